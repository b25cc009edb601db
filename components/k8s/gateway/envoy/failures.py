"""What a replica's 500 says: the replica's fault (retried on another replica, counted toward its ejection) or the
request's (answered at once, counted against no replica) (issue 44, item 8; docs/gateway.md, "Day 2").

Envoy's router decides a retry, and outlier detection counts a failure, on the status of the try's response headers
only (envoyproxy/envoy@v1.40.0 source/common/router/retry_state_impl.cc, `wouldRetryFromHeaders`;
source/common/upstream/outlier_detection_impl.cc, `putHttpResponseCode`). An upstream HTTP filter (a cluster's
HttpProtocolOptions.http_filters) sees each try's response before the router does, and the router retries on, and
counts, the status that filter leaves. Here, on each model's cluster (live:
tests/artifacts/test_envoy_failures_live.py), a header mutation names the replica that answered (REPLICA_HEADER:
the try's upstream address), then a Lua filter:

- both run on a 500 only (each wrapped in a matcher on the response's :status that skips it otherwise): a 200 meets
  neither, nor any Lua;
- on a request's first 500, keeps that replica's address in the request's dynamic metadata (FAULT_NAMESPACE: the
  downstream request's, shared by its tries) and leaves the 500 to the router: retried on another replica, counted
  toward its ejection;
- on a later 500 from another replica, ends the request there: two replicas failed it, which says nothing of whose
  fault (a poison request, a prompt that breaks the engine's processing, or the platform's: a bad rollout, a broken
  node pool, where every replica fails). The router must neither retry it again nor count it against that replica,
  and decides both on the status alone, so the filter leaves FAILED_TWICE_UPSTREAM_STATUS, a 4xx no engine sends
  (Envoy counts a 4xx as a success, which ends that replica's run of 5xx), with FAULT_HEADER. The client must still
  get a server error (it did not fail; an outage must not read as its fault): the gateway's own HTTP filter
  (failed_twice_filter, last before the router, so that every filter before it, the access log and the downstream
  stats see the client's status) answers it FAILED_TWICE_CLIENT_STATUS with the engine's body. The route cluster's
  own stats (upstream_rq_xx, upstream_rq_<code>) are the router's and keep FAILED_TWICE_UPSTREAM_STATUS: the
  gateway's alerts count that code as a server error (dashboards/gateway_alerts.py). A later 500 from the same
  replica (the retry came back to it) stays a 500;
- otherwise reads the body, only for an engine whose 500 bodies can say the request is at fault (the engine
  registry's request_fault_markers), and when one says so answers FAULT_STATUS at once (no retry, not counted):
  the client's fault by the engine's own word.

What each engine's 500 body says, at the pinned versions (docs/contracts.md, "Which 500 is the request's"):
- vLLM 0.33.0: nothing of the request. Request faults are 4xx by its own taxonomy (VLLMClientError: 400/404/422;
  ValueError, TypeError, OverflowError and template errors: 400); a 500 is a VLLMServerError (EngineDeadError:
  "The server had an error while processing your request.", EngineGenerateError, GenerationError) or an exception of
  unknown origin, all `{"error": {"message", "type": "InternalServerError", "param": null, "code": 500}}`
  (vllm/entrypoints/serve/exception_handling/error_response.py, `create_error_response`);
- SGLang 0.5.23: a multimodal input that the scheduler's entry rank cannot build is the request's own ("request-local
  error") yet answers 500: `{"object": "error", "message": "Multimodal input processing failed on the TP entry rank:
  ...", "type": "500", "param": null, "code": 500}` (python/sglang/srt/managers/scheduler.py,
  `_MultimodalInputProcessingError`; tokenizer_manager.py raises HTTPException(500); entrypoints/openai/
  serving_base.py, `handle_request`). Its other 500s (out of memory after retraction, an exception in the handler,
  "Internal server error: ...") are the replica's or unknown;
- Triton r26.07 OpenAI frontend: `{"detail": "<exception text>"}` for any ServerError or other exception, request
  faults being ClientError: 400 (python/openai/openai_frontend/frontend/fastapi/routers/chat.py): nothing to read.

The internal status: every pinned engine answers through FastAPI with codes of Python's http.HTTPStatus (vLLM,
SGLang), Triton's StatusCode (200, 400, 401, 404, 500: python/openai/openai_frontend/utils/utils.py) or FastAPI's
own (422 for a body that fails validation); 452 is no HTTPStatus member and unassigned in IANA's registry, and
Envoy's router treats an unknown 4xx as any 4xx (retried only by `retriable-4xx`, 409, or a listed code).

So a 500 of unknown origin is retried on another replica; a second replica's 500 for the same request ends it. A
poison request costs two tries and counts one failure against one replica (before: gateway.retries.attempts + 1
tries, one failure against each replica tried). The retry must reach another replica for this to hold: see
LEAST_REQUEST_CHOICES.
"""

