"""Metric and label names: the one module that telemetry/, dashboards/, the rules and the tests use.

Two groups:
- what the kit's own instrumentation emits (OTel instrument names and the Prometheus names the OTel
  Prometheus exporter / the Collector's prometheus exporter turn them into: dots become underscores,
  the unit word is appended, `_total` is added to monotonic sums, units in braces are dropped);
- what the exporters on the platform emit (DCGM exporter, vLLM, Triton, Istio, Envoy, kube-state-metrics,
  the Collector's spanmetrics connector), exactly as their upstream sources define them (docs/contracts.md,
  "Metric names").
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "STEP_KINDS",
    "StepKind",
    "Metric",
    "WORKFLOW_DURATION",
    "STEP_DURATION",
    "CRITICAL_PATH",
    "WORKFLOW_STEPS",
    "STEP_ERRORS",
    "GENAI_TOKEN_USAGE",
    "GENAI_OPERATION_DURATION",
    "STEP_BUDGET",
    "WORKFLOW_DEADLINES",
    "KIT_METRICS",
    "L_WORKFLOW",
    "L_TENANT",
    "L_STATUS",
    "L_STEP_KIND",
    "L_STEP_NAME",
    "L_ERROR_TYPE",
    "L_TOKEN_TYPE",
    "L_REQUEST_MODEL",
    "L_OPERATION",
    "L_PROVIDER",
    "L_DEADLINE",
    "DEADLINE_MET",
    "DEADLINE_MISSED",
    "WORKFLOW_BUCKETS_S",
    "STEP_BUCKETS_S",
    "STEPS_BUCKETS",
    "TOKEN_BUCKETS",
    "BUDGET_BUCKETS_S",
    "DCGM",
    "VLLM",
    "TRITON",
    "SGLANG",
    "ISTIO",
    "ENVOY",
    "BUDGET",
    "KSM",
    "LBC",
    "SPANMETRICS",
]

# --- step kinds ---------------------------------------------------------------------------------
StepKind = str
# Kinds the dashboards break compound latency into; instrumentation may add its own (extensible).
STEP_KINDS: tuple[StepKind, ...] = ("llm", "tool", "retrieval", "planning", "network", "other")

# --- labels (metric attributes) -----------------------------------------------------------------
L_WORKFLOW = "workflow"
L_TENANT = "tenant"
L_STATUS = "status"  # ok | error
L_STEP_KIND = "step_kind"
L_STEP_NAME = "step_name"
L_ERROR_TYPE = "error_type"
L_TOKEN_TYPE = "gen_ai_token_type"  # OTel attribute gen_ai.token.type
L_REQUEST_MODEL = "gen_ai_request_model"  # OTel attribute gen_ai.request.model
L_OPERATION = "gen_ai_operation_name"  # OTel attribute gen_ai.operation.name (chat, execute_tool, ...)
L_PROVIDER = "gen_ai_provider_name"  # OTel attribute gen_ai.provider.name (openai, vllm, ...)
L_DEADLINE = "deadline"  # met | missed: whether a workflow with a deadline ended by it
DEADLINE_MET, DEADLINE_MISSED = "met", "missed"


@dataclass(frozen=True, slots=True)
class Metric:
    otel: str  # instrument name
    prom: str  # Prometheus base name (histograms add _bucket/_sum/_count)
    unit: str  # UCUM unit of the instrument
    kind: str  # histogram | counter | gauge
    description: str
    # Labels the kit's instrumentation sets, as Prometheus sees them (the scrape adds job and instance, the
    # exporter otel_scope_*; histograms add le). Checked against the real exporter by the telemetry tests.
    labels: tuple[str, ...] = ()


# Bucket boundaries (seconds). Agent workflows run from about a second to many minutes; single steps
# from milliseconds (tool calls, retrieval) to a minute (long generations). Boundaries are dense where
# SLO thresholds usually sit (1-60 s) so histogram_quantile stays within a few percent there.
WORKFLOW_BUCKETS_S = (0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200)
STEP_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300)
STEPS_BUCKETS = (1, 2, 3, 5, 8, 13, 21, 34, 55, 89)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)  # OTel GenAI semconv advice
# Latency budget left when a step starts: 0 (the deadline has passed) up to a long workflow's whole budget.
BUDGET_BUCKETS_S = (0, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300, 600)

_WF = (L_TENANT, L_WORKFLOW)
_GENAI = (*_WF, L_OPERATION, L_PROVIDER, L_REQUEST_MODEL)

WORKFLOW_DURATION = Metric("aifactory.workflow.duration", "aifactory_workflow_duration_seconds", "s", "histogram",
                           "Wall time of one agent workflow (task), from start to end.", (*_WF, L_STATUS))
STEP_DURATION = Metric("aifactory.step.duration", "aifactory_step_duration_seconds", "s", "histogram",
                       "Wall time of one workflow step (LLM call, tool call, retrieval, planning...).",
                       (*_WF, L_STEP_KIND, L_STEP_NAME, L_STATUS))
CRITICAL_PATH = Metric("aifactory.workflow.critical_path", "aifactory_workflow_critical_path_seconds_total", "s",
                       "counter",
                       "Seconds of workflow wall time each step kind is responsible for; overlapping parallel "
                       "steps split the overlap, so per workflow the kinds add up to its duration.",
                       (*_WF, L_STEP_KIND))
WORKFLOW_STEPS = Metric("aifactory.workflow.steps", "aifactory_workflow_steps", "{step}", "histogram",
                        "Steps executed per workflow.", _WF)
STEP_ERRORS = Metric("aifactory.step.errors", "aifactory_step_errors_total", "{error}", "counter",
                     "Failed steps, by kind and error type.", (*_WF, L_STEP_KIND, L_STEP_NAME, L_ERROR_TYPE))
GENAI_TOKEN_USAGE = Metric("gen_ai.client.token.usage", "gen_ai_client_token_usage", "{token}", "histogram",
                           "Tokens used per LLM call (gen_ai.token.type input|output).", (*_GENAI, L_TOKEN_TYPE))
GENAI_OPERATION_DURATION = Metric("gen_ai.client.operation.duration", "gen_ai_client_operation_duration_seconds",
                                  "s", "histogram", "Duration of GenAI client operations (OTel GenAI semconv); "
                                  "error_type is set on failed calls only.", (*_GENAI, L_ERROR_TYPE))
STEP_BUDGET = Metric("aifactory.step.budget_remaining", "aifactory_step_budget_remaining_seconds", "s", "histogram",
                     "Latency budget the workflow had left when a step started (workflows with a deadline only; "
                     "0 once the deadline has passed).", (*_WF, L_STEP_KIND))
WORKFLOW_DEADLINES = Metric("aifactory.workflow.deadlines", "aifactory_workflow_deadlines_total", "{workflow}",
                            "counter", "Workflows with a deadline that ended, by whether they ended by it "
                            "(deadline met | missed).", (*_WF, L_DEADLINE))
KIT_METRICS = (WORKFLOW_DURATION, STEP_DURATION, CRITICAL_PATH, WORKFLOW_STEPS, STEP_ERRORS, GENAI_TOKEN_USAGE,
               GENAI_OPERATION_DURATION, STEP_BUDGET, WORKFLOW_DEADLINES)

# What `aifactory eval --otlp-endpoint` pushes after evaluating a workload (infra/evaluate.py): one point per
# variant. No unit: the Collector's Prometheus exporter would otherwise suffix a unit of 1 with `_ratio`.
L_WORKLOAD = "workload"
L_VARIANT = "variant"
L_SUITE = "suite"
_FIDELITY = (L_WORKLOAD, L_VARIANT, L_SUITE)
FIDELITY_SCORE = Metric("aifactory.fidelity.score", "aifactory_fidelity_score", "", "gauge",
                        "Share of the workload's fidelity suite the variant answered right (0-1).", _FIDELITY)
FIDELITY_DROP_BOUND = Metric("aifactory.fidelity.drop_bound", "aifactory_fidelity_drop_bound", "", "gauge",
                             "Upper end of the 95% interval of the variant's paired drop against the baseline "
                             "(0 for the baseline).", _FIDELITY)
FIDELITY_PASSED = Metric("aifactory.fidelity.passed", "aifactory_fidelity_passed", "", "gauge",
                         "1 when the variant passed the workload's fidelity gate (the baseline always), else 0.",
                         _FIDELITY)
FIDELITY_METRICS = (FIDELITY_SCORE, FIDELITY_DROP_BOUND, FIDELITY_PASSED)


class DCGM:
    """DCGM exporter (port 9400). Gauges unless noted; labels gpu, UUID, pci_bus_id, device, modelName,
    Hostname (newer exporters: hostname), and in Kubernetes mode pod, namespace, container."""

    PORT = 9400
    GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # %
    FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
    FB_FREE = "DCGM_FI_DEV_FB_FREE"  # MiB
    POWER = "DCGM_FI_DEV_POWER_USAGE"  # W
    GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"  # C
    MEMORY_TEMP = "DCGM_FI_DEV_MEMORY_TEMP"
    SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"  # MHz
    MEM_CLOCK = "DCGM_FI_DEV_MEM_CLOCK"
    XID = "DCGM_FI_DEV_XID_ERRORS"  # value of the last XID
    GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0-1
    TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
    DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
    PCIE_TX = "DCGM_FI_PROF_PCIE_TX_BYTES"
    PCIE_RX = "DCGM_FI_PROF_PCIE_RX_BYTES"
    ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # counter, mJ
    # A gauge: the current NVLink throughput, RX + TX, in units of 1000 KiB/s (DCGM 4.4.2 dcgmlib/src/
    # DcgmCacheManager.cpp ReadAndCacheNvLinkBandwidth; unit DCGM_FIELD_UNIT_BW_MBPS). dcgm-exporter's CSV
    # calls it a counter, but it falls as often as it rises: never rate() it.
    NVLINK_BW = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
    NVLINK_BW_BYTES_PER_UNIT = 1000 * 1024  # bytes per second in one unit of NVLINK_BW
    PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"  # counter
    # Not in the default counters: the kit's custom CSV adds them.
    SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
    ECC_DBE_VOLATILE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
    ECC_SBE_VOLATILE = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
    ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
    ROW_REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"
    UNCORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
    CLOCK_THROTTLE_REASONS = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
    HOSTNAME_LABELS = ("Hostname", "hostname")


class VLLM:
    """vLLM V1 (labels model_name, engine)."""

    TTFT = "vllm:time_to_first_token_seconds"  # histogram
    ITL = "vllm:inter_token_latency_seconds"  # histogram (was time_per_output_token_seconds before 0.11)
    TPOT = "vllm:request_time_per_output_token_seconds"
    E2E = "vllm:e2e_request_latency_seconds"
    QUEUE = "vllm:request_queue_time_seconds"
    PREFILL = "vllm:request_prefill_time_seconds"
    DECODE = "vllm:request_decode_time_seconds"
    RUNNING = "vllm:num_requests_running"  # gauge
    WAITING = "vllm:num_requests_waiting"  # gauge
    KV_CACHE = "vllm:kv_cache_usage_perc"  # gauge 0-1
    PROMPT_TOKENS = "vllm:prompt_tokens_total"  # counter
    GENERATION_TOKENS = "vllm:generation_tokens_total"
    PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
    PREFIX_HITS = "vllm:prefix_cache_hits_total"
    REQUEST_SUCCESS = "vllm:request_success_total"  # {finished_reason}
    PREEMPTIONS = "vllm:num_preemptions_total"
    SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
    SPEC_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
    SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
    L_MODEL = "model_name"
    # Default bucket edges (vllm 0.33.0 vllm/v1/metrics/buckets.py; the kit passes no --custom-histogram-buckets):
    # TTFT's for time_to_first_token_seconds, ITL's for inter_token_latency_seconds and
    # request_time_per_output_token_seconds, REQUEST's for e2e, queue, prefill and decode times.
    TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
                    160, 640, 2560)
    ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80)
    REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680)


class TRITON:
    """Triton (port 8002; labels model, version). Counters carry no _total suffix."""

    REQUEST_SUCCESS = "nv_inference_request_success"
    REQUEST_FAILURE = "nv_inference_request_failure"  # {reason}
    INFERENCE_COUNT = "nv_inference_count"
    EXEC_COUNT = "nv_inference_exec_count"
    REQUEST_DURATION_US = "nv_inference_request_duration_us"  # cumulative microseconds
    QUEUE_DURATION_US = "nv_inference_queue_duration_us"
    COMPUTE_INPUT_US = "nv_inference_compute_input_duration_us"
    COMPUTE_INFER_US = "nv_inference_compute_infer_duration_us"
    COMPUTE_OUTPUT_US = "nv_inference_compute_output_duration_us"
    PENDING = "nv_inference_pending_request_count"  # gauge
    GPU_UTILIZATION = "nv_gpu_utilization"  # 0-1
    GPU_MEMORY_USED = "nv_gpu_memory_used_bytes"
    ENERGY = "nv_energy_consumption"
    # The TensorRT-LLM backend's custom metrics (NVIDIA/TensorRT-LLM triton_backend/inflight_batcher_llm/src/
    # custom_metrics_reporter/custom_metrics_reporter.cc): histograms of the tokens of each response, labelled
    # response_metric_type; their _sum counts tokens.
    OUTPUT_TOKENS = "nv_llm_output_token_len"  # {response_metric_type="total_output_tokens"}
    INPUT_TOKENS = "nv_llm_input_token_len"  # {response_metric_type="total_input_tokens"}
    L_RESPONSE_METRIC_TYPE = "response_metric_type"
    OUTPUT_TOKENS_TYPE = "total_output_tokens"
    INPUT_TOKENS_TYPE = "total_input_tokens"
    L_MODEL = "model"  # the model-repository name, not the kit's model: see ENGINE_MODEL / L_POD_MODEL
    # A TensorRT-LLM repository holds preprocessing, tensorrt_llm, postprocessing and an ensemble; every user
    # request reaches `tensorrt_llm` exactly once (ensemble and BLS paths alike) and it owns the in-flight
    # batching queue, so the kit reads that one and keys it by the pod's aifactory.io/model label, which the
    # model's ServiceMonitor copies onto every series (podTargetLabels).
    ENGINE_MODEL = "tensorrt_llm"
    L_POD_MODEL = "aifactory_io_model"


class SGLANG:
    """SGLang 0.5.23 (sglang/srt/observability/metrics_collector.py; labels model_name, engine_type and, on the
    scheduler's, tp_rank, pp_rank, moe_ep_rank). /metrics only with --enable-metrics."""

    RUNNING = "sglang:num_running_reqs"  # gauge
    QUEUE = "sglang:num_queue_reqs"  # gauge: requests waiting in the scheduler's queue
    # counter {cache_source: device | host | storage, or total}: prompt tokens served from cached prefixes, counted
    # when a request finishes (the tokenizer's collector); the series appear at the first hit
    CACHED_TOKENS = "sglang:cached_tokens_total"
    TOKEN_USAGE = "sglang:token_usage"  # gauge 0-1: share of the KV pool in use
    GEN_THROUGHPUT = "sglang:gen_throughput"  # gauge: tokens/s
    PROMPT_TOKENS = "sglang:prompt_tokens_total"  # counter {is_streaming}
    GENERATION_TOKENS = "sglang:generation_tokens_total"  # counter {is_streaming}
    TTFT = "sglang:time_to_first_token_seconds"  # histogram {is_streaming}
    ITL = "sglang:inter_token_latency_seconds"  # histogram
    E2E = "sglang:e2e_request_latency_seconds"  # histogram
    QUEUE_TIME = "sglang:queue_time_seconds"  # histogram
    L_MODEL = "model_name"
    # Default bucket edges of the two latency histograms a model SLO is judged on (metrics_collector.py
    # TokenizerMetricsCollector; the kit passes no --bucket-time-to-first-token / --bucket-inter-token-latency)
    TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
    ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
                   0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)


