"""The OpenTelemetry Collector configuration: exact pipelines, a well-formed component graph (every
reference defined, every definition used, connectors both exported to and received from), and the
otel/collector.yaml artifact synth writes for every shipped stack."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k8s.otel_config import collector_config
from tests.support.stacks import SHIPPED_STACKS
from tests.unit.test_k8s_platform import stack_cfg

COMMON = ["memory_limiter", "k8sattributes", "batch"]


def test_pipelines_when_every_trace_is_kept() -> None:
    cfg = collector_config(stack_cfg("staging"))
    assert cfg["service"]["pipelines"] == {
        "traces": {"receivers": ["otlp"], "processors": COMMON, "exporters": ["spanmetrics", "otlp/jaeger"]},
        "metrics": {"receivers": ["otlp", "spanmetrics"], "processors": COMMON, "exporters": ["prometheus"]},
        "logs": {"receivers": ["otlp"], "processors": COMMON, "exporters": ["otlphttp/loki"]},
    }
    assert "probabilistic_sampler" not in cfg["processors"]


def test_sampled_traces_take_their_own_pipeline_after_spanmetrics() -> None:
    cfg = collector_config(stack_cfg("prod"))  # traceSampleRatio 0.2
    pipelines = cfg["service"]["pipelines"]
    assert pipelines["traces/spanmetrics"] == {"receivers": ["otlp"], "processors": COMMON,
                                               "exporters": ["spanmetrics"]}
    assert pipelines["traces/sampled"] == {
        "receivers": ["otlp"], "processors": ["memory_limiter", "k8sattributes", "probabilistic_sampler", "batch"],
        "exporters": ["otlp/jaeger"]}
    assert cfg["processors"]["probabilistic_sampler"] == {"sampling_percentage": 20.0}


def test_receivers_exporters_and_connector_settings() -> None:
    cfg = collector_config(stack_cfg("dev"))
    assert cfg["receivers"] == {"otlp": {"protocols": {"grpc": {"endpoint": "${env:MY_POD_IP}:4317"},
                                                       "http": {"endpoint": "${env:MY_POD_IP}:4318"}}}}
    assert cfg["exporters"] == {
        "otlp/jaeger": {"endpoint": "jaeger.monitoring.svc.cluster.local:4317", "tls": {"insecure": True}},
        "prometheus": {"endpoint": "${env:MY_POD_IP}:8889", "resource_to_telemetry_conversion": {"enabled": False}},
        "otlphttp/loki": {"endpoint": "http://loki-gateway.monitoring.svc.cluster.local/otlp"},
    }
    spanmetrics = cfg["connectors"]["spanmetrics"]
    assert spanmetrics["histogram"]["unit"] == "ms"
    assert spanmetrics["histogram"]["explicit"]["buckets"][:3] == ["5ms", "10ms", "25ms"]
    assert spanmetrics["dimensions"] == [{"name": "gen_ai.operation.name"}, {"name": "gen_ai.request.model"},
                                         {"name": "k8s.namespace.name"}]
    assert cfg["processors"]["memory_limiter"] == {"check_interval": "1s", "limit_percentage": 80,
                                                   "spike_limit_percentage": 20}
    assert cfg["processors"]["k8sattributes"]["extract"]["labels"] == [
        {"tag_name": "k8s.pod.label.aifactory.io/tenant", "key": "aifactory.io/tenant", "from": "pod"},
        {"tag_name": "k8s.pod.label.aifactory.io/model", "key": "aifactory.io/model", "from": "pod"}]


def _graph_problems(cfg: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    pipelines = cfg["service"]["pipelines"]
    connectors = set(cfg.get("connectors", {}))
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for name, p in pipelines.items():
        signal = name.split("/")[0]
        if signal not in ("traces", "metrics", "logs"):
            problems.append(f"pipeline {name}: unknown signal")
        for section in ("receivers", "processors", "exporters"):
            for ref in p.get(section, []):
                used[section].add(ref)
                defined = cfg.get(section, {})
                if ref not in defined and not (section != "processors" and ref in connectors):
                    problems.append(f"pipeline {name}: {section[:-1]} {ref!r} is not defined")
    for section in ("receivers", "processors", "exporters"):
        problems += [f"{section[:-1]} {n!r} is defined but unused" for n in set(cfg.get(section, {})) - used[section]]
    for c in connectors:
        if c not in used["exporters"] or c not in used["receivers"]:
            problems.append(f"connector {c!r} must be an exporter of one pipeline and a receiver of another")
    problems += [f"extension {e!r} is not defined" for e in cfg["service"].get("extensions", [])
                 if e not in cfg.get("extensions", {})]
    return problems


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_artifact_is_the_config_and_its_graph_is_well_formed(stack: str,
                                                             synthesized: Callable[[str], Path]) -> None:
    text = (synthesized(stack) / "otel" / "collector.yaml").read_text()
    cfg = yaml.safe_load(text)
    assert cfg == collector_config(stack_cfg(stack))
    assert _graph_problems(cfg) == []
    configmap = yaml.safe_load((synthesized(stack) / "manifests" / "monitoring" /
                                "configmap.otel-collector-config.yaml").read_text())
    assert configmap["data"]["relay"] == text  # what the Collector runs is byte-for-byte the artifact


def test_graph_check_catches_an_undefined_exporter_and_a_dangling_connector() -> None:
    cfg = collector_config(stack_cfg("dev"))
    cfg["service"]["pipelines"]["metrics"]["receivers"] = ["otlp"]
    cfg["service"]["pipelines"]["logs"]["exporters"] = ["loki"]
    assert _graph_problems(cfg) == [
        "pipeline logs: exporter 'loki' is not defined",
        "exporter 'otlphttp/loki' is defined but unused",
        "connector 'spanmetrics' must be an exporter of one pipeline and a receiver of another",
    ]
