"""SGLang's rules and panels: its latency histograms, tokens, queue, running batch, KV pool and RadixAttention hit
rate (cached over prompt tokens), by model_name (its --served-model-name, the config key) renamed `model`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dashboards.config import ObservabilityConfig, ServedModel
from dashboards.engines.base import MODEL, EngineRules, SloHistogram
from dashboards.panels import Q, timeseries
from dashboards.promql import series
from dashboards.rule_parts import QUANTILES, RATE, Alert, R, Record, quantile_record, runbook
from telemetry.names import SGLANG

__all__ = ["SGLANG_HISTOGRAMS", "S", "SglangRules", "RULES"]

SGLANG_HISTOGRAMS = (SGLANG.TTFT, SGLANG.ITL, SGLANG.E2E, SGLANG.QUEUE_TIME)


class S:
    """SGLang's recorded series (by model)."""

    TOKENS = "model:sglang_generation_tokens:rate5m"
    PROMPT_TOKENS = "model:sglang_prompt_tokens:rate5m"
    RUNNING = "model:sglang_num_running_reqs:sum"
    QUEUE = "model:sglang_num_queue_reqs:sum"
    QUEUE_PER_REPLICA = "model:sglang_num_queue_reqs:avg"
    TOKEN_USAGE = "model:sglang_token_usage:max"
    CACHE_HIT = "model:sglang_cached_tokens:ratio_rate5m"

    @staticmethod
    def bucket(metric: str) -> str:
        return f"model:{metric.replace(':', '_')}_bucket:rate5m"

    @staticmethod
    def quantile(metric: str) -> str:
        return f"model:{metric.replace(':', '_')}:histogram_quantile"


def _by_model(expr_of: str) -> str:
    return f'label_replace({expr_of}, "model", "$1", "{SGLANG.L_MODEL}", "(.+)")'


def _quantiles(metric: str) -> list[Q]:
    return [Q(f'{S.quantile(metric)}{{quantile="{q}", {MODEL}}}', f"{{{{model}}}} p{q[2:].ljust(2, '0')}")
            for q in QUANTILES]