class ISTIO:
    REQUESTS = "istio_requests_total"
    DURATION = "istio_request_duration_milliseconds"  # histogram
    MTLS_LABEL = "connection_security_policy"  # mutual_tls on the destination side


class ENVOY:
    """Envoy admin /stats/prometheus (cluster = one per model backend)."""

    RQ_TOTAL = "envoy_cluster_upstream_rq_total"
    RQ_XX = "envoy_cluster_upstream_rq_xx"  # {envoy_response_code_class}
    RQ_TIME = "envoy_cluster_upstream_rq_time"  # histogram, ms
    RQ_RETRY = "envoy_cluster_upstream_rq_retry"
    EJECTIONS = "envoy_cluster_outlier_detection_ejections_active"
    EJECTIONS_ENFORCED = "envoy_cluster_outlier_detection_ejections_enforced_total"  # counter
    DOWNSTREAM_RQ_TIME = "envoy_http_downstream_rq_time"  # histogram, ms
    # gauge {envoy_http_conn_manager_prefix}: requests in flight on a connection manager (`http.<stat_prefix>.
    # downstream_rq_active`, envoyproxy/envoy@v1.40.0 source/common/http/conn_manager_config.h), what the gateway
    # pod's preStop waits on (components/k8s/gateway/drain.py)
    DOWNSTREAM_RQ_ACTIVE = "envoy_http_downstream_rq_active"
    RATELIMITED = "envoy_http_local_rate_limit_rate_limited"
    NO_HEALTHY = "envoy_cluster_upstream_cx_none_healthy"  # counter: requests with no healthy upstream host
    # counter: active health checks sent to the cluster's hosts (a model's: its progress checks, one generation each)
    HEALTH_CHECK_ATTEMPT = "envoy_cluster_health_check_attempt"
    # counter: active health checks that passed (a model's: progress checks the engine answered, so counted)
    HEALTH_CHECK_SUCCESS = "envoy_cluster_health_check_success"
    # gauge: the cluster's hosts passing health checks and not ejected (a model's cluster: its replicas the gateway
    # may send to; envoyproxy/envoy@v1.40.0 docs/root/configuration/upstream/cluster_manager/cluster_stats.rst)
    MEMBERSHIP_HEALTHY = "envoy_cluster_membership_healthy"
    L_CODE_CLASS = "envoy_response_code_class"  # RQ_XX: 2, 4, 5...
    RQ_CODE = "envoy_cluster_upstream_rq"  # {envoy_response_code}: the route cluster's answers per status
    L_CODE = "envoy_response_code"
    # The status a model cluster's upstream filter leaves the router for a request two replicas failed (not retried,
    # not counted against the replica; the client gets 500): components/k8s/gateway/envoy/failures.py
    FAILED_TWICE_CODE = 452
    # Per route stat_prefix (vhost.<vhost>.route.<prefix>.*): the gateway's variant decisions are routes with
    # prefix <workload>__<variant>__<reason> (components/k8s/gateway/envoy/config.py)
    ROUTE_RQ_COMPLETED = "envoy_vhost_route_upstream_rq_completed"  # requests completed per route
    # a route's answers to clients by status class {envoy_response_code_class}, and by status {envoy_response_code}
    # (the gateway's routes that name a variant, or a workload with variants: the variants' clusters also count the
    # tries that overflowed)
    ROUTE_RQ_XX = "envoy_vhost_route_upstream_rq_xx"
    ROUTE_RQ_CODE = "envoy_vhost_route_upstream_rq"
    # counter: requests a cluster's load balancer balanced over every host because too few passed their health checks
    # (panic mode; envoyproxy/envoy@v1.40.0 docs/root/configuration/upstream/cluster_manager/cluster_stats.rst)
    LB_HEALTHY_PANIC = "envoy_cluster_lb_healthy_panic"
    ROUTE_RQ_RETRY = "envoy_vhost_route_upstream_rq_retry"  # retries: on a variant route, tries sent to the next one
    L_ROUTE = "envoy_route"
    L_VHOST = "envoy_virtual_host"
    L_CLUSTER = "envoy_cluster_name"
    # Every HTTP connection manager's stats carry its stat_prefix in this label: the gateway listener's, the stats
    # listener's (Prometheus scrapes, probes) and the admin interface's ("admin") are separate series.
    L_HCM_PREFIX = "envoy_http_conn_manager_prefix"
    GATEWAY_HCM_PREFIX = "gateway"  # the gateway listener's stat_prefix (components/k8s/gateway/envoy/config.py)
    STATS_HCM_PREFIX = "stats"
    # The overload manager (components/k8s/gateway/envoy/config.py `overload_manager`): per action
    # `overload.<action>.active` (1 while saturated) and `.scale_percent` (0-100), per resource monitor
    # `overload.<monitor>.pressure` (percent of its budget, above 100 past it), gauges without tags, one series per
    # gateway pod (envoyproxy/envoy@v1.40.0 source/server/overload_manager_impl.cc; the real Envoy's names:
    # tests/artifacts/test_gateway_overload.py).
    RESET_STREAMS_SCALE = "envoy_overload_envoy_overload_actions_reset_high_memory_stream_scale_percent"
    STOP_ACCEPTING_ACTIVE = "envoy_overload_envoy_overload_actions_stop_accepting_requests_active"
    HEAP_PRESSURE = "envoy_overload_envoy_resource_monitors_fixed_heap_pressure"
    # The shares of the heap budget at which the gateway starts resetting the streams that buffer most (the reset
    # action scales from 0 here to 100 at STOP_ACCEPTING_AT) and stops accepting requests, every listener's but the
    # admin interface's: its /stats/prometheus and /ready too.
    RESET_STREAMS_FROM = 0.85
    STOP_ACCEPTING_AT = 0.95


