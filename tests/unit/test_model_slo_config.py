"""A model's latency SLOs as validate and the rules take them (issue 44 item 9, issue 46 item 1): the alerts count the
share of requests above each SLO at that bucket edge of the engine's histogram (dashboards/rules.py), so a value
given must be an edge, and Triton, which exports neither histogram under its OpenAI frontend, takes none. Buckets:
vllm 0.33.0 vllm/v1/metrics/buckets.py; sglang 0.5.23 srt/observability/metrics_collector.py."""

from __future__ import annotations

import dataclasses

import pulumi
import pytest

from dashboards.deploy import check_config
from infra.config import parse
from infra.monitoring import from_platform
from infra.synth import load_stack
from tests.unit.test_config import BASE, problems, with_


def _slo(engine: str, slo: dict[str, float] | None, **model: object) -> dict:
    body = {**BASE["models"]["m1"], "engine": engine, **model}
    if slo is not None:
        body["slo"] = slo
    return with_("models.m1", body)


def test_a_triton_model_takes_no_time_to_first_token_or_inter_token_slo() -> None:
    """Triton's OpenAI frontend (triton-inference-server/server@v2.71.0 python/openai/openai_frontend/main.py) runs
    the server without histogram_latencies: no first-response histogram; TensorRT-LLM exports no per-token timing."""
    got = problems(_slo("triton", {"ttftSeconds": 0.3, "interTokenSeconds": 0.03, "e2eSeconds": 15},
                        uri="s3://models-bucket/llama-trtllm", toolCallParser="llama3"))
    assert got == [
        "models.m1.slo.ttftSeconds: engine 'triton' exports no time to first token histogram, so nothing can judge "
        "this SLO; remove it (docs/observability.md)",
        "models.m1.slo.interTokenSeconds: engine 'triton' exports no inter-token latency histogram, so nothing can "
        "judge this SLO; remove it (docs/observability.md)"]
    ok = parse(_slo("triton", {"e2eSeconds": 15}, uri="s3://models-bucket/llama-trtllm", toolCallParser="llama3"),
               stack="t")
    assert ok.models["m1"].slo.e2e_seconds == 15


TTFT, ITL = ("ttftSeconds", "time to first token"), ("interTokenSeconds", "inter-token latency")


@pytest.mark.parametrize(("engine", "slo", "value", "use"), [
    ("vllm", ITL, 0.04, "0.025 or 0.05"), ("vllm", TTFT, 0.8, "0.75 or 1"), ("vllm", TTFT, 3000, "2560"),
    ("sglang", TTFT, 0.5, "0.4 or 0.6"),
])
def test_a_latency_slo_inside_a_bucket_is_refused_naming_the_nearest_edges(engine: str, slo: tuple[str, str],
                                                                            value: float, use: str) -> None:
    key, what = slo
    assert problems(_slo(engine, {key: value})) == [
        f"models.m1.slo.{key}: {value:g} s is not a bucket edge of the {what} histogram of engine {engine!r}, where "
        f"the alert counts the share of requests above the SLO; use {use}"]


def test_a_default_slo_off_the_engines_edges_is_the_next_edge_above() -> None:
    """The settings' defaults (0.5 s, 0.05 s) are vLLM edges; SGLang's histograms have 0.4/0.6 and 0.04/0.06."""
    vllm = parse(_slo("vllm", None), stack="t").models["m1"].slo
    sglang = parse(_slo("sglang", None), stack="t").models["m1"].slo
    assert (vllm.ttft_seconds, vllm.inter_token_seconds) == (0.5, 0.05)
    assert (sglang.ttft_seconds, sglang.inter_token_seconds) == (0.6, 0.06)


def test_a_hand_built_config_with_an_slo_inside_a_bucket_is_refused() -> None:
    cfg = from_platform(load_stack("prod"))
    models = tuple(dataclasses.replace(m, inter_token_seconds=0.04) if m.name == "assistant-steady" else m
                   for m in cfg.models)
    with pytest.raises(pulumi.InputPropertiesError) as err:
        check_config("monitoring", dataclasses.replace(cfg, models=models))
    i = [m.name for m in models].index("assistant-steady")
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        (f"config.models[{i}].interTokenSeconds", "0.04 s is not a bucket edge of the inter-token latency histogram "
                                                  "of engine 'vllm', where the alert counts the share of requests "
                                                  "above the SLO; use 0.025 or 0.05")]
