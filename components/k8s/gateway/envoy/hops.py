"""A model's cluster reaches each replica through its own hop, so that Envoy can end a hung replica's tries.

Why: when active health checks fail a host, Envoy 1.40 drains the host's HTTP connection pools (busy connections
stay until their requests end) and closes only its TCP pools (envoyproxy/envoy@v1.40.0
source/common/upstream/cluster_manager_impl.cc, `drainOrCloseConnPools`; Cluster.close_connections_on_host_health_
failure). So a non-streamed try in flight on a replica that hangs would wait for the route timeout. With a hop, the
try's connection is a TCP one: the model's cluster `<model>` (HTTP: routes, least-request or Maglev, outlier
detection, retries, circuit breakers, variant metadata) has `replicas.max` hosts, host i being the hop listener
`<model>__replica-<i>`, whose tcp_proxy forwards the bytes to the one-host cluster `<model>__replica-<i>`: replica i
by its stable DNS name (`replica_host`), health-checked on the engine's health path with
close_connections_on_host_health_failure. When replica i fails its checks, the hop's TCP connections are closed,
the router sees a reset and retries the tries elsewhere (`reset` is in retry_on; previous_hosts keeps the retry off
that replica).

Stable names: a single-node model is a StatefulSet whose governing Service is the model's headless Service, so pod
i is `<model>-<i>.<model>.<namespace>.svc.cluster.local` while it is ready (kubernetes/website
content/en/docs/concepts/workloads/controllers/statefulset.md, "Stable Network ID"; the Service does not publish
not-ready addresses, so a starting replica has no record). A multi-node model is a LeaderWorkerSet `<model>-lws`:
the LWS controller makes a leader StatefulSet `<model>-lws` governed by a headless Service `<model>-lws` that
publishes not-ready addresses (kubernetes-sigs/lws@v0.9.0 pkg/controllers/leaderworkerset_controller.go
`reconcileHeadlessServices`, subdomainPolicy Shared by default: pkg/webhooks/leaderworkerset_webhook.go;
pkg/utils/controller/controller_utils.go `CreateHeadlessServiceIfNotExists`), so group i's leader is
`<model>-lws-<i>.<model>-lws.<namespace>.svc.cluster.local` (the name LWS_LEADER_ADDRESS carries:
pkg/utils/pod/pod_utils.go).

The hops listen on abstract Unix sockets (`@aifactory/<model>__replica-<i>`), not on Envoy internal listeners:
active health checks run on Envoy's main thread, which reaches no internal listener
(components.k8s.gateway.envoy.variants,
`gate_cluster`), and the model's cluster needs its own checks through each hop to know which of its
`replicas.max` hosts exist. A check through hop i passes only while replica i exists and passes the hop's own
checks (the hop's cluster has no panic mode), so the model's cluster balances over the live, healthy replicas only.
An abstract socket lives in the pod's network namespace, with no file and no port; the gateway's Istio sidecar does
not capture it (it redirects TCP over IP), while the hop's own connection to the replica leaves as before, with the
Host of the model's Service (components.k8s.gateway.envoy.config, "Through the mesh").

Panic: never, at either level. Of the model cluster's hosts only the running replicas can be healthy, so a panic
threshold would send tries to ordinals that do not exist; and a hop refuses a connection while its replica fails its
checks, so a panicking model cluster would only collect refusals. A model whose health endpoint fails on every
replica answers 503 (no healthy upstream) until one passes again; gateway.outlierDetection.panicThresholdPercent no
longer applies to models (docs/gateway.md, "Requests on a replica that hangs"). Outlier detection can eject every
running replica (its percentage counts all replicas.max hosts), so an ejected replica is back at its next passing
check (`outlier_detection`).

Sources (Envoy v1.40.0 API): Cluster.close_connections_on_host_health_failure and CommonLbConfig.healthy_panic_
threshold https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/cluster/v3/cluster.proto; TcpProxy
https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/extensions/filters/network/tcp_proxy/v3/tcp_proxy.proto;
Pipe addresses https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/core/v3/address.proto; retry budget
https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/cluster/v3/circuit_breaker.proto.
"""

