"""Token budgets in the gateway's bootstrap: the external processing filters that send each request to the kit's
budget service (components/k8s/gateway/budgets/), the cluster that reaches it, and the service's own config.

The filters sit last before the router, after the callers' RBAC and rate limits (a request they refuse reserves
nothing), with the whole body already buffered. Admission and metering are separate ext_proc filters, so that no
response byte ever waits for the service:
- admission (synchronous: one message per request, its whole body, answered before the request goes on with the 429
  or the reservation; the request's headers are not sent, the attributes the service needs come with the body:
  names.REQUEST_ATTRIBUTES, the route's name, the path and the tenant header read by a CEL expression): two instances
  of one ext_proc config, each behind a matcher on the caller's tenant (envoy.filters.http.match_delegate with an
  ExtensionWithMatcher: the filter is skipped where its matcher says SkipFilter):
  - `aifactory.budgets`: every caller but the tenants whose budget fails closed; failure_mode_allow: when the
    service cannot be reached (refused at once) or does not answer within BUDGET_MESSAGE_TIMEOUT_S the request goes
    on uncounted (fail-open);
  - `aifactory.budgets_closed` (only when a tenant sets onStoreFailure: closed): those tenants; without an answer
    the request gets 500 before it reaches a model (Envoy's ext_proc without failure_mode_allow).
  The reservation goes into the request's dynamic metadata (namespace BUDGET_METADATA_NAMESPACE, key
  `reservation`). A changed body (max_tokens, stream_options) reaches the engine whole: Envoy holds the headers of a
  BUFFERED body until the processor answers, and fixes their length (the live tests read the engine's copy).
- metering, `aifactory.budgets_meter` (every request; observability_mode: Envoy sends and never waits, and ignores
  any answer): the request headers (with the reservation's metadata: metadata_options.forwarding_namespaces, sent
  with every message; they reach this filter only once admission has answered, so the metadata is there), then the
  response headers and every response chunk. The stream opens as the request goes upstream, so its end is seen for
  every admitted request: the service settles the reservation at the response's end, or when Envoy closes the stream
  (the request ended early: client gone before or during the answer, engine cut; in observability mode Envoy keeps
  the stream for up to deferred_close_timeout after the request ends). A request whose response never started used
  nothing: its reservation is released.
The store's own failures are the service's to handle, per budget, within BUDGET_STORE_TIMEOUT_S.

Envoy v1.40 references: ExternalProcessor
https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/extensions/filters/http/ext_proc/v3/ext_proc.proto (message_timeout
200 ms by default; failure_mode_allow; request_attributes; metadata_options;
observability_mode: only STREAMED bodies, answers ignored; deferred_close_timeout, 5 s by default; request_attributes:
attribute names or CEL expressions, sent with the first message of the request), ProcessingMode (SKIP request
headers, BUFFERED request body, STREAMED response body; metering: STREAMED request body too), ExtensionWithMatcher
https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/extensions/common/matching/v3/extension_matcher.proto.
"""

from __future__ import annotations

import json
from typing import Any

from components.k8s.gateway.budgets import names
from components.k8s.gateway.envoy.base import (
    _T,
    TENANT_HEADER,
    GatewayView,
    _dns_cluster,
    _seconds,
    max_requests_of,
    skipped_when,
)
from components.k8s.settings import TokenBudget
from telemetry.names import BUDGET

__all__ = [
    "BUDGETS_CLUSTER",
    "BUDGETS_FILTER",
    "BUDGETS_CLOSED_FILTER",
    "BUDGETS_METER_FILTER",
    "BUDGETS_SERVICE",
    "BUDGETS_GRPC_PORT",
    "BUDGETS_METRICS_PORT",
    "BUDGET_STORE_TIMEOUT_S",
    "BUDGET_MESSAGE_TIMEOUT_S",
    "BUDGET_DEFERRED_CLOSE_S",
    "SWEEP_MARGIN_S",
    "SWEEP_INTERVAL_S",
    "request_seconds",
    "BUDGET_METADATA_NAMESPACE",
    "ROUTE_ATTRIBUTE",
    "any_budget",
    "budgets_host",
    "budget_filters",
    "budget_clusters",
    "budget_streams",
    "service_config",
]