class BUDGET:
    """The gateway's token budget service (components/k8s/gateway/budgets/service.py), scraped on its metrics port.

    Gauges are read from the shared store at scrape time, so every replica of the service reports the same value:
    aggregate them with max, not sum. {scope: tenant | workload, name: the tenant or workload, window: perMinute |
    perHour | perDay}."""

    SPENT = "aifactory_token_budget_spent_tokens"  # gauge: weighted tokens reserved or settled in the current window
    REMAINING = "aifactory_token_budget_remaining_tokens"  # gauge: the window's limit minus SPENT (at least 0)
    LIMIT = "aifactory_token_budget_limit_tokens"  # gauge: the window's limit
    REFUSED = "aifactory_token_budget_refused_total"  # counter: requests refused with 429 {scope, name, window}
    # counter {scope, name}: requests counted against the budget (admitted, refused, or answered without the store):
    # REFUSED's denominator
    REQUESTS = "aifactory_token_budget_requests_total"
    # counter {workload: the routed workload}: 2xx answers that ended without `usage`, settled at their reservation
    # (the engine did not say what it generated: over-counted rather than under)
    SETTLED_WITHOUT_USAGE = "aifactory_token_budget_settled_without_usage_total"
    # counter {scope, name, outcome: admitted | refused}: requests the store could not answer in time; admitted ones
    # are uncounted (onStoreFailure: open), refused ones got 503 (closed)
    STORE_FAILURES = "aifactory_token_budget_store_failures_total"
    CHECK_SECONDS = "aifactory_token_budget_check_seconds"  # histogram: time to reserve in the store
    # counter: requests answered without asking the store, its breaker open (in STORE_FAILURES too, and in
    # CHECK_SECONDS: their answer took no store time)
    STORE_SKIPPED = "aifactory_token_budget_store_skipped_total"
    STORE_BREAKER_OPEN = "aifactory_token_budget_store_breaker_open"  # gauge: 1 while the store's breaker is open
    # gauge {stream: admission | metering}: the ext_proc streams this replica holds open now (per pod: sum them). A
    # metering stream lasts as long as its request's answer; one cut at shutdown loses its settlement
    STREAMS_IN_FLIGHT = "aifactory_token_budget_streams_in_flight"
    L_STREAM = "stream"
    ADMISSION, METERING = "admission", "metering"
    # counter {reason: retries | dropped}: settlements never written: every try failed, or dropped unwritten (too many
    # pending while the store was down, or still pending at shutdown). The reservation stays counted until its deadline,
    # when the sweep gives it back (callers refused early); a fail-open request's usage is not counted
    SETTLEMENTS_FAILED = "aifactory_token_budget_settlements_failed_total"
    SETTLE_RETRIES, SETTLE_DROPPED = "retries", "dropped"
    # counters: reservations the sweep released, their deadline passed and nobody settled them (their metering stream
    # lost: a service pod killed hard), {scope, name}; and the weighted tokens it gave back, {scope, name, window}.
    # Each replica counts what it released (sum them); every budget's series exported from 0
    SWEPT = "aifactory_token_budget_swept_reservations_total"
    SWEPT_TOKENS = "aifactory_token_budget_swept_tokens_total"
    # the gateway's budget filters' ext_proc stat prefixes (components/k8s/gateway/envoy/budgets.py): admission for
    # fail-open callers, for fail-closed tenants, and metering
    ENVOY_ADMISSION = "budgets"
    ENVOY_ADMISSION_CLOSED = "budgets_closed"
    ENVOY_METER = "budgets_meter"
    # the store: the Valkey chart's release in the gateway namespace; its primary is always the StatefulSet's pod 0
    # (valkey-io/valkey-helm valkey-0.11.0 valkey/templates/init_config.yaml, service.yaml: no Sentinel, no promotion)
    STORE_RELEASE = "aifactory-budgets-valkey"
    STORE_PRIMARY_POD = f"{STORE_RELEASE}-0"
    # The primary's pod in either shape the chart renders (a PromQL regex, anchored): with storeReplicas, the
    # StatefulSet's pod 0; without (storeReplicas: 0, the default), the chart renders a Deployment of one pod instead
    # (templates/deploy_valkey.yaml, `replica.enabled` false), named <release>-<pod-template-hash>-<5 characters>, both
    # drawn from Kubernetes' alphabet without vowels (kubernetes/kubernetes@v1.34.0 pkg/controller/deployment/sync.go:
    # the ReplicaSet <deployment>-<hash>, its pods <replicaset>-<suffix>; staging/src/k8s.io/apimachinery/pkg/util/
    # rand/rand.go `alphanums`, SafeEncodeString). Neither matches a replica (<release>-1, -2 ...).
    K8S_NAME_CHARS = "[bcdfghjklmnpqrstvwxz2456789]"
    STORE_PRIMARY_PODS = f"{STORE_RELEASE}-(0|{K8S_NAME_CHARS}+-{K8S_NAME_CHARS}{{5}})"
    L_SCOPE = "scope"
    L_NAME = "name"
    L_WINDOW = "window"
    L_WORKLOAD = "workload"
    L_OUTCOME = "outcome"
    L_REASON = "reason"


