"""Serving engines: vLLM (KV cache, queues, batch, tokens, prefix cache, spec decode) and Triton."""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.config import ObservabilityConfig
from dashboards.panels import Q, custom_variable, dashboard, timeseries
from dashboards.rules import QUANTILES, R
from telemetry.names import VLLM

__all__ = ["UID", "build"]

UID = "aifactory-serving"
MODEL = 'model=~"$model"'


def _p(metric: str, q: str) -> Q:
    return Q(f'{R.vllm_quantile(metric)}{{quantile="{q}", {MODEL}}}', f"{{{{model}}}} p{q[2:].ljust(2, '0')}")


def _vllm() -> list:
    return [
        timeseries("KV cache usage", "Highest vllm:kv_cache_usage_perc across a model's replicas (1 = full: "
                                     "requests get preempted).", "percentunit", Q(f"{R.VLLM_KV_CACHE}{{{MODEL}}}",
                                                                                  "{{model}}")),
        timeseries("Requests running and waiting", "Requests in the running batch and waiting in the queue, all "
                                                   "replicas.", "short",
                   Q(f"{R.VLLM_RUNNING}{{{MODEL}}}", "{{model}} running"),
                   Q(f"{R.VLLM_WAITING}{{{MODEL}}}", "{{model}} waiting")),
        timeseries("Batch size per replica", "Mean running requests per replica (the continuous batch).", "short",
                   Q(f"{R.VLLM_BATCH}{{{MODEL}}}", "{{model}}")),
        timeseries("Token throughput", "Prompt and generated tokens per second.", "short",
                   Q(f"{R.MODEL_PROMPT_TOKENS}{{{MODEL}}}", "{{model}} prompt"),
                   Q(f"{R.MODEL_TOKENS}{{{MODEL}}}", "{{model}} generated")),
        timeseries("Prefix cache hit rate", "Share of prompt tokens served from the prefix cache.", "percentunit",
                   Q(f"{R.VLLM_PREFIX_HIT}{{{MODEL}}}", "{{model}}")),
        timeseries("Speculative decoding acceptance", "Accepted draft tokens over proposed draft tokens.",
                   "percentunit", Q(f"{R.VLLM_SPEC_ACCEPT}{{{MODEL}}}", "{{model}}")),
        timeseries("Preemptions", "Requests preempted per second (KV cache pressure).", "short",
                   Q(f"{R.VLLM_PREEMPTIONS}{{{MODEL}}}", "{{model}}")),
        timeseries("Finished requests by reason", "Finished requests per second: stop, length or abort.", "reqps",
                   Q(f"{R.VLLM_REQUESTS}{{{MODEL}}}", "{{model}} {{finished_reason}}")),
        timeseries("Time to first token", "p50 / p95 / p99.", "s", *(_p(VLLM.TTFT, q) for q in QUANTILES)),
        timeseries("Inter-token latency", "p50 / p95 / p99.", "s", *(_p(VLLM.ITL, q) for q in QUANTILES)),
        timeseries("End-to-end request latency", "p50 / p95 / p99 of whole requests inside vLLM.", "s",
                   *(_p(VLLM.E2E, q) for q in QUANTILES)),
        timeseries("Queue time", "p50 / p95 / p99 of time waiting for a batch slot.", "s",
                   *(_p(VLLM.QUEUE, q) for q in QUANTILES)),
    ]


def _triton() -> list:
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
        timeseries("Triton token throughput", "Prompt and generated tokens per second (the TensorRT-LLM backend's "
                                              "nv_llm_input_token_len / nv_llm_output_token_len sums).", "short",
                   Q(f"{R.TRITON_PROMPT_TOKENS}{{{MODEL}}}", "{{model}} prompt"),
                   Q(f"{R.TRITON_TOKENS}{{{MODEL}}}", "{{model}} generated")),
        timeseries("Triton time to first token", "p50 / p95 / p99 of tensorrt_llm's time to first response "
                                                 "(nv_inference_first_response_histogram_ms; Triton's default "
                                                 "buckets 100/500/2000/5000 ms bound the precision). TensorRT-LLM's "
                                                 "Triton backend exports no per-token latency: no inter-token "
                                                 "panel.", "s",
                   *(Q(f'{R.TRITON_TTFT_QUANTILE}{{quantile="{q}", {MODEL}}} / 1000',
                       f"{{{{model}}}} p{q[2:].ljust(2, '0')}") for q in QUANTILES)),
    ]


def build(cfg: ObservabilityConfig) -> Dashboard:
    return dashboard(
        uid=UID, title="aifactory / Serving",
        description="vLLM and Triton serving: KV cache, queues, batching, token throughput, prefix caching, "
                    "speculative decoding and latency.",
        tags=["serving", "vllm", "triton"],
        variables=[custom_variable("model", "Model", [m.name for m in cfg.models])],
        rows=[("vLLM", _vllm()), ("Triton", _triton())],
    )
