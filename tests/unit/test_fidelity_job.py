"""The evaluation in the cluster: the Job the kit creates per workload that asks for one (its ServiceAccount,
NetworkPolicy, Pod Security), validated against the real schemas, and the scores `aifactory eval` pushes to the
OpenTelemetry Collector over OTLP/HTTP, decoded with OTLP's own protobuf messages."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from infra import cli
from infra.synth import synth
from policies.preflight import pss_violations
from telemetry import names
from tests.support.istio_sidecar import routes_to_service, service_domains
from tests.support.processes import free_port
from tests.unit.test_fidelity_eval import ACCURACY, expected_right, graded, make_stacks, run_eval

JOB = {"image": "registry.example.com/aifactory:1.0", "tokenSecret": {"name": "eval-token", "key": "token"}}


def with_job(stacks: Path, job: dict[str, Any] = JOB, **models: dict[str, Any]) -> Path:
    doc = yaml.safe_load((stacks / "Pulumi.t.yaml").read_text())
    doc["config"]["aifactory:gateway"]["routing"]["chat"]["fidelity"]["job"] = job
    for name, change in models.items():
        doc["config"]["aifactory:models"][name].update(change)
    (stacks / "Pulumi.t.yaml").write_text(yaml.safe_dump(doc))
    return stacks


def objects(stacks: Path, out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    synth("t", out, stacks_dir=stacks, progress=None)
    state = json.loads((out / "state.json").read_text())
    found = {}
    for e in state["deployment"]["resources"]:
        if e["type"].startswith("kubernetes:") and "fidelity" in e["urn"].rsplit("::", 1)[-1]:
            obj = e["inputs"]
            kind = e["type"].rsplit(":", 1)[-1]
            found[(kind, obj["metadata"]["name"])] = {"apiVersion": e["type"].split(":")[1].replace("core/", ""),
                                                      "kind": kind, **obj}
    return found


@pytest.fixture(scope="module")
def job_objects(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    base = tmp_path_factory.mktemp("job")
    return objects(with_job(make_stacks(base / "stacks")), base / "out")


def test_the_job_runs_eval_through_the_gateway_and_pushes_to_the_collector(job_objects: dict[Any, Any]) -> None:
    assert sorted(job_objects) == [("ConfigMap", "aifactory-fidelity"), ("Job", "eval-chat"),
                                   ("NetworkPolicy", "fidelity-eval"), ("ServiceAccount", "fidelity-eval")]
    job = job_objects[("Job", "eval-chat")]
    assert job["metadata"]["namespace"] == "aifactory-gateway"
    assert job["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (0, 3600)
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"  # a sidecar would never let it finish
    (c,) = pod["spec"]["containers"]
    assert c["image"] == "registry.example.com/aifactory:1.0"
    assert c["command"] == ["aifactory", "eval", "t", "--workload", "chat",
                            "--url", "http://aifactory-gateway.aifactory-gateway.svc.cluster.local:80",
                            "--token-file", "/var/run/secrets/aifactory-eval/token", "--no-record",
                            "--otlp-endpoint", "http://otel-collector.monitoring.svc:4318"]
    # the Host it sends names the gateway Service for a sidecar in its namespace (were one injected), so its
    # requests would still reach the gateway's listener rather than pass through (istio 1.28.3 httproute.go)
    host = urlsplit(c["command"][c["command"].index("--url") + 1]).netloc
    assert routes_to_service(host, service_domains("aifactory-gateway", "aifactory-gateway",
                                                   caller_namespace=job["metadata"]["namespace"], headless=False))
    assert pod["spec"]["volumes"][0] == {"name": "token", "secret": {
        "secretName": "eval-token", "items": [{"key": "token", "path": "token"}]}}
    assert (pod["spec"]["serviceAccountName"], pod["spec"]["automountServiceAccountToken"]) == ("fidelity-eval", False)
    assert job_objects[("ServiceAccount", "fidelity-eval")]["automountServiceAccountToken"] is False


def test_the_job_meets_pod_security_restricted_and_the_upstream_schemas(job_objects: dict[Any, Any]) -> None:
    job = job_objects[("Job", "eval-chat")]
    assert pss_violations("restricted", job["spec"]["template"]["spec"]) == []
    for obj in job_objects.values():
        kubernetes_validate.validate(obj, "1.34", strict=True)


def test_the_job_may_reach_only_the_gateway_listener_and_the_collector(job_objects: dict[Any, Any]) -> None:
    spec = job_objects[("NetworkPolicy", "fidelity-eval")]["spec"]
    assert spec == {
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "fidelity-eval"}},
        "policyTypes": ["Ingress", "Egress"], "ingress": [],
        "egress": [
            {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "aifactory-gateway"}}}],
             "ports": [{"protocol": "TCP", "port": 8080}]},
            {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                     "podSelector": {"matchLabels": {"app.kubernetes.io/name": "opentelemetry-collector"}}}],
             "ports": [{"protocol": "TCP", "port": 4318}]}]}


def test_a_changed_variant_changes_the_job_so_the_next_deploy_runs_it_again(
        job_objects: dict[Any, Any], tmp_path: Path) -> None:
    before = job_objects[("Job", "eval-chat")]["spec"]["template"]["metadata"]["annotations"]
    changed = objects(with_job(make_stacks(tmp_path / "stacks"), **{"chat-bad": {"quantization": "gptq"}}),
                      tmp_path / "out")
    after = changed[("Job", "eval-chat")]["spec"]["template"]["metadata"]["annotations"]
    assert set(before) == set(after) == {"aifactory.io/evaluates"} and before != after


def test_job_config_errors_name_the_key_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks = with_job(make_stacks(tmp_path / "stacks"), {"image": "x", "timeoutSeconds": 5})
    assert cli.main(["validate", "t", "--stacks-dir", str(stacks)]) == 2
    err = capsys.readouterr().err
    assert "  - gateway.routing.chat.fidelity.job.tokenSecret.name: is required\n" in err
    assert "  - gateway.routing.chat.fidelity.job.timeoutSeconds: 5 is below the minimum 60\n" in err


# --- the scores as metrics


class _Otlp(BaseHTTPRequestHandler):
    server: _Receiver

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence per-request logs
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's hook name
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.received.append((self.path, self.headers.get("content-type") or "", body))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()


class _Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Otlp)
        self.received: list[tuple[str, str, bytes]] = []


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    srv = _Receiver()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(timeout=5)


def test_eval_pushes_each_variants_score_bound_and_verdict_as_otlp_gauges(tmp_path: Path, receiver: _Receiver) -> None:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    stacks = make_stacks(tmp_path / "stacks")
    with graded(ACCURACY) as b:
        assert run_eval(stacks, b.url, "--no-record", "--otlp-endpoint",
                        f"http://127.0.0.1:{receiver.server_address[1]}") == 0
    ((path, ctype, body),) = receiver.received
    assert (path, ctype) == ("/v1/metrics", "application/x-protobuf")
    req = ExportMetricsServiceRequest.FromString(body)
    (rm,) = req.resource_metrics
    assert {a.key: a.value.string_value for a in rm.resource.attributes}["service.name"] == "aifactory-eval"
    got: dict[tuple[str, str], float] = {}
    for sm in rm.scope_metrics:
        for m in sm.metrics:
            for dp in m.gauge.data_points:
                attrs = {a.key: a.value.string_value for a in dp.attributes}
                assert (attrs["workload"], attrs["suite"]) == ("chat", "chat-arith")
                got[(m.name, attrs["variant"])] = dp.as_double
    assert {k for k, _ in got} == {m.otel for m in names.FIDELITY_METRICS}
    assert got[("aifactory.fidelity.passed", "chat-bf16")] == 1.0
    assert got[("aifactory.fidelity.passed", "chat-good")] == 1.0
    assert got[("aifactory.fidelity.passed", "chat-bad")] == 0.0
    assert got[("aifactory.fidelity.drop_bound", "chat-bf16")] == 0.0
    assert got[("aifactory.fidelity.drop_bound", "chat-bad")] > 0.05 > got[("aifactory.fidelity.drop_bound",
                                                                             "chat-good")]
    assert got[("aifactory.fidelity.score", "chat-bad")] == expected_right(0.80) / 200
    assert not (stacks / "evals" / "results").exists()  # --no-record


def test_a_collector_that_refuses_the_scores_is_one_clear_error() -> None:
    from infra.evaluate import EndpointError, push_metrics

    port = free_port()
    points = [(names.FIDELITY_SCORE.otel, 0.9, {"workload": "chat", "variant": "chat-bf16", "suite": "s"})]
    with pytest.raises(EndpointError) as err:
        push_metrics(points, endpoint=f"http://127.0.0.1:{port}", timeout_seconds=2)
    assert str(err.value) == f"scores not exported to http://127.0.0.1:{port} (OTLP/HTTP)"