class KSM:
    """kube-state-metrics."""

    NODE_LABELS = "kube_node_labels"
    POD_REQUESTS = "kube_pod_container_resource_requests"  # {resource="nvidia_com_gpu"}
    POD_LABELS = "kube_pod_labels"  # label_<key> for keys in --metric-labels-allowlist=pods=[...]
    NODE_INFO = "kube_node_info"
    NODE_CAPACITY = "kube_node_status_capacity"  # gauge {node, resource="nvidia_com_gpu", unit}
    POD_PHASE = "kube_pod_status_phase"  # gauge {namespace, pod, uid, phase}: 1 for the pod's current phase
    POD_READY = "kube_pod_status_ready"  # gauge {namespace, pod, uid, condition: true | false | unknown}
    DEPLOY_REPLICAS = "kube_deployment_status_replicas_available"
    # gauge {namespace, pod, uid, container}: 1 while the container passes its readiness probe. The pod's Ready
    # condition (POD_READY) also needs its readiness gates: every container ready and the pod not Ready is a gate
    # still false (kube-state-metrics v2.18.0, the version kube-prometheus-stack 82.4.0 deploys, exports no series
    # for readiness gates: docs/metrics/workload/pod-metrics.md)
    CONTAINER_READY = "kube_pod_container_status_ready"
    POD_DELETED = "kube_pod_deletion_timestamp"  # gauge {namespace, pod, uid}: exported only once the pod is deleted