from __future__ import annotations

from typing import Any

from components.k8s.engines import ENGINES
from components.k8s.gateway.envoy.base import _T, skipped_when
from components.k8s.settings import Model
from telemetry.names import ENVOY

__all__ = [
    "LEAST_REQUEST_CHOICES",
    "LEAST_REQUEST_HOST_DRAWS",
    "least_request_policy",
    "FAULT_STATUS",
    "FAILED_TWICE_UPSTREAM_STATUS",
    "FAILED_TWICE_CLIENT_STATUS",
    "FAULT_HEADER",
    "FAULT_FAILED_TWICE",
    "FAULT_ENGINE_SAYS",
    "REPLICA_HEADER",
    "FAULT_NAMESPACE",
    "FAULT_FILTER",
    "fault_script",
    "failed_twice_filter",
    "upstream_protocol_options",
]

# LEAST_REQUEST: the fewest requests in flight of LEAST_REQUEST_CHOICES replicas drawn at random (with replacement),
# not of all replicas (FULL_SCAN, before). A full scan is deterministic: a replica that fails fast holds the fewest
# requests, so every try went to it until its ejection, and each re-draw of a retry's replica while previous_hosts
# rejected it returned it again (the same scan): the retry landed on the replica that had just failed
# (envoyproxy/envoy@v1.40.0 source/extensions/load_balancing_policies/least_request/least_request_lb.cc,
# `unweightedHostPickFullScan`, `unweightedHostPickNChoices`; RetryPolicy.host_selection_retry_max_attempts). With
# c choices of n replicas a draw misses a given replica with probability ((n-1)/n)^c, so:
# - a retry stays on the replica that failed after LEAST_REQUEST_HOST_DRAWS re-draws with probability
#   (1 - ((n-1)/n)^c)^draws: (15/16)^200 ~ 2.5e-6 at n = 2, (65/81)^200 ~ 1e-19 at n = 3;
# - a replica slower than the others (more in flight) is picked only when every choice is it: (1/n)^c, 1/81 of
#   requests at n = 3 (two choices, Envoy's default: 1/9).
LEAST_REQUEST_CHOICES = 4
LEAST_REQUEST_HOST_DRAWS = 200
# What the client gets for a 500 the engine says the request is at fault for: the engine's body, with this status
# (vLLM's own for a request it cannot process, UnprocessableEntityError) and FAULT_HEADER saying why.
FAULT_STATUS = 422
# A request failed by two replicas: what the router and the route cluster's stats see (not retried, not counted
# against the replica; no engine sends it: see the module docstring), and what the client gets: 500, as the engine
# answered (its body says 500 too). Not 502 or 503: those say the gateway could not reach a replica or none was
# available, which an SRE reads in the flags (UF, UH) and clients as a reason to back off; OpenAI's SDKs retry all
# three alike (status >= 500, twice by default), and the gateway does not tell them not to (x-should-retry): when
# the platform is at fault a later try may meet a replica that works.
FAILED_TWICE_UPSTREAM_STATUS = ENVOY.FAILED_TWICE_CODE  # 452, in the vocabulary: the gateway's alerts read it
FAILED_TWICE_CLIENT_STATUS = 500
FAULT_HEADER = "x-aifactory-fault"
FAULT_FAILED_TWICE = "failed-on-two-replicas"
FAULT_ENGINE_SAYS = "engine-says-request"
# Which replica answered a 500: set by a header mutation (the upstream's address, known there) for the Lua filter,
# which removes it (no pod address reaches the client).
REPLICA_HEADER = "x-aifactory-replica"
FAULT_NAMESPACE = "aifactory.tries"  # dynamic metadata of the request, shared by its tries
FIRST_FAILED_KEY = "first_500"  # the replica that answered the request's first 500
FAULT_FILTER = "aifactory.request_fault"
REPLICA_FILTER = "aifactory.replica_address"
FAILED_TWICE_FILTER = "aifactory.failed_on_two_replicas"  # the gateway's own (HTTP connection manager) filter


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def fault_script(engine: str) -> str:
    """The upstream Lua filter's code for a model served by `engine` (see the module docstring)."""
    markers = ENGINES[engine].request_fault_markers
    # headers() is fetched again after body(): a handle taken before body() yields is no longer valid
    body_check = "" if not markers else f"""  if why == nil then
    local body = handle:body()
    local text = body and body:getBytes(0, body:length()) or ""
    for _, marker in ipairs({{{", ".join(_lua_string(m) for m in markers)}}}) do
      if string.find(text, marker, 1, true) then why = "{FAULT_ENGINE_SAYS}" break end
    end
    headers = handle:headers()
  end
"""
    return f"""function envoy_on_response(handle)
  local headers = handle:headers()
  local replica = headers:get("{REPLICA_HEADER}") or ""
  headers:remove("{REPLICA_HEADER}")
  local metadata = handle:streamInfo():dynamicMetadata()
  local seen = metadata:get("{FAULT_NAMESPACE}")
  local first = seen and seen["{FIRST_FAILED_KEY}"]
  local why = nil
  local status = "{FAULT_STATUS}"
  if first == nil then
    metadata:set("{FAULT_NAMESPACE}", "{FIRST_FAILED_KEY}", replica)
  elseif first ~= replica then
    why = "{FAULT_FAILED_TWICE}"
    status = "{FAILED_TWICE_UPSTREAM_STATUS}"
  end
{body_check}  if why ~= nil then
    headers:replace(":status", status)
    headers:add("{FAULT_HEADER}", why)
  end
end
"""


