"""The gateway (`gateway`): replicas, timeouts, retries, outlier detection, auth, routing and fidelity gates."""

from __future__ import annotations

import dataclasses
from typing import Any

from components.k8s.defaults import GATEWAY_DETECTION_SECONDS
from components.k8s.settings import (
    CategoryGate,
    Fidelity,
    GatewayAuth,
    GatewaySettings,
    HealthCheck,
    JwtIssuer,
    Routing,
    TokenBudget,
)
from infra.stack.messages import got as _got
from infra.stack.reader import (
    _given,
    _Reader,
)
from infra.stack.tenants import _token_budget


def _gateway(r: _Reader, raw: Any) -> GatewaySettings:
    p = "gateway"
    v = r.fields(GatewaySettings, raw, p, handled=("auth",))
    d = {k: x for k, x in raw.items() if x is not None} if isinstance(raw, dict) else {}
    routing, margins, gates, budgets = _routing(r, d.get("routing"))
    v["health_check"] = _health_check(r, v["health_check"], d.get("healthCheck"))
    if "maxReplicas" not in d or r.problems_at(f"{p}.maxReplicas"):  # default: 6, or minReplicas when larger
        v["max_replicas"] = max(v["min_replicas"], v["max_replicas"])
    if v["min_replicas"] > v["max_replicas"]:
        r.fail(f"{p}.minReplicas", f"{v['min_replicas']} is greater than maxReplicas {v['max_replicas']}")
    return GatewaySettings(
        **v,
        auth=_gateway_auth(r, d.get("auth")),
        routing=routing,
        routing_margins=margins,
        fidelity=gates,
        token_budgets=budgets,
    )


def _routing(r: _Reader, raw: Any) -> tuple[dict[str, str], dict[str, float], dict[str, Fidelity],
                                            dict[str, TokenBudget]]:
    """gateway.routing: per workload its policy, its marginPercent where given, its fidelity gate and its token
    budget. An entry that gives only tokenBudget sets no policy: any workload may have a budget, variants or not."""
    policies: dict[str, str] = {}
    margins: dict[str, float] = {}
    gates: dict[str, Fidelity] = {}
    budgets: dict[str, TokenBudget] = {}
    for workload, body in r.named(raw if raw is not None else {}, "gateway.routing").items():
        wp = f"gateway.routing.{workload}"
        v = r.fields(Routing, body, wp, handled=("fidelity",))
        if (budget := _token_budget(r, v["token_budget"], f"{wp}.tokenBudget")) is not None:
            budgets[workload] = budget
        if set(body) - {"tokenBudget"} or not body:
            policies[workload] = v["policy"]
        if v["margin_percent"] is not None:
            margins[workload] = v["margin_percent"]
        if body.get("fidelity") is not None and (gate := _fidelity(r, body["fidelity"], f"{wp}.fidelity")):
            gates[workload] = gate
    return policies, margins, gates, budgets


def _fidelity(r: _Reader, raw: Any, path: str) -> Fidelity | None:
    v = r.fields(Fidelity, raw, path, handled=("categories",))
    d = raw if isinstance(raw, dict) else {}
    categories = _category_gates(r, d.get("categories"), f"{path}.categories")
    if v["suite"] is None or v["baseline"] is None:
        return None
    job = v.pop("job")  # one reported incomplete is left out (the checks that span keys ask only whether one is set)
    complete = job is not None and None not in (job.image, job.token_secret.name, job.token_secret.key)
    return Fidelity(**v, job=job if complete else None, categories=categories)


def _category_gates(r: _Reader, raw: Any, path: str) -> tuple[CategoryGate, ...]:
    """categories: {<category> | "*": {minScore, maxDrop}}: at least one of the two each."""
    if raw is None:
        return ()
    out = []
    for name, body in (r.mapping(raw, path, None) or {}).items():
        cp = f"{path}.{name}"
        if not isinstance(body, dict):
            r.fail(cp, f"expected a mapping, got {_got(body)}")
            continue
        v = r.fields(CategoryGate, body, cp)
        if v["min_score"] is None and v["max_drop"] is None:
            if not r.problems_at(cp):
                r.fail(cp, "needs minScore (the variant's score on the category's items at least this) or maxDrop "
                           "(at most this below the baseline's)")
            continue
        out.append(CategoryGate(name, **v))
    return tuple(sorted(out, key=lambda c: c.name))


def _gateway_auth(r: _Reader, raw: Any) -> GatewayAuth:
    p = "gateway.auth"
    v = r.fields(GatewayAuth, raw, p)
    issuers: dict[str, JwtIssuer] = {}
    for i, item in enumerate(v.pop("issuers")):
        if item.issuer in issuers:
            r.fail(f"{p}.issuers[{i}].issuer", f"{item.issuer!r} is listed twice")
        elif item.issuer is not None:
            issuers[item.issuer] = item
    return GatewayAuth(issuers=tuple(i for i in issuers.values() if i.jwks_uri is not None), **v)


def _health_check(r: _Reader, hc: HealthCheck, raw: Any) -> HealthCheck:
    """gateway.healthCheck; timeoutSeconds, when unset, is its default or the longest that keeps the checks' window
    within GATEWAY_DETECTION_SECONDS, whichever is shorter."""
    p = "gateway.healthCheck"
    given = _given(raw if isinstance(raw, dict) else None, "timeoutSeconds") and \
        not r.problems_at(f"{p}.timeoutSeconds")
    if not given:
        fits = GATEWAY_DETECTION_SECONDS / hc.unhealthy_threshold - hc.interval_seconds
        default = HealthCheck().timeout_seconds
        hc = dataclasses.replace(hc, timeout_seconds=min(default, fits) if fits > 0 else default)
    if hc.detection_seconds > GATEWAY_DETECTION_SECONDS and not r.problems_at(p):
        r.fail(p, f"unhealthyThreshold x (timeoutSeconds + intervalSeconds) is {hc.detection_seconds:g} s, above "
                  f"{GATEWAY_DETECTION_SECONDS} s: a replica that stops answering would still get new requests "
                  "after its pod's preStop wait (components.k8s.defaults.GATEWAY_DETECTION_SECONDS); lower one of "
                  "them")
    return hc