class LBC:
    """The AWS Load Balancer Controller (components.k8s.load_balancer; kubernetes-sigs/aws-load-balancer-controller
    v3.5.0), scraped through its chart's ServiceMonitor (plain HTTP on its metrics-server port, 8080: the system
    namespace has no sidecars). The chart's ServiceMonitor takes the job from the Service's app.kubernetes.io/instance
    label, the release's name (aws/eks-charts aws-load-balancer-controller 3.5.0 templates/servicemonitor.yaml
    `jobLabel`)."""

    RELEASE = "aws-load-balancer-controller"
    JOB = RELEASE
    # controller-runtime v0.24.1 (the controller's go.mod) counts each Reconcile that returned an error, {controller}
    # (pkg/internal/controller/metrics/metrics.go). The controller returns its real failures (AWS API errors,
    # permissions, throttling after retries) and turns "requeue" results into no error (pkg/runtime/reconcile.go
    # HandleReconcileError), so waiting for a target's health is not counted.
    RECONCILE_ERRORS = "controller_runtime_reconcile_errors_total"
    RECONCILES = "controller_runtime_reconcile_total"  # {controller, result}
    L_CONTROLLER = "controller"
    # the controllers that make the gateway's NLB and register its pods: the names they register under
    # (controllers/service/service_controller.go, controllers/elbv2/targetgroupbinding_controller.go `controllerName`)
    SERVICE_CONTROLLER = "service"
    TARGET_GROUP_BINDING_CONTROLLER = "targetGroupBinding"


