"""The gateway (stack key `gateway`): its replicas, timeouts, retries, ejection, circuit breakers, health checks, JWT
authentication, and per workload the routing among variants with its fidelity gate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from components.k8s.defaults import (
    DEFAULT_GATEWAY_NAMESPACE,
    DEFAULT_HEALTH_CHECK_INTERVAL_SECONDS,
    DEFAULT_HEALTH_CHECK_TIMEOUT_SECONDS,
    DEFAULT_HEALTH_CHECK_UNHEALTHY_THRESHOLD,
)
from components.k8s.settings.base import DNS_LABEL_PATTERN, NOT_A_DNS_LABEL, SecretRef, setting
from components.k8s.settings.tenants import TokenBudget

__all__ = [
    "ROUTING_POLICIES",
    "DEFAULT_ROUTING_MARGIN_PERCENT",
    "DEFAULT_MAX_TOKEN_LIFETIME_SECONDS",
    "MAX_TOKEN_LIFETIME_LIMIT_SECONDS",
    "DEFAULT_MAX_DROP",
    "DEFAULT_MIN_BASELINE_SCORE",
    "DEFAULT_MAX_UNANSWERED",
    "FidelityJob",
    "CategoryGate",
    "Fidelity",
    "Retries",
    "OutlierDetection",
    "CircuitBreakers",
    "HealthCheck",
    "JwtIssuer",
    "GatewayAuth",
    "Routing",
    "GatewaySettings",
    "BudgetService",
]


ROUTING_POLICIES = ("cost-within-deadline", "fastest", "cheapest")
# A variant fits a budget when the budget covers its slo.e2eSeconds plus this margin (gateway.routing.<workload>.
# marginPercent): the SLO is the engine's p95, while the caller also waits in the gateway and, when the variant is
# busy, in its queue. 25: in the variant benchmark (tests/bench/bench_variant_routing.py, README) queueing at the
# saturated cheap variant made a margin of 0 miss 4 points more deadlines than all-fastest; 25 misses 0.3 more.
DEFAULT_ROUTING_MARGIN_PERCENT = 25.0
# gateway.auth.maxTokenLifetimeSeconds: a token whose exp is further away than this is refused (jwt_authn max_lifetime)
DEFAULT_MAX_TOKEN_LIFETIME_SECONDS = 86400
MAX_TOKEN_LIFETIME_LIMIT_SECONDS = 30 * 86400
DEFAULT_MAX_DROP = 0.02  # gateway.routing.<workload>.fidelity.maxDrop: 2 points of the suite's score
# gateway.routing.<workload>.fidelity.minBaselineScore: a baseline right on fewer than half of its own workload's items
# is a broken endpoint or the wrong suite, and every variant would pass against it.
DEFAULT_MIN_BASELINE_SCORE = 0.5
# gateway.routing.<workload>.fidelity.maxUnanswered: share of items a variant may leave without an answer (an empty
# or null content, an error body without choices) before its evaluation fails: that is the endpoint, not the model.
DEFAULT_MAX_UNANSWERED = 0.05


@dataclass(frozen=True, slots=True)
class FidelityJob:
    """The evaluation as a Kubernetes Job in the gateway namespace (components/k8s/fidelity.py), run again
    whenever a variant, the suite or the gate changes: `aifactory eval` through the gateway, scores to the
    OpenTelemetry Collector as metrics."""

    image: str = setting(pattern=r"^\S+$", invalid="is not an image reference",
                         doc="An image with the kit and this repository's stacks/ (the stack file and its evals/), "
                             "e.g. your CI's.")
    token_secret: SecretRef = setting(doc="A Secret in the gateway namespace holding a bearer token the gateway "
                                          "accepts.")
    timeout_seconds: int = setting(3600, ge=60, le=86400, doc="The Job's deadline (activeDeadlineSeconds).")


@dataclass(frozen=True, slots=True)
class CategoryGate:
    """Guards on one category of a suite's items (gateway.routing.<workload>.fidelity.categories.<name>; `*`: every
    category not named), on the observed scores: a category too small for an interval still cannot collapse
    unseen behind the aggregate."""

    name: str  # an item's `category`, or `*`
    min_score: float | None = setting(None, ge=0, le=1, doc="The variant's score on the category's items must be at "
                                                            "least this (give it, maxDrop or both).")
    max_drop: float | None = setting(None, ge=0, le=1, doc="The variant's score on the category's items may be at "
                                                           "most this below the baseline's.")


@dataclass(frozen=True, slots=True)
class Fidelity:
    """A workload's fidelity gate (gateway.routing.<workload>.fidelity): a variant other than `baseline` gets
    traffic only with a current result of suite `suite` (stacks/evals/<suite>/) whose drop below the baseline's
    score on the same items is shown to be at most `max_drop` (infra/fidelity.py, docs/fidelity.md)."""

    suite: str = setting(pattern=DNS_LABEL_PATTERN, invalid="is not a suite directory name (a DNS label: lowercase "
                         "letters, digits, '-')", doc="The suite: a directory under stacks/evals/.")
    baseline: str = setting(doc="The variant (a model key) the others are compared with; it needs no result of its "
                                "own.")
    max_drop: float = setting(DEFAULT_MAX_DROP, ge=0, le=1, doc="Largest drop of a variant's score (a share, 0-1) "
                                                                "below the baseline's on the same items.")
    job: FidelityJob | None = setting(None, doc="Run the evaluation as a Job in the cluster (default: none: "
                                                "evaluate with `aifactory eval` from outside).")
    min_baseline_score: float = setting(DEFAULT_MIN_BASELINE_SCORE, ge=0, le=1, doc="Below this baseline score no "
                                                                                    "variant is judged (a broken "
                                                                                    "endpoint or the wrong suite).")
    max_unanswered: float = setting(DEFAULT_MAX_UNANSWERED, ge=0, le=1, doc="Share of items a variant may leave "
                                                                            "unanswered before its evaluation "
                                                                            "fails.")
    categories: tuple[CategoryGate, ...] = setting((), form=Mapping[str, CategoryGate],
                                                   doc="Guards per category of the suite's items (`*`: every "
                                                       "category not named) (default: none; only the aggregate is "
                                                       "gated).")

    def category_gate(self, category: str) -> CategoryGate | None:
        """The guards of `category`: its own entry, else `*`'s, else none."""
        named = {c.name: c for c in self.categories}
        return named.get(category) or named.get("*")



