"""Session affinity, seen on the dashboards (issue 34): is a session's prefix found where its steps land, and does
affinity leave one replica hotter than the rest?

- Prefix cache hit rate per replica: prompt tokens served from vLLM's prefix cache over prompt tokens looked up,
  per model and pod (vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total). With affinity working, each
  replica's rate stays close to the model's; a replica far below the rest holds sessions it does not keep.
- Requests per replica: each replica's share of its model's finished requests (vllm:request_success_total).
  With n replicas an even spread is 1/n each.
- Busiest replica over the mean: the most requests running on one replica over the model's mean per replica
  (vllm:num_requests_running). The gateway caps a replica at the model's sessionAffinity.hashBalanceFactor percent
  of the average load per gateway pod; a value well above factor/100 is a hot replica (several gateway pods, or
  load that does not come through the gateway).

Mounted on the serving dashboard's vLLM row after "Prefix cache hit rate" (dashboards/serving.py `_row`).
"""

from __future__ import annotations

from grafanalib.core import TimeSeries

from dashboards.config import ObservabilityConfig
from dashboards.panels import Q, timeseries
from dashboards.promql import series
from telemetry.names import VLLM

__all__ = ["RATE", "panels"]

RATE = "5m"
MODEL = 'model_name=~"$model"'


def _rate_by(cfg: ObservabilityConfig, metric: str, by: str) -> str:
    return f"sum by ({by}) (rate({series(cfg, metric, MODEL)}[{RATE}]))"


def panels(cfg: ObservabilityConfig) -> list[TimeSeries]:
    """The session affinity panels, for the serving dashboard's vLLM row."""
    per_pod = f"{VLLM.L_MODEL}, pod"
    running = series(cfg, VLLM.RUNNING, MODEL)
    return [
        timeseries("Prefix cache hit rate per replica", "Share of each replica's prompt tokens served from its "
                   "prefix cache. With session affinity a session's steps land where its prefix is cached: "
                   "replicas stay close to each other.", "percentunit",
                   Q(f"{_rate_by(cfg, VLLM.PREFIX_HITS, per_pod)} / {_rate_by(cfg, VLLM.PREFIX_QUERIES, per_pod)}",
                     "{{model_name}} {{pod}}")),
        timeseries("Requests per replica", "Each replica's share of its model's finished requests (even: 1/n of n "
                   "replicas).", "percentunit",
                   Q(f"{_rate_by(cfg, VLLM.REQUEST_SUCCESS, per_pod)} / ignoring (pod) group_left "
                     f"{_rate_by(cfg, VLLM.REQUEST_SUCCESS, VLLM.L_MODEL)}", "{{model_name}} {{pod}}")),
        timeseries("Busiest replica over the mean", "Most requests running on one replica over the model's mean "
                   "per replica. Session affinity caps a replica at sessionAffinity.hashBalanceFactor / 100 of the "
                   "mean (per gateway pod); well above it: a hot replica.", "short",
                   Q(f"max by ({VLLM.L_MODEL}) ({running}) / avg by ({VLLM.L_MODEL}) ({running})",
                     "{{model_name}}")),
    ]
