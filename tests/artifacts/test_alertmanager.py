"""The Alertmanager configuration every shipped stack deploys, under the real amtool (Debian's
prometheus-alertmanager, installed by `make test`): `check-config` accepts it with its templates, `config
routes test` sends each severity to the receivers the stack file names, and the notification text of one of
the kit's own alerts carries its runbook_url.

kube-prometheus-stack writes `alertmanager.config` into the Alertmanager Secret as YAML and mounts
`alertmanager.templateFiles` in /etc/alertmanager/config/ (values.yaml of the pinned chart): the test reads
both from the Helm artifact synth writes and points `templates` at a scratch copy of the files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k8s.settings import ALERT_SEVERITIES
from tests.support.processes import die_with_parent, free_port, stop_process
from tests.support.stacks import SHIPPED_STACKS, stack_raw


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("amtool")
    if tool is None:
        raise RuntimeError("amtool not on PATH: run `make test` (it installs Debian's prometheus-alertmanager)")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60, check=False)


def shipped(build: Path, tmp_path: Path) -> tuple[Path, Path]:
    """alertmanager.yaml and the template directory as the pod sees them, in tmp_path."""
    values = yaml.safe_load((build / "helm" / "monitoring.kube-prometheus-stack.yaml").read_text())["values"]
    am = values["alertmanager"]
    templates = tmp_path / "templates"
    templates.mkdir()
    for name, text in am["templateFiles"].items():
        (templates / name).write_text(text)
    config = dict(am["config"])
    assert config["templates"] == ["/etc/alertmanager/config/*.tmpl"]  # where the chart mounts templateFiles
    config["templates"] = [str(templates / "*.tmpl")]
    path = tmp_path / "alertmanager.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path, templates


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_amtool_accepts_the_config_and_routes_each_severity_as_the_stack_says(
        stack: str, tmp_path: Path, synthesized: Callable[[str], Path]) -> None:
    config, _ = shipped(synthesized(stack), tmp_path)
    check = amtool("check-config", str(config))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "1 templates" in check.stdout and "SUCCESS" in check.stdout
    routes: dict[str, Any] = stack_raw(stack)["observability"]["alerting"]["routes"]
    for severity in ALERT_SEVERITIES:
        res = amtool("config", "routes", "test", f"--config.file={config}", f"severity={severity}",
                     "alertname=AnyAlert")
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == ",".join(routes.get(severity, ["null"])), severity
    watchdog = amtool("config", "routes", "test", f"--config.file={config}", "severity=none", "alertname=Watchdog")
    heartbeat = stack_raw(stack)["observability"]["alerting"].get("heartbeat")
    assert watchdog.stdout.strip() == (heartbeat["receiver"] if heartbeat else "null")


def test_notifications_carry_the_alerts_runbook_url(tmp_path: Path, synthesized: Callable[[str], Path]) -> None:
    build = synthesized("prod")
    _, templates = shipped(build, tmp_path)
    rules = yaml.safe_load((build / "rules" / "aifactory.rules.yaml").read_text())
    alert = next(r for g in rules["groups"] for r in g["rules"] if "alert" in r)
    data = {"receiver": "platform-slack", "status": "firing",
            "alerts": [{"status": "firing", "labels": {"alertname": alert["alert"], **alert["labels"]},
                        "annotations": {**alert["annotations"], "summary": "chat is slow",
                                        "description": "chat missed its SLO"},
                        "startsAt": "2026-01-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                        "generatorURL": "http://prometheus/graph", "fingerprint": "1"}],
            "groupLabels": {"alertname": alert["alert"]},
            "commonLabels": {"alertname": alert["alert"], **alert["labels"]},
            "commonAnnotations": {}, "externalURL": "http://alertmanager"}
    data_file = tmp_path / "data.json"
    data_file.write_text(json.dumps(data))
    rendered = {}
    for name in ("aifactory.title", "aifactory.text"):
        res = amtool("template", "render", f"--template.glob={templates}/*.tmpl",
                     f'--template.text={{{{ template "{name}" . }}}}', f"--template.data={data_file}")
        assert res.returncode == 0, res.stderr
        rendered[name] = res.stdout
    assert rendered["aifactory.title"].strip() == f"[FIRING] {alert['alert']} (critical)"
    assert rendered["aifactory.text"].strip().splitlines() == [
        "chat is slow", "chat missed its SLO",
        f"Runbook: {alert['annotations']['runbook_url']}"]
    assert alert["annotations"]["runbook_url"].startswith("https://")


def _alertmanager_api(url: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{url}{path}", data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        text = resp.read()
    return json.loads(text) if text else None


def test_the_real_alertmanager_inhibits_a_warning_only_by_the_same_things_critical_alert(
        tmp_path: Path, synthesized: Callable[[str], Path]) -> None:
    """Issue 44 item 11, on prod's Alertmanager config under the real Alertmanager (Debian's
    prometheus-alertmanager 0.25). kube-prometheus-stack's `equal: [namespace, alertname]` let model a's critical
    GatewayModelUnavailable silence model b's warning (neither carries a namespace, and Alertmanager takes a label
    missing from both alerts as equal: prometheus/alertmanager@v0.25.0 inhibit/inhibit.go hasEqual); one workflow's
    fast burn silenced another's slow burn; one gateway pod's critical GatewayOverloaded (refusing every request)
    silenced another pod's warning (streams reset), both in the gateway's namespace. A model's gateway outage pages
    once: its GatewayModelUnavailable silences its own GatewayServerErrorRatioHigh (the same 503s), not another
    model's. GatewayDrainCutsRequests is grouped per pod (components/k8s/observability/alerting.py PER_POD_ALERTS)."""
    config, _ = shipped(synthesized("prod"), tmp_path)
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    assert binary, "run `make test`: it installs Debian's prometheus-alertmanager"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=die_with_parent)
    unavailable, ratio, burn = "GatewayModelUnavailable", "GatewayServerErrorRatioHigh", "WorkflowLatencyBudgetBurn"
    overloaded, cuts = "GatewayOverloaded", "GatewayDrainCutsRequests"
    sent = {  # name -> labels
        "a down": {"alertname": unavailable, "severity": "critical", "envoy_cluster_name": "a"},
        "a no replica": {"alertname": unavailable, "severity": "warning", "envoy_cluster_name": "a"},
        "b no replica": {"alertname": unavailable, "severity": "warning", "envoy_cluster_name": "b"},
        "a 5xx": {"alertname": ratio, "severity": "critical", "envoy_cluster_name": "a"},
        "c 5xx": {"alertname": ratio, "severity": "critical", "envoy_cluster_name": "c"},
        "x fast burn": {"alertname": burn, "severity": "critical", "workflow": "x", "tenant": "t", "slo": "latency"},
        "x slow burn": {"alertname": burn, "severity": "warning", "workflow": "x", "tenant": "t", "slo": "latency"},
        "y slow burn": {"alertname": burn, "severity": "warning", "workflow": "y", "tenant": "t", "slo": "latency"},
        "gw-1 refusing": {"alertname": overloaded, "severity": "critical", "namespace": "gw", "pod": "gw-1"},
        "gw-1 resets": {"alertname": overloaded, "severity": "warning", "namespace": "gw", "pod": "gw-1"},
        "gw-2 resets": {"alertname": overloaded, "severity": "warning", "namespace": "gw", "pod": "gw-2"},
        "gw-1 cuts": {"alertname": cuts, "severity": "warning", "namespace": "gw", "pod": "gw-1"},
        "gw-2 cuts": {"alertname": cuts, "severity": "warning", "namespace": "gw", "pod": "gw-2"},
    }
    want = {"a down": False, "a no replica": True, "b no replica": False, "a 5xx": True, "c 5xx": False,
            "x fast burn": False, "x slow burn": True, "y slow burn": False,
            "gw-1 refusing": False, "gw-1 resets": True, "gw-2 resets": False, "gw-1 cuts": False, "gw-2 cuts": False}
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _alertmanager_api(url, "/api/v2/status")
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
                time.sleep(0.1)
        _alertmanager_api(url, "/api/v2/alerts", [{"labels": labels, "annotations": {"summary": name}}
                                                   for name, labels in sent.items()])
        got: dict[str, bool] = {}
        while time.monotonic() < deadline:  # the inhibitor reads new alerts from its subscription, asynchronously
            alerts = _alertmanager_api(url, "/api/v2/alerts")
            got = {a["annotations"]["summary"]: bool(a["status"]["inhibitedBy"]) for a in alerts}
            if got == want:
                break
            time.sleep(0.1)
        assert got == want
        # Groups: GatewayDrainCutsRequests is notified one group per pod (a second pod's alert would otherwise wait
        # for the first one's next group_interval, 5 minutes, after its cut); GatewayOverloaded by namespace and name
        # (its critical through the critical route, its two warnings together through the warning route).
        groups = _alertmanager_api(url, "/api/v2/alerts/groups")
        by_name: dict[str, list[tuple[str, ...]]] = {}
        for g in groups:
            if g["receiver"]["name"] == "platform-slack" and g["labels"].get("alertname") in (cuts, overloaded):
                by_name.setdefault(g["labels"]["alertname"], []).append(
                    tuple(sorted(a["labels"]["pod"] for a in g["alerts"])))
        assert {k: sorted(v) for k, v in by_name.items()} == {cuts: [("gw-1",), ("gw-2",)],
                                                             overloaded: [("gw-1",), ("gw-1", "gw-2")]}
    finally:
        stop_process(proc)