BUDGETS_CLUSTER = "aifactory_budgets"
BUDGETS_FILTER = "aifactory.budgets"
BUDGETS_CLOSED_FILTER = "aifactory.budgets_closed"
BUDGETS_METER_FILTER = "aifactory.budgets_meter"
# each filter's ext_proc stats (ExternalProcessor.stat_prefix): http.<listener's stat prefix>.ext_proc.<this>.<stat>,
# e.g. streams_failed, message_timeouts (dashboards/budgets.py alerts on them)
ADMISSION_STATS = BUDGET.ENVOY_ADMISSION
ADMISSION_CLOSED_STATS = BUDGET.ENVOY_ADMISSION_CLOSED
METER_STATS = BUDGET.ENVOY_METER
BUDGETS_SERVICE = "aifactory-budgets"  # the budget service's Service in the gateway namespace
BUDGETS_GRPC_PORT = names.GRPC_PORT
BUDGETS_METRICS_PORT = names.METRICS_PORT  # the service's Prometheus metrics
# The store answers a reservation in well under a millisecond in the cluster, but the service sees its answer only
# once its event loop gets to it: on a busy service that scheduling delay is the larger part (tests/bench/
# bench_budgets.py, "store answer time": p99 under 10 ms, the slowest few up to 250 ms on a shared 2-core machine with
# 64 streams). A shorter timeout turns that delay into fail-open admissions, which then go unreserved; a longer one is
# what each request waits when the store hangs. Past BUDGET_STORE_TIMEOUT_S the service applies each budget's
# onStoreFailure. Envoy's own wait for admission's one answer (message_timeout) is twice that, so a slow store is the
# service's to decide; only a service that accepts connections and never answers costs a request this long (one that
# is gone refuses the connection, and the request goes on at once, or gets 500 when fail-closed). No response byte
# waits for it: metering is observability-only.
BUDGET_STORE_TIMEOUT_S = 0.5
BUDGET_MESSAGE_TIMEOUT_S = 1.0
# How long the metering filter keeps its stream after the request ends (observability mode): Envoy's default for
# deferred_close_timeout, which the kit does not set (ext_proc.proto above).
BUDGET_DEFERRED_CLOSE_S = 5
# A reservation's deadline (the sweep releases it past that, unless settled): the longest route timeout of the
# request's workload (RouteAction.timeout, a model's timeoutSeconds: the router's timer starts once the whole request
# has passed the filters, and bounds every try and the whole response, streamed or not: envoyproxy/envoy@v1.40.0
# api/envoy/config/route/v3/route_components.proto), plus this margin, every step after the reservation that the
# route timeout does not cover: admission's answer reaching Envoy (BUDGET_MESSAGE_TIMEOUT_S: the router's timer starts
# after it), the metering stream closed after the request (BUDGET_DEFERRED_CLOSE_S), the settlement written
# (names.SETTLE_DRAIN_SECONDS: the service's own bound on its pending settlements, above its retries' 6.1 s), and the
# service pods' clocks apart (2 s; NTP keeps them within milliseconds).
SWEEP_MARGIN_S = int(BUDGET_MESSAGE_TIMEOUT_S) + BUDGET_DEFERRED_CLOSE_S + names.SETTLE_DRAIN_SECONDS + 2
SWEEP_INTERVAL_S = names.SWEEP_INTERVAL_SECONDS
BUDGET_METADATA_NAMESPACE = names.METADATA_NAMESPACE
ROUTE_ATTRIBUTE = names.ROUTE_ATTRIBUTE


def budgets_host(cfg: GatewayView) -> str:
    return f"{BUDGETS_SERVICE}.{cfg.gateway.namespace}.svc.cluster.local"


def any_budget(cfg: GatewayView) -> bool:
    return bool(cfg.gateway.token_budgets) or any(t.token_budget for t in cfg.tenants.values())


