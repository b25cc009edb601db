"""The session-affinity benchmark's model of a vLLM replica, of an agentic trace and of an oracle router (issue 34).

What routing changes, and nothing else: which prompt tokens a replica finds in its prefix cache, what the rest costs
to prefill, and how that prefill slows every decode running beside it. Everything runs in simulated seconds; the
Envoy benchmark (tests/bench/bench_affinity.py) maps them onto the wall clock, the oracle runs them here at once.

The replica: Llama-3.1-8B-Instruct in BF16 on one H100 SXM (the kit's catalog entry `components.catalog.H100`:
989 TFLOP/s dense BF16, 3,350 GB/s, 80 GiB), served by vLLM with the kit's `--gpu-memory-utilization`:

- KV bytes per token = 2 (K and V) x layers x kv_heads x head_dim x 2 bytes = 2 x 32 x 8 x 128 x 2 = 131,072 B,
  from meta-llama/Llama-3.1-8B-Instruct config.json (num_hidden_layers 32, num_attention_heads 32,
  num_key_value_heads 8, hidden_size 4096, so head_dim 128; torch_dtype bfloat16; 8.03 B parameters).
- KV capacity = 80 GiB x 0.92 (components/k8s/engines/vllm.py DEFAULT_GPU_MEMORY_UTILIZATION) - 16.06 GB of
  weights - ACTIVATION_RESERVE_GIB (vLLM's profiled activation peak and CUDA graphs: an assumption), in 16-token
  blocks (vLLM's default block size on CUDA).
- A scheduler step (vLLM V1, chunked prefill): every running request that has its first token decodes one token;
  what is left of the step's token budget (max_num_batched_tokens, 8192: vLLM's default for the OpenAI server on
  a GPU of 70 GiB or more that is not an A100, vllm/engine/arg_utils.py EngineArgs.get_batch_defaults) goes to
  prefill, running requests first, then waiting ones in arrival order. A request enters only when the KV blocks
  of its whole prompt and output fit (a reservation: vLLM allocates as it goes and preempts instead).
- A step takes max(FLOPs / (peak x MFU), bytes / (bandwidth x BANDWIDTH_EFFICIENCY)): FLOPs are 2 x parameters
  per token plus attention, 4 x layers x (heads x head_dim) x position per token (QK^T and AV); bytes are the
  weights plus the KV of every position each token attends to. So a prefill chunk of 8192 tokens holds every
  running decode for the chunk's compute time: that is the interference a cache miss inflicts on others.
- The physical bound: at MFU 0.4, prefill runs at 989e12 x 0.4 / (2 x 8.03e9) = 24,600 tokens/s before
  attention (less at long context); a decode step is at least 16.06 GB / (3,350 GB/s x 0.8) = 6.0 ms.
  The MFU and bandwidth efficiency are assumptions, stated, not measured here.
- The prefix cache: vLLM's, reduced to full blocks keyed by their whole prefix (a block's hash chains its
  parent's), an LRU of the blocks no running request holds, a request's blocks freed tail first (so the tail
  goes first, vllm/v1/core/kv_cache_manager.py `free`); a request recomputes at least its last token.
"""

from __future__ import annotations

import heapq
import math
import random
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from components.catalog import H100, GpuSpec
from components.k8s.engines.vllm import DEFAULT_GPU_MEMORY_UTILIZATION

__all__ = [
    "BLOCK_TOKENS",
    "LlmSpec",
    "LLAMA_31_8B",
    "TimingModel",
    "DEFAULT_TIMING",
    "BlockCache",
    "Request",
    "Replica",
    "Step",
    "Session",
    "trace",
    "block_ids",
    "session_gpu_seconds",
    "capacity_sessions_per_s",
    "StepRecord",
    "simulate",
    "oracle_router",
    "bounded_hash_router",
    "within_bound",
]

