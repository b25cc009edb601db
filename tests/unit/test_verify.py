"""`aifactory verify`: where it looks by default (the Services the kit's releases render), its table, its JSON and
its flags. The hops themselves run against the real gateway and Prometheus in tests/artifacts/test_verify_live.py."""

from __future__ import annotations

import json
from dataclasses import replace

from infra.cli import build_parser
from infra.verify import Access, Endpoints, Hop, Report, default_endpoints, format_report, report_doc
from tests.support.stacks import stack_config


def test_defaults_are_the_in_cluster_services_the_stack_renders() -> None:
    """Gateway: the kit's Service (components/k8s/gateway/component.py, port 80). kube-prometheus-stack with
    fullnameOverride
    kps names its Services <fullname>-prometheus :9090 and <fullname>-alertmanager :9093 (prometheus-community/
    helm-charts charts/kube-prometheus-stack templates/alertmanager/service.yaml, alertmanager.service.port);
    the jaeger chart 4.11.1 serves the query API on its one Service `jaeger` port 16686 (http-query); the loki
    chart 6.53.0 gateway Service `loki-gateway` on gateway.service.port 80."""
    assert default_endpoints(stack_config("prod")) == Endpoints(
        gateway="http://aifactory-gateway.aifactory-gateway.svc:80",
        prometheus="http://kps-prometheus.monitoring.svc:9090",
        jaeger="http://jaeger.monitoring.svc:16686",
        loki="http://loki-gateway.monitoring.svc",
        alertmanager="http://kps-alertmanager.monitoring.svc:9093")


REPORT = Report("prod", Endpoints("http://gw", "http://p", "http://j", "http://l", "http://a"), (
    Hop("request", "chat", True, "200 in 0.20s: 'OK'"),
    Hop("trace", "chat", False, "no trace 4bf9 in Jaeger (404)", "the gateway's spans do not reach Jaeger"),
    Hop("alerting", "", True, "Watchdog active since 2026-11-25T00:00:00Z"),
))


def test_the_table_has_a_row_per_hop_and_the_cause_under_a_broken_one() -> None:
    assert format_report(REPORT) == (
        "verify prod: gateway http://gw\n"
        "  ok      request   chat  200 in 0.20s: 'OK'\n"
        "  BROKEN  trace     chat  no trace 4bf9 in Jaeger (404)\n"
        "                          likely: the gateway's spans do not reach Jaeger\n"
        "  ok      alerting  -     Watchdog active since 2026-11-25T00:00:00Z\n"
        "3 hop(s), 1 broken\n")


def test_json_has_the_verdict_the_endpoints_and_every_row_and_never_the_kube_credentials() -> None:
    access = Access("https://api.example:6443", {"authorization": "Bearer kube-secret"})
    doc = report_doc(replace(REPORT, endpoints=replace(REPORT.endpoints, access=access)))
    assert "kube-secret" not in json.dumps(doc)
    assert doc["ok"] is False and doc["stack"] == "prod"
    assert doc["endpoints"]["jaeger"] == "http://j"
    assert doc["hops"][1] == {"hop": "trace", "model": "chat", "ok": False, "saw": "no trace 4bf9 in Jaeger (404)",
                              "cause": "the gateway's spans do not reach Jaeger"}


def test_every_endpoint_has_a_flag_and_json_defaults_to_stdout() -> None:
    args = build_parser().parse_args(["verify", "prod", "--json", "--model", "a", "--model", "b",
                                      "--loki-url", "http://loki:3100"])
    assert (args.json, args.model, args.loki_url, args.gateway_url) == ("-", ["a", "b"], "http://loki:3100", None)
    assert {f"{k}_url" for k in Endpoints.__dataclass_fields__ if k != "access"} <= set(vars(args))
    assert build_parser().parse_args(["verify", "prod", "--kubeconfig", "kc"]).kubeconfig == "kc"


def _jaeger_trace(*spans: tuple[str, str, str | None]) -> dict:
    """Jaeger's GET /api/traces/{id} answer for (service, span id, parent span id) triples."""
    services = sorted({s for s, _, _ in spans})
    pid = {s: f"p{i}" for i, s in enumerate(services)}
    return {"data": [{"traceID": "t", "processes": {pid[s]: {"serviceName": s} for s in services},
                      "spans": [{"spanID": sid, "processID": pid[s],
                                 "references": [{"refType": "CHILD_OF", "spanID": up}] if up else []}
                                for s, sid, up in spans]}]}


def _trace_hop(monkeypatch, model_name: str, doc: dict) -> Hop:  # type: ignore[no-untyped-def]
    from infra.verify import endpoints, gateway, signals

    cfg = stack_config("prod")
    monkeypatch.setattr(signals, "http_get", lambda *a, **k: endpoints.Answer(200, json.dumps(doc).encode()))
    sent = gateway.Sent(cfg.models[model_name], "t", "r", True)
    return signals.trace_check(REPORT.endpoints, sent, timeout=1)()


def test_an_engine_span_under_both_sidecars_spans_continues_the_gateways_trace(monkeypatch) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """On a cluster the kit's mesh-default Telemetry makes both Istio sidecars trace, so the engine's span is the
    grandchild of the gateway's span's child, not its child (Envoy's router injects its own span into the upstream
    traceparent: envoyproxy/envoy@v1.40.0:source/common/router/upstream_request.cc)."""
    model = next(m for m in stack_config("prod").models.values() if m.engine == "vllm")
    doc = _jaeger_trace(("aifactory-gateway", "g", None), ("aifactory-gateway.aifactory-gateway", "s1", "g"),
                        (f"{model.name}.{model.tenant}", "s2", "s1"), (model.name, "e", "s2"))
    hop = _trace_hop(monkeypatch, model.name, doc)
    assert (hop.ok, hop.saw.endswith(f"{model.name} under aifactory-gateway")) == (True, True)
    unrelated = _jaeger_trace(("aifactory-gateway", "g", None), (model.name, "e", "elsewhere"))
    assert _trace_hop(monkeypatch, model.name, unrelated).ok is False


def test_a_triton_model_needs_only_the_gateways_span(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Triton's OpenAI frontend exports no spans (r26.07 python/openai/openai_frontend/main.py takes no trace
    options), so its trace hop is the gateway's span alone."""
    model = next(m for m in stack_config("prod").models.values() if m.engine == "triton")
    hop = _trace_hop(monkeypatch, model.name, _jaeger_trace(("aifactory-gateway", "g", None)))
    assert (hop.ok, hop.saw) == (True, "1 span(s) of aifactory-gateway; triton exports no engine spans")
