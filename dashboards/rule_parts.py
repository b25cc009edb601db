"""The parts every rule module builds with: Record, Alert and Group, the recorded series' names (R), and
quantile records. Split from dashboards.rules so the engines' rule modules (dashboards.engines) and the rule
assembly can both read them; dashboards.rules re-exports every name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dashboards.config import ObservabilityConfig

__all__ = ["QUANTILES", "RATE", "XID_WINDOW", "Record", "Alert", "Group", "R", "quantile_record", "runbook"]

QUANTILES = ("0.5", "0.95", "0.99")
RATE = "5m"
XID_WINDOW = "10m"  # a changed XID value within this window is a new XID


@dataclass(frozen=True, slots=True)
class Record:
    record: str
    expr: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"record": self.record, "expr": self.expr}
        if self.labels:
            out["labels"] = dict(self.labels)
        return out


@dataclass(frozen=True, slots=True)
class Alert:
    alert: str
    expr: str
    severity: str  # critical pages, warning tickets
    summary: str
    description: str
    runbook_url: str
    for_: str = "0m"
    labels: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"alert": self.alert, "expr": self.expr}
        if self.for_ != "0m":
            out["for"] = self.for_
        out["labels"] = {"severity": self.severity, **self.labels}
        out["annotations"] = {"summary": self.summary, "description": self.description,
                              "runbook_url": self.runbook_url}
        return out


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    rules: tuple[Record | Alert, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rules": [r.to_dict() for r in self.rules]}



class R:
    """Recorded series names (what panels and alerts query)."""

    NODE_PRICE = "aifactory:pool_node_price_dollars_per_hour"
    GPU_PRICE = "aifactory:pool_gpu_price_dollars_per_hour"
    QUEUE_DEPTH_TARGET = "aifactory:model_target_queue_depth"
    QUEUE_TIME_TARGET = "aifactory:model_target_queue_seconds"
    GPUS_PER_NODE = "aifactory:pool_gpus_per_node"
    NODE_POOL = "aifactory:node_pool:info"
    POD_MODEL = "aifactory:pod_model:info"
    POD_GPUS = "namespace_pod:kube_pod_gpu_requests:sum"
    GPU_UTIL = "gpu:dcgm_gpu_utilization:ratio_avg5m"
    GPU_ALLOCATED_UTIL = "gpu:dcgm_gpu_utilization_allocated:ratio_avg5m"
    POOL_NODES = "pool:kube_node:count"
    POOL_GPUS = "pool:dcgm_gpu:count"
    NEW_XID = f"gpu:dcgm_fi_dev_xid_errors:new{XID_WINDOW}"
    POOL_COST = "pool:gpu_cost_dollars_per_hour:sum"
    TOTAL_COST = "aifactory:gpu_cost_dollars_per_hour:sum"
    POOL_USED_COST = "pool:gpu_used_cost_dollars_per_hour:sum"
    IDLE_GPUS = "pool_model:gpu_idle:count"
    IDLE_COST = "pool_model:gpu_idle_cost_dollars_per_hour:sum"
    # Every GPU of a pool is in exactly one of: working (allocated to a model, at or above the idle
    # threshold), allocated idle (requested by a pod, not working), unallocated (requested by no pod).
    POOL_GPU_CAPACITY = "pool:kube_node_status_capacity_gpu:sum"
    POOL_GPU_REQUESTS = "pool:kube_pod_gpu_requests:sum"
    POOL_WORKING_GPUS = "pool:gpu_working:count"
    POOL_ALLOCATED_IDLE_GPUS = "pool:gpu_allocated_idle:count"
    POOL_UNALLOCATED_GPUS = "pool:gpu_unallocated:count"
    POOL_WORKING_COST = "pool:gpu_working_cost_dollars_per_hour:sum"
    POOL_ALLOCATED_IDLE_COST = "pool:gpu_allocated_idle_cost_dollars_per_hour:sum"
    POOL_UNALLOCATED_COST = "pool:gpu_unallocated_cost_dollars_per_hour:sum"
    MODEL_GPUS = "model:kube_pod_gpu_requests:sum"
    MODEL_COST = "model:gpu_cost_dollars_per_hour:sum"
    MODEL_TOKENS = "model:vllm_generation_tokens:rate5m"
    MODEL_PROMPT_TOKENS = "model:vllm_prompt_tokens:rate5m"
    TRITON_TOKENS = "model:nv_llm_output_token_len_sum:rate5m"
    TRITON_PROMPT_TOKENS = "model:nv_llm_input_token_len_sum:rate5m"
    GENERATED_TOKENS = "model:generated_tokens:rate5m"  # every engine: vLLM's counter or Triton's histogram sum
    MODEL_COST_PER_MTOK = "model:gpu_cost_dollars_per_million_generated_tokens:ratio5m"
    TENANT_COST_PER_WORKFLOW = "tenant:gpu_cost_dollars_per_completed_workflow:ratio5m"
    WF_BUCKET = "workflow:aifactory_workflow_duration_seconds_bucket:rate5m"
    WF_COUNT = "workflow:aifactory_workflow_duration_seconds_count:rate5m"
    WF_SUM = "workflow:aifactory_workflow_duration_seconds_sum:rate5m"
    WF_QUANTILE = "workflow:aifactory_workflow_duration_seconds:histogram_quantile"
    CRITICAL_PATH = "workflow:aifactory_workflow_critical_path_seconds:rate5m"
    STEP_BUCKET = "workflow:aifactory_step_duration_seconds_bucket:rate5m"
    STEP_QUANTILE = "workflow:aifactory_step_duration_seconds:histogram_quantile"
    STEP_ERRORS = "workflow:aifactory_step_errors:rate5m"
    VLLM_RUNNING = "model:vllm_num_requests_running:sum"
    VLLM_BATCH = "model:vllm_num_requests_running:avg"
    VLLM_WAITING = "model:vllm_num_requests_waiting:sum"
    VLLM_WAITING_PER_REPLICA = "model:vllm_num_requests_waiting:avg"
    VLLM_KV_CACHE = "model:vllm_kv_cache_usage_perc:max"
    VLLM_PREFIX_HIT = "model:vllm_prefix_cache_hit:ratio_rate5m"
    VLLM_SPEC_ACCEPT = "model:vllm_spec_decode_acceptance:ratio_rate5m"
    VLLM_PREEMPTIONS = "model:vllm_num_preemptions:rate5m"
    VLLM_REQUESTS = "model:vllm_request_success:rate5m"
    TRITON_REQUESTS = "model:nv_inference_request_success:rate5m"
    TRITON_FAILURES = "model:nv_inference_request_failure:rate5m"
    TRITON_QUEUE = "model:nv_inference_queue_duration_seconds:mean5m"
    TRITON_COMPUTE = "model:nv_inference_compute_duration_seconds:mean5m"
    TRITON_BATCH = "model:nv_inference_batch_size:mean5m"
    TRITON_PENDING = "model:nv_inference_pending_request_count:sum"
    ISTIO_BUCKET = "workload:istio_request_duration_milliseconds_bucket:rate5m"
    ISTIO_QUANTILE = "workload:istio_request_duration_milliseconds:histogram_quantile"
    ISTIO_REQUESTS = "workload:istio_requests:rate5m"
    ISTIO_MTLS = "workload:istio_requests_mutual_tls:ratio_rate5m"
    ENVOY_BUCKET = "cluster:envoy_cluster_upstream_rq_time_bucket:rate5m"
    ENVOY_QUANTILE = "cluster:envoy_cluster_upstream_rq_time:histogram_quantile"
    ENVOY_REQUESTS = "cluster:envoy_cluster_upstream_rq_xx:rate5m"
    ENVOY_RETRIES = "cluster:envoy_cluster_upstream_rq_retry:rate5m"
    ROUTE_DECISIONS = "workload:envoy_vhost_route_upstream_rq_completed:rate5m"  # {workload, variant, reason}
    ROUTE_OVERFLOW = "workload:envoy_vhost_route_upstream_rq_retry:rate5m"  # {workload, variant, reason}
    # The stack config's $ per request of each variant {workload, variant, fastest: "true" for the workload's fastest}
    VARIANT_COST = "aifactory:variant_cost_per_request_dollars"
    # tries each variant's cluster served {workload, variant}
    VARIANT_REQUESTS = "variant:envoy_cluster_upstream_rq:rate5m"
    VARIANT_SPEND = "workload:aifactory_variant_spend_dollars:rate5m"  # $/s {workload}
    # Per model {model}: the share of its time-to-first-token / inter-token observations above its latency SLO
    # (models.<name>.slo, a bucket edge of its engine's histogram), and its requests/s (first tokens), over 5 minutes
    MODEL_TTFT_ABOVE_SLO = "model:time_to_first_token_above_slo:ratio_rate5m"
    MODEL_ITL_ABOVE_SLO = "model:inter_token_latency_above_slo:ratio_rate5m"
    MODEL_SLO_REQUESTS = "model:time_to_first_token_count:rate5m"
    # Per model {model}: the gateway's passing progress checks/s of its replicas (every gateway pod's), over 5 minutes:
    # each a 1-token generation the engine answered, so may count as a request (components.k8s.engines:
    # Engine.progress_check); a check that timed out never became one
    MODEL_PROGRESS_CHECKS = "model:gateway_progress_checks:rate5m"
    # 1 while a gateway cluster has no replica by design {envoy_cluster_name}: every model behind it is on a
    # capacity-block pool outside the block's window (dashboards.gateway_alerts)
    CLUSTER_EXPECTED_DOWN = "aifactory:gateway_cluster_expected_down"
    # $/s had every one of those requests gone to the workload's fastest variant {workload}
    VARIANT_SPEND_ALL_FASTEST = "workload:aifactory_variant_spend_all_fastest_dollars:rate5m"
    # {workflow, tenant, step_kind, le}
    STEP_BUDGET_BUCKET = "workflow:aifactory_step_budget_remaining_seconds_bucket:rate5m"
    WF_DEADLINES = "workflow:aifactory_workflow_deadlines:rate5m"  # {workflow, tenant, deadline: met | missed}

    @staticmethod
    def vllm_bucket(metric: str) -> str:
        return f"model:{metric.replace(':', '_')}_bucket:rate5m"

    @staticmethod
    def vllm_quantile(metric: str) -> str:
        return f"model:{metric.replace(':', '_')}:histogram_quantile"

    @staticmethod
    def dcgm_pool(metric: str, agg: str) -> str:
        return f"pool:{metric.lower()}:{agg}"

    @staticmethod
    def dcgm_gpu(metric: str, rate: bool = False) -> str:
        """A DCGM series per GPU with its node and pool {node, pool, gpu, UUID, GPU_I_ID}; its 5-minute rate for a
        counter."""
        return f"gpu:{metric.lower()}:{'rate5m' if rate else 'max'}"

    @staticmethod
    def slo_errors(sli: str, window: str) -> str:
        return f"workflow:aifactory_workflow_{sli}_errors:ratio_rate{window}"


def quantile_record(name: str, bucket_record: str, by: str) -> list[Record]:
    return [Record(name, f"histogram_quantile({q}, sum by ({by}, le) ({bucket_record}))", {"quantile": q})
            for q in QUANTILES]



def runbook(cfg: ObservabilityConfig, alert: str) -> str:
    """The alert's runbook_url: its anchor in the stack's runbook."""
    return f"{cfg.runbook_url}#{alert.lower()}"