BLOCK_TOKENS = 16  # vLLM's default KV block size on CUDA
_BLOCK_BITS = 24  # a block id: (session or system prompt + 1) << _BLOCK_BITS | block index
_GIB = 1 << 30
ACTIVATION_RESERVE_GIB = 2.0  # assumed: what vLLM keeps out of the KV cache beside the weights
DEFAULT_MFU = 0.4  # assumed: share of the dense BF16 peak a prefill chunk reaches
DEFAULT_BANDWIDTH_EFFICIENCY = 0.8  # assumed: share of the HBM peak a decode step reaches
MAX_BATCHED_TOKENS = 8192  # vLLM's default step budget on an H100 (EngineArgs.get_batch_defaults)
MAX_NUM_SEQS = 1024  # vLLM's default on the same GPUs
DECODE_BATCH_FOR_CAPACITY = 8  # the batch that shares the weights' read in the capacity figure (an assumption)

# The trace (an agent's session): a shared system prompt, a task, then step after step the previous output and a
# tool result appended, until the context reaches the session's final size.
SYSTEM_PROMPT_TOKENS = (1200, 1500, 1800, 2000)  # a few distinct system prompts (with tool schemas)
TASK_TOKENS = (200, 600)
FINAL_CONTEXT_TOKENS = (24_000, 32_000)
STEPS_PER_SESSION = (4, 12)
OUTPUT_TOKENS = (100, 400)
TOOL_PAUSE_S = (0.2, 5.0)


@dataclass(frozen=True, slots=True)
class LlmSpec:
    name: str
    params: float
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    bytes_per_param: float = 2.0  # BF16
    kv_bytes_per_element: int = 2  # BF16 KV cache

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes_per_element

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param


# meta-llama/Llama-3.1-8B-Instruct config.json; 8.03 B parameters (its model card)
LLAMA_31_8B = LlmSpec("Llama-3.1-8B-Instruct", 8.03e9, layers=32, heads=32, kv_heads=8, head_dim=128)


