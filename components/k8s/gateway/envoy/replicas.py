"""A model's cluster: its replicas, reached directly, steered by fast checks, never cut by them (issue 44).

Hosts: the model's headless Service by its absolute DNS name (`<model>.<namespace>.svc.cluster.local.`), every
address it answers being a replica (Envoy's DNS cluster, strict: every A record is a host). The Service selects
the model's pods, a multi-node model's group leaders only (worker-index 0: components.k8s.serving.objects.service),
and publishes ready addresses only, so the cluster's hosts are the running, ready replicas: no absent ordinal is a
host (outlier detection's max_ejection_percent is a share of the replicas that run), and the gateway asks one
name per model per refresh, whatever replicas.max is. The name is absolute (a trailing dot): c-ares, Envoy's
resolver, queries it as is and only as is (c-ares ares_getaddrinfo.c, `as_is_only`), where a relative name would
also be tried under each search domain of the pod's resolv.conf (`ndots:5`), one NXDOMAIN each. The Host of every
request and check stays the Service's name without the dot (`model_host`), the name the gateway's sidecar routes.

Two decisions, two speeds (docs/gateway.md, "Day 2"):

- stop sending new requests: fast. A replica whose record is gone (a pod being deleted: rollout, scale-in, node
  drain; its endpoint leaves the ready addresses at once) is removed at the next DNS refresh even while it passes
  its checks (Cluster.ignore_health_on_host_removal); a replica that fails `unhealthyThreshold` checks is taken
  out. The checks are progress checks (`health_check`): a replica whose engine stops producing fails them, however
  well its /health answers. Both within components.k8s.defaults.GATEWAY_DETECTION_SECONDS (`dns_detection_seconds`,
  HealthCheck.detection_seconds), which each model pod's preStop outwaits. Outlier detection takes out a replica
  that fails requests (`outlier_detection`).
- kill work in flight: never on a check. A failed check or a removed record drains the replica's connections
  (Envoy 1.40 drains HTTP pools on host health failure and removal: source/common/upstream/cluster_manager_impl.cc,
  `drainOrCloseConnPools`): the requests on them run to their end. A slow /health under load (vLLM's runs on the
  API server's event loop: vllm-project/vllm#38157) only steers new work away; nothing is reset and re-run on
  the saturated peers. A try ends when the replica ends it (a reset, an error: retried elsewhere), when it is
  silent past the try idle timeout (streamed tries), or at the route timeout.

Panic: only when no replica passes. While at least one replica of the model passes its checks (and is not
ejected), new requests go to those only; when none does (every replica saturated past the check's timeout, or all
hung), Envoy spreads new requests over all of them (panic mode, PANIC_WHEN_NONE_PASSES) instead of answering 503 no
healthy upstream: saturation sheds no work, it queues. The cost: a hung replica gets its share too while no replica
passes (a model of one replica that hangs: its requests wait for their try idle or route timeout instead of a 503).
A variant has no panic mode (NO_PANIC): with none of its replicas passing, its tries fail at once behind its gate and
go to its workload's next variant (components.k8s.gateway.envoy.variants), which beats queueing on it. Its panic is a
cluster of its own, its last resort (`last_resort_cluster`): the same replicas, no health checks, tried only after
every variant's own try failed, so a workload whose variants are all saturated queues on them instead of answering
503. A request that names the variant itself reaches the variant's cluster, then its last resort, each through its
gate, as a workload's requests do.

Sources (Envoy v1.40.0 API): Cluster.ignore_health_on_host_removal, CommonLbConfig.healthy_panic_threshold,
OutlierDetection https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/cluster/v3/cluster.proto,
outlier_detection.proto; DnsCluster https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/extensions/clusters/dns/v3/
dns_cluster.proto; HealthCheck https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/core/v3/health_check.proto;
retry budget https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/cluster/v3/circuit_breaker.proto.
"""

from __future__ import annotations

from typing import Any