def _closed_tenants(cfg: GatewayView) -> list[str]:
    return sorted(n for n, t in cfg.tenants.items() if t.token_budget and t.token_budget.on_store_failure == "closed")


def _grpc(cfg: GatewayView) -> dict[str, Any]:
    # no gRPC timeout: it would bound the whole stream, i.e. every streamed answer
    return {"envoy_grpc": {"cluster_name": BUDGETS_CLUSTER, "authority": budgets_host(cfg)}}


def _ext_proc(cfg: GatewayView, *, fail_open: bool) -> dict[str, Any]:
    """Admission: the request's whole body with its attributes, answered before the request goes on."""
    return {
        "@type": _T + "extensions.filters.http.ext_proc.v3.ExternalProcessor",
        "stat_prefix": ADMISSION_STATS if fail_open else ADMISSION_CLOSED_STATS,
        "grpc_service": _grpc(cfg),
        "failure_mode_allow": fail_open,
        "processing_mode": {"request_header_mode": "SKIP", "request_body_mode": "BUFFERED",
                            "response_header_mode": "SKIP", "response_body_mode": "NONE",
                            "request_trailer_mode": "SKIP", "response_trailer_mode": "SKIP"},
        "request_attributes": list(names.REQUEST_ATTRIBUTES),
        "message_timeout": _seconds(BUDGET_MESSAGE_TIMEOUT_S),
        # the refusal and the reservation: the access log's, and the meter's
        "metadata_options": {"receiving_namespaces": {"untyped": [BUDGET_METADATA_NAMESPACE]}},
    }


def _meter(cfg: GatewayView) -> dict[str, Any]:
    """Metering: the response (with the reservation's metadata), sent without waiting."""
    return {
        "@type": _T + "extensions.filters.http.ext_proc.v3.ExternalProcessor",
        "grpc_service": _grpc(cfg),
        "stat_prefix": METER_STATS,
        "failure_mode_allow": True,
        "observability_mode": True,
        # the request's body opens the stream as the request goes upstream: it passes this filter only once admission
        # (before it, BUFFERED) has answered, so the reservation is in the metadata, and the stream's end is seen
        # whatever happens to the request after (client gone before any answer: released). Not the request's
        # headers: admission does not hold them (its header mode is SKIP), they reach this filter before its answer
        "processing_mode": {"request_header_mode": "SKIP", "request_body_mode": "STREAMED",
                            "response_header_mode": "SEND", "response_body_mode": "STREAMED",
                            "request_trailer_mode": "SKIP", "response_trailer_mode": "SKIP"},
        "metadata_options": {"forwarding_namespaces": {"untyped": [BUDGET_METADATA_NAMESPACE]}},
    }


def _tenants_predicate(tenants: list[str]) -> dict[str, Any]:
    return {"single_predicate": {
        "input": {"name": "tenant", "typed_config": {"@type": _T + "type.matcher.v3.HttpRequestHeaderMatchInput",
                                                     "header_name": TENANT_HEADER}},
        "value_match": {"safe_regex": {"google_re2": {}, "regex": f"^(?:{'|'.join(tenants)})$"}}}}


def _matched(name: str, ext_proc: dict[str, Any], skip_when: dict[str, Any]) -> dict[str, Any]:
    return skipped_when(name, "envoy.filters.http.ext_proc", ext_proc, skip_when)


def budget_filters(cfg: GatewayView) -> list[dict[str, Any]]:
    """The budget filters, last before the router (admission, then metering: it reads admission's metadata); none
    without budgets."""
    if not any_budget(cfg):
        return []
    closed = _closed_tenants(cfg)
    meter = {"name": BUDGETS_METER_FILTER, "typed_config": _meter(cfg)}
    if not closed:
        return [{"name": BUDGETS_FILTER, "typed_config": _ext_proc(cfg, fail_open=True)}, meter]
    return [_matched(BUDGETS_FILTER, _ext_proc(cfg, fail_open=True), _tenants_predicate(closed)),
            _matched(BUDGETS_CLOSED_FILTER, _ext_proc(cfg, fail_open=False),
                     {"not_matcher": _tenants_predicate(closed)}), meter]