@dataclass(frozen=True, slots=True)
class TimingModel:
    gpu: GpuSpec = H100
    llm: LlmSpec = LLAMA_31_8B
    mfu: float = DEFAULT_MFU
    bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY
    memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    activation_reserve_gib: float = ACTIVATION_RESERVE_GIB
    max_batched_tokens: int = MAX_BATCHED_TOKENS
    max_num_seqs: int = MAX_NUM_SEQS

    @property
    def kv_blocks(self) -> int:
        """KV blocks one replica holds."""
        kv = (self.gpu.memory_gib * self.memory_utilization - self.activation_reserve_gib) * _GIB \
            - self.llm.weight_bytes
        return int(kv // (self.llm.kv_bytes_per_token * BLOCK_TOKENS))

    @property
    def flops_per_s(self) -> float:
        return self.gpu.bf16_dense_tflops * 1e12 * self.mfu

    @property
    def bytes_per_s(self) -> float:
        return self.gpu.memory_bandwidth_gbs * 1e9 * self.bandwidth_efficiency

    @property
    def prefill_tokens_per_s(self) -> float:
        """The physical bound the model uses: prefill tokens/s before attention."""
        return self.flops_per_s / (2 * self.llm.params)

    def _attention(self) -> float:
        return self.llm.layers * self.llm.heads * self.llm.head_dim

    def step_seconds(self, decode_positions: Sequence[int], chunks: Sequence[tuple[int, int]]) -> float:
        """One step: a token for each decode at its position, and prefill chunks [p0, p1)."""
        tokens = len(decode_positions) + sum(p1 - p0 for p0, p1 in chunks)
        attn = self._attention()
        flops = 2 * self.llm.params * tokens + 4 * attn * sum(decode_positions) \
            + 2 * attn * sum(p1 * p1 - p0 * p0 for p0, p1 in chunks)
        read = self.llm.weight_bytes + self.llm.kv_bytes_per_token * (sum(decode_positions)
                                                                    + sum(p1 for _, p1 in chunks))
        return max(flops / self.flops_per_s, read / self.bytes_per_s)

    def prefill_seconds(self, p0: int, p1: int) -> float:
        """Compute time of prefilling positions [p0, p1) alone (the capacity figure's prefill)."""
        return (2 * self.llm.params * (p1 - p0) + 2 * self._attention() * (p1 * p1 - p0 * p0)) / self.flops_per_s

    def decode_seconds(self, position: int, tokens: int, *, batch: int = DECODE_BATCH_FOR_CAPACITY) -> float:
        """Memory time of decoding `tokens` from `position`, the weights' read shared by `batch` requests."""
        positions = tokens * position + tokens * (tokens - 1) // 2
        return (tokens * self.llm.weight_bytes / batch + self.llm.kv_bytes_per_token * positions) / self.bytes_per_s


DEFAULT_TIMING = TimingModel()


class BlockCache:
    """A replica's prefix cache: `capacity` blocks; the ones running requests hold, and an LRU of the others."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free: OrderedDict[Hashable, None] = OrderedDict()  # cached, held by no request: least recent first
        self._held: dict[Hashable, int] = {}  # cached blocks running requests hold: holders
        self._reserved = 0  # blocks reserved for running requests' partial prompt block and output

    def __len__(self) -> int:
        return len(self._free) + len(self._held) + self._reserved

    def __contains__(self, block: Hashable) -> bool:
        return block in self._free or block in self._held

    def match(self, blocks: Sequence[Hashable]) -> int:
        """How many of `blocks`, from the first, are cached."""
        n = 0
        for b in blocks:
            if b not in self._free and b not in self._held:
                break
            n += 1
        return n

    def acquire(self, blocks: Sequence[Hashable], reserve: int) -> bool:
        """Hold `blocks` (a prompt's full blocks) and `reserve` more; evict least recent free blocks for room.
        False, and nothing changes, when they do not fit beside what running requests hold."""
        new = sum(1 for b in blocks if b not in self._held)
        if len(self._held) + new + self._reserved + reserve > self.capacity:
            return False
        for b in blocks:
            if b in self._held:
                self._held[b] += 1
            else:
                self._free.pop(b, None)
                self._held[b] = 1
        self._reserved += reserve
        while len(self) > self.capacity:
            self._free.popitem(last=False)
        return True

    def release(self, blocks: Sequence[Hashable], reserve: int, filled: Sequence[Hashable]) -> None:
        """A request ends: `blocks` it held and the `reserve` it had, of which `filled` became full blocks of its
        output (cached from now on); freed tail first, so the tail is evicted first."""
        self._reserved -= reserve
        for b in reversed([*blocks, *filled]):
            held = self._held.get(b)
            if held is None:
                self._free[b] = None
                self._free.move_to_end(b)
            elif held > 1:
                self._held[b] = held - 1
            else:
                del self._held[b]
                self._free[b] = None
        while len(self) > self.capacity:
            self._free.popitem(last=False)


def block_ids(sys_id: int, sys_len: int, session: int, tokens: int) -> list[int]:
    """The full blocks of a session's first `tokens` tokens: those wholly inside the system prompt are shared by
    every session using it (negative ids), the others chain through the session's own tokens."""
    n, shared = tokens // BLOCK_TOKENS, sys_len // BLOCK_TOKENS
    own = (session + 1) << _BLOCK_BITS
    return [*range(-((sys_id + 1) << _BLOCK_BITS), -((sys_id + 1) << _BLOCK_BITS) + min(n, shared)),
            *range(own + shared, own + n)]


@dataclass(eq=False)
class Request:
    session: int
    step: int
    sys_id: int
    sys_len: int
    prompt_len: int
    output_len: int
    arrival: float
    cached: int = 0  # prompt tokens found in the cache on entry
    computed: int = 0  # prompt tokens prefilled (cached ones included)
    generated: int = 0
    first_token_at: float | None = None
    finished_at: float | None = None
    blocks: list[int] = field(default_factory=list)
    reserve: int = 0


class Replica:
    """One engine: a waiting queue, the running batch, the prefix cache, and a clock in simulated seconds.

    A driver calls `begin(t)` when the replica is idle at t, or at the end of its previous step, and `end()` at
    the returned end time; `end` returns the requests that got their first token and those that finished."""

    def __init__(self, name: str, timing: TimingModel = DEFAULT_TIMING) -> None:
        self.name, self.timing = name, timing
        self.cache = BlockCache(timing.kv_blocks)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.busy_s = 0.0
        self.prompt_tokens = self.cached_tokens = 0
        # the planned step: start, the end of each step in it (several when only decodes run), decodes, chunks
        self._step: tuple[float, list[float], list[Request], list[tuple[Request, int, int]]] | None = None
        self.generation = 0  # counts plans: a driver's timer for an older plan is stale

    @property
    def in_flight(self) -> int:
        return len(self.waiting) + len(self.running)

    @property
    def stepping(self) -> bool:
        return self._step is not None

    def submit(self, r: Request) -> None:
        self.waiting.append(r)

    def _admit(self, r: Request) -> bool:
        r.blocks = block_ids(r.sys_id, r.sys_len, r.session, r.prompt_len)
        r.reserve = math.ceil((r.prompt_len + r.output_len) / BLOCK_TOKENS) - len(r.blocks)
        hit = self.cache.match(r.blocks)
        if not self.cache.acquire(r.blocks, r.reserve):
            return False
        r.cached = r.computed = min(hit * BLOCK_TOKENS, r.prompt_len - 1)
        self.prompt_tokens += r.prompt_len
        self.cached_tokens += r.cached
        return True

    def begin(self, now: float) -> float | None:
        """Plan the step that starts at `now`; its end time, or None when there is nothing to do."""
        budget = self.timing.max_batched_tokens
        decodes = [r for r in self.running if r.first_token_at is not None]
        budget -= len(decodes)
        chunks = []
        for r in self.running:
            if r.first_token_at is None and budget > 0:
                n = min(budget, r.prompt_len - r.computed)
                chunks.append((r, r.computed, r.computed + n))
                budget -= n
        while (self.waiting and self.waiting[0].arrival <= now and budget > 0
               and len(self.running) < self.timing.max_num_seqs and self._admit(self.waiting[0])):
            r = self.waiting.popleft()
            self.running.append(r)
            n = min(budget, r.prompt_len - r.computed)
            chunks.append((r, r.computed, r.computed + n))
            budget -= n
        if not decodes and not chunks:
            return None
        positions = [r.prompt_len + r.generated - 1 for r in decodes]
        ends = [now + self.timing.step_seconds(positions, [(p0, p1) for _, p0, p1 in chunks])]
        if not chunks:  # only decodes: the same batch runs step after step until one of them finishes
            for j in range(1, min(r.output_len - r.generated for r in decodes)):
                ends.append(ends[-1] + self.timing.step_seconds([p + j for p in positions], []))
        self._step = (now, ends, decodes, chunks)
        self.generation += 1
        return ends[-1]

    def interrupt(self, t: float) -> float | None:
        """A request arrived at `t` during a run of decode steps: the run stops at the first step boundary at or
        after `t`, so the request joins the next step; the run's new end, or None when it is unchanged."""
        if self._step is None:
            return None
        start, ends, decodes, chunks = self._step
        keep = next((j + 1 for j, e in enumerate(ends) if e >= t), len(ends))
        if keep == len(ends):
            return None
        self._step = (start, ends[:keep], decodes, chunks)
        self.generation += 1
        return ends[keep - 1]

    def end(self) -> tuple[list[Request], list[Request]]:
        """Finish the planned step(s): (requests that got their first token, requests that finished)."""
        assert self._step is not None
        start, ends, decodes, chunks = self._step
        t = ends[-1]
        self._step = None
        self.busy_s += t - start
        first, done = [], []
        for r, _, p1 in chunks:
            r.computed = p1
            if p1 == r.prompt_len:
                r.generated, r.first_token_at = 1, t
                first.append(r)
        for r in decodes:
            r.generated += len(ends)
        for r in [*decodes, *first]:
            if r.generated >= r.output_len:
                r.finished_at = t
                done.append(r)
        for r in done:
            self.running.remove(r)
            filled = block_ids(r.sys_id, r.sys_len, r.session, r.prompt_len + r.output_len)[len(r.blocks):]
            self.cache.release(r.blocks, r.reserve, filled)
        return first, done

    def crash(self) -> list[Request]:
        """The replica fails: its requests are lost (returned), its cache empty."""
        lost = [*self.running, *self.waiting]
        self.running, self.waiting, self._step = [], deque(), None
        self.cache = BlockCache(self.timing.kv_blocks)
        return lost


@dataclass(frozen=True, slots=True)
class Step:
    prompt_len: int
    output_len: int
    pause_s: float  # the tool's pause before this step (0 for the first)


@dataclass(frozen=True, slots=True)
class Session:
    sid: int
    start_s: float
    sys_id: int
    sys_len: int
    steps: tuple[Step, ...]


def trace(seed: int, rate_per_s: float, window_s: float) -> list[Session]:
    """Sessions arriving as a Poisson process of `rate_per_s` over `window_s` seconds, drawn from `seed`: each
    picks one of the shared system prompts, runs 4-12 steps whose context grows from the system prompt and task
    (~2k tokens) to 24k-32k, each step's output and a tool result appended, 0.2-5 s of tool time between steps."""
    rng = random.Random(seed)
    out: list[Session] = []
    t = rng.expovariate(rate_per_s)
    while t < window_s:
        sys_id = rng.randrange(len(SYSTEM_PROMPT_TOKENS))
        sys_len = SYSTEM_PROMPT_TOKENS[sys_id]
        n = rng.randint(*STEPS_PER_SESSION)
        final = rng.randint(*FINAL_CONTEXT_TOKENS)
        outputs = [rng.randint(*OUTPUT_TOKENS) for _ in range(n)]
        prompt = sys_len + rng.randint(*TASK_TOKENS)
        growth = (final - prompt - sum(outputs[:-1])) / (n - 1)
        steps = [Step(prompt, outputs[0], 0.0)]
        for i in range(1, n):
            tool = max(BLOCK_TOKENS, round(growth * rng.uniform(0.5, 1.5)))
            prompt += outputs[i - 1] + tool
            steps.append(Step(prompt, outputs[i], rng.uniform(*TOOL_PAUSE_S)))
        out.append(Session(len(out), t, sys_id, sys_len, tuple(steps)))
        t += rng.expovariate(rate_per_s)
    return out


def session_gpu_seconds(s: Session, timing: TimingModel = DEFAULT_TIMING, *, reuse: bool) -> float:
    """GPU seconds one session costs: each step's prefill (from its previous step's end with `reuse`, else from
    the shared system prompt's last full block) and decode (the weights' read shared by a batch of
    DECODE_BATCH_FOR_CAPACITY)."""
    total, seen = 0.0, (s.sys_len // BLOCK_TOKENS) * BLOCK_TOKENS
    for step in s.steps:
        start = seen if reuse else (s.sys_len // BLOCK_TOKENS) * BLOCK_TOKENS
        total += timing.prefill_seconds(min(start, step.prompt_len - 1), step.prompt_len)
        total += timing.decode_seconds(step.prompt_len, step.output_len)
        seen = ((step.prompt_len + step.output_len) // BLOCK_TOKENS) * BLOCK_TOKENS
    return total


def capacity_sessions_per_s(replicas: int, timing: TimingModel = DEFAULT_TIMING, *, sample_seed: int = 0,
                            sample: int = 2000) -> float:
    """Sessions/s that keep `replicas` GPUs busy when no step finds its own session's prefix cached (today's
    routing at worst: only the shared system prompt reused), over a sample of the trace's sessions."""
    sessions = trace(sample_seed, 1.0, float(sample))
    mean = sum(session_gpu_seconds(s, timing, reuse=True) for s in sessions) / len(sessions)
    return replicas / mean


@dataclass(frozen=True, slots=True)
class StepRecord:
    session: int
    step: int
    replica: str
    arrival: float
    first_token_at: float
    finished_at: float
    prompt_tokens: int
    cached_tokens: int


Router = Callable[[Request, Sequence[Replica]], Replica]


def within_bound(in_flight: int, total: int, replicas: int, balance_factor: int) -> bool:
    """Envoy's bounded load for equal weights: a host takes a request while its active requests are at most
    max(ceil(ceil((cluster active + 1) x factor / 100) / hosts), 1) (envoyproxy/envoy
    source/extensions/load_balancing_policies/common/thread_aware_lb_impl.cc, hostOverloadFactor)."""
    total_slots = ((total + 1) * balance_factor + 99) // 100
    return in_flight <= max(math.ceil(total_slots / replicas), 1)


def oracle_router(balance_factor: int = 125) -> Router:
    """Every step to the replica holding the longest prefix of its prompt, among the replicas within Envoy's load
    bound for `balance_factor` (the kit's hashBalanceFactor); ties to the least loaded."""
    def route(r: Request, live: Sequence[Replica]) -> Replica:
        total = sum(x.in_flight for x in live)
        ok = [x for x in live if within_bound(x.in_flight, total, len(live), balance_factor)] or list(live)
        blocks = block_ids(r.sys_id, r.sys_len, r.session, r.prompt_len)
        return max(ok, key=lambda x: (x.cache.match(blocks), -x.in_flight))
    return route


def bounded_hash_router(balance_factor: int = 125) -> Router:
    """A stand-in for Envoy's consistent hashing with bounded load, for runs without Envoy: a session's home is the
    replica with the highest hash of (session, replica) (rendezvous hashing: like Maglev, losing a replica moves
    only its sessions); past `within_bound`, the other replicas in an order seeded by the session (as Envoy
    probes), else the least loaded."""
    def route(r: Request, live: Sequence[Replica]) -> Replica:
        total = sum(x.in_flight for x in live)
        order = sorted(live, key=lambda x: zlib.crc32(f"{r.session}/{x.name}".encode()), reverse=True)
        home, rest = order[0], order[1:]
        random.Random(r.session).shuffle(rest)
        for x in (home, *rest):
            if within_bound(x.in_flight, total, len(live), balance_factor):
                return x
        return min(live, key=lambda x: x.in_flight)
    return route


def simulate(sessions: Sequence[Session], route: Router, *, replicas: int,
             timing: TimingModel = DEFAULT_TIMING,
             fail: tuple[int, float] | None = None) -> tuple[list[StepRecord], list[Replica]]:
    """Run the sessions through `replicas` engines in simulated time, each step placed by `route`; `fail`
    (replica index, time) crashes one replica then (its requests start again elsewhere). The steps' records, and
    the engines as they ended."""
    engines = [Replica(f"r{i}", timing) for i in range(replicas)]
    events: list[tuple[float, int, str, Any]] = []
    seq = 0

    def push(t: float, kind: str, payload: Any) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, payload))
        seq += 1

    def place(r: Request, t: float) -> None:
        e = route(r, [x for i, x in enumerate(engines) if not (fail and i == fail[0] and t >= fail[1])])
        e.submit(r)
        end = e.interrupt(t) if e.stepping else e.begin(t)
        if end is not None:
            push(end, "end", (e, e.generation))

    by_id = {s.sid: s for s in sessions}
    for s in sessions:
        push(s.start_s, "step", (s.sid, 0))
    if fail is not None:
        push(fail[1], "fail", engines[fail[0]])
    records: list[StepRecord] = []
    while events:
        t, _, kind, payload = heapq.heappop(events)
        if kind == "step":
            sid, i = payload
            s, st = by_id[sid], by_id[sid].steps[i]
            place(Request(sid, i, s.sys_id, s.sys_len, st.prompt_len, st.output_len, t), t)
        elif kind == "fail":
            assert isinstance(payload, Replica)
            for r in payload.crash():
                place(Request(r.session, r.step, r.sys_id, r.sys_len, r.prompt_len, r.output_len, r.arrival), t)
        else:
            e, generation = payload
            if not e.stepping or generation != e.generation:
                continue  # crashed, or an older plan
            _, done = e.end()
            for r in done:
                assert r.first_token_at is not None
                records.append(StepRecord(r.session, r.step, e.name, r.arrival, r.first_token_at, t,
                                          r.prompt_len, r.cached))
                s = by_id[r.session]
                if r.step + 1 < len(s.steps):
                    push(t + s.steps[r.step + 1].pause_s, "step", (r.session, r.step + 1))
            end = e.begin(t)
            if end is not None:
                push(end, "end", (e, e.generation))
    return records, engines
