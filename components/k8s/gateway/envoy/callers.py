"""Who may call the gateway and how often: jwt_authn over the stack's token issuers (and the JWKS clusters it
fetches their keys from), the RBAC that limits which tenants each issuer may name, and one token bucket per calling
tenant and priority (local_ratelimit)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from components.k8s.gateway.envoy.base import (
    _ALL,
    _T,
    DEFAULT_JWKS_CACHE_SECONDS,
    DEFAULT_JWKS_FETCH_TIMEOUT_SECONDS,
    DEFAULT_JWT_CACHE_SIZE,
    DEFAULT_UNROUTED_RPS,
    ISSUER_TENANTS_FILTER,
    JWT_FILTER,
    METADATA_NAMESPACE,
    PRIORITY_DESCRIPTOR,
    SYSTEM_CA_BUNDLE,
    TENANT_DESCRIPTOR,
    TENANT_HEADER,
    GatewayView,
    _address,
    _seconds,
)
from components.k8s.settings import JwtIssuer

__all__ = [
    "rate_limit_filter",
    "jwt_filter",
    "issuer_tenants_restricted",
    "issuer_tenants_filter",
    "jwks_endpoint",
    "jwks_cluster",
]


def _token_bucket(per_second: int, burst: int) -> dict[str, Any]:
    return {"max_tokens": burst, "tokens_per_fill": per_second, "fill_interval": "1s"}


def rate_limit_filter(cfg: GatewayView) -> dict[str, Any]:
    """One token bucket per calling tenant and priority (descriptor tenant=<caller>, priority=<route's>).

    The caller is the token's tenant (x-aifactory-tenant, set by jwt_authn); the priority is the routed
    model's. Requests that match no model use the default bucket."""
    buckets = []
    for t in sorted(cfg.tenants):
        rl = cfg.tenants[t].rate_limit
        for priority, rps, burst in (("batch", rl.batch_requests_per_second, rl.batch_burst),
                                     ("interactive", rl.requests_per_second, rl.burst)):
            buckets.append({"entries": [{"key": TENANT_DESCRIPTOR, "value": t},
                                        {"key": PRIORITY_DESCRIPTOR, "value": priority}],
                            "token_bucket": _token_bucket(rps, burst)})
    return {
        "name": "envoy.filters.http.local_ratelimit",
        "typed_config": {
            "@type": _T + "extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
            "stat_prefix": "tenant_rate_limit",
            "token_bucket": _token_bucket(DEFAULT_UNROUTED_RPS, DEFAULT_UNROUTED_RPS),
            "filter_enabled": {"runtime_key": "tenant_rate_limit_enabled", "default_value": _ALL},
            "filter_enforced": {"runtime_key": "tenant_rate_limit_enforced", "default_value": _ALL},
            "always_consume_default_token_bucket": False,
            "rate_limits": [{"actions": [
                {"request_headers": {"header_name": TENANT_HEADER, "descriptor_key": TENANT_DESCRIPTOR}},
                {"metadata": {"descriptor_key": PRIORITY_DESCRIPTOR, "source": "ROUTE_ENTRY",
                              "metadata_key": {"key": METADATA_NAMESPACE, "path": [{"key": PRIORITY_DESCRIPTOR}]}}},
            ]}],
            "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
            "descriptors": buckets,
        },
    }


def _provider_name(index: int) -> str:
    return f"issuer-{index}"


def _jwks_cluster_name(index: int) -> str:
    return f"jwks-{index}"


def jwt_filter(cfg: GatewayView) -> dict[str, Any]:
    """jwt_authn: a token of one of the stack's issuers is required on every request (401 otherwise).

    The token itself is not forwarded; the tenant claim is, as x-aifactory-tenant."""
    auth = cfg.gateway.auth
    providers = {}
    for i, issuer in enumerate(auth.issuers):
        provider: dict[str, Any] = {
            "issuer": issuer.issuer,
            "remote_jwks": {
                "http_uri": {"uri": issuer.jwks_uri, "cluster": _jwks_cluster_name(i),
                             "timeout": _seconds(DEFAULT_JWKS_FETCH_TIMEOUT_SECONDS)},
                "cache_duration": _seconds(DEFAULT_JWKS_CACHE_SECONDS),
                "async_fetch": {},  # fetched at start-up and refreshed in the background
                "retry_policy": {"num_retries": 3},
            },
            "forward": False,
            # only the Authorization header: by default jwt_authn also reads an `access_token` query parameter
            # (JwtProvider.from_headers/from_params), and tokens in URLs end up in logs and browser histories
            "from_headers": [{"name": "Authorization", "value_prefix": "Bearer "}],
            # a token without exp, or valid for longer than gateway.auth.maxTokenLifetimeSeconds, is refused
            "require_expiration": True,
            "max_lifetime": _seconds(auth.max_token_lifetime_seconds),
            "claim_to_headers": [{"header_name": TENANT_HEADER, "claim_name": auth.tenant_claim}],
            # a client reuses its token until it expires: verify each token's signature once, not per request
            "jwt_cache_config": {"jwt_cache_size": DEFAULT_JWT_CACHE_SIZE},
        }
        if issuer.audiences:
            provider["audiences"] = list(issuer.audiences)
        if issuer_tenants_restricted(cfg):
            # the verified payload -> dynamic metadata envoy.filters.http.jwt_authn/issuer-<i>, read by issuer_tenants
            provider["payload_in_metadata"] = _provider_name(i)
        providers[_provider_name(i)] = provider
    names = list(providers)
    requires: dict[str, Any] = ({"provider_name": names[0]} if len(names) == 1 else
                                {"requires_any": {"requirements": [{"provider_name": n} for n in names]}})
    return {"name": JWT_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.jwt_authn.v3.JwtAuthentication",
        "providers": providers,
        # every request: any path, and CONNECT, which has no path (RouteMatch.connect_matcher)
        "rules": [{"match": {"prefix": "/"}, "requires": requires},
                  {"match": {"connect_matcher": {}}, "requires": requires}]}}


