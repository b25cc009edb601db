"""Deadline-aware routing between a workload's variants (models of one workload that declare `variant`,
cheapest first by cost per request). The budget is what this one request may take, in ms:

    x-aifactory-budget-ms: <ms>                     the request's budget, or else
    baggage: ...,aifactory.budget_ms=<ms>,...       W3C baggage as telemetry's `headers()` sends it (its step's
                                                    share of the workflow's remaining budget)

A variant fits a budget of at least its threshold: its slo.e2eSeconds (the engine's p95) plus the workload's
margin (gateway.routing.<workload>.marginPercent, default 25%: the gateway and, under load, the variant's queue
add to the engine's latency), in whole ms rounded up (`threshold_ms`). Policy `cost-within-deadline` (the
default): the cheapest variant that fits (reason `fits-budget`); a budget below every threshold takes the
fastest (`rescued`); no budget (or one that is not a whole number of ms) takes the cheapest (`default`).
Policies `cheapest` and `fastest` ignore the budget (`default`). x-priority: batch still goes to the workload's
batch model.

Why plain route matching: the decision is a pure function of one number and a handful of thresholds known
when the config is built, so it compiles to ordered routes, first match wins: per useful variant (cheaper
ones first, a pricier variant only if it is faster than every cheaper one) a route whose header matcher
accepts budgets >= its threshold: `range_match` on x-aifactory-budget-ms, an RE2 `safe_regex` for "a decimal
integer >= N" on the baggage member (Envoy matches repeated headers joined by commas). No Lua, no ext_proc,
no other process and no network hop (the overflow gates below are in process); the explicit header wins over
baggage (the baggage routes require it absent).

Overflow: each decision routes to an aggregate cluster (`envoy.clusters.aggregate`) listing the chosen
variant, then the others fastest first, each through its overflow gate. The first try goes to the chosen
variant; the route's retry policy adds `envoy.retry_priorities.previous_priorities`, so a try that failed on one
variant (503 from a saturated engine, reset, per-try idle timeout, a tripped circuit breaker, no healthy replica)
is retried on the next variant, not queued behind it.
The gate is needed for the breaker: Envoy never retries a request refused by its own circuit breaker
(RetryPolicyImpl::wouldRetryFromReset returns false for StreamResetReason::Overflow, and wouldRetryFromHeaders
for a response carrying x-envoy-overloaded: envoyproxy/envoy source/common/router/retry_policy_impl.cc). So the
aggregate cluster reaches each variant through `<variant>__gate`, an internal listener (in process, no socket:
envoy.bootstrap.internal_listener) whose router forwards to the variant's cluster with `suppress_envoy_headers`:
a try the variant's breaker refuses comes back to the decision's route as a plain 503, which it retries on the
next variant. A variant's breaker is its `variant.maxRequests` (default gateway.circuitBreakers.maxRequests):
set to what the variant's replicas serve at once, tries past it overflow instead of queueing at the engine.
The variant's cluster keeps its health checks, outlier detection, LB and breakers (within the variant they
pick the replica; with session affinity the gate retries a failed try once on another replica of the variant,
`gate_listener`); the gate clusters are not health-checked (Envoy's health checker cannot reach internal
listeners), so a variant that is down costs each request one fast-failing try before the next variant serves it.

Last resort: a variant's cluster keeps no panic mode (components.k8s.gateway.envoy.replicas.NO_PANIC), so that a
variant whose replicas all fail their checks (saturated or hung) answers its try at once and the next variant serves
it. When every variant does, the request is not answered 503: each aggregate ends with every variant's last resort,
fastest first (`overflow_steps`): `<variant>__last`, the variant's replicas with panic mode and no health checks
(replicas.last_resort_cluster), behind its own gate `<variant>__last__gate`. A try gets there only after every
variant's own try failed; only when none passes do the requests queue at the replicas, as a model's without variants
do. The decision's route allows a try per step (`decision_num_retries`). Why not panic on one variant's own cluster:
the variant a decision tries first would then hold its requests while no replica of it passes, instead of overflowing
(the slowest variant is also the cheapest, which requests without a budget try first).

A hung variant (its engine stops answering) and the requests already on it: nothing cuts a try on it but the
decision route's per-try idle timeout (a streamed request: the variant's tryIdleTimeoutSeconds; an unstreamed one:
its timeoutSeconds, config._unstreamed) or the route's timeout (timeoutSeconds, all tries together); the gate has
none. So those requests wait it out: a try cut by its idle timeout is retried on the next variant, and where the try
idle timeout is not below the route's (prod's assistant variants: both 30 s) the route's ends the request first, 504,
not retried. Only new requests overflow at once, once the progress checks have taken the variant's replicas out
(unhealthyThreshold times the check's timeout plus its interval: components.k8s.defaults.GATEWAY_DETECTION_SECONDS,
10 s). A shorter try idle timeout would cut them sooner, and also every legitimate long generation that is not
streamed (it sends nothing until the whole answer is ready), which would then be retried on another variant and
generated again: not done.

A request that names a variant by its own key (the body's `"model": "<variant>"`, route `<variant>/key-body`) is
the client's choice of variant: it does not overflow to another one. Its route sends to the aggregate cluster
`<variant>__direct` (`direct_cluster`): the variant's gate, then its last resort's (`direct_steps`), retried on the
next step as a decision's route is. The gate is one host that is never checked, so it takes all of the aggregate's
load, and behind it the variant's cluster picks among its passing replicas only: while one passes, all of the
requests go to it; while none does, the variant's try fails at once and the last resort serves. A try the variant's
breaker (variant.maxRequests) refuses comes back from the gate as a plain 503 and the last resort serves it too
(before the gate, the variant's own cluster was the first member: Envoy never retries its own overflow, and the
client got 503). The cost, as for a decision: each pass through a gate is a stream of its own, so a retry after a
replica's 500 goes to the last resort, whose pick knows nothing of the replica that failed (with session affinity the
gate first retries once on another replica), and a request's second 500 is recognised (components.k8s.gateway.envoy.
failures) only within one pass.
Internal listeners: https://www.envoyproxy.io/docs/envoy/v1.40.0/configuration/other_features/internal_listener
Aggregate cluster: https://www.envoyproxy.io/docs/envoy/v1.40.0/intro/arch_overview/upstream/aggregate_cluster

The decision is visible: requests reach the model with, and clients get back, `x-aifactory-route:
<chosen variant>; reason=<fits-budget|rescued|default>`, and `x-aifactory-variant: <variant that served>`
(they differ when the request overflowed). Each decision's route has stat_prefix
`<workload>__<variant>__<reason>` (vhost.models.route.<prefix>.upstream_rq_*; Prometheus:
envoy_vhost_route_upstream_rq_completed{envoy_route=...}), whose upstream_rq_retry counts tries sent on to the
next variant; each variant's cluster counts the tries it served (upstream_rq_total, overflow included; a try its
breaker refused counts in upstream_rq_active_overflow instead); the aggregate clusters are
`<workload>__<chosen variant>`; the access log has the route and the upstream cluster (the gate). A route that names
a variant by its key has stat_prefix `<variant>__direct` (`direct_route`). The answers every route gave clients are
its route stats (dashboards/gateway_alerts.py reads them); the variants' clusters also count tries that overflowed.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from components.k8s import naming
from components.k8s.gateway.envoy.affinity import hash_policy
from components.k8s.gateway.envoy.affinity import retry_policy as affinity_retry_policy
from components.k8s.gateway.envoy.base import (
    _T,
    BAGGAGE_HEADER,
    BUDGET_BAGGAGE_KEY,
    BUDGET_HEADER,
    BUDGET_MAX_MS,
    METADATA_NAMESPACE,
    ROUTE_DECISION_HEADER,
    VARIANT_HEADER,
    VARIANT_KEY,
    GatewayView,
    _hcm,
    _seconds,
    max_requests_of,
    model_host,
    retriable_status_codes,
)
from components.k8s.gateway.envoy.replicas import last_resort_cluster, last_resort_name
from components.k8s.settings import Model

__all__ = [
    "Workload",
    "workloads",
    "Decision",
    "decisions",
    "at_least_regex",
    "threshold_ms",
    "overflow_cluster_name",
    "overflow_order",
    "overflow_steps",
    "overflow_retries",
    "decision_num_retries",
    "overflow_cluster",
    "variant_clusters",
    "variant_models",
    "gate_name",
    "gate_cluster",
    "GATE_RETRIES",
    "gate_retry_policy",
    "gate_listener",
    "gate_listeners",
    "gate_stats_excluded",
    "decision_route",
    "DIRECT_SUFFIX",
    "direct_cluster_name",
    "direct_steps",
    "direct_cluster",
    "direct_route",
]


@dataclass(frozen=True, slots=True)
class Workload:
    """One API model: the interactive model and, optionally, a batch model serving the same name."""

    name: str
    default: Model  # the interactive model, or the only model (with variants: the no-budget policy's pick)
    batch: Model | None  # set when the workload declares both priorities
    variants: tuple[Model, ...] = ()  # cheapest first; empty without variants


def workloads(cfg: GatewayView) -> list[Workload]:
    """The config's models grouped into API models, sorted by name."""
    groups: dict[str, dict[str, Model]] = {}
    for m in cfg.models.values():
        groups.setdefault(m.workload, {})[m.priority] = m
    out = []
    for name in sorted(groups):
        g = groups[name]
        if variants := cfg.variants_of(name):
            out.append(Workload(name, _no_budget_pick(cfg, name, variants), g.get("batch"), tuple(variants)))
        elif "interactive" in g:
            out.append(Workload(name, g["interactive"], g.get("batch")))
        else:  # a batch-only workload: every request goes to its batch model
            out.append(Workload(name, g["batch"], None))
    return out


