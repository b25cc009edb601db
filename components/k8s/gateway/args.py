"""GatewayArgs: what a Gateway takes (the models it routes to, their tenants, its settings), each field with its
default; components.k8s.gateway.spec validates them and applies the defaults.

A platform team can run the gateway without the kit's stack config; infra.component_args maps PlatformConfig to
these args.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
from typing import NotRequired, TypedDict

__all__ = [
    "GatewayArgs",
    "GatewayModelArgs",
    "GatewayVariantArgs",
    "GatewayTenantArgs",
    "RateLimitArgs",
    "RetriesArgs",
    "OutlierDetectionArgs",
    "CircuitBreakersArgs",
    "HealthCheckArgs",
    "JwtIssuerArgs",
    "GatewayAuthArgs",
    "RoutingArgs",
    "TokenBudgetArgs",
    "BudgetServiceArgs",
]


class GatewayVariantArgs(TypedDict):
    """The model is one of its workload's variants: the gateway routes each request to the cheapest variant whose
    expected latency (its e2eSloSeconds plus the workload's margin) fits the caller's remaining budget."""

    cost_per_request: float
    """What one request to this variant costs ($): the gateway orders the workload's variants by it."""
    max_requests: NotRequired[int]
    """Requests one gateway replica keeps in flight to the variant before further ones overflow to the next
    variant. Default: circuitBreakers.maxRequests."""


class GatewayModelArgs(TypedDict):
    """A model the gateway routes to: its Service `<name>.<tenant namespace>` on port 8000."""

    tenant: str
    """The tenant (a key of `tenants`) whose namespace runs the model and whose callers may call it."""
    engine: str
    """vllm or triton: which OpenAI APIs the route admits and which health path Envoy checks."""
    task: NotRequired[str]
    """generate, embed or rerank (vllm only): which of the engine's API paths the route admits. Default: generate."""
    workload: NotRequired[str]
    """The API model name callers ask for; models sharing one are routed by x-priority or as variants.
    Default: the model's name."""
    priority: NotRequired[str]
    """interactive or batch. Default: interactive."""
    timeout_seconds: NotRequired[float]
    """The gateway's timeout for one request to the model. Default: 60."""
    e2e_slo_seconds: NotRequired[float]
    """The model's p95 end-to-end request latency: a variant's expected latency. Default: 20."""
    max_request_bytes: NotRequired[int]
    """Largest request body the gateway accepts for the model (413 past it). Default: 8388608 (8 MiB)."""
    try_idle_timeout_seconds: NotRequired[float]
    """Longest silence of a replica before the gateway retries on another one. Default: min(timeoutSeconds, 30)."""
    variant: NotRequired[GatewayVariantArgs]
    """Default: none (the workload's only model of its priority)."""
    max_replicas: NotRequired[int]
    """Most replicas (the gateway reaches the ready ones by the model Service's DNS name). Default: 1."""
    multi_node: NotRequired[bool]
    """A LeaderWorkerSet `<name>-lws`: replica i is its group i's leader. Default: false."""
    session_affinity_balance_factor: NotRequired[int | None]
    """Session affinity: requests with a session key (x-aifactory-session, else the body's prompt_cache_key) go to
    the replica that served the session before, by Maglev hashing; no replica takes more than this percentage of
    the average load (at least 100). None: least-request. Default: 125 for task generate, None otherwise."""


class RateLimitArgs(TypedDict):
    """A tenant's token buckets at the gateway."""

    requests_per_second: NotRequired[int]
    """Default: 50."""
    burst: NotRequired[int]
    """Default: 100."""
    batch_requests_per_second: NotRequired[int]
    """Batch traffic (x-priority: batch) has a bucket of its own. Default: requestsPerSecond."""
    batch_burst: NotRequired[int]
    """Default: burst."""


class TokenBudgetArgs(TypedDict):
    """Weighted tokens a tenant's callers (or a workload's) may spend per UTC window, across every gateway replica;
    at least one window."""

    per_minute: NotRequired[int]
    """Weighted tokens per UTC minute. Default: no limit per minute."""
    per_hour: NotRequired[int]
    """Weighted tokens per UTC hour. Default: no limit per hour."""
    per_day: NotRequired[int]
    """Weighted tokens per UTC calendar day. Default: no limit per day."""
    output_weight: NotRequired[float]
    """What one output token counts for, in input tokens. Default: 1."""
    default_max_tokens: NotRequired[int]
    """Reserved (and set as max_tokens) for a request without max_tokens. Default: 4096."""
    prompt_bytes_per_token: NotRequired[float]
    """Body bytes counted as one prompt token when reserving. Default: 1."""
    on_store_failure: NotRequired[str]
    """open (admit uncounted) or closed (503) when the store cannot answer. Default: open."""


class BudgetServiceArgs(TypedDict):
    """The token budget service (Envoy ext_proc) and its Valkey store, in the gateway namespace."""

    image: str
    """Built from components/k8s/gateway/budgets/Dockerfile."""
    replicas: NotRequired[int]
    """Default: 2."""
    store_replicas: NotRequired[int]
    """Valkey replicas beside the primary. Default: 0."""
    store_volume_gib: NotRequired[int]
    """Default: 8."""
    store_storage_class: NotRequired[str]
    """The class of the store's volumes. Default: the cluster's default class."""


class GatewayTenantArgs(TypedDict):
    """A tenant whose callers the gateway admits (the token's tenant claim names it)."""

    namespace: NotRequired[str]
    """The tenant's namespace (where its models run). Default: the tenant's name."""
    rate_limit: NotRequired[RateLimitArgs]
    """Default: 50 requests/s, burst 100, the same again for batch traffic."""
    share_with: NotRequired[list[str]]
    """Tenants whose callers may call this tenant's models too. Default: none."""
    token_budget: NotRequired[TokenBudgetArgs]
    """Default: none."""


class RetriesArgs(TypedDict):
    """Retries of a failed try (connect failure, reset, 502/503 and the engine's own retriable statuses: vLLM's 500,
    a try idle too long)."""

    attempts: NotRequired[int]
    """Default: 2."""
    budget_percent: NotRequired[float]
    """Retries a variant's overflow may add, as a share of active requests (a model's own cluster: 100). Default: 20."""


class OutlierDetectionArgs(TypedDict):
    """Ejection of replicas that keep failing."""

    consecutive_5xx: NotRequired[int]
    """Default: 3."""
    interval_seconds: NotRequired[float]
    """Default: 2."""
    base_ejection_seconds: NotRequired[float]
    """Default: 30."""
    max_ejection_percent: NotRequired[int]
    """Default: 67."""
    panic_threshold_percent: NotRequired[float]
    """No longer applied (a model panics only when none of its replicas passes: docs/gateway.md). Default: 30."""


class CircuitBreakersArgs(TypedDict):
    """Limits per model cluster and gateway replica."""

    max_connections: NotRequired[int]
    """Default: 4096."""
    max_pending_requests: NotRequired[int]
    """Default: 2048."""
    max_requests: NotRequired[int]
    """Default: 4096."""


class HealthCheckArgs(TypedDict):
    """Envoy's active health check of each replica."""

    interval_seconds: NotRequired[float]
    """Default: 2."""
    timeout_seconds: NotRequired[float]
    """Default: 8 (a progress check waits in a saturated engine's queue: docs/gateway.md, "Day 2")."""
    unhealthy_threshold: NotRequired[int]
    """Default: 1."""
    healthy_threshold: NotRequired[int]
    """Default: 2."""


class JwtIssuerArgs(TypedDict):
    """An identity provider whose tokens the gateway accepts."""

    issuer: str
    """The tokens' iss, e.g. https://sso.example.com/realms/aifactory."""
    jwks_uri: str
    """Where its signing keys are published (https://...)."""
    audiences: NotRequired[list[str]]
    """Default: none (any aud)."""
    tenants: NotRequired[list[str]]
    """The tenants this issuer may name in its tokens. Default: any tenant."""


class GatewayAuthArgs(TypedDict):
    """Who may call the gateway."""

    issuers: NotRequired[list[JwtIssuerArgs]]
    """Default: none: every model request gets 401."""
    tenant_claim: NotRequired[str]
    """The JWT claim naming the caller's tenant. Default: tenant."""
    max_token_lifetime_seconds: NotRequired[int]
    """A token without exp, or whose exp is further away than this, gets 401. Default: 86400 (24 h)."""


class RoutingArgs(TypedDict):
    """How the gateway chooses among one workload's variants."""

    policy: NotRequired[str]
    """cost-within-deadline, fastest or cheapest. Default: cost-within-deadline."""
    margin_percent: NotRequired[float]
    """How much more than a variant's e2eSloSeconds a budget must hold for the variant to fit it. Default: 25."""


class GatewayArgs(TypedDict):
    """Arguments of a Gateway."""

    models: dict[str, GatewayModelArgs]
    """The models the gateway routes to, by name (the Service name in the tenant's namespace)."""
    tenants: dict[str, GatewayTenantArgs]
    """The tenants whose callers it admits, by name."""
    namespace: NotRequired[str]
    """The gateway's namespace (created with Pod Security restricted and Istio injection).
    Default: aifactory-gateway."""
    kubernetes_version: NotRequired[str]
    """The cluster's Kubernetes minor version (the Pod Security labels' version). Default: 1.35."""
    monitoring_namespace: NotRequired[str]
    """Where Prometheus (which scrapes the gateway) and the OpenTelemetry Collector run. Default: monitoring."""
    trace_sample_ratio: NotRequired[float]
    """Share of requests the gateway traces. Default: 1.0."""
    aws_internal_load_balancer: NotRequired[bool]
    """A LoadBalancer Service becomes an internal AWS NLB of the AWS Load Balancer Controller (which must run in the
    cluster: components.k8s.load_balancer), with the gateway's pods as targets. Default: false."""
    service_type: NotRequired[str]
    """LoadBalancer, NodePort or ClusterIP. Default: LoadBalancer."""
    min_replicas: NotRequired[int]
    """Default: 2."""
    max_replicas: NotRequired[int]
    """Default: 6."""
    connect_timeout_seconds: NotRequired[float]
    """Default: 2."""
    request_headers_timeout_seconds: NotRequired[float]
    """Time to receive a request's headers (408 past it). Default: 10."""
    request_timeout_seconds: NotRequired[float]
    """Time to receive a whole request, body included (408). Default: 60."""
    stream_idle_timeout_seconds: NotRequired[float]
    """Default: 30 (routes to a model use its timeoutSeconds instead)."""
    idle_timeout_seconds: NotRequired[float]
    """Before an idle client connection is closed. Default: 300."""
    retries: NotRequired[RetriesArgs]
    """Default: 2 attempts within a 20% budget."""
    outlier_detection: NotRequired[OutlierDetectionArgs]
    """Default: eject after 3 consecutive 5xx."""
    circuit_breakers: NotRequired[CircuitBreakersArgs]
    """Default: 4096 connections, 2048 pending, 4096 requests."""
    health_check: NotRequired[HealthCheckArgs]
    """Default: every 5 s, 2 s timeout, 2 failures out, 2 passes back."""
    auth: NotRequired[GatewayAuthArgs]
    """Default: no issuer (every model request gets 401)."""
    routing: NotRequired[dict[str, RoutingArgs]]
    """By workload with variants. Default: cost-within-deadline with a 25% margin."""
    token_budgets: NotRequired[dict[str, TokenBudgetArgs]]
    """By workload: what all its callers together may spend, besides each caller's tenant budget. Default: none."""
    budget_service: NotRequired[BudgetServiceArgs]
    """The token budget service and its store; required with any token budget. Default: none."""