@dataclass(frozen=True, slots=True)
class Retries:
    attempts: int = setting(2, ge=0, le=10, doc="Retries of one request, on a connect failure, a reset, a 500, 502 "
                            "or 503, or a try idle longer than the model's tryIdleTimeoutSeconds.")
    budget_percent: float = setting(20.0, ge=0, le=100, doc="Retries in flight to a model (and a variant's "
                                                           "overflow), at most this share of its requests in "
                                                           "flight, percent, or 16 (Envoy's retry budget).")


@dataclass(frozen=True, slots=True)
class OutlierDetection:
    consecutive_5xx: int = setting(3, ge=1, doc="Consecutive failed tries (5xx, connect failures, resets, "
                                                "timeouts) that eject a replica from its model's load balancing; "
                                                "each of them is retried on another replica.")
    interval_seconds: float = setting(2.0, ge=0.1, doc="Seconds between ejection sweeps.")
    base_ejection_seconds: float = setting(30.0, ge=0.1, doc="How long a first ejection lasts, seconds (Envoy "
                                                             "multiplies it by the number of ejections); a passing "
                                                             "health check does not end it.")
    max_ejection_percent: int = setting(67, ge=1, le=100, doc="At most this share of a model's ready replicas is "
                                                             "ejected at once, percent.")
    panic_threshold_percent: float = setting(1.0, ge=0, le=100, doc="A model balances over all its replicas, "
                                                                   "those failing their checks too (panic), when "
                                                                   "fewer than this share pass them, percent. 1: "
                                                                   "only when none of up to 100 passes, so a "
                                                                   "saturated model queues instead of answering "
                                                                   "503; 0: never (503 while none passes); higher "
                                                                   "values also send part of the load to failing "
                                                                   "replicas while others pass. A variant's own "
                                                                   "cluster never panics: its last resort does "
                                                                   "(docs/gateway.md, Day 2).")