from __future__ import annotations

import re
from typing import Any

from components.k8s import naming
from components.k8s.engines import ENGINES
from components.k8s.gateway.envoy import affinity as affinity
from components.k8s.gateway.envoy.base import (
    _T,
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
    "HOP_SEPARATOR",
    "HOP_SOCKET_PREFIX",
    "NO_PANIC",
    "replica_service",
    "replica_host",
    "hop_name",
    "hop_address",
    "hop_endpoints",
    "hop_listener",
    "hop_cluster",
    "hop_listeners",
    "hop_clusters",
    "health_check",
    "outlier_detection",
    "MODEL_RETRY_BUDGET_PERCENT",
    "RECHECK_SECONDS",
    "model_cluster",
    "HOP_STATS_KEPT",
    "stats_config",
]

HOP_SEPARATOR = "__replica-"  # `<model>__replica-<i>`: no dot (Envoy's stats tag cuts a cluster name at one)
HOP_SOCKET_PREFIX = "@aifactory/"  # abstract Unix socket names (the leading '@': Linux's abstract namespace)
NO_PANIC = {"healthy_panic_threshold": {"value": 0}}


def replica_service(model: Model) -> str:
    """The headless Service that gives each replica (its leader, multi-node) a DNS name: the model's own Service,
    or the one the LWS controller makes for `<model>-lws` (named after it)."""
    return f"{model.name}{naming.LWS_SUFFIX}" if model.multi_node else model.name


def replica_host(cfg: GatewayView, model: Model, ordinal: int) -> str:
    """Replica `ordinal`'s DNS name: its pod (its group's leader pod, multi-node) `<set>-<ordinal>` under the
    governing Service `<set>` (see the module docstring), absolute (a trailing dot).

    Absolute, because a hop resolves its name every few seconds on every gateway pod whether or not the replica
    exists (replicas.max hops, fewer replicas), and an absent one answers NXDOMAIN: c-ares, Envoy's resolver, queries
    a name that ends in a dot as is and only as is (c-ares ares_getaddrinfo.c, `as_is_only`), where a relative name
    is also tried under each search domain of the pod's resolv.conf (`ndots:5`), one NXDOMAIN each. Nothing else
    reads the name: the hop is TCP (tcp_proxy sets no SNI and no Host), its health checks send the model Service's
    Host (`health_check`), and the gateway's Istio sidecar routes the hop's connection by the pod IP it resolves.

    How often: every DEFAULT_DNS_REFRESH_SECONDS, present or absent: Envoy 1.40 counts an NXDOMAIN as a resolution
    that succeeded with no host (update_success, not update_failure: tests/artifacts/test_envoy_dns_live.py), so
    DnsCluster.dns_failure_refresh_rate never slows an absent ordinal's queries; and a slower refresh would delay
    a new or restarted replica's first request (its record appears once it is ready)."""
    svc = replica_service(model)
    return f"{svc}-{ordinal}.{svc}.{cfg.tenant_of(model).namespace}.svc.cluster.local."


def hop_name(model: Model, ordinal: int) -> str:
    """Hop `ordinal`'s listener and one-host cluster."""
    return f"{model.name}{HOP_SEPARATOR}{ordinal}"


def hop_address(model: Model, ordinal: int) -> dict[str, Any]:
    return {"pipe": {"path": f"{HOP_SOCKET_PREFIX}{hop_name(model, ordinal)}"}}


def hop_endpoints(model: Model) -> list[dict[str, Any]]:
    """The model cluster's hosts: one hop per replica it may have (replicas.max). Maglev (session affinity) hashes
    each by its hop's name (LbEndpoint metadata envoy.lb hash_key, maglev.proto), so every gateway replica builds
    the same table for the same live replicas."""
    return [{"endpoint": {"address": hop_address(model, i)},
             "metadata": {"filter_metadata": {"envoy.lb": {"hash_key": hop_name(model, i)}}}}
            for i in range(model.replicas.max)]