class PIPELINE:
    """The telemetry pipeline's own metrics: the OpenTelemetry Collector's and Jaeger v2's internal telemetry (both
    collector builds, scraped on 8888), Grafana Alloy's loki.write, Loki's requests and its canary.

    Collector counters carry `_total` when the telemetry is exported by a configured Prometheus pull reader, as the
    kit configures it (open-telemetry/opentelemetry-collector@v0.143.0 internal/e2e/metric_stability_test.go,
    "Metric readers"; names from exporter/exporterhelper/metadata.yaml and receiver/receiverhelper/metadata.yaml).
    """

    # {exporter} (the exporter's id, e.g. otlp/jaeger), one per signal
    SENT = "otelcol_exporter_sent_{signal}_total"
    SEND_FAILED = "otelcol_exporter_send_failed_{signal}_total"  # gave up after retries: the data is dropped
    ENQUEUE_FAILED = "otelcol_exporter_enqueue_failed_{signal}_total"  # the sending queue was full: dropped
    # {receiver, transport}: refused by the pipeline behind the receiver (memory limiter, a failing exporter)
    RECEIVER_REFUSED = "otelcol_receiver_refused_{signal}_total"
    SIGNALS = ("spans", "metric_points", "log_records")
    # Alloy loki.write {host, tenant, reason}: entries dropped after every retry
    # (grafana/alloy@v1.11.3 internal/component/common/loki/client/client.go)
    LOKI_WRITE_DROPPED = "loki_write_dropped_entries_total"
    LOKI_WRITE_SENT = "loki_write_sent_entries_total"
    # Loki's HTTP/gRPC requests {route, status_code} (the loki chart's own LokiRequestErrors reads it:
    # grafana/loki@helm-loki-6.53.0 production/helm/loki/src/alerts.yaml.tpl)
    LOKI_REQUESTS = "loki_request_duration_seconds_count"
    # loki-canary (a DaemonSet in the loki chart, lokiCanary.enabled: true) writes lines and reads them back
    # (grafana/loki@v3.6.5 pkg/canary/comparator/comparator.go)
    CANARY_ENTRIES = "loki_canary_entries_total"
    CANARY_MISSING = "loki_canary_missing_entries_total"  # not received back via websocket nor direct query


class SPANMETRICS:
    """OTel Collector spanmetrics connector (labels service_name, span_name, span_kind, status_code)."""

    CALLS = "traces_span_metrics_calls_total"
    DURATION = "traces_span_metrics_duration_milliseconds"  # histogram, ms
