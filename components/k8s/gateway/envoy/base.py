"""What every part of the Envoy gateway's bootstrap shares: the views it reads (GatewayView), the names and
constants of its headers, metadata, filters and clusters, and the small builders of durations, addresses, DNS clusters
and connection managers. The bootstrap itself: components.k8s.gateway.envoy.config; routing between a workload's
variants:
components.k8s.gateway.envoy.variants; who may call and how often: components.k8s.gateway.envoy.callers."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from components.k8s import naming
from components.k8s.engines import ENGINES
from components.k8s.settings import GatewaySettings, Model, Tenant

__all__ = [
    "max_requests_of",
    "GatewayView",
    "ObservabilityView",
    "model_host",
    "collector_host",
    "longest_request_seconds",
    "retriable_status_codes",
    "route_name",
    "skipped_when",
]


class ObservabilityView(Protocol):
    """What the gateway reads of the observability settings."""

    @property
    def namespace(self) -> str: ...  # where the OpenTelemetry Collector and Prometheus run

    @property
    def trace_sample_ratio(self) -> float: ...  # share of requests the gateway starts a trace for


class GatewayView(Protocol):
    """What the gateway's build functions read: the Gateway component's GatewaySpec (from its args), or the kit's
    whole PlatformConfig, which has the same attributes."""

    @property
    def kubernetes_version(self) -> str: ...

    @property
    def is_aws(self) -> bool: ...  # a LoadBalancer Service becomes an internal NLB

    @property
    def models(self) -> Mapping[str, Model]: ...

    @property
    def tenants(self) -> Mapping[str, Tenant]: ...

    @property
    def gateway(self) -> GatewaySettings: ...

    @property
    def observability(self) -> ObservabilityView: ...

    def tenant_of(self, model: Model) -> Tenant: ...

    def variants_of(self, workload: str) -> list[Model]: ...  # cheapest first; ties: faster, then by name

    def routing_policy(self, workload: str) -> str: ...

    def routing_margin_percent(self, workload: str) -> float: ...


# Route names (the access log's `route`, and the kit's own map of a route to its model). A route's subject is a
# workload (`<workload>`, header-routed), its batch model (`<workload>.batch`), a variant decision
# (`<workload>.<variant>.<reason>[.baggage]`: components.k8s.gateway.envoy.variants) or a model's own key; after it,
# each
# after ROUTE_NAME_SEPARATOR, how the route matches (`path`, `body`; `key-body`: the body names the model's own key)
# and which twin it is (`unstreamed`, `too-large`). Workload and model names are DNS labels, which hold neither `.`
# nor ROUTE_NAME_SEPARATOR, so no two names of the kit's routes are alike, whatever a stack's names (`foo` and
# `foo-path` are two workloads); the gateway's own refusals (components.k8s.gateway.envoy.refusals.REFUSAL_ROUTE_PREFIX)
# hold a `:`, which no other route name does. Envoy accepts two routes of one name, but their access log lines
# could not be told apart.
ROUTE_NAME_SEPARATOR = "/"
MODEL_HEADER = "x-model"
PRIORITY_HEADER = "x-priority"
TENANT_HEADER = "x-aifactory-tenant"  # set by the gateway from the token's tenant claim; sent to the model
TENANT_DESCRIPTOR = "tenant"
PRIORITY_DESCRIPTOR = "priority"
ROUTE_PREFIX = "/models/"
METADATA_NAMESPACE = "aifactory"  # route metadata {aifactory: {tenant, priority}}; body model: dynamic metadata
BODY_MODEL_KEY = "model"  # dynamic metadata aifactory.model: the OpenAI request body's "model"
BODY_STREAM_KEY = "stream"  # dynamic metadata aifactory.stream: the body's "stream" (false when absent)
BODY_LIMIT_FILTER = "aifactory.body_limit"  # the per-route buffer filter instance (413 past the model's limit)
BUFFER_FILTER = "envoy.filters.http.buffer"  # the first buffer: the whole body before anything goes upstream
# RBAC on the route chosen from the headers, before any body is buffered (403 at once for header/path routes)
CALLERS_FILTER = "aifactory.callers"
RBAC_FILTER = "envoy.filters.http.rbac"  # RBAC on the route chosen once the body is read (body routes)
# fault filter: answers a refusal route (405, 404, 413 from the headers) at once, before any body is buffered
REFUSALS_FILTER = "aifactory.refusals"
REFUSAL_KEY = "refusal"  # route metadata aifactory.refusal: the refusal's text (the local reply's body)
# the methods the OpenAI API uses (GET /v1/models, POST for the rest); any other, CONNECT included, gets 405
ALLOWED_METHODS = ("GET", "POST")
ENVOY_HEADER_PREFIX = "x-envoy-"  # client-sent headers with this prefix are removed (Envoy's own control headers)
JWT_FILTER = "envoy.filters.http.jwt_authn"  # also the dynamic metadata namespace of verified payloads
ISSUER_TENANTS_FILTER = "aifactory.issuer_tenants"  # RBAC: which tenants each issuer may name (403 otherwise)
COLLECTOR_CLUSTER = "otel_collector"
ADMIN_CLUSTER = "envoy_admin"
# What a try of any model is retried on besides connect failures, resets and its engine's own statuses
# (Engine.retriable_status_codes): 500, 502, 503. 502 and 503: the way to the replica failed (the gateway's Istio
# sidecar answers 503 when it cannot connect to the pod). 500: a replica that answers 500 to every request while its
# /health passes would otherwise answer for itself (issue 44: 28-46% of requests served on prod's config, the
# failing replica, holding no requests, preferred by the balancer); retried on another replica, and counted toward
# its ejection (envoy_replicas.outlier_detection), it costs a try. A 500 that is the request's own fails on every
# replica tried (gateway.retries.attempts + 1 tries). Not 504: no engine answers it, and a timeout that has taken
# its time is not repeated (a silent try is the per-try idle timeout's).
PROXY_RETRIABLE_STATUS_CODES = (500, 502, 503)
DEFAULT_UNROUTED_RPS = 100  # requests/s (per replica) for requests that match no model: 404s, scans
# Retries in flight allowed whatever the budget says (Envoy's default is 3): a replica that dies with a
# dozen requests in flight gets them all retried before outlier detection ejects it.
DEFAULT_MIN_RETRY_CONCURRENCY = 16
# How often a model's cluster asks its Service's name: how soon a new replica takes traffic, and (with CoreDNS's 5 s
# TTL) how soon a departing one takes none (components.k8s.gateway.envoy.replicas.dns_detection_seconds)
DEFAULT_DNS_REFRESH_SECONDS = 5
DEFAULT_MAX_DOWNSTREAM_CONNECTIONS = 50000  # per replica: past it Envoy refuses connections, not memory
GATEWAY_MEMORY_LIMIT_GIB = 1  # the gateway container's memory limit (components/k8s/gateway/component.py)
# The overload manager's heap budget: 75% of the container limit, so Envoy sheds load before the kernel OOM-kills
# it. Bodies are buffered whole before routing, so many slow or large uploads could otherwise fill the heap.
MAX_HEAP_BYTES = GATEWAY_MEMORY_LIMIT_GIB * 1024**3 * 3 // 4
# Streams buffering at least 2^20 bytes are tracked, and the largest are reset first under memory pressure
# (overload action envoy.overload_actions.reset_high_memory_stream needs buffer_factory_config).
TRACKED_STREAM_BUFFER_POWER_OF_TWO = 20
DEFAULT_JWKS_CACHE_SECONDS = 600  # how long fetched signing keys are used before they are fetched again
DEFAULT_JWKS_FETCH_TIMEOUT_SECONDS = 5
DEFAULT_JWT_CACHE_SIZE = 1000  # verified tokens kept per worker thread (expiry still checked on every use)
# The CA bundle of the Envoy image (its Ubuntu stage installs ca-certificates: envoyproxy/envoy
# ci/Dockerfile-envoy), used to check the issuers' JWKS servers
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DNS_CLUSTER_TYPE = "envoy.cluster.dns"
# compared exactly by json_to_metadata: the spellings clients send (Spring's APPLICATION_JSON_UTF8 is the
# upper-case one)
JSON_CONTENT_TYPES = ("application/json", "application/json; charset=utf-8", "application/json;charset=utf-8",
                      "application/json; charset=UTF-8", "application/json;charset=UTF-8")
SERVICE_NAME = naming.GATEWAY_APP  # service.name of the gateway's spans
BUDGET_HEADER = "x-aifactory-budget-ms"  # the caller's remaining latency budget, whole ms (wins over baggage)
BAGGAGE_HEADER = "baggage"  # W3C baggage (https://www.w3.org/TR/baggage/)
BUDGET_BAGGAGE_KEY = "aifactory.budget_ms"  # telemetry.instrument.BUDGET_BAGGAGE_KEY (headers() sends it)
ROUTE_DECISION_HEADER = "x-aifactory-route"  # to the model and back: "<chosen variant>; reason=<reason>"
VARIANT_HEADER = "x-aifactory-variant"  # back to the client: the variant (cluster) that served the request
VARIANT_KEY = "variant"  # a variant's endpoints carry metadata aifactory.variant = its model name
BUDGET_MAX_MS = 10**12  # the open end of the budget range matches (Envoy's range is [start, end))

_T = "type.googleapis.com/envoy."
_ALL = {"numerator": 100, "denominator": "HUNDRED"}


def model_host(cfg: GatewayView, model: Model) -> str:
    """DNS name of the model's headless Service: the cluster's address, and the Host of every request and health
    check the gateway sends the model (the name the gateway's sidecar routes by)."""
    return f"{model.name}.{cfg.tenant_of(model).namespace}.svc.cluster.local"


def retriable_status_codes(models: Iterable[Model]) -> list[int]:
    """The statuses a try is retried on when any of `models` may have answered it, ascending: the way's
    (PROXY_RETRIABLE_STATUS_CODES) and those their engines say another replica may answer better
    (Engine.retriable_status_codes)."""
    return sorted({*PROXY_RETRIABLE_STATUS_CODES,
                   *(code for m in models for code in ENGINES[m.engine].retriable_status_codes)})


def route_name(subject: str, *parts: str) -> str:
    """A route's name: its subject, then how it matches and which twin it is (see ROUTE_NAME_SEPARATOR)."""
    return ROUTE_NAME_SEPARATOR.join((subject, *parts))


def longest_request_seconds(cfg: GatewayView) -> int:
    """The longest request any of the gateway's routes allows (a model's timeoutSeconds), in whole seconds up: what
    a gateway pod's drain and the budget service's shutdown grace must outlast."""
    return math.ceil(max((m.timeout_seconds for m in cfg.models.values()), default=0))


def collector_host(cfg: GatewayView) -> str:
    return f"{naming.OTEL_COLLECTOR_SERVICE}.{cfg.observability.namespace}.svc.cluster.local"


def _seconds(value: float) -> str:
    return f"{value:.3f}s".replace(".000s", "s")


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _dns_cluster(name: str, host: str, port: int, *, connect_timeout: float) -> dict[str, Any]:
    """Every address the name resolves to is a host (a headless Service: every replica), re-resolved often.

    The DNS cluster extension: Cluster.dns_refresh_rate (type STRICT_DNS) is deprecated in 1.40
    (https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/extensions/clusters/dns/v3/dns_cluster.proto)."""
    return {
        "name": name,
        "cluster_type": {"name": DNS_CLUSTER_TYPE, "typed_config": {
            "@type": _T + "extensions.clusters.dns.v3.DnsCluster",
            "dns_refresh_rate": _seconds(DEFAULT_DNS_REFRESH_SECONDS),
            "dns_lookup_family": "V4_ONLY"}},
        "connect_timeout": _seconds(connect_timeout),
        "load_assignment": {"cluster_name": name,
                            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(host, port)}}]}]},
    }


