"""Session affinity within a model: the steps of one agent session go to the replica that already holds their
prefix in its KV cache (issue 34).

The session key, first found wins:

    x-aifactory-session: <key>                      set by the client
    {"prompt_cache_key": "<key>", ...}              the OpenAI request body's field (clients send it for this)
    baggage: ...,aifactory.session=<key>,...        a W3C baggage member

A replica is picked by consistent hashing of the key with bounded load: Envoy's Maglev
(envoy.load_balancing_policies.maglev) with `consistent_hashing_lb_config.hash_balance_factor` = the model's
`sessionAffinity.hashBalanceFactor`: a replica takes at most that percentage of the average requests in flight
(as this gateway pod counts them); past it the key probes on to another replica, so one hot session cannot overload
a replica. Maglev, not ring hash: when a replica of three left, Envoy's ring hash also moved 43 of the 261 sessions
of the two that stayed (the ring keeps its size, so the survivors get more points on it, which take keys from each
other), Maglev none of 269 (tests/artifacts/test_envoy_affinity_live.py, 400 sessions). The table is built from the
hosts the headless Service's DNS returns (pod IPs) that pass their health checks. Requests with no key get a random
replica (no hash: a random one is drawn, envoyproxy/envoy@v1.40.0
source/extensions/load_balancing_policies/common/thread_aware_lb_impl.cc), still under the load bound; a model with
affinity off keeps LEAST_REQUEST.

Hash policies read only headers (and connection or filter state), never the body or dynamic metadata: the body's
`prompt_cache_key` becomes dynamic metadata (json_to_metadata, once the body is read), then the header
x-aifactory-session when the client sent none (a header_mutation after json_to_metadata: its decodeHeaders runs
only once json_to_metadata has read the body and continues the chain). The route's hash policy hashes that header;
on a variant's decision route the hash happens at the variant's gate, where the variant's cluster is picked.
The baggage member's value becomes dynamic metadata aifactory.session_baggage (header_to_metadata: a
`regex_value_rewrite` that always matches, and leaves the member's value or nothing; an empty value sets no
metadata), then the header x-aifactory-session when neither the client nor the body gave one (the same
header_mutation, after the body's key). So a baggage without the member is no key at all: hashing it whole would
send every request that carries the same unrelated baggage to one replica.
Envoy API: RouteAction.HashPolicy
https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/config/route/v3/route_components.proto, Maglev
https://www.envoyproxy.io/docs/envoy/v1.40.0/api-v3/extensions/load_balancing_policies/maglev/v3/maglev.proto
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from components.k8s.gateway.envoy.base import _T, METADATA_NAMESPACE
from components.k8s.settings import DEFAULT_HASH_BALANCE_FACTOR, Model

__all__ = [
    "SESSION_HEADER",
    "PROMPT_CACHE_KEY",
    "DEFAULT_HASH_BALANCE_FACTOR",
    "AFFINITY_HOST_SELECTION_ATTEMPTS",
    "prompt_cache_key_rule",
    "baggage_session_filter",
    "session_header_filter",
    "session_filters",
    "hash_policy",
    "retry_policy",
    "route_metadata",
    "SESSION_SOURCE_LOG",
    "SESSION_LB_LOG",
    "load_balancing_policy",
]

SESSION_HEADER = "x-aifactory-session"
PROMPT_CACHE_KEY = "prompt_cache_key"  # the OpenAI request body's field; dynamic metadata aifactory.prompt_cache_key
# A retry's replica: Maglev draws from the key's hash mutated by the draw's number while the previous_hosts predicate
# rejects the draw (envoyproxy/envoy@v1.40.0 source/extensions/load_balancing_policies/maglev/maglev_lb.cc,
# chooseHost), each draw about uniform over the replicas: with k draws a session of n replicas stays on its failed
# one with probability (1/n)^k, 1/8 at Envoy's usual 3 draws and 2 replicas; 20 draws: about 1e-6 (table lookups).
AFFINITY_HOST_SELECTION_ATTEMPTS = 20
SESSION_FILTER = "aifactory.session"
SANITIZE_FILTER = "aifactory.session_key"
RESTORE_FILTER = "aifactory.session_key_header"
SESSION_KEY = "session"  # dynamic metadata aifactory.session: the key the route hashes, if any
MAX_SESSION_KEY_CHARS = 256  # past it, no key: a header that long risks the next hop's header limits
RE2_PROGRAM_SIZE = 1024  # the check's regex compiles to ~3 instructions per character allowed (~780 at 256)
BAGGAGE_FILTER = "aifactory.session_baggage"
BAGGAGE_SESSION_KEY = "session_baggage"  # dynamic metadata aifactory.session_baggage: the baggage member's value
CLIENT_SESSION_KEY = "session_header"  # dynamic metadata aifactory.session_header: "header" when the client sent one
ROUTE_AFFINITY_KEY = "session_affinity"  # route metadata aifactory.session_affinity: true where the route hashes
SESSION_BAGGAGE_KEY = "aifactory.session"  # telemetry.instrument.SESSION_BAGGAGE_KEY (headers() sends it)
BAGGAGE_HEADER = "baggage"


def prompt_cache_key_rule() -> dict[str, Any]:
    """json_to_metadata: the body's prompt_cache_key -> dynamic metadata aifactory.prompt_cache_key."""
    return {"selectors": [{"key": PROMPT_CACHE_KEY}],
            "on_present": {"metadata_namespace": METADATA_NAMESPACE, "key": PROMPT_CACHE_KEY, "type": "STRING"}}