@dataclass(frozen=True, slots=True)
class CircuitBreakers:
    max_connections: int = setting(4096, ge=1, doc="Connections to one model's replicas at once.")
    max_pending_requests: int = setting(2048, ge=1, doc="Requests waiting for a connection to one model.")
    max_requests: int = setting(4096, ge=1, doc="Requests in flight to one model at once.")


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """The gateway's active health checks of each replica: progress checks (a generation), which on vLLM and Triton
    wait in the engine's queue. They only steer new requests: a replica that fails them gets no new request, and its
    requests in flight run to their end. unhealthyThreshold x (timeoutSeconds + intervalSeconds) must be at most
    components.k8s.defaults.GATEWAY_DETECTION_SECONDS (10), which the model pods' preStop outwaits. The defaults (one
    check of 8 s, every 2 s) take out a replica that produced nothing for 8 s, not one whose queue is long
    (docs/gateway.md, "Day 2")."""

    interval_seconds: float = setting(DEFAULT_HEALTH_CHECK_INTERVAL_SECONDS, ge=0.01, le=5,
                                      doc="Seconds from a health check's answer (or timeout) to the next one.")
    timeout_seconds: float = setting(DEFAULT_HEALTH_CHECK_TIMEOUT_SECONDS, ge=0.01, derived=True,
                                     doc="Seconds a health check (a 1-token generation, which waits in a saturated "
                                         "engine's queue) may take (default: 8, or the longest that keeps "
                                         "unhealthyThreshold x (timeoutSeconds + intervalSeconds) within 10 s).")
    unhealthy_threshold: int = setting(DEFAULT_HEALTH_CHECK_UNHEALTHY_THRESHOLD, ge=1, le=10,
                                       doc="Failed checks in a row that take a replica out of new requests (an "
                                           "error status takes it out at once).")
    healthy_threshold: int = setting(2, ge=1, le=10, doc="Passed checks that bring it back.")

    @property
    def detection_seconds(self) -> float:
        """Longest time from a replica going silent to its taking no new request: each of unhealthyThreshold checks
        starts at most an interval after the previous one ended and fails at its timeout (Envoy schedules a check
        an interval after the previous one's answer or timeout: envoyproxy/envoy@v1.40.0
        source/extensions/health_checkers/common/health_checker_base_impl.cc, `onIntervalBase`). A replica that
        answers its checks with an error is out sooner."""
        return self.unhealthy_threshold * (self.timeout_seconds + self.interval_seconds)


@dataclass(frozen=True, slots=True)
class JwtIssuer:
    issuer: str = setting(pattern=r"\S", invalid="is empty", doc="The tokens' iss, e.g. "
                                                                  "https://sso.example.com/realms/aifactory.")
    jwks_uri: str = setting(pattern=r"^https://[^/\s:]+(:\d+)?(/\S*)?$", invalid="is not an https:// URL",
                            doc="Where the issuer publishes its signing keys (https://).")
    audiences: tuple[str, ...] = setting((), doc="Accepted aud values (default: none, any aud); set it to the "
                                                 "gateway's client id.")
    # Set it when several issuers are configured, so one team's IdP cannot mint tokens for another team's tenant
    tenants: tuple[str, ...] | None = setting(None, derived=True, doc="The tenants this issuer's tokens may name in "
                                                                      "the tenant claim (default: any tenant).")


@dataclass(frozen=True, slots=True)
class GatewayAuth:
    issuers: tuple[JwtIssuer, ...] = setting((), doc="The JWT issuers whose tokens the gateway accepts (default: "
                                                     "none: every model request gets 401).")
    tenant_claim: str = setting("tenant", pattern=r"^[A-Za-z0-9_:.-]+$",
                                invalid="is not a claim name (letters, digits, _ : . -)",
                                doc="The JWT claim naming the caller's tenant.")
    max_token_lifetime_seconds: int = setting(DEFAULT_MAX_TOKEN_LIFETIME_SECONDS, ge=60,
                                              le=MAX_TOKEN_LIFETIME_LIMIT_SECONDS,
                                              doc="A token without exp, or whose exp is further away than this, "
                                                  "gets 401 (seconds).")


@dataclass(frozen=True, slots=True)
class Routing:
    """The stack file's form of gateway.routing.<workload> (GatewaySettings.routing, .routing_margins, .fidelity)."""

    policy: str = setting(ROUTING_POLICIES[0], choices=ROUTING_POLICIES,
                          doc="How a request picks a variant: the cheapest that fits its latency budget "
                              "(cost-within-deadline), the fastest, or the cheapest.")
    margin_percent: float | None = setting(None, ge=0, le=1000, derived=True,
                                           doc="How much more than a variant's slo.e2eSeconds a budget must hold "
                                               "for the variant to fit it, percent (default: 25).")
    fidelity: Fidelity | None = setting(None, doc="The workload's fidelity gate: a variant gets traffic only with "
                                                  "a current evaluation close enough to the baseline's (default: "
                                                  "none).")
    token_budget: TokenBudget | None = setting(None, doc="Tokens all callers of the workload together may spend per "
                                                         "window, besides each caller's tenant budget (any workload, "
                                                         "with or without variants) (default: none).")


