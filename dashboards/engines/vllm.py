"""vLLM's rules and panels: its histograms, tokens, queue, KV cache, prefix cache and speculative decoding, by
model_name (its first --served-model-name, the config key) renamed `model`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dashboards.config import ObservabilityConfig, ServedModel
from dashboards.engines.base import MODEL, EngineRules, SloHistogram
from dashboards.panels import Q, timeseries
from dashboards.promql import series
from dashboards.rule_parts import QUANTILES, RATE, Alert, R, Record, quantile_record, runbook
from telemetry.names import VLLM

__all__ = ["VLLM_HISTOGRAMS", "VllmRules", "RULES"]

VLLM_HISTOGRAMS = (VLLM.TTFT, VLLM.ITL, VLLM.QUEUE, VLLM.PREFILL, VLLM.DECODE, VLLM.E2E)


def _by_model(expr_of: str) -> str:
    """Aggregate a vLLM expression by model_name, then name the label `model` like Triton's."""
    return f'label_replace({expr_of}, "model", "$1", "model_name", "(.+)")'


def _p(metric: str, q: str) -> Q:
    return Q(f'{R.vllm_quantile(metric)}{{quantile="{q}", {MODEL}}}', f"{{{{model}}}} p{q[2:].ljust(2, '0')}")


@dataclass(frozen=True, eq=False)
class VllmRules(EngineRules):
    def queue_target(self, model: ServedModel) -> Record:
        return Record(R.QUEUE_DEPTH_TARGET, f"vector({model.target_queue_depth})", {"model": model.name})

    def records(self, cfg: ObservabilityConfig) -> list[Record]:
        def vrate(metric: str, *matchers: str, by: str = "model_name") -> str:
            return _by_model(f"sum by ({by}) (rate({series(cfg, metric, *matchers)}[{RATE}]))")

        out: list[Record] = []
        for h in VLLM_HISTOGRAMS:
            out.append(Record(R.vllm_bucket(h), vrate(f"{h}_bucket", by="model_name, le")))
            out += quantile_record(R.vllm_quantile(h), R.vllm_bucket(h), "model")
        return [
            *out,
            Record(R.MODEL_TOKENS, vrate(VLLM.GENERATION_TOKENS)),
            Record(R.MODEL_PROMPT_TOKENS, vrate(VLLM.PROMPT_TOKENS)),
            Record(R.VLLM_REQUESTS, vrate(VLLM.REQUEST_SUCCESS, by="model_name, finished_reason")),
            Record(R.VLLM_PREEMPTIONS, vrate(VLLM.PREEMPTIONS)),
            Record(R.VLLM_RUNNING, _by_model(f"sum by (model_name) ({series(cfg, VLLM.RUNNING)})")),
            Record(R.VLLM_BATCH, _by_model(f"avg by (model_name) ({series(cfg, VLLM.RUNNING)})")),
            Record(R.VLLM_WAITING, _by_model(f"sum by (model_name) ({series(cfg, VLLM.WAITING)})")),
            Record(R.VLLM_WAITING_PER_REPLICA, _by_model(f"avg by (model_name) ({series(cfg, VLLM.WAITING)})")),
            Record(R.VLLM_KV_CACHE, _by_model(f"max by (model_name) ({series(cfg, VLLM.KV_CACHE)})")),
            Record(R.VLLM_PREFIX_HIT, f"{vrate(VLLM.PREFIX_HITS)} / {vrate(VLLM.PREFIX_QUERIES)}"),
            Record(R.VLLM_SPEC_ACCEPT, f"{vrate(VLLM.SPEC_ACCEPTED_TOKENS)} / {vrate(VLLM.SPEC_DRAFT_TOKENS)}"),
        ]

    def alerts(self, cfg: ObservabilityConfig) -> list[Alert]:
        return [
            Alert("ModelKvCacheSaturated", f"{R.VLLM_KV_CACHE} > {cfg.kv_cache_saturation!r}", "warning",
                  summary="Model {{ $labels.model }} KV cache is {{ $value | humanizePercentage }} used",
                  description=f"Model {{{{ $labels.model }}}} has used more than {cfg.kv_cache_saturation:.0%} of "
                              "its KV cache for 10 minutes: requests are preempted or queue; add replicas or cut "
                              "max model length.",
                  runbook_url=runbook(cfg, "ModelKvCacheSaturated"), for_="10m"),
            Alert("ModelQueueGrowing",
                  f"{R.VLLM_WAITING_PER_REPLICA} > on (model) {cfg.queue_alert_factor!r} * {R.QUEUE_DEPTH_TARGET}",
                  "warning",
                  summary="Model {{ $labels.model }} has {{ $value }} requests waiting per replica",
                  description=f"Model {{{{ $labels.model }}}} has held more than {cfg.queue_alert_factor:g}x its "
                              "autoscaling target (replicas.targetQueueDepth) of waiting requests per replica for "
                              "10 minutes: the autoscaler is at its maximum or cannot get GPUs.",
                  runbook_url=runbook(cfg, "ModelQueueGrowing"), for_="10m"),
        ]

    def panels(self) -> list[Any]:
        return [
            timeseries("KV cache usage", "Highest vllm:kv_cache_usage_perc across a model's replicas (1 = full: "
                                         "requests get preempted).", "percentunit",
                       Q(f"{R.VLLM_KV_CACHE}{{{MODEL}}}", "{{model}}")),
            timeseries("Requests running and waiting", "Requests in the running batch and waiting in the queue, "
                                                       "all replicas.", "short",
                       Q(f"{R.VLLM_RUNNING}{{{MODEL}}}", "{{model}} running"),
                       Q(f"{R.VLLM_WAITING}{{{MODEL}}}", "{{model}} waiting")),
            timeseries("Batch size per replica", "Mean running requests per replica (the continuous batch).",
                       "short", Q(f"{R.VLLM_BATCH}{{{MODEL}}}", "{{model}}")),
            timeseries("Token throughput", "Prompt and generated tokens per second.", "short",
                       Q(f"{R.MODEL_PROMPT_TOKENS}{{{MODEL}}}", "{{model}} prompt"),
                       Q(f"{R.MODEL_TOKENS}{{{MODEL}}}", "{{model}} generated")),
            timeseries("Prefix cache hit rate", "Share of prompt tokens served from the prefix cache.",
                       "percentunit", Q(f"{R.VLLM_PREFIX_HIT}{{{MODEL}}}", "{{model}}")),
            timeseries("Speculative decoding acceptance", "Accepted draft tokens over proposed draft tokens.",
                       "percentunit", Q(f"{R.VLLM_SPEC_ACCEPT}{{{MODEL}}}", "{{model}}")),
            timeseries("Preemptions", "Requests preempted per second (KV cache pressure).", "short",
                       Q(f"{R.VLLM_PREEMPTIONS}{{{MODEL}}}", "{{model}}")),
            timeseries("Finished requests by reason", "Finished requests per second: stop, length or abort.",
                       "reqps", Q(f"{R.VLLM_REQUESTS}{{{MODEL}}}", "{{model}} {{finished_reason}}")),
            timeseries("Time to first token", "p50 / p95 / p99.", "s", *(_p(VLLM.TTFT, q) for q in QUANTILES)),
            timeseries("Inter-token latency", "p50 / p95 / p99.", "s", *(_p(VLLM.ITL, q) for q in QUANTILES)),
            timeseries("End-to-end request latency", "p50 / p95 / p99 of whole requests inside vLLM.", "s",
                       *(_p(VLLM.E2E, q) for q in QUANTILES)),
            timeseries("Queue time", "p50 / p95 / p99 of time waiting for a batch slot.", "s",
                       *(_p(VLLM.QUEUE, q) for q in QUANTILES)),
        ]

    def compound_panels(self) -> list[Any]:
        return [
            timeseries("Time to first token p95 (vLLM)",
                       "Prefill-dominated latency users wait before the first token.", "s",
                       Q(f'{R.vllm_quantile(VLLM.TTFT)}{{quantile="0.95", {MODEL}}}', "{{model}}")),
            timeseries("Inter-token latency p95 (vLLM)", "Time between output tokens while decoding.", "s",
                       Q(f'{R.vllm_quantile(VLLM.ITL)}{{quantile="0.95", {MODEL}}}', "{{model}}")),
            timeseries("vLLM request phases p95: queue, prefill, decode",
                       "Where a vLLM request's time goes: waiting for a slot, prefill, then decode.", "s",
                       *(Q(f'{R.vllm_quantile(h)}{{quantile="0.95", {MODEL}}}', f"{{{{model}}}} {phase}")
                         for h, phase in ((VLLM.QUEUE, "queue"), (VLLM.PREFILL, "prefill"),
                                          (VLLM.DECODE, "decode")))),
        ]


RULES = VllmRules(name="vllm", title="vLLM", generated_tokens=R.MODEL_TOKENS,
                  # the gateway's progress check is a 1-token completion: one first token each, no inter-token
                  # observation (vllm 0.33.0 vllm/v1/metrics/stats.py IterationStats.update_from_output: an
                  # inter-token latency for each output after the prefill's)
                  ttft=SloHistogram(R.vllm_bucket(VLLM.TTFT), VLLM.TTFT_BUCKETS, counts_progress_checks=True),
                  itl=SloHistogram(R.vllm_bucket(VLLM.ITL), VLLM.ITL_BUCKETS))
