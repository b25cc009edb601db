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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k8s.settings import ALERT_SEVERITIES
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