def health_check(cfg: GatewayView, model: Model) -> dict[str, Any]:
    """The model's active health check (the model's cluster and each hop run it): the engine's health path, with
    Host = the model Service's name (Envoy's default Host is the cluster's name, which the gateway's sidecar passes
    through in plaintext to the model's STRICT sidecar: every check would fail)."""
    hc = cfg.gateway.health_check
    return {
        "timeout": _seconds(hc.timeout_seconds),
        "interval": _seconds(hc.interval_seconds),
        "no_traffic_interval": _seconds(hc.interval_seconds),  # default 60 s: too slow for a new gateway
        "unhealthy_threshold": hc.unhealthy_threshold,
        "healthy_threshold": hc.healthy_threshold,
        "http_health_check": {"path": ENGINES[model.engine].health_path, "host": model_host(cfg, model)},
    }


# How often the model's cluster checks a host it holds unhealthy (a replica that is starting, failing or absent):
# through its hop, such a check reaches no replica (the hop refuses the connection: no panic mode), so it is cheap,
# and a replica that passes its hop's check takes requests within this, not within a whole interval.
RECHECK_SECONDS = 1.0


def _through_hops(cfg: GatewayView, check: dict[str, Any]) -> dict[str, Any]:
    """The model cluster's check: its hosts held unhealthy (at start-up, or before any traffic: no_traffic_interval)
    are checked every RECHECK_SECONDS at most (HealthCheck.unhealthy_interval); healthy ones every interval."""
    recheck = _seconds(min(RECHECK_SECONDS, cfg.gateway.health_check.interval_seconds))
    return {**check, "no_traffic_interval": recheck, "no_traffic_healthy_interval": check["interval"],
            "unhealthy_interval": recheck}


def hop_cluster(cfg: GatewayView, model: Model, ordinal: int) -> dict[str, Any]:
    """Replica `ordinal` alone, by its DNS name: health-checked, its connections closed when it fails its checks,
    none made while it fails them (no panic mode)."""
    return {
        **_dns_cluster(hop_name(model, ordinal), replica_host(cfg, model, ordinal), naming.MODEL_HTTP_PORT,
                       connect_timeout=cfg.gateway.connect_timeout_seconds),
        "common_lb_config": NO_PANIC,
        "close_connections_on_host_health_failure": True,
        # a new gateway (no traffic yet) and a failing replica are re-checked every RECHECK_SECONDS: a gateway pod
        # that has just started serves once each hop's first checks pass, not a whole interval later
        "health_checks": [_through_hops(cfg, health_check(cfg, model))],
        # the model's cluster limits the requests; a hop must never be what refuses a connection it can make
        "circuit_breakers": {"thresholds": [{"priority": "DEFAULT",
                                             "max_connections": cfg.gateway.circuit_breakers.max_connections}]},
    }


def hop_listener(model: Model, ordinal: int) -> dict[str, Any]:
    """The hop's listener: its bytes go to replica `ordinal` unchanged (tcp_proxy)."""
    name = hop_name(model, ordinal)
    return {"name": name, "address": hop_address(model, ordinal), "filter_chains": [{"filters": [{
        "name": "envoy.filters.network.tcp_proxy", "typed_config": {
            "@type": _T + "extensions.filters.network.tcp_proxy.v3.TcpProxy",
            "stat_prefix": name.replace("-", "_"), "cluster": name}}]}]}


def _models(cfg: GatewayView) -> list[Model]:
    return [cfg.models[n] for n in sorted(cfg.models)]


def hop_listeners(cfg: GatewayView) -> list[dict[str, Any]]:
    """Every model's hop listeners, models by name, ordinals in order."""
    return [hop_listener(m, i) for m in _models(cfg) for i in range(m.replicas.max)]


