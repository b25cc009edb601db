"""Triton's rules and panels: requests, queue and compute time, batching, pending requests and TensorRT-LLM's token
counts, of the repository model TRITON.ENGINE_MODEL, by the pod's model label renamed `model`.

No latency SLO histogram (EngineRules.ttft / itl): Triton's OpenAI frontend (triton-inference-server/server@v2.71.0,
r26.07, python/openai/openai_frontend/main.py) starts its in-process server without `histogram_latencies`, so
nv_inference_first_response_histogram_ms is never exported, and the TensorRT-LLM backend exports no per-token timing.
A Triton model has no time-to-first-token panel and no model SLO alert; the stack config refuses its slo.ttftSeconds
and slo.interTokenSeconds (infra/stack/models.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dashboards.config import ObservabilityConfig, ServedModel
from dashboards.engines.base import MODEL, EngineRules
from dashboards.panels import Q, timeseries
from dashboards.promql import series
from dashboards.rule_parts import RATE, Alert, R, Record, runbook
from telemetry.names import TRITON

__all__ = ["TritonRules", "RULES"]

_ENGINE_MODEL = f'{TRITON.L_MODEL}="{TRITON.ENGINE_MODEL}"'


def _by_model(expr_of: str) -> str:
    """Name Triton's pod-label model key `model`, like vLLM's (see TRITON.ENGINE_MODEL)."""
    return f'label_replace({expr_of}, "model", "$1", "{TRITON.L_POD_MODEL}", "(.+)")'


def _rate(cfg: ObservabilityConfig, metric: str, *matchers: str, by: str = TRITON.L_POD_MODEL) -> str:
    return _by_model(f"sum by ({by}) (rate({series(cfg, metric, _ENGINE_MODEL, *matchers)}[{RATE}]))")


@dataclass(frozen=True, eq=False)
class TritonRules(EngineRules):
    def queue_target(self, model: ServedModel) -> Record:
        return Record(R.QUEUE_TIME_TARGET, f"vector({model.target_queue_seconds!r})", {"model": model.name})

    def records(self, cfg: ObservabilityConfig) -> list[Record]:
        def trate(metric: str, *matchers: str, by: str = TRITON.L_POD_MODEL) -> str:
            return _rate(cfg, metric, *matchers, by=by)

        def tokens(metric: str, kind: str) -> str:
            return trate(f"{metric}_sum", f'{TRITON.L_RESPONSE_METRIC_TYPE}="{kind}"')

        return [
            Record(R.TRITON_REQUESTS, trate(TRITON.REQUEST_SUCCESS)),
            Record(R.TRITON_FAILURES, trate(TRITON.REQUEST_FAILURE, by=f"{TRITON.L_POD_MODEL}, reason")),
            Record(R.TRITON_QUEUE, f"{trate(TRITON.QUEUE_DURATION_US)} / {R.TRITON_REQUESTS} / 1e6"),
            Record(R.TRITON_COMPUTE, f"({trate(TRITON.COMPUTE_INPUT_US)} + {trate(TRITON.COMPUTE_INFER_US)} + "
                                     f"{trate(TRITON.COMPUTE_OUTPUT_US)}) / {R.TRITON_REQUESTS} / 1e6"),
            Record(R.TRITON_BATCH, f"{trate(TRITON.INFERENCE_COUNT)} / {trate(TRITON.EXEC_COUNT)}"),
            Record(R.TRITON_PENDING, _by_model(f"sum by ({TRITON.L_POD_MODEL}) "
                                               f"({series(cfg, TRITON.PENDING, _ENGINE_MODEL)})")),
            Record(R.TRITON_TOKENS, tokens(TRITON.OUTPUT_TOKENS, TRITON.OUTPUT_TOKENS_TYPE)),
            Record(R.TRITON_PROMPT_TOKENS, tokens(TRITON.INPUT_TOKENS, TRITON.INPUT_TOKENS_TYPE)),
        ]

    def alerts(self, cfg: ObservabilityConfig) -> list[Alert]:
        return [
            Alert("TritonQueueTimeHigh",
                  f"{R.TRITON_QUEUE} > on (model) {cfg.queue_alert_factor!r} * {R.QUEUE_TIME_TARGET}", "warning",
                  summary="Model {{ $labels.model }} requests queue {{ $value | humanizeDuration }} on average",
                  description=f"Triton model {{{{ $labels.model }}}} has queued requests for more than "
                              f"{cfg.queue_alert_factor:g}x its autoscaling target (replicas.targetQueueTimeMs) "
                              "for 10 minutes: the autoscaler is at its maximum or cannot get GPUs.",
                  runbook_url=runbook(cfg, "TritonQueueTimeHigh"), for_="10m"),
        ]

    def panels(self) -> list[Any]:
        return [
            timeseries("Requests per second", "Successful and failed inference requests per second.", "reqps",
                       Q(f"{R.TRITON_REQUESTS}{{{MODEL}}}", "{{model}} ok"),
                       Q(f"sum by (model) ({R.TRITON_FAILURES}{{{MODEL}}})", "{{model}} failed")),
            timeseries("Queue and compute time per request", "Mean queue time and compute time (input + infer + "
                                                              "output) per successful request.", "s",
                       Q(f"{R.TRITON_QUEUE}{{{MODEL}}}", "{{model}} queue"),
                       Q(f"{R.TRITON_COMPUTE}{{{MODEL}}}", "{{model}} compute")),
            timeseries("Dynamic batch size", "Inferences per model execution.", "short",
                       Q(f"{R.TRITON_BATCH}{{{MODEL}}}", "{{model}}")),
            timeseries("Pending requests", "Requests queued in Triton, all replicas.", "short",
                       Q(f"{R.TRITON_PENDING}{{{MODEL}}}", "{{model}}")),
            timeseries("Triton token throughput", "Prompt and generated tokens per second (the TensorRT-LLM "
                                                  "backend's nv_llm_input_token_len / nv_llm_output_token_len "
                                                  "sums).", "short",
                       Q(f"{R.TRITON_PROMPT_TOKENS}{{{MODEL}}}", "{{model}} prompt"),
                       Q(f"{R.TRITON_TOKENS}{{{MODEL}}}", "{{model}} generated")),
        ]

    def compound_panels(self) -> list[Any]:
        return [
            timeseries("Triton queue and compute time per request",
                       "Mean queue time and compute time (input + infer + output) per successful request.", "s",
                       Q(f"{R.TRITON_QUEUE}{{{MODEL}}}", "{{model}} queue"),
                       Q(f"{R.TRITON_COMPUTE}{{{MODEL}}}", "{{model}} compute")),
        ]


RULES = TritonRules(name="triton", title="Triton", generated_tokens=R.TRITON_TOKENS)