from components.k8s import naming
from components.k8s.engines import ENGINES
from components.k8s.gateway.envoy import affinity as affinity
from components.k8s.gateway.envoy import failures
from components.k8s.gateway.envoy.base import (
    DEFAULT_DNS_REFRESH_SECONDS,
    DEFAULT_MIN_RETRY_CONCURRENCY,
    METADATA_NAMESPACE,
    VARIANT_KEY,
    GatewayView,
    _dns_cluster,
    _seconds,
    max_requests_of,
    model_host,
)
from components.k8s.settings import Model

__all__ = [
    "PANIC_WHEN_NONE_PASSES",
    "NO_PANIC",
    "COREDNS_TTL_SECONDS",
    "RECHECK_SECONDS",
    "PROGRESS_CHECK_TRACEPARENT",
    "replicas_host",
    "health_check",
    "dns_detection_seconds",
    "outlier_detection",
    "model_cluster",
    "panic",
    "last_resort_name",
    "last_resort_cluster",
]

# Panic mode below 1% of the model's hosts passing: with up to 100 replicas, only when none passes. Envoy compares the
# share of healthy (plus degraded) hosts, in percent, with the threshold and balances over every host below it, those
# failing their checks and those ejected alike (envoyproxy/envoy@v1.40.0
# source/extensions/load_balancing_policies/common/load_balancer_impl.cc, `LoadBalancerBase::isHostSetInPanic`; the
# least-request and Maglev policies read the cluster's common_lb_config.healthy_panic_threshold: their config.cc).
# 0 (before) answered 503 for every request while all replicas failed their checks: a saturated model's outage.
# The default of gateway.outlierDetection.panicThresholdPercent (`panic`), which each model's cluster applies.
PANIC_WHEN_NONE_PASSES = {"healthy_panic_threshold": {"value": 1}}
NO_PANIC = {"healthy_panic_threshold": {"value": 0}}  # a variant's: its workload's next variant serves instead
# How long CoreDNS may answer a record after its endpoint left the Service: the kubernetes plugin's default TTL
# (coredns/coredns plugin/kubernetes/README.md, `ttl`: "default is 5 seconds"), which its cache honours.
COREDNS_TTL_SECONDS = 5
# How often the cluster checks a replica it holds unhealthy (starting, or failing): one that passes its checks takes
# requests within about this, not a whole interval later (HealthCheck.unhealthy_interval).
RECHECK_SECONDS = 1.0
# Every progress check carries this W3C traceparent, flags 00 ("not sampled"), so no tracer on its way records it
# (docs/observability.md, "Progress checks in traces"): the sidecars' Envoy (the pinned Istio's follows an incoming
# flag: envoyproxy/envoy#35721) and vLLM (the OTel SDK's parentbased_traceidratio drops a child of a remote parent not
# sampled). A fixed, valid context, recognisable where it is logged: the trace id spells `aifactory-check!` and the
# parent span id `envoy-hc` in ASCII. An invalid one (a zero id) is no parent to the W3C propagator: vLLM would sample
# the check as a root.
PROGRESS_CHECK_TRACEPARENT = "00-6169666163746f72792d636865636b21-656e766f792d6863-00"


def replicas_host(cfg: GatewayView, model: Model) -> str:
    """The name the model's cluster resolves: its headless Service's, absolute (see the module docstring)."""
    return f"{model_host(cfg, model)}."


def dns_detection_seconds() -> float:
    """Longest time from a replica's endpoint leaving the Service to the gateway sending it nothing new: CoreDNS may
    answer the old record for its TTL, then the next refresh drops the host (ignore_health_on_host_removal)."""
    return COREDNS_TTL_SECONDS + DEFAULT_DNS_REFRESH_SECONDS