def hop_clusters(cfg: GatewayView) -> list[dict[str, Any]]:
    """Every model's hop clusters, models by name, ordinals in order."""
    return [hop_cluster(cfg, m, i) for m in _models(cfg) for i in range(m.replicas.max)]


# Retries in flight a model's cluster allows, percent of its requests in flight (circuit_breaker.proto RetryBudget:
# retries in flight may reach budget_percent of the cluster's active and pending requests, or min_retry_concurrency,
# whichever is more). When a hung replica fails its checks, all of its tries are reset at once and retried, and
# they can be nearly all of the model's requests in flight: the other replicas' requests end while the hung one
# holds its own until detection (live, tests/artifacts/test_envoy_input_live.py: with 50% and a floor of 16, one or two
# of 60 requests got 503 with flag UO, their retry refused). So as many retries in flight as requests: each request's
# retries stay bounded by gateway.retries.attempts, per-try timeouts and previous_hosts, and outlier detection ejects
# replicas that fail; the price is that when every replica fails at once, retries may double the requests sent.
MODEL_RETRY_BUDGET_PERCENT = 100.0


def model_cluster(cfg: GatewayView, model: Model) -> dict[str, Any]:
    """The model's cluster: what the routes send to, over one hop per replica it may have."""
    gw = cfg.gateway
    cb = gw.circuit_breakers
    endpoints = hop_endpoints(model)
    if model.variant is not None:  # every replica says which variant it is (the response's x-aifactory-variant)
        for e in endpoints:
            e["metadata"]["filter_metadata"][METADATA_NAMESPACE] = {VARIANT_KEY: model.name}
    return {
        "name": model.name,
        "type": "STATIC",
        "connect_timeout": _seconds(gw.connect_timeout_seconds),
        "load_assignment": {"cluster_name": model.name, "endpoints": [{"lb_endpoints": endpoints}]},
        # Full scan: the replica with the fewest requests in flight, ties broken at random; a slow replica
        # holds its requests longer, so it is picked only when it has no more in flight than the others.
        # With session affinity: Maglev with bounded load (envoy_affinity).
        "load_balancing_policy": affinity.load_balancing_policy(model)
        if model.session_affinity_balance_factor is not None else {"policies": [{"typed_extension_config": {
            "name": "envoy.load_balancing_policies.least_request",
            "typed_config": {"@type": _T + "extensions.load_balancing_policies.least_request.v3.LeastRequest",
                             "selection_method": "FULL_SCAN"}}}]},
        # No panic mode (module docstring). Host health changes are applied at once: with the default 1 s merge
        # window a second ejection right after the first waits up to a second while the replica keeps taking (and
        # failing) requests.
        "common_lb_config": {**NO_PANIC, "update_merge_window": "0s"},
        "circuit_breakers": {"thresholds": [{
            "priority": "DEFAULT",
            "max_connections": cb.max_connections,
            "max_pending_requests": cb.max_pending_requests,
            # a variant's own limit: past it, tries overflow to the next variant (envoy_variants)
            "max_requests": max_requests_of(cfg.gateway, model),
            "retry_budget": {"budget_percent": {"value": MODEL_RETRY_BUDGET_PERCENT},
                             "min_retry_concurrency": DEFAULT_MIN_RETRY_CONCURRENCY},
        }]},
        # through each hop: a host is healthy while its replica exists and passes the hop's own checks
        "health_checks": [_through_hops(cfg, health_check(cfg, model))],
        "outlier_detection": outlier_detection(cfg),
    }