@dataclass(frozen=True, slots=True)
class BudgetService:
    """The token budget service and its store, deployed in the gateway namespace when any budget is declared
    (docs/gateway.md, "Token budgets")."""

    image: str = setting("", pattern=r"^\S*$", invalid="is not an image reference", derived=True,
                         doc="The budget service's image, built from components/k8s/gateway/budgets/Dockerfile "
                             "(required when a tenant or workload declares tokenBudget).")
    replicas: int = setting(2, ge=1, le=20, doc="Replicas of the budget service; every gateway replica's requests "
                                                "go to any of them.")
    store_replicas: int = setting(0, ge=0, le=5, doc="Valkey replicas beside the primary (0: a standalone "
                                                     "primary).")
    store_volume_gib: int = setting(8, ge=1, le=1000, doc="The persistent volume of each Valkey pod (its "
                                                          "append-only file), GiB.")
    # the class of the store's volumes (None: the cluster's default): the target's, set by infra.component_args
    store_storage_class: str | None = field(default=None)


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    namespace: str = setting(DEFAULT_GATEWAY_NAMESPACE, pattern=DNS_LABEL_PATTERN, invalid=NOT_A_DNS_LABEL,
                             doc="The gateway's namespace.")
    min_replicas: int = setting(2, ge=1, doc="Fewest gateway replicas (the autoscaler's floor).")
    max_replicas: int = setting(6, ge=1, derived=True, doc="Most gateway replicas (default: 6, or minReplicas when "
                                                           "larger).")
    service_type: Literal["LoadBalancer", "NodePort", "ClusterIP"] = setting(
        "LoadBalancer", doc="How clients reach the gateway: its Service's type.")
    connect_timeout_seconds: float = setting(2.0, ge=0.01, le=60, doc="Seconds to connect to a model replica.")
    retries: Retries = setting(default_factory=Retries, doc="Retries of a failed request on another replica.")
    outlier_detection: OutlierDetection = setting(default_factory=OutlierDetection,
                                                  doc="Ejection of replicas that keep failing.")
    circuit_breakers: CircuitBreakers = setting(default_factory=CircuitBreakers,
                                                doc="Limits on what one gateway replica sends to one model.")
    auth: GatewayAuth = setting(default_factory=GatewayAuth, doc="Who may call models: JWT issuers and the "
                                                                 "tenant claim.")
    health_check: HealthCheck = setting(default_factory=HealthCheck, doc="The gateway's active health checks of "
                                                                         "replicas.")
    request_headers_timeout_seconds: float = setting(10.0, ge=0.01, le=3600, doc="Seconds to receive a request's "
                                                                                 "headers (408 past it).")
    request_timeout_seconds: float = setting(60.0, ge=0.01, le=3600, doc="Seconds to receive a whole request, body "
                                                                         "included (408 past it).")
    stream_idle_timeout_seconds: float = setting(30.0, ge=0.01, le=3600, doc="Seconds a stream may idle; routes to a "
                                                                             "model use its timeoutSeconds instead.")
    idle_timeout_seconds: float = setting(300.0, ge=1, le=86400, doc="Seconds before an idle client connection is "
                                                                     "closed.")
    budget_service: BudgetService = setting(default_factory=BudgetService, doc="The token budget service and its "
                                                                              "Valkey store (only with budgets).")
    # workload -> routing policy among its variants; default: cost-within-deadline for every workload with variants
    routing: Mapping[str, str] = setting(default_factory=dict, form=Mapping[str, Routing], pattern=DNS_LABEL_PATTERN,
                                         doc="Per workload with variants: how a request picks one, and the "
                                             "variants' fidelity gate (default: cost-within-deadline, no gate).")
    # workload -> marginPercent over each variant's expected latency; default: DEFAULT_ROUTING_MARGIN_PERCENT
    routing_margins: Mapping[str, float] = field(default_factory=dict)
    # workload -> its fidelity gate (gateway.routing.<workload>.fidelity); default: none (every variant is routed)
    fidelity: Mapping[str, Fidelity] = field(default_factory=dict)
    # workload -> its token budget (gateway.routing.<workload>.tokenBudget); default: none
    token_budgets: Mapping[str, TokenBudget] = field(default_factory=dict)
