"""The gateway (`gateway`): replicas, timeouts, retries, outlier detection, auth, routing and fidelity gates."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from components.k8s.settings import (
    DEFAULT_MAX_DROP,
    DEFAULT_MAX_TOKEN_LIFETIME_SECONDS,
    DEFAULT_MAX_UNANSWERED,
    DEFAULT_MIN_BASELINE_SCORE,
    MAX_TOKEN_LIFETIME_LIMIT_SECONDS,
    ROUTING_POLICIES,
    CategoryGate,
    CircuitBreakers,
    Fidelity,
    FidelityJob,
    GatewayAuth,
    GatewaySettings,
    HealthCheck,
    JwtIssuer,
    OutlierDetection,
    Retries,
    SecretRef,
)
from infra.stack.reader import (
    DNS_LABEL,
    _given,
    _Reader,
    _show,
)


def _gateway(r: _Reader, raw: Any) -> GatewaySettings:
    p = "gateway"
    v = r.fields(GatewaySettings, raw, p, handled=("retries", "outlierDetection", "circuitBreakers", "auth",
                                                   "healthCheck", "routing"))
    d = {k: x for k, x in raw.items() if x is not None} if isinstance(raw, dict) else {}
    if "maxReplicas" not in d or r.problems_at(f"{p}.maxReplicas"):  # default: 6, or minReplicas when larger
        v["max_replicas"] = max(v["min_replicas"], v["max_replicas"])
    if v["min_replicas"] > v["max_replicas"]:
        r.fail(f"{p}.minReplicas", f"{v['min_replicas']} is greater than maxReplicas {v['max_replicas']}")
    return GatewaySettings(
        **v,
        retries=r.section(Retries, d.get("retries"), f"{p}.retries"),
        outlier_detection=r.section(OutlierDetection, d.get("outlierDetection"), f"{p}.outlierDetection"),
        circuit_breakers=r.section(CircuitBreakers, d.get("circuitBreakers"), f"{p}.circuitBreakers"),
        auth=_gateway_auth(r, d.get("auth")),
        health_check=_health_check(r, d.get("healthCheck")),
        routing=_routing(r, d.get("routing")),
        routing_margins=_routing_margins(r, d.get("routing")),
        fidelity=_fidelity(r, d.get("routing")),
    )


def _routing(r: _Reader, raw: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for workload, body in r.named(raw if raw is not None else {}, "gateway.routing").items():
        wp = f"gateway.routing.{workload}"
        wd = r.mapping(body, wp, ("policy", "marginPercent", "fidelity"))
        policy = r.value(wd, "policy", wp, str, ROUTING_POLICIES[0], choices=ROUTING_POLICIES)
        if policy is not None:
            out[workload] = policy
    return out


def _routing_margins(r: _Reader, raw: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for workload, body in (raw if isinstance(raw, dict) else {}).items():
        if isinstance(body, dict) and "marginPercent" in body:
            margin = r.value(body, "marginPercent", f"gateway.routing.{workload}", float, None, minimum=0,
                             maximum=1000)
            if margin is not None:
                out[workload] = margin
    return out


def _fidelity(r: _Reader, raw: Any) -> dict[str, Fidelity]:
    out: dict[str, Fidelity] = {}
    for workload, body in (raw if isinstance(raw, dict) else {}).items():
        if not isinstance(body, dict) or body.get("fidelity") is None:
            continue  # _routing reports the mapping itself
        fp = f"gateway.routing.{workload}.fidelity"
        fd = r.mapping(body["fidelity"], fp, ("suite", "baseline", "maxDrop", "job", "minBaselineScore",
                                              "maxUnanswered", "categories"))
        suite = r.value(fd, "suite", fp, str, check=lambda v: None if DNS_LABEL.match(v) else
                        "is not a suite directory name (a DNS label: lowercase letters, digits, '-')")
        baseline = r.value(fd, "baseline", fp, str)
        max_drop = r.value(fd, "maxDrop", fp, float, DEFAULT_MAX_DROP, minimum=0, maximum=1)
        job = _fidelity_job(r, (fd or {}).get("job"), f"{fp}.job")
        floor = r.value(fd, "minBaselineScore", fp, float, DEFAULT_MIN_BASELINE_SCORE, minimum=0, maximum=1)
        unanswered = r.value(fd, "maxUnanswered", fp, float, DEFAULT_MAX_UNANSWERED, minimum=0, maximum=1)
        categories = _category_gates(r, (fd or {}).get("categories"), f"{fp}.categories")
        if suite is not None and baseline is not None:
            out[workload] = Fidelity(suite, baseline, max_drop, job, floor, unanswered, categories)
    return out


def _category_gates(r: _Reader, raw: Any, path: str) -> tuple[CategoryGate, ...]:
    """categories: {<category> | "*": {minScore, maxDrop}}: at least one of the two each."""
    if raw is None:
        return ()
    out = []
    for name, body in (r.mapping(raw, path, None) or {}).items():
        cp = f"{path}.{name}"
        cd = r.mapping(body, cp, ("minScore", "maxDrop"))
        if cd is None:
            continue
        floor = r.value(cd, "minScore", cp, float, None, minimum=0, maximum=1)
        drop = r.value(cd, "maxDrop", cp, float, None, minimum=0, maximum=1)
        if floor is None and drop is None:
            if not r.problems_at(cp):
                r.fail(cp, "needs minScore (the variant's score on the category's items at least this) or maxDrop "
                           "(at most this below the baseline's)")
            continue
        out.append(CategoryGate(name, floor, drop))
    return tuple(sorted(out, key=lambda c: c.name))


def _fidelity_job(r: _Reader, raw: Any, path: str) -> FidelityJob | None:
    if raw is None:
        return None
    d = r.mapping(raw, path, ("image", "tokenSecret", "timeoutSeconds"))
    image = r.value(d, "image", path, str, check=lambda v: None if v.strip() and " " not in v else
                    "is not an image reference")
    sd = r.mapping((d or {}).get("tokenSecret") or {}, f"{path}.tokenSecret", ("name", "key"))
    name = r.value(sd, "name", f"{path}.tokenSecret", str)
    key = r.value(sd, "key", f"{path}.tokenSecret", str)
    timeout = r.value(d, "timeoutSeconds", path, int, 3600, minimum=60, maximum=86400)
    if image is None or name is None or key is None:
        return None
    return FidelityJob(image, SecretRef(name, key), timeout)


def _https_url(value: str) -> str | None:
    return None if re.match(r"^https://[^/\s:]+(:\d+)?(/\S*)?$", value) else "is not an https:// URL"


def _gateway_auth(r: _Reader, raw: Any) -> GatewayAuth:
    p = "gateway.auth"
    d = r.mapping(raw if raw is not None else {}, p, ("issuers", "tenantClaim", "maxTokenLifetimeSeconds"))
    issuers: list[JwtIssuer] = []
    seen: set[str] = set()
    raw_issuers = r.value(d, "issuers", p, list, [])
    for i, item in enumerate(raw_issuers):
        ip = f"{p}.issuers[{i}]"
        idd = r.mapping(item, ip, ("issuer", "jwksUri", "audiences", "tenants"))
        if idd is None:
            continue
        issuer = r.value(idd, "issuer", ip, str, check=lambda v: None if v.strip() else "is empty")
        jwks = r.value(idd, "jwksUri", ip, str, check=_https_url)
        if issuer in seen:
            r.fail(f"{ip}.issuer", f"{issuer!r} is listed twice")
        elif issuer is not None and jwks is not None:
            issuers.append(JwtIssuer(issuer, jwks, r.strings(idd, "audiences", ip),
                                     r.strings(idd, "tenants", ip, derived=True) if "tenants" in idd else None))
        if issuer is not None:
            seen.add(issuer)
    return GatewayAuth(tuple(issuers), r.value(d, "tenantClaim", p, str, "tenant",
                                               check=lambda v: None if re.match(r"^[A-Za-z0-9_:.-]+$", v)
                                               else "is not a claim name (letters, digits, _ : . -)"),
                       r.value(d, "maxTokenLifetimeSeconds", p, int, DEFAULT_MAX_TOKEN_LIFETIME_SECONDS, minimum=60,
                               maximum=MAX_TOKEN_LIFETIME_LIMIT_SECONDS))


def _health_check(r: _Reader, raw: Any) -> HealthCheck:
    """gateway.healthCheck; timeoutSeconds is at most intervalSeconds, and its default no longer than it."""
    p = "gateway.healthCheck"
    hc = r.section(HealthCheck, raw, p)
    given = _given(raw if isinstance(raw, dict) else None, "timeoutSeconds") and \
        not r.problems_at(f"{p}.timeoutSeconds")
    if given and hc.timeout_seconds > hc.interval_seconds:
        r.fail(f"{p}.timeoutSeconds", f"{_show(hc.timeout_seconds)} is above the maximum {hc.interval_seconds:g}")
        given = False
    return hc if given else dataclasses.replace(hc, timeout_seconds=min(HealthCheck().timeout_seconds,
                                                                        hc.interval_seconds))