def least_request_policy() -> dict[str, Any]:
    """A model's balancing without session affinity (LEAST_REQUEST_CHOICES)."""
    return {"policies": [{"typed_extension_config": {
        "name": "envoy.load_balancing_policies.least_request",
        "typed_config": {"@type": _T + "extensions.load_balancing_policies.least_request.v3.LeastRequest",
                         "selection_method": "N_CHOICES", "choice_count": LEAST_REQUEST_CHOICES}}}]}


def _response_header_is(header: str, value: str) -> dict[str, Any]:
    return {"single_predicate": {
        "input": {"name": header.lstrip(":"), "typed_config": {
            "@type": _T + "type.matcher.v3.HttpResponseHeaderMatchInput", "header_name": header}},
        "value_match": {"exact": value}}}


def _skip_unless(name: str, extension: str, typed_config: dict[str, Any], *when: dict[str, Any]) -> dict[str, Any]:
    """Filter `extension` wrapped so that it is skipped for every response but one that matches all of `when`
    (ExtensionWithMatcher on the response's headers: envoyproxy/envoy@v1.40.0
    api/envoy/extensions/common/matching/v3/extension_matcher.proto, HttpResponseHeaderMatchInput): on any other
    answer neither it nor its Lua runs."""
    match = when[0] if len(when) == 1 else {"and_matcher": {"predicate": list(when)}}
    return skipped_when(name, extension, typed_config, {"not_matcher": match})


def _on_500_only(name: str, extension: str, typed_config: dict[str, Any]) -> dict[str, Any]:
    return _skip_unless(name, extension, typed_config, _response_header_is(":status", "500"))


def _lua(code: str) -> dict[str, Any]:
    return {"@type": _T + "extensions.filters.http.lua.v3.Lua", "default_source_code": {"inline_string": code}}


def failed_twice_filter() -> dict[str, Any]:
    """The gateway's HTTP filter (last before the router) that gives the client FAILED_TWICE_CLIENT_STATUS for a
    request the model cluster's filter ended with FAILED_TWICE_UPSTREAM_STATUS; skipped for every other answer
    (both the status and FAULT_HEADER must match): no Lua runs for them."""
    return _skip_unless(
        FAILED_TWICE_FILTER, "envoy.filters.http.lua",
        _lua(f"""function envoy_on_response(handle)
  handle:headers():replace(":status", "{FAILED_TWICE_CLIENT_STATUS}")
end
"""),
        _response_header_is(":status", str(FAILED_TWICE_UPSTREAM_STATUS)),
        _response_header_is(FAULT_HEADER, FAULT_FAILED_TWICE))


def upstream_protocol_options(model: Model) -> dict[str, Any]:
    """The model cluster's HttpProtocolOptions: HTTP/1.1 to the replicas (as without options), each try's 500 through
    the replica's name and the request-fault filter, then the upstream codec (the chain's required last filter)."""
    return {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": _T + "extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http_protocol_options": {}},
        "http_filters": [
            _on_500_only(FAULT_FILTER, "envoy.filters.http.lua", _lua(fault_script(model.engine))),
            # responses pass the filters last to first: this one, then the Lua filter
            _on_500_only(REPLICA_FILTER, "envoy.filters.http.header_mutation", {
                "@type": _T + "extensions.filters.http.header_mutation.v3.HeaderMutation",
                "mutations": {"response_mutations": [{"append": {
                    "header": {"key": REPLICA_HEADER, "value": "%UPSTREAM_REMOTE_ADDRESS%"},
                    "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}}]}}),
            {"name": "envoy.filters.http.upstream_codec", "typed_config": {
                "@type": _T + "extensions.filters.http.upstream_codec.v3.UpstreamCodec"}},
        ]}}