def _latency_ms(model: Model) -> int:
    """A variant's expected latency: its p95 end-to-end SLO, whole ms rounded up."""
    return -(-round(model.slo.e2e_seconds * 1e6) // 1000)


def threshold_ms(cfg: GatewayView, workload: str, model: Model) -> int:
    """The least budget the variant fits: its expected latency plus the workload's margin, whole ms rounded up."""
    return -(-round(model.slo.e2e_seconds * 1e6 * (100 + cfg.routing_margin_percent(workload))) // 100_000)


def _fastest(variants: Sequence[Model]) -> Model:
    """The lowest expected latency; ties go to the cheaper (variants come cheapest first)."""
    return min(variants, key=lambda m: m.slo.e2e_seconds)


def _no_budget_pick(cfg: GatewayView, workload: str, variants: Sequence[Model]) -> Model:
    return _fastest(variants) if cfg.routing_policy(workload) == "fastest" else variants[0]


@dataclass(frozen=True, slots=True)
class Decision:
    """One routing decision of a workload with variants: requests whose headers match `headers` go to `chosen`."""

    name: str  # its routes' subject (envoy_base.route_name: how they match and their twins follow it)
    chosen: Model
    reason: str  # fits-budget | rescued | default
    headers: tuple[dict[str, Any], ...]


def at_least_regex(n: int) -> str:
    """RE2 for a decimal integer (leading zeros allowed) >= n: more digits, or as many and larger at the first
    digit that differs."""
    if n <= 0:
        return r"\d+"
    s = str(n)
    alts = [f"[1-9]\\d{{{len(s)},}}", s]
    for i, digit in enumerate(s):
        if digit != "9":
            rest = len(s) - i - 1
            alts.append(f"{s[:i]}[{int(digit) + 1}-9]" + (f"\\d{{{rest}}}" if rest else ""))
    return f"0*(?:{'|'.join(alts)})"


def _baggage_budget(regex: str) -> dict[str, Any]:
    """The baggage carries aifactory.budget_ms whose value matches `regex` (W3C baggage: list-members
    `key OWS = OWS value *( OWS ; property )` separated by OWS , OWS)."""
    key = re.escape(BUDGET_BAGGAGE_KEY)
    return {"name": BAGGAGE_HEADER, "string_match": {"safe_regex": {
        "regex": f"^(?:.*,)?[ \\t]*{key}[ \\t]*=[ \\t]*(?:{regex})[ \\t]*(?:[;,].*)?$"}}}


_NO_BUDGET_HEADER = {"name": BUDGET_HEADER, "present_match": True, "invert_match": True}


def decisions(cfg: GatewayView, w: Workload) -> list[Decision]:
    """The workload's routing decisions in match order (empty without variants): see the module docstring."""
    if not w.variants:
        return []
    out: list[Decision] = []
    if cfg.routing_policy(w.name) == "cost-within-deadline":
        best: int | None = None
        for v in w.variants:  # cheapest first: a pricier variant is useful only if it is faster
            lat = threshold_ms(cfg, w.name, v)
            if best is not None and lat >= best:
                continue
            best = lat
            name = f"{w.name}.{v.name}.fits-budget"
            out.append(Decision(name, v, "fits-budget", (
                {"name": BUDGET_HEADER, "range_match": {"start": lat, "end": BUDGET_MAX_MS}},)))
            out.append(Decision(f"{name}.baggage", v, "fits-budget",
                                (_NO_BUDGET_HEADER, _baggage_budget(at_least_regex(lat)))))
        fast = _fastest(w.variants)
        name = f"{w.name}.{fast.name}.rescued"
        out.append(Decision(name, fast, "rescued", (
            {"name": BUDGET_HEADER, "range_match": {"start": 0, "end": threshold_ms(cfg, w.name, fast)}},)))
        out.append(Decision(f"{name}.baggage", fast, "rescued", (_NO_BUDGET_HEADER, _baggage_budget(r"\d+"))))
    out.append(Decision(f"{w.name}.{w.default.name}.default", w.default, "default", ()))
    return out


def overflow_cluster_name(workload: str, chosen: Model) -> str:
    """The aggregate cluster that tries `chosen` first. Model names are DNS labels: "__" clashes with none, and
    no dot, so Prometheus' envoy_cluster_name tag holds the whole name (Envoy's tag extractor cuts at a dot)."""
    return f"{workload}__{chosen.name}"


def _by_latency(variants: Sequence[Model]) -> list[Model]:
    """Fastest first (ties: cheaper first: variants come cheapest first)."""
    return sorted(variants, key=_latency_ms)


def overflow_order(w: Workload, chosen: Model) -> list[Model]:
    """`chosen`, then the workload's other variants fastest first (ties: cheaper first)."""
    return [chosen, *_by_latency([v for v in w.variants if v is not chosen])]


def overflow_steps(w: Workload, chosen: Model) -> list[str]:
    """The aggregate cluster's members, in order: each variant's gate (`overflow_order`), then each variant's last
    resort's gate, fastest first (module docstring)."""
    return [*(gate_name(m) for m in overflow_order(w, chosen)),
            *(gate_name(m, last_resort=True) for m in _by_latency(w.variants))]


def decision_num_retries(attempts: int, w: Workload, chosen: Model) -> int:
    """A decision route's retries: gateway.retries.attempts, and at least one try per step of its aggregate, so that
    a request every variant failed reaches the last resorts (with previous_priorities each retry goes to the next
    step; a step whose variant has no replica fails at once)."""
    return _num_retries(attempts, overflow_steps(w, chosen))


def _num_retries(attempts: int, steps: Sequence[str]) -> int:
    return max(attempts, len(steps) - 1)


def _retry_per_step(route: dict[str, Any], steps: Sequence[str]) -> None:
    """A route to an aggregate over `steps` (gates) retries a failed try on the next step (previous_priorities: each
    step is a priority of the aggregate), with at least a retry per step (`_num_retries`)."""
    policy = route["route"]["retry_policy"]
    policy["num_retries"] = _num_retries(policy["num_retries"], steps)
    policy["retry_priority"] = {
        "name": "envoy.retry_priorities.previous_priorities",
        "typed_config": {"@type": _T + "extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig",
                         "update_frequency": 1}}
    del route["route"]["host_rewrite_literal"]  # the gate of the step that serves the try sets it


def overflow_retries(cfg: GatewayView, w: Workload) -> int:
    """The tries of one decision that may overflow at once: as many as the workload's variants take at once (the sum
    of their circuit breakers, variant.maxRequests or gateway.circuitBreakers.maxRequests), so that the variants'
    breakers, not the retry budget, bound the overflow.

    Envoy allows a cluster's retries in flight up to budget_percent of *its own* requests in flight, at least
    min_retry_concurrency (RetryBudget, envoyproxy/envoy@v1.40.0 api/envoy/config/cluster/v3/circuit_breaker.proto).
    The router checks the budget on the route's cluster, this aggregate one, which counts no requests: each try is
    counted on the cluster of the host that serves it, a gate's. So the percentage never adds to the floor, and
    with a floor of 16, 16 of 48 requests overflowing at once were served and 32 got 503 (flag UO), at
    budget_percent 20 and 100 alike (live: tests/artifacts/test_envoy_variants_block_live.py). A variant with no
    healthy replica, such as one on a capacity block outside its window, makes every request an overflow. The last
    resorts' breakers (gateway.circuitBreakers.maxRequests each) add theirs: every try there is a retry."""
    return sum(max_requests_of(cfg.gateway, m) + cfg.gateway.circuit_breakers.max_requests for m in w.variants)


def overflow_cluster(cfg: GatewayView, w: Workload, chosen: Model) -> dict[str, Any]:
    """An aggregate cluster over the variants' gates in overflow order, then their last resorts' (each variant keeps
    its own LB, health checks and breakers); its retry budget lets every try the variants can take overflow
    (`overflow_retries`)."""
    return _aggregate(cfg, overflow_cluster_name(w.name, chosen), overflow_steps(w, chosen), overflow_retries(cfg, w))


def _aggregate(cfg: GatewayView, name: str, members: list[str], retries: int) -> dict[str, Any]:
    return {
        "name": name,
        "connect_timeout": _seconds(cfg.gateway.connect_timeout_seconds),
        "lb_policy": "CLUSTER_PROVIDED",
        "cluster_type": {"name": "envoy.clusters.aggregate", "typed_config": {
            "@type": _T + "extensions.clusters.aggregate.v3.ClusterConfig", "clusters": members}},
        # the router checks the retry budget on the route's cluster: this one
        "circuit_breakers": {"thresholds": [{
            "priority": "DEFAULT",
            "retry_budget": {"budget_percent": {"value": cfg.gateway.retries.budget_percent},
                             "min_retry_concurrency": retries}}]},
    }


DIRECT_SUFFIX = naming.DIRECT_SUFFIX


def direct_cluster_name(model: Model) -> str:
    """The aggregate cluster of the routes that name the variant by its key, and their stat_prefix."""
    return f"{model.name}{DIRECT_SUFFIX}"


def direct_steps(model: Model) -> list[str]:
    """The direct aggregate's members, in order: the variant's gate, then its last resort's (module docstring)."""
    return [gate_name(model), gate_name(model, last_resort=True)]


def direct_cluster(cfg: GatewayView, model: Model) -> dict[str, Any]:
    """The variant's gate, then its last resort's (module docstring); its retry budget is the tries both take."""
    return _aggregate(cfg, direct_cluster_name(model), direct_steps(model),
                      max_requests_of(cfg.gateway, model) + cfg.gateway.circuit_breakers.max_requests)


def variant_clusters(cfg: GatewayView) -> list[dict[str, Any]]:
    """One aggregate cluster per variant a decision can choose, then every variant's direct aggregate (when it has a
    key of its own), last resort and gate clusters, sorted by name."""
    out = {}
    for w in workloads(cfg):
        for d in decisions(cfg, w):
            c = overflow_cluster(cfg, w, d.chosen)
            out[c["name"]] = c
    models = variant_models(cfg)
    return [out[k] for k in sorted(out)] + [
        *(direct_cluster(cfg, m) for m in models if m.name != m.workload),
        *(last_resort_cluster(cfg, m) for m in models),
        *(gate_cluster(cfg, m, last_resort=last) for m in models for last in (False, True))]


def variant_models(cfg: GatewayView) -> list[Model]:
    return [m for w in workloads(cfg) for m in sorted(w.variants, key=lambda v: v.name)]


GATE_SUFFIX = naming.GATE_SUFFIX


def gate_name(model: Model, *, last_resort: bool = False) -> str:
    """The variant's overflow gate (or its last resort's): an internal listener and the cluster that reaches it."""
    return f"{last_resort_name(model) if last_resort else model.name}{GATE_SUFFIX}"


# The gate's own limits are not the variant's: its breaker must never be what refuses a request.
GATE_MAX = 1_000_000


def gate_cluster(cfg: GatewayView, model: Model, *, last_resort: bool = False) -> dict[str, Any]:
    """The variant as the aggregate clusters see it: its gate listener, in process (no socket). Not health-checked:
    Envoy's health checker runs on the main thread, which reaches no internal listener (Envoy 1.40 counts every
    such check as health_check.network_failure, logging "connect to previously closed peer"); a try on a variant
    that is down fails at once behind the gate (503) and is retried on the next variant."""
    name = gate_name(model, last_resort=last_resort)
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": _seconds(cfg.gateway.connect_timeout_seconds),
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{
            "endpoint": {"address": {"envoy_internal_address": {"server_listener_name": name}}},
            # the response's x-aifactory-variant (%UPSTREAM_METADATA%): the variant behind this gate
            "metadata": {"filter_metadata": {METADATA_NAMESPACE: {VARIANT_KEY: model.name}}}}]}]},
        "transport_socket": {"name": "envoy.transport_sockets.internal_upstream", "typed_config": {
            "@type": _T + "extensions.transport_sockets.internal_upstream.v3.InternalUpstreamTransport",
            "transport_socket": {"name": "envoy.transport_sockets.raw_buffer", "typed_config": {
                "@type": _T + "extensions.transport_sockets.raw_buffer.v3.RawBuffer"}}}},
        "circuit_breakers": {"thresholds": [{"priority": "DEFAULT", "max_connections": GATE_MAX,
                                             "max_pending_requests": GATE_MAX, "max_requests": GATE_MAX,
                                             "max_retries": GATE_MAX}]},
    }


