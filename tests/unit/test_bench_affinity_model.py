"""The session-affinity benchmark's model pieces (tests/bench/affinity_model.py), with answers worked out by hand:
the LRU block cache, the trace generator, the timing arithmetic, Envoy's load bound and the oracle."""

from __future__ import annotations

import math

import pytest

from tests.bench.affinity_model import (
    BLOCK_TOKENS,
    DEFAULT_TIMING,
    LLAMA_31_8B,
    BlockCache,
    Replica,
    Request,
    Session,
    Step,
    block_ids,
    bounded_hash_router,
    capacity_sessions_per_s,
    oracle_router,
    session_gpu_seconds,
    simulate,
    trace,
    within_bound,
)

FLOPS = 989e12 * 0.4  # the catalog's H100 dense BF16 peak at MFU 0.4
BYTES = 3350e9 * 0.8  # its HBM bandwidth at 80%
WEIGHTS = 8.03e9 * 2
KV = 131_072  # 2 x 32 layers x 8 kv heads x 128 x 2 bytes
ATTN = 32 * 32 * 128  # layers x heads x head_dim


def test_kv_bytes_per_token_weights_and_kv_blocks() -> None:
    assert LLAMA_31_8B.kv_bytes_per_token == KV
    assert LLAMA_31_8B.weight_bytes == WEIGHTS
    # (80 GiB x 0.92 - 2 GiB) - 16.06 GB = 60,819,914,598 bytes, over 16 x 131,072 bytes a block
    assert DEFAULT_TIMING.kv_blocks == 29_001
    assert DEFAULT_TIMING.prefill_tokens_per_s == pytest.approx(24_632.6, abs=0.1)


def test_a_decode_step_reads_the_weights_and_a_prefill_chunk_is_compute_bound() -> None:
    t = DEFAULT_TIMING
    assert t.step_seconds([0], []) == pytest.approx(WEIGHTS / BYTES)  # 5.99 ms
    assert t.step_seconds([0], []) == pytest.approx(0.005992537, rel=1e-6)
    chunk = (2 * 8.03e9 * 8192 + 2 * ATTN * 8192**2) / FLOPS  # 0.377 s
    assert t.step_seconds([], [(0, 8192)]) == pytest.approx(chunk)
    assert chunk == pytest.approx(0.37704, abs=1e-5)
    # interference: a decode beside that chunk waits for the chunk's compute (plus its own token's)
    with_decode = (2 * 8.03e9 * 8193 + 2 * ATTN * 8192**2 + 4 * ATTN * 20_000) / FLOPS
    assert t.step_seconds([20_000], [(0, 8192)]) == pytest.approx(with_decode)
    # long decodes alone are memory-bound: weights plus each sequence's KV
    assert t.step_seconds([20_000, 10_000], []) == pytest.approx((WEIGHTS + KV * 30_000) / BYTES)


def test_prefill_and_decode_seconds_of_the_capacity_figure() -> None:
    t = DEFAULT_TIMING
    assert t.prefill_seconds(16, 32) == pytest.approx((2 * 8.03e9 * 16 + 2 * ATTN * (32**2 - 16**2)) / FLOPS)
    # 3 tokens from position 100: positions 100, 101, 102; weights shared by a batch of 8
    assert t.decode_seconds(100, 3) == pytest.approx((3 * WEIGHTS / 8 + KV * 303) / BYTES)
    s = Session(0, 0.0, 0, 16, (Step(32, 1, 0.0), Step(64, 2, 1.0)))
    reuse = t.prefill_seconds(16, 32) + t.decode_seconds(32, 1) + t.prefill_seconds(32, 64) + t.decode_seconds(64, 2)
    assert session_gpu_seconds(s, reuse=True) == pytest.approx(reuse)
    cold = t.prefill_seconds(16, 32) + t.decode_seconds(32, 1) + t.prefill_seconds(16, 64) + t.decode_seconds(64, 2)
    assert session_gpu_seconds(s, reuse=False) == pytest.approx(cold)


def test_capacity_is_replicas_over_the_mean_session_cost_with_reuse() -> None:
    sessions = trace(0, 1.0, 200.0)
    mean = sum(session_gpu_seconds(s, reuse=True) for s in sessions) / len(sessions)
    assert capacity_sessions_per_s(4, sample=200) == pytest.approx(4 / mean)