def baggage_session_filter() -> dict[str, Any]:
    """header_to_metadata: the baggage's aifactory.session member's value -> dynamic metadata
    aifactory.session_baggage. The rewrite matches every baggage (W3C baggage list-members
    `key OWS = OWS value *( OWS ; property )` separated by OWS , OWS: https://www.w3.org/TR/baggage/) and leaves the
    member's value, or nothing when the member is absent or empty; the filter sets no metadata from an empty value
    (envoyproxy/envoy@v1.40.0 source/extensions/filters/http/header_to_metadata/header_to_metadata_filter.cc,
    applyKeyValue)."""
    key = re.escape(SESSION_BAGGAGE_KEY)
    return {"name": BAGGAGE_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.header_to_metadata.v3.Config",
        "request_rules": [
            {"header": BAGGAGE_HEADER, "on_header_present": {
                "metadata_namespace": METADATA_NAMESPACE, "key": BAGGAGE_SESSION_KEY, "type": "STRING",
                "regex_value_rewrite": {
                    "pattern": {"regex": f"^(?:(?:.*,)?[ \\t]*{key}[ \\t]*=[ \\t]*([^,; \\t]*).*|.*)$"},
                    "substitution": "\\1"}}},
            # the client's own session header (this filter runs before session_header_filter adds one): the
            # access log's session_source
            {"header": SESSION_HEADER, "on_header_present": {
                "metadata_namespace": METADATA_NAMESPACE, "key": CLIENT_SESSION_KEY, "value": "header",
                "type": "STRING"}}]}}


def session_header_filter() -> dict[str, Any]:
    """header_mutation after json_to_metadata and baggage_session_filter: x-aifactory-session from the body's
    prompt_cache_key, else from the baggage member, when the client sent no such header (an empty value, i.e. no
    such key, adds nothing: HeaderValueOption.keep_empty_value is false)."""
    def add(metadata_key: str) -> dict[str, Any]:
        return {"append": {"header": {"key": SESSION_HEADER,
                                      "value": f"%DYNAMIC_METADATA({METADATA_NAMESPACE}:{metadata_key})%"},
                           "append_action": "ADD_IF_ABSENT"}}

    return {"name": SESSION_FILTER, "typed_config": {
        "@type": _T + "extensions.filters.http.header_mutation.v3.HeaderMutation",
        "mutations": {"request_mutations": [add(PROMPT_CACHE_KEY), add(BAGGAGE_SESSION_KEY)]}}}