def health_check(cfg: GatewayView, model: Model) -> dict[str, Any]:
    """The model's active health check: a progress check, the engine's request that passes only when it produces
    (Engine.progress_check: vLLM and Triton a 1-token completion, or the task's one-word embedding or rerank; SGLang
    its /health_generate), not its /health, which a stuck engine core passes (vLLM's check_health reads an errored
    flag). A POST carries its JSON body (HttpHealthCheck.send, hex) and content-type application/json (the engines'
    OpenAI servers read a body as JSON by that header). Every check carries PROGRESS_CHECK_TRACEPARENT, not sampled:
    no span of it reaches the Collector, so traces and spanmetrics count users' requests only. Host = the model
    Service's name (Envoy's default Host is the cluster's name, which the gateway's sidecar passes through in
    plaintext to the model's STRICT sidecar: every check would fail). Healthy replicas are checked every interval,
    traffic or not (the default no-traffic interval, 60 s, would leave a quiet model's failing replica in for a
    minute); replicas held unhealthy (a new gateway's before their first passing checks, a starting, failing or hung
    replica) every RECHECK_SECONDS.

    Failing it only steers: no new request goes to the replica until it passes healthyThreshold checks again (it
    produces again); what it holds drains (module docstring). Its verdict means "no progress", not "one slow request"
    (defaults: unhealthyThreshold 1, timeout 8 s: components.k8s.defaults.DEFAULT_HEALTH_CHECK_TIMEOUT_SECONDS): the
    check waits in a saturated vLLM or Triton engine's queue, and only a replica whose 1-token request waited longer
    than any sane queue is steered away. Every replica failing at once (all saturated past it, or all hung): panic,
    new requests spread over all of them (PANIC_WHEN_NONE_PASSES), none answered 503."""
    hc = cfg.gateway.health_check
    recheck = _seconds(min(RECHECK_SECONDS, hc.interval_seconds))
    check = ENGINES[model.engine].progress_check(model)
    http: dict[str, Any] = {"path": check.path, "host": model_host(cfg, model)}
    if check.method != "GET":
        http["method"] = check.method
    headers = {"traceparent": PROGRESS_CHECK_TRACEPARENT}
    if check.body is not None:
        http["send"] = {"text": check.payload().hex()}
        headers["content-type"] = "application/json"
    http["request_headers_to_add"] = [{"header": {"key": k, "value": v}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
                                      for k, v in sorted(headers.items())]
    return {
        "timeout": _seconds(hc.timeout_seconds),
        "interval": _seconds(hc.interval_seconds),
        "no_traffic_interval": recheck,
        "no_traffic_healthy_interval": _seconds(hc.interval_seconds),
        "unhealthy_interval": recheck,
        "unhealthy_threshold": hc.unhealthy_threshold,
        "healthy_threshold": hc.healthy_threshold,
        "http_health_check": http,
    }


def model_cluster(cfg: GatewayView, model: Model) -> dict[str, Any]:
    """The model's cluster: what the routes send to, its replicas directly."""
    gw = cfg.gateway
    cb = gw.circuit_breakers
    cluster = _dns_cluster(model.name, replicas_host(cfg, model), naming.MODEL_HTTP_PORT,
                           connect_timeout=gw.connect_timeout_seconds)
    if model.variant is not None:  # every replica says which variant it is (the response's x-aifactory-variant)
        cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["metadata"] = {
            "filter_metadata": {METADATA_NAMESPACE: {VARIANT_KEY: model.name}}}
    return {
        **cluster,
        # Least request of four random choices (failures.least_request_policy); with session affinity: Maglev with
        # bounded load (envoy_affinity), hashing each replica by its address.
        "load_balancing_policy": affinity.load_balancing_policy(model)
        if model.session_affinity_balance_factor is not None else failures.least_request_policy(),
        # Panic only when no replica passes, never for a variant (module docstring). Host health changes are applied
        # at once: with the default 1 s merge window a second ejection right after the first waits up to a second
        # while the replica keeps taking (and failing) requests.
        "common_lb_config": {**(panic(cfg) if model.variant is None else NO_PANIC),
                             "update_merge_window": "0s"},
        # a replica whose record is gone takes no new request, however well it answers its checks (a pod in its
        # preStop answers them)
        "ignore_health_on_host_removal": True,
        "circuit_breakers": {"thresholds": [{
            "priority": "DEFAULT",
            "max_connections": cb.max_connections,
            "max_pending_requests": cb.max_pending_requests,
            # a variant's own limit: past it, tries overflow to the next variant (envoy_variants)
            "max_requests": max_requests_of(cfg.gateway, model),
            # retries come from failures only (no check resets a replica's tries), so the configured budget
            "retry_budget": {"budget_percent": {"value": gw.retries.budget_percent},
                             "min_retry_concurrency": DEFAULT_MIN_RETRY_CONCURRENCY},
        }]},
        "health_checks": [health_check(cfg, model)],
        "outlier_detection": outlier_detection(cfg),
        "typed_extension_protocol_options": failures.upstream_protocol_options(model),  # which 500 is whose
    }


def outlier_detection(cfg: GatewayView) -> dict[str, Any]:
    """Ejection of a replica that fails requests, kept until its ejection time ends.

    What counts: any 5xx and the failures Envoy originates (connect failures, resets, per-try timeouts: mapped to
    503/504 while split_external_local_origin_errors is off), `gateway.outlierDetection.consecutive5xx` in a row,
    enforced (consecutive_5xx and consecutive_gateway_failure, 100%). A replica that answers 500 to every request
    while its /health passes is out after that many, and each of those tries was retried elsewhere (the route's
    retriable statuses). A passing health check does not end an ejection (successful_active_health_check_uneject_
    host false: source/common/upstream/outlier_detection_impl.cc, `DetectorImpl::initialize`), so such a replica
    stays out for its ejection time (baseEjectionSeconds times its ejections so far), and a replica whose engine
    stopped producing but answers /health (vLLM's check_health reads an errored flag) stays out as long.

    max_ejection_percent is a share of the cluster's hosts (`DetectorImpl::ejectHost`), here the ready replicas
    only: at 67%, one of 2 and two of 3, never a model's only replica."""
    od = cfg.gateway.outlier_detection
    return {
        "consecutive_5xx": od.consecutive_5xx,
        "enforcing_consecutive_5xx": 100,
        "consecutive_gateway_failure": od.consecutive_5xx,
        "enforcing_consecutive_gateway_failure": 100,
        "interval": _seconds(od.interval_seconds),
        "base_ejection_time": _seconds(od.base_ejection_seconds),
        "max_ejection_percent": od.max_ejection_percent,
        "successful_active_health_check_uneject_host": False,
    }


def panic(cfg: GatewayView) -> dict[str, Any]:
    """A model's panic threshold: gateway.outlierDetection.panicThresholdPercent (default 1: PANIC_WHEN_NONE_PASSES)."""
    return {"healthy_panic_threshold": {"value": cfg.gateway.outlier_detection.panic_threshold_percent}}


def last_resort_name(model: Model) -> str:
    return f"{model.name}{naming.LAST_RESORT_SUFFIX}"


def last_resort_cluster(cfg: GatewayView, model: Model) -> dict[str, Any]:
    """A variant's last resort: its replicas (the same Service name) as a model without variants reaches them when none
    passes its checks, for the tries that every variant's own cluster failed (components.k8s.gateway.envoy.variants).

    No health checks: a second checker would double the progress checks each replica answers, and what it would find
    is already known when a try gets here (the variant had no passing replica, or its breaker was full): without
    checks every ready replica is a host, as in panic, and least request keeps a replica that holds its requests
    (saturated or hung) from getting more than its share. Outlier detection stays (ejection takes at most
    maxEjectionPercent of the replicas), with panic below 1% not ejected, as a model's. That panic is not a no-op:
    Envoy ejects a host only while the ejected share stays within maxEjectionPercent (always_eject_one_host off:
    envoyproxy/envoy@v1.40.0 source/common/upstream/outlier_detection_impl.cc, `DetectorImpl::ejectHost`), so at the
    defaults (67%) a third of the replicas stay in and it never panics, but with maxEjectionPercent 100 every replica
    may be ejected, and panic then sends the tries to them rather than answering 503 no healthy upstream. Its breaker
    is a model's (gateway.circuitBreakers.maxRequests): here requests queue at the engines, as they would without
    variants."""
    name = last_resort_name(model)
    cluster = {k: v for k, v in model_cluster(cfg, model).items() if k != "health_checks"}
    thresholds = {**cluster["circuit_breakers"]["thresholds"][0],
                  "max_requests": cfg.gateway.circuit_breakers.max_requests}
    return {**cluster, "name": name, "load_assignment": {**cluster["load_assignment"], "cluster_name": name},
            "common_lb_config": {**panic(cfg), "update_merge_window": "0s"},
            "circuit_breakers": {"thresholds": [thresholds]}}