def test_block_cache_is_lru_over_unheld_blocks_freed_tail_first() -> None:
    c = BlockCache(4)
    assert c.acquire(["a", "b"], reserve=1)
    assert len(c) == 3
    c.release(["a", "b"], 1, filled=["c"])  # freed c, b, a: c is the least recent
    assert len(c) == 3 and c.match(["a", "b", "c"]) == 3
    assert c.acquire(["d", "e"], reserve=0)  # 5 blocks for 4: c goes
    assert "c" not in c and c.match(["a", "b", "c"]) == 2
    assert not c.acquire(["x", "y", "z"], reserve=0)  # d and e are held: 2 + 3 > 4, and nothing changed
    assert c.match(["a", "b"]) == 2 and "x" not in c
    c.release(["d", "e"], 0, filled=[])
    assert c.acquire(["a", "x", "y", "z"], reserve=0)  # a is a hit; b, e, d go (least recent first)
    assert [b in c for b in "abcdexyz"] == [True, False, False, False, False, True, True, True]


def test_block_ids_share_the_system_prompt_blocks_only() -> None:
    one, two = block_ids(1, 40, 7, 64), block_ids(1, 40, 8, 64)
    assert len(one) == 64 // BLOCK_TOKENS == 4
    assert one[:2] == two[:2]  # tokens 0-31 lie wholly in the 40-token system prompt
    assert not set(one[2:]) & set(two[2:])  # the block holding tokens 32-47 mixes in the session's own
    assert block_ids(1, 40, 7, 47) == one[:2]  # only full blocks
    assert not set(block_ids(2, 40, 7, 32)) & set(one)  # another system prompt