def outlier_detection(cfg: GatewayView) -> dict[str, Any]:
    """Ejection on gateway failures only, undone by the replica's next passing health check.

    What counts: 502, 503, 504 and the failures Envoy originates (connect failures, resets, timeouts: mapped to
    503/504 while split_external_local_origin_errors is off), `gateway.outlierDetection.consecutive5xx` in a row
    (consecutive_gateway_failure, enforced 100%). A 500 does not: vLLM answers 500 to EngineGenerateError, which
    "could be request specific" (vllm-project/vllm@v0.33.0 vllm/entrypoints/serve/exception_handling/handlers/
    vllm_error.py, engine_error_handler), as Triton's and SGLang's 500s are (components.k8s.engines), so
    consecutive_5xx would let one client's bad requests eject healthy replicas; its enforcement is 0.

    Why the check brings it back: max_ejection_percent is a share of all of the cluster's hosts (Envoy v1.40
    source/common/upstream/outlier_detection_impl.cc, `DetectorImpl::ejectHost`: (ejected + 1) / hosts), and the
    model's cluster has replicas.max hosts, of which only the running replicas can be ejected; with 2 of 6 running,
    67% allows both. With successful_active_health_check_uneject_host (`DetectorImpl::initialize`), an ejected
    replica whose next active check passes is back at once, so a model whose replicas answer their checks is left
    without one for at most a check interval, not for the ejection time (no panic mode: envoy_hops module docstring).
    """
    od = cfg.gateway.outlier_detection
    return {
        "consecutive_5xx": od.consecutive_5xx,
        "enforcing_consecutive_5xx": 0,
        "consecutive_gateway_failure": od.consecutive_5xx,
        "enforcing_consecutive_gateway_failure": 100,
        "interval": _seconds(od.interval_seconds),
        "base_ejection_time": _seconds(od.base_ejection_seconds),
        "max_ejection_percent": od.max_ejection_percent,
        "successful_active_health_check_uneject_host": True,
    }


# What a hop's stats keep (each hop emitted ~260 Prometheus lines per gateway pod, ~9.9k in prod): its health
# (`health_check.*`, `membership_healthy`, `membership_total`). Traffic is counted on the model's cluster, whose
# stats the dashboards, rules and docs read (telemetry.names.ENVOY), including the connections a hop closed with
# requests on them (`upstream_cx_destroy_remote_with_active_rq`); the hops' listeners and tcp_proxy keep none.
HOP_STATS_KEPT = ("health_check.", "membership_healthy", "membership_total")


def _none_of(prefixes: tuple[str, ...]) -> str:
    """RE2 for a string that starts with none of `prefixes` (Envoy's StringMatcher.safe_regex matches the whole
    name; RE2 has no lookahead): at each character, either one no prefix continues with, or the string ends."""
    trie: dict[str, Any] = {}
    for p in prefixes:
        node = trie
        for ch in p:
            node = node.setdefault(ch, {})
        node[""] = {}

    def walk(node: dict[str, Any]) -> str | None:
        if "" in node:
            return None  # a whole prefix: no string from here qualifies
        chars = sorted(node)
        alts = [f"[^{''.join(re.escape(c) for c in chars)}].*"]
        alts += [re.escape(c) + sub for c in chars if (sub := walk(node[c])) is not None]
        return f"(?:{'|'.join(alts)}|)"

    return walk(trie) or ""


def stats_config() -> dict[str, Any]:
    """The bootstrap's stats_config: every hop's stats but HOP_STATS_KEPT are never created (StatsMatcher
    exclusion_list, https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/metrics/v3/stats.proto). Hop names are
    unambiguous: a model name is a DNS label, without `_`; the tcp_proxy's stat_prefix has `_` for `-`."""
    hop = r"[a-z0-9-]+" + re.escape(HOP_SEPARATOR) + r"\d+"
    tcp_hop = r"[a-z0-9_]+" + re.escape(HOP_SEPARATOR.replace("-", "_")) + r"\d+"
    return {"stats_matcher": {"exclusion_list": {"patterns": [
        {"safe_regex": {"regex": rf"cluster\.{hop}\.{_none_of(HOP_STATS_KEPT)}"}},
        {"safe_regex": {"regex": rf"listener\.{re.escape(HOP_SOCKET_PREFIX)}.*"}},
        {"safe_regex": {"regex": rf"tcp\.{tcp_hop}\..*"}},
    ]}}}