def session_key_filters() -> list[dict[str, Any]]:
    """header_to_metadata then header_mutation, after session_header_filter: the x-aifactory-session header as sent
    on is only a key a header can carry. The first takes the header out and keeps its value as dynamic metadata
    aifactory.session when it is 1 to MAX_SESSION_KEY_CHARS characters without a control character (a body's
    prompt_cache_key may hold CR, LF or NUL, which no header value may: Envoy would answer 503 for the invalid
    header, RFC 9110 5.5); the second puts that value back. Any other value is no key: the request is served
    without a session."""
    return [
        {"name": SANITIZE_FILTER, "typed_config": {
            "@type": _T + "extensions.filters.http.header_to_metadata.v3.Config",
            "request_rules": [{"header": SESSION_HEADER, "remove": True, "on_header_present": {
                "metadata_namespace": METADATA_NAMESPACE, "key": SESSION_KEY, "type": "STRING",
                "regex_value_rewrite": {
                    "pattern": {"regex": f"(?s)^([^\\x00-\\x1f\\x7f]{{1,{MAX_SESSION_KEY_CHARS}}})$|^.*$"},
                    "substitution": "\\1"}}}]}},
        {"name": RESTORE_FILTER, "typed_config": {
            "@type": _T + "extensions.filters.http.header_mutation.v3.HeaderMutation",
            "mutations": {"request_mutations": [{"append": {"header": {
                "key": SESSION_HEADER, "value": f"%DYNAMIC_METADATA({METADATA_NAMESPACE}:{SESSION_KEY})%"},
                "append_action": "ADD_IF_ABSENT"}}]}}},
    ]


def session_filters() -> list[dict[str, Any]]:
    """The filters that set the session key header, in order, after json_to_metadata."""
    return [baggage_session_filter(), session_header_filter(), *session_key_filters()]


def _has(key: str) -> str:
    return f"'{key}' in metadata.filter_metadata['{METADATA_NAMESPACE}']"


# The access log's session fields, as CEL (Envoy's %CEL()% command; attributes `metadata`: the request's dynamic
# metadata, `xds.route_metadata`: its route's: https://www.envoyproxy.io/docs/envoy/v1.40.0/intro/arch_overview/
# advanced/attributes). session_source: where the key came from, first found wins (header | body | baggage | none);
# session_lb: what picked the replica (hash: Maglev on the key; random: Maglev without a key; least_request: a
# model without affinity; on a variant decision route, as the workload's default variant's route says).
_OURS = f"'{METADATA_NAMESPACE}' in metadata.filter_metadata"
SESSION_SOURCE_LOG = (f"%CEL(!({_OURS} && {_has(SESSION_KEY)}) ? 'none' : {_has(CLIENT_SESSION_KEY)} ? 'header' : "
                      f"{_has(PROMPT_CACHE_KEY)} ? 'body' : {_has(BAGGAGE_SESSION_KEY)} ? 'baggage' : 'none')%")
_ROUTE_HASHES = (f"'{METADATA_NAMESPACE}' in xds.route_metadata.filter_metadata && '{ROUTE_AFFINITY_KEY}' in "
                 f"xds.route_metadata.filter_metadata['{METADATA_NAMESPACE}']")
SESSION_LB_LOG = (f"%CEL(!({_ROUTE_HASHES}) ? 'least_request' : ({_OURS} && {_has(SESSION_KEY)}) ? 'hash' : "
                  "'random')%")


def route_metadata() -> dict[str, Any]:
    """What a route that hashes the session key adds to its aifactory metadata (the access log's session_lb)."""
    return {ROUTE_AFFINITY_KEY: True}


def hash_policy() -> list[dict[str, Any]]:
    """The route's hash policy: the session header (the client's, or the one session_filters set)."""
    return [{"header": {"header_name": SESSION_HEADER}}]


def retry_policy(policy: dict[str, Any]) -> dict[str, Any]:
    """A route's retry policy with session affinity: AFFINITY_HOST_SELECTION_ATTEMPTS draws for a retry's replica."""
    return {**policy, "host_selection_retry_max_attempts": AFFINITY_HOST_SELECTION_ATTEMPTS}


def load_balancing_policy(model: Model) -> dict[str, Any]:
    """Maglev with bounded load for a model with session affinity."""
    return {"policies": [{"typed_extension_config": {
        "name": "envoy.load_balancing_policies.maglev",
        "typed_config": {"@type": _T + "extensions.load_balancing_policies.maglev.v3.Maglev",
                         "consistent_hashing_lb_config": {
                             "hash_balance_factor": model.session_affinity_balance_factor}}}}]}


def any_affinity(models: Iterable[Model]) -> bool:
    return any(m.session_affinity_balance_factor is not None for m in models)
