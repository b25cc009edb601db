"""A model on a capacity block, outside the block's window, under the real promtool and kube-prometheus-stack
82.4.0's own default alerts (tests/fixtures/kube_prometheus_stack/kubernetes-apps-82.4.0.yaml): the pool has no node
there, so every pod the model keeps waits Pending (and holds GPU quota). KubePodNotReady and
KubeStatefulSetReplicasMismatch must stay silent: the model's ScaledObject leaves it no replica outside the window.

The replica count outside the window is read off the rendered ScaledObject, the way KEDA computes it: its cron
trigger is inactive outside its start-end range (kedacore/keda pkg/scalers/cron_scaler.go IsActive), and a prometheus
trigger on the model's own pods' series has no sample while it has no pod (ignoreNullValues); what remains is
minReplicaCount. kube-state-metrics then reports the StatefulSet's replicas as that count, and one Pending pod per
replica (no node to bind to)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k8s.serving import scaled_object
from tests.support.prometheus import PrometheusServer, backfill, promtool
from tests.support.stacks import stack_config

RULES = Path(__file__).resolve().parents[1] / "fixtures" / "kube_prometheus_stack" / "kubernetes-apps-82.4.0.yaml"
KSM = 'job="kube-state-metrics"'


def replicas_outside_window(so: dict[str, Any]) -> int:
    """What KEDA keeps of the model outside its block's window (see the module docstring). A trigger that can be
    active without the model's pods (the gateway's wake query) would keep it scaled up: refused here."""
    spec = so["spec"]
    for trigger in spec["triggers"]:
        if trigger["type"] == "cron":
            continue
        assert trigger["type"] == "prometheus" and "aifactory_io_model=" in trigger["metadata"]["query"], trigger
        assert trigger["metadata"]["ignoreNullValues"] == "true"
    return int(spec["minReplicaCount"])


def _series(namespace: str, statefulset: str, replicas: int) -> list[dict[str, str]]:
    """kube-state-metrics for 40 minutes: the StatefulSet at `replicas`, none ready, each pod Pending."""
    sts = f'namespace="{namespace}",statefulset="{statefulset}",{KSM}'
    out = [{"series": f"kube_statefulset_replicas{{{sts}}}", "values": f"{replicas}x40"},
           {"series": f"kube_statefulset_status_replicas_ready{{{sts}}}", "values": "0x40"},
           {"series": f"kube_statefulset_status_replicas_updated{{{sts}}}", "values": f"{replicas}x40"}]
    for i in range(replicas):
        pod = f'namespace="{namespace}",pod="{statefulset}-{i}",{KSM}'
        out += [{"series": f'kube_pod_status_phase{{{pod},phase="Pending"}}', "values": "1x40"},
                {"series": f'kube_pod_owner{{{pod},owner_kind="StatefulSet",owner_name="{statefulset}"}}',
                 "values": "1x40"}]
    return out


def _expected(namespace: str, statefulset: str, replicas: int) -> list[dict[str, Any]]:
    sts = [{"exp_labels": {"severity": "warning", "namespace": namespace, "statefulset": statefulset,
                           "job": "kube-state-metrics"}}] if replicas else []
    pods = [{"exp_labels": {"severity": "warning", "namespace": namespace, "pod": f"{statefulset}-{i}",
                            "job": "kube-state-metrics"}} for i in range(replicas)]
    return [{"eval_time": "30m", "alertname": "KubePodNotReady", "exp_alerts": pods},
            {"eval_time": "30m", "alertname": "KubeStatefulSetReplicasMismatch", "exp_alerts": sts}]


def _run(tmp_path: Path, name: str, replicas: int, *, namespace: str, statefulset: str, fires: bool) -> None:
    """promtool over `replicas` Pending pods: both alerts fire for them (`fires`), or none fires."""
    test = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": _series(namespace, statefulset, replicas),
        "alert_rule_test": _expected(namespace, statefulset, replicas if fires else 0)}]}
    path = tmp_path / f"{name}.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    res = promtool("test", "rules", str(path))
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("stack", ["prod"])
def test_default_pod_alerts_stay_silent_outside_the_block_window(stack: str, tmp_path: Path) -> None:
    """prod's assistant-fast (h100-block): no replica outside the window, so neither default alert fires there.
    The control (its in-window minimum of 2, Pending for want of nodes) fires both, with these exact labels: the
    rules are live, the silence is not vacuous."""
    cfg = stack_config(stack)
    model = cfg.models["assistant-fast"]
    outside = replicas_outside_window(scaled_object(cfg, model))
    _run(tmp_path, "outside", outside, namespace="assistant", statefulset=model.name, fires=False)
    _run(tmp_path, "control", 2, namespace="assistant", statefulset=model.name, fires=True)


def _busy_queue(times: list[int]) -> str:
    """Triton's counters for a busy assistant-fast: one request a second, each 60 ms in the queue (60,000 us)."""
    labels = 'namespace="assistant",aifactory_io_model="assistant-fast",model="assistant-fast"'
    lines = []
    for metric, per_s in (("nv_inference_queue_duration_us", 60_000), ("nv_inference_request_success", 1)):
        lines.append(f"# TYPE {metric} gauge")
        lines += [f"{metric}{{{labels}}} {per_s * (t - times[0])} {t}" for t in times]
    return "\n".join(lines) + "\n"


def test_a_busy_block_models_queue_trigger_goes_inactive_at_the_crons_end(tmp_path: Path) -> None:
    """The real Prometheus over a busy assistant-fast (60 ms of queue per request) around its cron's end (10:23 UTC
    on 2026-12-15), asked the exact query of its rendered ScaledObject's queue trigger: 60 ms (above its threshold 30:
    active) a minute before the end, no sample a minute after, which KEDA reads as 0 (ignoreNullValues) with
    activationThreshold 0: inactive, so with the cron also inactive KEDA scales the model to 0 before its nodes go
    (keda.sh/docs/2.18/scalers/prometheus; kedacore/keda pkg/scalers/prometheus_scaler.go). Before, the query had
    no gate and answered 60 after the end too."""
    cfg = stack_config("prod")
    [queue] = [t for t in scaled_object(cfg, cfg.models["assistant-fast"])["spec"]["triggers"]
               if t["type"] == "prometheus"]
    end = 1797330180  # 2026-12-15T10:23:00Z, the cron's end
    times = list(range(end - 600, end + 601, 15))
    backfill(_busy_queue(times), tmp_path / "tsdb", workdir=tmp_path)
    with PrometheusServer(tmp_path, tsdb=tmp_path / "tsdb") as prom:
        assert prom.scalar(queue["metadata"]["query"], at=end - 60) == 60.0
        assert prom.query(queue["metadata"]["query"], at=end + 60) == []
        assert prom.query(queue["metadata"]["query"], at=end) == []  # from the end itself