def budget_streams(cfg: GatewayView) -> int:
    """The streams one gateway replica can hold open to the budget service at once: two per request it can have
    upstream (its meter stream, for the whole response, and, briefly, the next request's admission stream).

    What bounds requests in flight is the model clusters' breakers: each model's max_requests (a variant's own), plus
    a variant's last resort's (gateway.circuitBreakers.maxRequests, components.k8s.gateway.envoy.replicas). Not the
    gateway's downstream connection cap (DEFAULT_MAX_DOWNSTREAM_CONNECTIONS): it counts connections, and one HTTP/2
    connection carries any number of requests."""
    gw = cfg.gateway
    upstream = sum(max_requests_of(gw, m) + (gw.circuit_breakers.max_requests if m.variant is not None else 0)
                   for m in cfg.models.values())
    return 2 * upstream


def budget_clusters(cfg: GatewayView) -> list[dict[str, Any]]:
    """The budget service's cluster (gRPC: HTTP/2); none without budgets.

    Its breakers are sized to `budget_streams`: without them Envoy's defaults (1,024 connections, pending requests
    and requests per cluster and priority: envoyproxy/envoy@v1.40.0 api/envoy/config/cluster/v3/circuit_breaker.proto)
    cap the streams below the models', and past them admission fails (open: uncounted; closed: 500) and meter streams
    are refused (their reservations never settled). Every ext_proc stream is one HTTP/2 stream. max_connections lets
    the pool open more connections should the service announce a per-connection stream limit (grpcio's aio server
    announces none); max_concurrent_streams is the same number, below Envoy's default of 2^31 - 1, so one connection
    never carries more than the cluster may. track_remaining exports the remaining-capacity gauges the runbook reads
    (circuit_breakers.default.remaining_rq)."""
    if not any_budget(cfg):
        return []
    streams = budget_streams(cfg)
    return [{**_dns_cluster(BUDGETS_CLUSTER, budgets_host(cfg), BUDGETS_GRPC_PORT,
                            connect_timeout=cfg.gateway.connect_timeout_seconds),
             "circuit_breakers": {"thresholds": [{"priority": "DEFAULT", "max_connections": streams,
                                                  "max_pending_requests": streams, "max_requests": streams,
                                                  "track_remaining": True}]},
             "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                 "@type": _T + "extensions.upstreams.http.v3.HttpProtocolOptions",
                 "explicit_http_config": {"http2_protocol_options": {"max_concurrent_streams": streams}}}}}]


def _policy(b: TokenBudget) -> dict[str, Any]:
    return {"limits": b.limits(), "outputWeight": b.output_weight, "defaultMaxTokens": b.default_max_tokens,
            "promptBytesPerToken": b.prompt_bytes_per_token, "onStoreFailure": b.on_store_failure}


def service_config(cfg: GatewayView) -> str:
    """The budget service's config file (its ConfigMap), deterministic: every budget, and each model's workload
    (a route whose subject is a model's own key counts against that model's workload's budget)."""
    doc = {"tenants": {n: _policy(t.token_budget) for n, t in sorted(cfg.tenants.items()) if t.token_budget},
           "workloads": {w: _policy(b) for w, b in sorted(cfg.gateway.token_budgets.items())},
           "models": {m.name: m.workload for m in sorted(cfg.models.values(), key=lambda m: m.name)},
           "storeTimeoutSeconds": BUDGET_STORE_TIMEOUT_S,
           "requestSeconds": request_seconds(cfg), "sweepMarginSeconds": SWEEP_MARGIN_S,
           "sweepIntervalSeconds": SWEEP_INTERVAL_S}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def request_seconds(cfg: GatewayView) -> dict[str, float]:
    """Per workload, the longest request a route to it allows: the longest timeoutSeconds of its models (its
    variants, its batch model). A reservation's deadline is its reservation's time plus this plus SWEEP_MARGIN_S."""
    out: dict[str, float] = {}
    for m in cfg.models.values():
        out[m.workload] = max(out.get(m.workload, 0.0), float(m.timeout_seconds))
    return dict(sorted(out.items()))