def issuer_tenants_restricted(cfg: GatewayView) -> bool:
    return any(i.tenants is not None for i in cfg.gateway.auth.issuers)


def _payload_claim(index: int, claim: str, value: dict[str, Any]) -> dict[str, Any]:
    """Principal: the payload that issuer `index` verified has `claim` matching `value`."""
    return {"sourced_metadata": {"metadata_matcher": {
        "filter": JWT_FILTER, "path": [{"key": _provider_name(index)}, *([{"key": claim}] if claim else [])],
        "value": value}}}


def issuer_tenants_filter(cfg: GatewayView) -> dict[str, Any]:
    """RBAC after jwt_authn: a token's tenant claim must be one its issuer may name (`issuers[].tenants`), else 403.

    jwt_authn proves who signed a token, not that the signer speaks for the tenant it names: with two issuers
    (two teams' IdPs) either could mint a token for the other's tenant. Each issuer's verified payload is in
    dynamic metadata under its provider name; one ALLOW policy per issuer accepts its payload only with a
    permitted tenant (an issuer without `tenants` may name any)."""
    auth = cfg.gateway.auth
    policies = {}
    for i, issuer in enumerate(auth.issuers):
        if issuer.tenants is None:
            principals = [_payload_claim(i, "", {"present_match": True})]
        else:
            principals = [_payload_claim(i, auth.tenant_claim, {"string_match": {"exact": t}})
                          for t in issuer.tenants]
        policies[_provider_name(i)] = {"permissions": [{"any": True}], "principals": principals}
    return {"name": ISSUER_TENANTS_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.rbac.v3.RBAC",
        "rules_stat_prefix": "issuer_tenants",
        "rules": {"action": "ALLOW", "policies": policies}}}


def jwks_endpoint(issuer: JwtIssuer) -> tuple[str, int]:
    """(host, port) of an issuer's JWKS URI (https: port 443 unless given)."""
    parts = urlsplit(issuer.jwks_uri)
    return parts.hostname or "", parts.port or 443


def jwks_cluster(cfg: GatewayView, index: int) -> dict[str, Any]:
    """The issuer's JWKS host over TLS (server certificate checked against the system's roots)."""
    name = _jwks_cluster_name(index)
    host, port = jwks_endpoint(cfg.gateway.auth.issuers[index])
    return {
        "name": name,
        "type": "LOGICAL_DNS",  # one external host: connect to whatever it resolves to now
        "dns_lookup_family": "V4_PREFERRED",
        "connect_timeout": _seconds(cfg.gateway.connect_timeout_seconds),
        "load_assignment": {"cluster_name": name,
                            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(host, port)}}]}]},
        "transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": {
            "@type": _T + "extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "sni": host,
            "common_tls_context": {"validation_context": {
                "trusted_ca": {"filename": SYSTEM_CA_BUNDLE},
                "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": host}}]}}}},
    }