def _hcm(stat_prefix: str, route_config: dict[str, Any], filters: list[dict[str, Any]],
         **extra: Any) -> dict[str, Any]:
    return {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": _T + "extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": stat_prefix,
            "codec_type": "AUTO",
            "route_config": route_config,
            "http_filters": [*filters, {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": _T + "extensions.filters.http.router.v3.Router"},
            }],
            **extra,
        },
    }


def max_requests_of(gateway: GatewaySettings, model: Model) -> int:
    """A model's circuit breaker in one gateway replica: its variant.maxRequests, else
    gateway.circuitBreakers.maxRequests. Past it, a variant's tries overflow to the next variant."""
    return model.variant.max_requests if model.variant and model.variant.max_requests else \
        gateway.circuit_breakers.max_requests


# ExtensionWithMatcher's action that skips the wrapped filter for a stream
# (envoyproxy/envoy@v1.40.0 api/envoy/extensions/filters/common/matcher/action/v3/skip_action.proto)
_SKIP = {"name": "skip", "typed_config": {"@type": _T + "extensions.filters.common.matcher.action.v3.SkipFilter"}}


def skipped_when(name: str, extension: str, typed_config: dict[str, Any], predicate: dict[str, Any]) -> dict[str, Any]:
    """HTTP filter `extension` (its `typed_config`) named `name`, skipped for every stream that `predicate` matches
    (ExtensionWithMatcher: envoyproxy/envoy@v1.40.0 api/envoy/extensions/common/matching/v3/extension_matcher.proto):
    on those it does not run at all."""
    return {"name": name, "typed_config": {
        "@type": _T + "extensions.common.matching.v3.ExtensionWithMatcher",
        "extension_config": {"name": extension, "typed_config": typed_config},
        "xds_matcher": {"matcher_list": {"matchers": [{"predicate": predicate, "on_match": {"action": _SKIP}}]}}}}
