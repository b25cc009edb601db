"""The gateway's own answers: refusals it makes before a model is tried, and the local replies that carry their text.

Each is a route with a direct response. One the request's headers decide (a method the OpenAI API does not use, a
path no model serves, a declared content-length past a limit) is answered `at_once` by the refusals filter (a fault
filter whose abort each such route brings), before the buffer filter holds the body; the rest are answered by the
router once the body is read (components.k8s.gateway.envoy.config, the filter order). Route names: see
REFUSAL_ROUTE_PREFIX.
"""

from __future__ import annotations

import copy
from typing import Any

from components.k8s.gateway.envoy.base import (
    _ALL,
    _T,
    ALLOWED_METHODS,
    CALLERS_FILTER,
    METADATA_NAMESPACE,
    REFUSAL_KEY,
    REFUSALS_FILTER,
    GatewayView,
    route_name,
)
from components.k8s.settings import Model

__all__ = [
    "REFUSAL_ROUTE_PREFIX",
    "not_found",
    "local_replies",
    "refused_methods",
    "too_large",
    "too_large_for_any",
    "max_body",
]

# The gateway's own refusals' route names start with this: a colon, in no other route's name, so a workload named
# `gateway` has routes of its own (route names: components.k8s.gateway.envoy.base.ROUTE_NAME_SEPARATOR).
REFUSAL_ROUTE_PREFIX = "gateway:"


def not_found(name: str, match: dict[str, Any], text: str, *, status: int = 404, at_once: bool = False
              ) -> dict[str, Any]:
    """A direct response. `at_once`: the refusals filter answers it from the headers, before the body is buffered
    (only for requests no body can route elsewhere); otherwise the router answers once the body is read."""
    out = {"name": name, "match": match, "direct_response": {"status": status, "body": {"inline_string": text}}}
    if at_once:
        out["metadata"] = {"filter_metadata": {METADATA_NAMESPACE: {REFUSAL_KEY: text}}}
        out["typed_per_filter_config"] = {REFUSALS_FILTER: {
            "@type": _T + "extensions.filters.http.fault.v3.HTTPFault",
            "abort": {"http_status": status, "percentage": _ALL}}}
    return out


def local_replies() -> dict[str, Any]:
    """The refusals filter's answers carry their route's text (the fault filter's own body is "fault filter
    abort"); response flag FI marks them (envoy.config.accesslog.v3.ResponseFlagFilter). A refused method's 405
    also names the methods the gateway serves: RFC 9110 section 15.5.6 requires an Allow header in every 405."""
    refused = {"response_flag_filter": {"flags": ["FI"]}}
    text = {"text_format_source": {"inline_string": f"%METADATA(ROUTE:{METADATA_NAMESPACE}:{REFUSAL_KEY})%"}}
    method = {"header_filter": {"header": {"name": ":method", "string_match": {
        "safe_regex": {"regex": "|".join(ALLOWED_METHODS)}}, "invert_match": True}}}
    allow = {"header": {"key": "allow", "value": ", ".join(ALLOWED_METHODS)},
             "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
    return {"mappers": [{"filter": {"and_filter": {"filters": [refused, method]}}, "headers_to_add": [allow],
                         "body_format_override": text},
                        {"filter": copy.deepcopy(refused), "body_format_override": copy.deepcopy(text)}]}


def refused_methods() -> list[dict[str, Any]]:
    """405 before any body is read for a method the OpenAI API does not use.

    CONNECT has no :path, so no path route matches it: without a route the connection manager runs the filter
    chain and the buffer filter holds its stream until it idles out. A connect_matcher route
    (envoy.config.route.v3.RouteMatch) gives it one, and a route that has no upgrade_configs for CONNECT makes the
    connection manager refuse it itself, 403 `upgrade_failed`, before any filter (envoyproxy/envoy@v1.40.0
    source/common/http/conn_manager_impl.cc, ActiveStream::decodeHeaders)."""
    text = f"method not allowed: the gateway serves {', '.join(ALLOWED_METHODS)}\n"
    methods = {"name": ":method", "string_match": {"safe_regex": {"regex": "|".join(ALLOWED_METHODS)}},
               "invert_match": True}
    return [not_found(f"{REFUSAL_ROUTE_PREFIX}method-not-allowed", {"prefix": "/", "headers": [methods]}, text,
                       status=405, at_once=True),
            not_found(f"{REFUSAL_ROUTE_PREFIX}connect-not-allowed", {"connect_matcher": {}}, text, status=405)]


def too_large(route: dict[str, Any], model: Model) -> dict[str, Any]:
    """413 for a route's requests past the model's limit.

    A JSON request is routed again once the gateway has buffered it (and set its content-length), at the
    largest limit of any model (json_to_metadata holds the per-route buffer filter until then), so its
    model's limit is checked here, by the route; other requests also meet the per-route buffer filter."""
    match = copy.deepcopy(route["match"])
    match["headers"] = [*match.get("headers", []), {"name": "content-length", "invert_match": True, "range_match": {
        "start": 0, "end": model.max_request_bytes + 1}}]
    out = not_found(route_name(route["name"], "too-large"), match,
                     f"request body larger than {model.max_request_bytes} bytes (models.{model.name}."
                     "maxRequestBytes)\n", status=413, at_once=True)
    # a caller the model refuses gets its 403 first, whatever the size
    out["typed_per_filter_config"][CALLERS_FILTER] = route["typed_per_filter_config"][CALLERS_FILTER]
    return out


def too_large_for_any(cfg: GatewayView) -> dict[str, Any]:
    """413 at once for a declared content-length past every model's limit (the buffer would refuse it anyway)."""
    limit = max_body(cfg)
    match = {"prefix": "/", "headers": [{"name": "content-length", "invert_match": True,
                                         "range_match": {"start": 0, "end": limit + 1}}]}
    return not_found(f"{REFUSAL_ROUTE_PREFIX}too-large", match,
                      f"request body larger than {limit} bytes, the most any model here takes "
                      "(models.<name>.maxRequestBytes)\n", status=413, at_once=True)


def max_body(cfg: GatewayView) -> int:
    return max((m.max_request_bytes for m in cfg.models.values()), default=1024 * 1024)