# With session affinity, a try that fails on a variant's replica is tried once more on another replica of the
# variant, at its gate, before it goes back to the decision's route (see gate_listener).
GATE_RETRIES = 1


def gate_retry_policy(retry_policy: dict[str, Any]) -> dict[str, Any]:
    """The gate's retry policy from the model route's (`retry_policy`: its retry_on, codes and previous_hosts
    predicate): GATE_RETRIES retries, no per-try idle timeout (the decision's route times the whole try), the
    affinity's draws for the retry's replica (envoy_affinity.retry_policy)."""
    out = {k: v for k, v in retry_policy.items() if k != "per_try_idle_timeout"}
    return affinity_retry_policy({**out, "num_retries": GATE_RETRIES})


def gate_listener(cfg: GatewayView, model: Model, *, retry_policy: dict[str, Any], last_resort: bool = False
                  ) -> dict[str, Any]:
    """The variant's overflow gate: an internal listener whose router sends everything to the variant's cluster
    and answers a try the cluster's circuit breaker refuses with a plain 503 (suppress_envoy_headers drops
    x-envoy-overloaded, which would forbid the retry), so the decision's route retries it on the next variant.
    No timeouts here: the decision's route has them. The Host becomes the variant's Service name here, the last hop
    before the socket (see "Through the mesh" in components.k8s.gateway.envoy.config): which variant serves a try is
    known
    only at its gate.

    With session affinity the variant's replica is picked here, by the session key (`hash_policy`). Each pass
    through the gate is a new stream, whose pick knows nothing of the replicas earlier tries failed on: a retry the
    decision's route sends back through this gate (the variants' order wraps around once every variant was tried)
    would meet the same replica again. So the gate's route retries a failed try itself, GATE_RETRIES times, on
    another replica of the variant (the model route's `retry_policy`: its retry_on and previous_hosts, whose next
    Maglev pick for the key is another replica); the variant's breaker refusing a try is never retried here
    (Envoy does not retry its own overflow) and still goes straight back as the plain 503 that overflows it. The
    router keeps the body (up to the model's maxRequestBytes) to send it again. The last resort's gate is the same
    to the variant's last resort cluster."""
    name = gate_name(model, last_resort=last_resort)
    route: dict[str, Any] = {"cluster": last_resort_name(model) if last_resort else model.name, "timeout": "0s",
                             "host_rewrite_literal": model_host(cfg, model)}
    gate_route: dict[str, Any] = {"match": {"prefix": "/"}, "route": route}
    if model.session_affinity_balance_factor is not None:
        route["hash_policy"] = hash_policy()
        route["retry_policy"] = gate_retry_policy(retry_policy)
        gate_route["request_body_buffer_limit"] = model.max_request_bytes
    route_config = {"name": name, "virtual_hosts": [{"name": name, "domains": ["*"], "routes": [gate_route]}]}
    hcm = _hcm(f"gate_{name.removesuffix(GATE_SUFFIX)}", route_config, [], stream_idle_timeout="0s")
    hcm["typed_config"]["http_filters"][-1]["typed_config"]["suppress_envoy_headers"] = True
    return {"name": name, "internal_listener": {}, "filter_chains": [{"filters": [hcm]}]}