@dataclass(frozen=True, eq=False)
class SglangRules(EngineRules):
    def queue_target(self, model: ServedModel) -> Record:
        return Record(R.QUEUE_DEPTH_TARGET, f"vector({model.target_queue_depth})", {"model": model.name})

    def records(self, cfg: ObservabilityConfig) -> list[Record]:
        def srate(metric: str, by: str = SGLANG.L_MODEL) -> str:
            return _by_model(f"sum by ({by}) (rate({series(cfg, metric)}[{RATE}]))")

        def gauge(agg: str, metric: str) -> str:
            """Each scheduler process of a pod exports its own series (tp_rank, pp_rank, moe_ep_rank): a pod counts
            once, by its largest; then `agg` over the model's pods."""
            per_pod = f"max by ({SGLANG.L_MODEL}, pod) ({series(cfg, metric)})"
            return _by_model(f"{agg} by ({SGLANG.L_MODEL}) ({per_pod})")

        out: list[Record] = []
        for h in SGLANG_HISTOGRAMS:
            out.append(Record(S.bucket(h), srate(f"{h}_bucket", by=f"{SGLANG.L_MODEL}, le")))
            out += quantile_record(S.quantile(h), S.bucket(h), "model")
        return [
            *out,
            Record(S.TOKENS, srate(SGLANG.GENERATION_TOKENS)),
            Record(S.PROMPT_TOKENS, srate(SGLANG.PROMPT_TOKENS)),
            Record(S.RUNNING, gauge("sum", SGLANG.RUNNING)),
            Record(S.QUEUE, gauge("sum", SGLANG.QUEUE)),
            Record(S.QUEUE_PER_REPLICA, gauge("avg", SGLANG.QUEUE)),
            Record(S.TOKEN_USAGE, gauge("max", SGLANG.TOKEN_USAGE)),
            # cached prompt tokens over prompt tokens, both counted per finished request: sglang:cache_hit_rate is
            # each prefill batch's own share, so averaging it shows the last batch's and freezes on an idle replica.
            # A model with no hit yet has no cached_tokens series (they appear at the first hit): 0, not no data.
            Record(S.CACHE_HIT, f"({srate(SGLANG.CACHED_TOKENS)} or {srate(SGLANG.PROMPT_TOKENS)} * 0) / "
                                f"{srate(SGLANG.PROMPT_TOKENS)}"),
        ]

    def alerts(self, cfg: ObservabilityConfig) -> list[Alert]:
        return [
            Alert("SglangQueueGrowing",
                  f"{S.QUEUE_PER_REPLICA} > on (model) {cfg.queue_alert_factor!r} * {R.QUEUE_DEPTH_TARGET}",
                  "warning",
                  summary="Model {{ $labels.model }} has {{ $value }} requests queued per replica",
                  description=f"SGLang model {{{{ $labels.model }}}} has held more than "
                              f"{cfg.queue_alert_factor:g}x its autoscaling target (replicas.targetQueueDepth) of "
                              "queued requests per replica for 10 minutes: the autoscaler is at its maximum or "
                              "cannot get GPUs.",
                  runbook_url=runbook(cfg, "SglangQueueGrowing"), for_="10m"),
            Alert("SglangKvCacheSaturated", f"{S.TOKEN_USAGE} > {cfg.kv_cache_saturation!r}", "warning",
                  summary="Model {{ $labels.model }} KV pool is {{ $value | humanizePercentage }} used",
                  description=f"SGLang model {{{{ $labels.model }}}} has used more than "
                              f"{cfg.kv_cache_saturation:.0%} of its KV pool for 10 minutes: RadixAttention evicts "
                              "shared prefixes and requests queue; add replicas or cut max model length.",
                  runbook_url=runbook(cfg, "SglangKvCacheSaturated"), for_="10m"),
        ]

    def panels(self) -> list[Any]:
        """Titles carry the engine's name: a board's panel titles are unique (the known answers are keyed by them)."""
        return [
            timeseries("SGLang requests running and queued", "Requests in the running batch and waiting in the "
                                                             "scheduler's queue, all replicas (a pod counted once, "
                                                             "not once per TP rank).", "short",
                       Q(f"{S.RUNNING}{{{MODEL}}}", "{{model}} running"),
                       Q(f"{S.QUEUE}{{{MODEL}}}", "{{model}} queued")),
            timeseries("SGLang token throughput", "Prompt and generated tokens per second.", "short",
                       Q(f"{S.PROMPT_TOKENS}{{{MODEL}}}", "{{model}} prompt"),
                       Q(f"{S.TOKENS}{{{MODEL}}}", "{{model}} generated")),
            timeseries("SGLang prefix cache hit rate", "RadixAttention: share of prompt tokens served from cached "
                                                       "prefixes (device, host or storage) over 5 minutes, all "
                                                       "replicas: sglang:cached_tokens_total over "
                                                       "sglang:prompt_tokens_total.",
                       "percentunit", Q(f"{S.CACHE_HIT}{{{MODEL}}}", "{{model}}")),
            timeseries("SGLang KV pool usage", "Highest share of a replica's KV token pool in use "
                                               "(sglang:token_usage; 1 = full: requests wait or are retracted).",
                       "percentunit", Q(f"{S.TOKEN_USAGE}{{{MODEL}}}", "{{model}}")),
            timeseries("SGLang time to first token", "p50 / p95 / p99.", "s", *_quantiles(SGLANG.TTFT)),
            timeseries("SGLang inter-token latency", "p50 / p95 / p99.", "s", *_quantiles(SGLANG.ITL)),
            timeseries("SGLang end-to-end request latency", "p50 / p95 / p99 of whole requests inside SGLang.", "s",
                       *_quantiles(SGLANG.E2E)),
            timeseries("SGLang queue time", "p50 / p95 / p99 of time waiting in the scheduler's queue.", "s",
                       *_quantiles(SGLANG.QUEUE_TIME)),
        ]

    def compound_panels(self) -> list[Any]:
        return [
            timeseries("Time to first token p95 (SGLang)",
                       "Prefill-dominated latency users wait before the first token.", "s",
                       Q(f'{S.quantile(SGLANG.TTFT)}{{quantile="0.95", {MODEL}}}', "{{model}}")),
            timeseries("Inter-token latency p95 (SGLang)", "Time between output tokens while decoding.", "s",
                       Q(f'{S.quantile(SGLANG.ITL)}{{quantile="0.95", {MODEL}}}', "{{model}}")),
        ]


# Its progress check (/health_generate) is not in its metrics: the handler's request has log_metrics False (sglang
# 0.5.23 srt/entrypoints/http_server.py health_generate; srt/managers/tokenizer_manager.py collects metrics only for
# requests with log_metrics).
RULES = SglangRules(name="sglang", title="SGLang", generated_tokens=S.TOKENS,
                    ttft=SloHistogram(S.bucket(SGLANG.TTFT), SGLANG.TTFT_BUCKETS),
                    itl=SloHistogram(S.bucket(SGLANG.ITL), SGLANG.ITL_BUCKETS))
