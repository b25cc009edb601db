"""Defaults and fixed sizes the Kubernetes components share with the stack config (infra.config).

A light module on purpose (like components/nodes.py): config validation imports it without pulling in
pulumi_kubernetes. Each component module re-exports the defaults of its own args.
"""

__all__ = [
    "IPAM_BLOCK_SIZE",
    "CAPACITY_BLOCK_DRAIN_MINUTES",
    "DEFAULT_DRIVER_MIN_VERSION",
    "DEFAULT_KUBERNETES_VERSION",
    "DEFAULT_GATEWAY_NAMESPACE",
    "DEFAULT_MONITORING_NAMESPACE",
    "DEFAULT_STARTUP_BUDGET_SECONDS",
    "DEFAULT_GROUP_FORMATION_SECONDS",
    "SERVING_PRIORITY_CLASSES",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_TRY_IDLE_SECONDS",
    "TRY_IDLE_TTFT_FACTOR",
    "TRY_IDLE_TTFT_WARN",
    "default_try_idle_seconds",
    "GATEWAY_DETECTION_SECONDS",
    "DEFAULT_HEALTH_CHECK_TIMEOUT_SECONDS",
    "DEFAULT_HEALTH_CHECK_INTERVAL_SECONDS",
    "DEFAULT_HEALTH_CHECK_UNHEALTHY_THRESHOLD",
]

IPAM_BLOCK_SIZE = 16  # RDMA-network addresses each InfiniBand node takes from infiniband.ipRange (nv-ipam block)
DEFAULT_KUBERNETES_VERSION = "1.35"  # the cluster's minor version (Pod Security labels, chart choices)
DEFAULT_GATEWAY_NAMESPACE = "aifactory-gateway"  # where the Envoy gateway runs
DEFAULT_MONITORING_NAMESPACE = "monitoring"  # where Prometheus and the OpenTelemetry Collector run
# A multi-node replica's Ray group formation: the leader's wait for its workers to join (vLLM's
# examples/online_serving/multi-node-serving.sh --ray_init_timeout, default 300 s), counted apart from the start-up
# budget. The workers may land on fresh nodes: an image pull (serving.DEFAULT_IMAGE_PULL_SECONDS, 600 s) plus Ray's
# start and retries (the worker retries `ray start` every 5 s for the same timeout).
DEFAULT_GROUP_FORMATION_SECONDS = 900
# The PriorityClass of each model priority (models.X.priority): (name, value, preemptionPolicy). Model pods are
# the only pods on GPU pools (tainted), so this orders them among themselves: an interactive pod that finds no GPU
# preempts batch ones; a batch pod never preempts (it waits). Far below system-cluster-critical (2,000,000,000).
SERVING_PRIORITY_CLASSES: dict[str, tuple[str, int, str]] = {
    "interactive": ("aifactory-serving-interactive", 100000, "PreemptLowerPriority"),
    "batch": ("aifactory-serving-batch", 10000, "Never"),
}
DEFAULT_STARTUP_BUDGET_SECONDS = 1800  # a model's download + load + warm-up (models.X.startupBudgetSeconds)
DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024  # an OpenAI request body: 128k tokens of text is ~0.5 MiB; images more
DEFAULT_TRY_IDLE_SECONDS = 30.0  # longest silence of a replica before the gateway retries elsewhere (at most timeout)
# A streamed try is silent until its first token: a try idle timeout near the model's p95 TTFT SLO cuts the slow 5%
# of first tokens (long prefills, a deep queue) and retries them from scratch elsewhere. The default leaves
# TRY_IDLE_TTFT_FACTOR x the SLO; a stack that sets it at or below TRY_IDLE_TTFT_WARN x the SLO is warned.
TRY_IDLE_TTFT_FACTOR = 3.0
TRY_IDLE_TTFT_WARN = 1.5


def default_try_idle_seconds(timeout_seconds: float, ttft_seconds: float) -> float:
    """models.X.tryIdleTimeoutSeconds when unset: DEFAULT_TRY_IDLE_SECONDS, or TRY_IDLE_TTFT_FACTOR x the model's
    TTFT SLO where that is longer, at most timeoutSeconds."""
    return min(timeout_seconds, max(DEFAULT_TRY_IDLE_SECONDS, TRY_IDLE_TTFT_FACTOR * ttft_seconds))
# Day 2: a model pod stops getting new work before it is told to stop. Within this many seconds of a replica leaving
# its Service's ready endpoints (a pod being deleted: rollout, scale-in, drain) or failing its checks, the gateway
# sends it no new request (components.k8s.gateway.envoy.replicas: DNS refresh and health checks are sized to it); each
# model pod's preStop hook waits longer than this before its engine gets SIGTERM (components.k8s.serving).
GATEWAY_DETECTION_SECONDS = 10
# The gateway's progress checks (gateway.healthCheck: components.k8s.gateway.envoy.replicas.health_check): a check is
# a generation, not a /health, and on vLLM and Triton it waits in the engine's FCFS queue behind the work a saturated
# replica holds. So its verdict must mean "no progress", not "one slow request": one check (unhealthyThreshold 1) that
# got no token for DEFAULT_HEALTH_CHECK_TIMEOUT_SECONDS, longer than any sane queue, takes a replica out; the next
# starts DEFAULT_HEALTH_CHECK_INTERVAL_SECONDS after the last one's answer, so the window is 1 x (8 + 2) =
# GATEWAY_DETECTION_SECONDS. SGLang's /health_generate answers at 1 s or 2 s after any output: well inside 8 s. Each
# gateway pod sends a replica one check per interval plus its answer (under 0.5/s).
DEFAULT_HEALTH_CHECK_TIMEOUT_SECONDS = 8.0
DEFAULT_HEALTH_CHECK_INTERVAL_SECONDS = 2.0
DEFAULT_HEALTH_CHECK_UNHEALTHY_THRESHOLD = 1
CAPACITY_BLOCK_DRAIN_MINUTES = 60  # default drain: EKS asks to scale to zero more than 30 min before the end
DEFAULT_DRIVER_MIN_VERSION = "550.54.15"  # node-check: the oldest NVIDIA driver a GPU node may run