def gate_stats_excluded() -> dict[str, Any]:
    """The bootstrap's stats_config with the gates' stats left out: their clusters' (`cluster.<gate>.*`), their
    internal listeners' (`listener.envoy_internal_<gate>.*`) and their connection managers' (`http.gate_<...>.*`),
    about 300 series per gate per gateway pod that nothing reads (the clients' answers are the routes' stats; each
    variant's try, its own cluster's). Envoy matches the full stat name before extracting tags
    (envoyproxy/envoy@v1.40.0 api/envoy/config/metrics/v3/stats.proto, StatsConfig.stats_matcher)."""
    return {"stats_matcher": {"exclusion_list": {"patterns": [
        {"safe_regex": {"regex": f"cluster\\.[^.]+{GATE_SUFFIX}\\..+"}},  # RE2 on the whole name
        {"prefix": "listener.envoy_internal_"},
        {"prefix": "http.gate_"}]}}}


def gate_listeners(cfg: GatewayView, model: Model, *, retry_policy: dict[str, Any]) -> list[dict[str, Any]]:
    """The variant's gate and its last resort's."""
    return [gate_listener(cfg, model, retry_policy=retry_policy, last_resort=last) for last in (False, True)]


def decision_route(route: dict[str, Any], w: Workload, d: Decision) -> dict[str, Any]:
    """A model route turned into one decision's route: its headers, its overflow cluster, the decision shown."""
    out = copy.deepcopy(route)
    out["name"] = route["name"].replace(w.name, d.name, 1)
    out["match"]["headers"] = [*route["match"].get("headers", []), *d.headers]
    out["route"]["cluster"] = overflow_cluster_name(w.name, d.chosen)
    # a failed try goes to the next variant (the next priority of the aggregate cluster), on a status any variant's
    # engine may answer where another would not (variants of different engines: the chosen one's alone would miss
    # the others')
    out["route"]["retry_policy"]["retriable_status_codes"] = retriable_status_codes(w.variants)
    _retry_per_step(out, overflow_steps(w, d.chosen))
    out["stat_prefix"] = f"{w.name}__{d.chosen.name}__{d.reason}"
    decision = f"{d.chosen.name}; reason={d.reason}"
    out["request_headers_to_add"] = [{"header": {"key": ROUTE_DECISION_HEADER, "value": decision},
                                      "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]
    out["response_headers_to_add"] = [
        {"header": {"key": ROUTE_DECISION_HEADER, "value": decision}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"},
        # the serving host's metadata (model_cluster): %UPSTREAM_CLUSTER% names the aggregate cluster here
        {"header": {"key": VARIANT_HEADER, "value": f"%UPSTREAM_METADATA({METADATA_NAMESPACE}:{VARIANT_KEY})%"},
         "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]
    return out


def direct_route(route: dict[str, Any], model: Model) -> dict[str, Any]:
    """A route that names the variant by its key, turned to its direct aggregate (module docstring): the route keeps
    its retry conditions and timeouts, retries a failed try on the next step (`_retry_per_step`: the variant's gate,
    then its last resort's, then the variant's again), and its gates set the Host; its route stats are the variant's
    answers."""
    out = copy.deepcopy(route)
    out["route"]["cluster"] = out["stat_prefix"] = direct_cluster_name(model)
    _retry_per_step(out, direct_steps(model))
    return out