def test_trace_is_seeded_and_shaped_like_agent_sessions() -> None:
    a, b = trace(34, 0.5, 400.0), trace(34, 0.5, 400.0)
    assert a == b and a != trace(35, 0.5, 400.0)
    assert 150 <= len(a) <= 250  # Poisson, 0.5/s over 400 s
    assert all(x.start_s < y.start_s < 400.0 for x, y in zip(a, a[1:], strict=False))
    for s in a:
        assert 4 <= len(s.steps) <= 12
        assert s.sys_len in (1200, 1500, 1800, 2000)
        assert s.sys_len + 200 <= s.steps[0].prompt_len <= s.sys_len + 600
        assert s.steps[0].pause_s == 0 and all(0.2 <= st.pause_s <= 5.0 for st in s.steps[1:])
        assert all(100 <= st.output_len <= 400 for st in s.steps)
        # each prompt is the previous one, its output and a tool result
        assert all(y.prompt_len >= x.prompt_len + x.output_len + BLOCK_TOKENS
                   for x, y in zip(s.steps, s.steps[1:], strict=False))
        assert 12_000 <= s.steps[-1].prompt_len <= 45_000
    assert {s.sys_id for s in a} == {0, 1, 2, 3}
    last = sorted(s.steps[-1].prompt_len for s in a)
    assert 24_000 <= last[len(last) // 2] <= 32_000


def test_a_replica_prefills_then_decodes_and_the_next_step_finds_its_prefix() -> None:
    t = DEFAULT_TIMING
    r = Replica("r0")
    first = Request(0, 0, 0, 40, 100, 3, arrival=0.0)
    r.submit(first)
    end = r.begin(0.0)
    assert end is not None and end == pytest.approx(t.step_seconds([], [(0, 100)]))
    assert r.end() == ([first], [])
    # only decodes left: one plan runs both decode steps (positions 100 and 101) up to the finish
    t2 = r.begin(end)
    assert t2 is not None
    assert t2 == pytest.approx(end + t.step_seconds([100], []) + t.step_seconds([101], []))
    assert r.end() == ([], [first]) and first.finished_at == t2 and first.generated == 3
    # the session's next step: 100 prompt + 3 output + 29 tool tokens; 103 // 16 = 6 full blocks cached
    nxt = Request(0, 1, 0, 40, 132, 1, arrival=t2)
    r.submit(nxt)
    r.begin(t2)
    assert nxt.cached == 96 and r.cached_tokens == 96 and r.prompt_tokens == 232


def test_a_request_arriving_mid_step_joins_the_next_step() -> None:
    r = Replica("r0")
    r.submit(Request(0, 0, 0, 16, 8192, 5, arrival=0.0))
    end = r.begin(0.0)
    assert end is not None
    late = Request(1, 0, 0, 16, 64, 1, arrival=0.1)
    r.submit(late)
    r.end()
    assert late.cached == 0 and r.running[-1] is not late
    r.begin(end)
    assert r.running[-1] is late and late.cached == 16  # the shared system prompt's one full block


def test_an_arrival_cuts_a_run_of_decode_steps_at_the_next_boundary() -> None:
    t = DEFAULT_TIMING
    r = Replica("r0")
    a = Request(0, 0, 0, 16, 1000, 50, arrival=0.0)
    r.submit(a)
    start = r.begin(0.0)
    assert start is not None
    r.end()  # the prefill step: first token
    step = [t.step_seconds([1000 + j], []) for j in range(49)]
    assert r.begin(start) == pytest.approx(start + sum(step))  # 49 decode steps in one plan
    # an arrival inside the third step: the plan stops where that step ends, three tokens on
    assert r.interrupt(start + step[0] + step[1] + step[2] / 2) == pytest.approx(start + sum(step[:3]))
    assert r.interrupt(start + sum(step)) is None  # past the plan's end: nothing to cut
    r.end()
    assert a.generated == 4 and a.finished_at is None


def test_within_bound_is_envoys_slots() -> None:
    # no request in flight: ceil(1 x 125 / 100) = 2 slots over 4 hosts -> max(ceil(0.5), 1) = 1
    assert within_bound(1, 0, 4, 125) and not within_bound(2, 0, 4, 125)
    # 7 in flight: ceil(8 x 1.25) = 10 slots -> ceil(10 / 4) = 3 per host
    assert within_bound(3, 7, 4, 125) and not within_bound(4, 7, 4, 125)
    assert math.ceil(((40 + 1) * 125 + 99) // 100 / 4) == 13 and within_bound(13, 40, 4, 125)


def test_the_oracle_keeps_a_session_where_its_prefix_is() -> None:
    steps = tuple(Step(2000 + 3000 * i, 200, 1.0 if i else 0.0) for i in range(4))
    sessions = [Session(i, 0.5 * i, 0, 1200, steps) for i in range(3)]
    records, engines = simulate(sessions, oracle_router(125), replicas=3)
    assert len(records) == 12
    homes = {s: {r.replica for r in records if r.session == s} for s in range(3)}
    # the shared system prompt draws the first steps to r0 (within the bound: slots 1, 1 then 2 in flight)
    assert homes == {0: {"r0"}, 1: {"r0"}, 2: {"r0"}}
    later = [r for r in records if r.step > 0]
    # every later step finds its previous prompt and output cached, to the last full block
    assert all(r.cached_tokens == (2000 + 3000 * (r.step - 1) + 200) // 16 * 16 for r in later)
    assert sum(e.busy_s for e in engines) > 0


def test_the_hash_stand_in_keeps_homes_and_a_lost_replica_moves_only_its_sessions() -> None:
    route = bounded_hash_router(125)
    four = [Replica(f"r{i}") for i in range(4)]

    def home(session: int, live: list[Replica]) -> str:
        return route(Request(session, 0, 0, 16, 64, 1, arrival=0.0), live).name

    homes = {s: home(s, four) for s in range(200)}
    assert set(homes.values()) == {"r0", "r1", "r2", "r3"}
    assert all(home(s, four) == homes[s] for s in range(200))  # stable
    after = {s: home(s, four[1:]) for s in range(200)}
    assert {s for s in homes if after[s] != homes[s]} == {s for s in homes if homes[s] == "r0"}
    # past the bound (2 in flight, all on its home: ceil(ceil(3 x 1.25) / 4) = 1 slot each), the session probes on
    s0 = homes[0]
    busy = next(x for x in four if x.name == s0)
    busy.submit(Request(99, 0, 0, 16, 64, 1, arrival=0.0))
    busy.submit(Request(98, 0, 0, 16, 64, 1, arrival=0.0))
    assert home(0, four) != s0
