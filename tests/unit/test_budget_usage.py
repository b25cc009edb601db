"""The budget service's accounting (components/k8s/gateway/budgets/usage.py, service.BudgetConfig), pure: what a
request reserves and forwards, and what a response says it used."""

from __future__ import annotations

import json

from components.k8s.gateway.budgets.service import BudgetConfig
from components.k8s.gateway.budgets.usage import Policy, ResponseMeter, plan

POLICY = Policy(limits={"perMinute": 1000}, output_weight=4.0, default_max_tokens=50, prompt_bytes_per_token=2.0)


def test_a_request_without_max_tokens_is_given_the_default_and_a_stream_asks_for_usage() -> None:
    body = json.dumps({"model": "m", "messages": [], "stream": True, "stream_options": {"x": 1}}).encode()
    p = plan(body, "/models/chat/v1/chat/completions", 50)
    assert p.max_tokens == 50
    assert p.body is not None
    assert json.loads(p.body) == {"model": "m", "messages": [], "stream": True, "max_tokens": 50,
                                  "stream_options": {"x": 1, "include_usage": True}}
    assert p.body_bytes == max(len(body), len(p.body))


def test_the_clients_max_completion_tokens_is_reserved_and_the_body_left_alone() -> None:
    body = json.dumps({"model": "m", "max_completion_tokens": 7, "max_tokens": 99}).encode()
    assert plan(body, "/v1/chat/completions", 50) == type(plan(b"", "/v1/embeddings", 1))(len(body), 7, None)


def test_embeddings_reserve_the_prompt_only_and_a_body_that_is_not_json_reserves_the_default() -> None:
    assert plan(b'{"input": "abc"}', "/v1/embeddings", 50).max_tokens == 0
    p = plan(b"not json", "/v1/completions", 50)
    assert (p.max_tokens, p.body) == (50, None)


def test_a_policy_weighs_output_and_estimates_the_prompt_from_bytes() -> None:
    assert POLICY.prompt_estimate(101) == 51
    assert POLICY.cost(20, 3) == 32


def test_a_stream_is_settled_from_its_usage_chunk_split_across_reads() -> None:
    m = ResponseMeter()
    m.headers(200, "text/event-stream; charset=utf-8")
    events = [{"choices": [{"delta": {"content": "a"}}]}, {"choices": [{"delta": {"content": "b"}}]},
              {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}]
    raw = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    for i in range(0, len(raw), 7):  # chunk boundaries inside events
        m.body(raw[i:i + 7], i + 7 >= len(raw))
    assert (m.output_chunks, m.prompt_tokens, m.completion_tokens) == (2, 9, 2)
    assert m.used(POLICY, 1000, 50) == 9 + 4 * 2


def test_a_cut_stream_is_settled_from_what_it_generated_and_an_error_from_nothing() -> None:
    m = ResponseMeter()
    m.headers(200, "text/event-stream")
    m.body(b'data: {"choices": [{"delta": {"content": "a"}}]}\n\ndata: {"choices": [{"delta": {"role": "x"}}]}\n\n',
           False)
    assert m.used(POLICY, 100, 50) == 50 + 4 * 1  # the prompt's estimate (100 bytes / 2) and one generated chunk
    err = ResponseMeter()
    err.headers(400, "application/json")
    err.body(b'{"error": {}}', True)
    assert err.used(POLICY, 100, 50) == 0
    # no response at all (the client went before the engine's headers): nothing generated, nothing counted
    assert ResponseMeter().used(POLICY, 100, 50) == 0


def test_an_answer_that_ended_without_usage_is_charged_its_reservation_and_a_cut_one_what_it_generated() -> None:
    """A complete 2xx without `usage` (Triton's OpenAI frontend sends none when the model does not output its token
    counts: triton-inference-server/server@r26.07 python/openai/openai_frontend/engine/utils/triton.py) is charged
    the prompt's estimate plus max_tokens x outputWeight, streamed or not; one cut before its end, what it generated."""
    whole = ResponseMeter()
    whole.headers(200, "application/json")
    whole.body(b'{"choices": [{"message": {"content": "a long answer"}}]', False)
    assert not whole.without_usage and whole.used(POLICY, 100, 50) == 50  # cut: the prompt alone (no chunk counted)
    whole.body(b'}', True)
    assert whole.without_usage and whole.used(POLICY, 100, 50) == 50 + 4 * 50
    stream = ResponseMeter()
    stream.headers(200, "text/event-stream")
    stream.body(b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n', False)
    assert not stream.without_usage and stream.used(POLICY, 100, 50) == 50 + 4 * 1
    stream.body(b'data: [DONE]\n\n', True)
    assert stream.without_usage and stream.used(POLICY, 100, 50) == 50 + 4 * 50
    empty = ResponseMeter()  # headers that end the answer: nothing said what it used
    empty.headers(200, "application/json", end=True)
    assert empty.without_usage and empty.used(POLICY, 100, 50) == 250
    refused = ResponseMeter()
    refused.headers(429, "application/json", end=True)
    assert not refused.without_usage and refused.used(POLICY, 100, 50) == 0


def test_a_routes_subject_names_the_workload_whose_budget_it_counts_against() -> None:
    policy = {"limits": {"perDay": 5}, "outputWeight": 1, "defaultMaxTokens": 8, "promptBytesPerToken": 1,
              "onStoreFailure": "open"}
    cfg = BudgetConfig.load_text(json.dumps({"tenants": {"t": policy}, "workloads": {"plan": policy},
                                             "models": {"plan-int4": "plan", "other": "other"},
                                             "storeTimeoutSeconds": 0.1, "requestSeconds": {},
                                             "sweepMarginSeconds": 16, "sweepIntervalSeconds": 10}))
    scopes = {r: [(s, n) for s, n, _ in cfg.budgets_of("t", r)] for r in (
        "plan/body", "plan.batch/path", "plan.plan-int4.fits-budget.baggage/unstreamed", "plan-int4/key-body",
        "other/body", "")}
    assert scopes == {"plan/body": [("tenant", "t"), ("workload", "plan")],
                      "plan.batch/path": [("tenant", "t"), ("workload", "plan")],
                      "plan.plan-int4.fits-budget.baggage/unstreamed": [("tenant", "t"), ("workload", "plan")],
                      "plan-int4/key-body": [("tenant", "t"), ("workload", "plan")],
                      "other/body": [("tenant", "t")], "": [("tenant", "t")]}
    assert cfg.budgets_of("nobody", "other/body") == []
