"""Session affinity (#34): least-request vs session affinity through the real Envoy, and an oracle, on agent sessions.

The real Envoy (--concurrency 1) on the kit's generated bootstrap for a stack with one generate model `chat` and
REPLICAS replicas, once with `sessionAffinity.enabled: false` (least-request, today) and once with it on (Maglev,
hash_balance_factor 125), in front of fake vLLM replicas that model a prefix cache, prefill, decode, a queue and
chunked prefill's interference (tests/bench/affinity_model.py states the GPU, the model and every constant with its
source). The oracle runs the same replicas in simulated time without Envoy: every step to the replica holding the
longest prefix of its prompt, within the same load bound. So does "affinity (model)", a stand-in for Envoy's
bounded-load hashing (affinity_model.bounded_hash_router): it tells the placement's effect apart from what the live
harness adds on a busy machine.

Sessions (tests.bench.affinity_model.trace, seeded) arrive as a Poisson process at LOADS x capacity for WINDOW_S
simulated seconds, capacity being the session rate the replicas sustain when every step finds its own prefix
(affinity_model.capacity_sessions_per_s); every policy gets the same sessions. Simulated time runs SCALE real
seconds per simulated second. Reported per seed, load and policy: the share of prompt tokens served from cache,
TTFT p50/p99, workflow end-to-end p50/p99 (simulated seconds), max/mean steps per replica, and the share of steps
that left the replica of the session's previous step; then the means over the seeds against the issue's targets.
A last run per policy crashes one replica at FAIL_AT_S (connections reset, health checks failing, cache lost) and
counts the sessions that moved: those that were on the failed replica, and the others.

    .venv/bin/python -m tests.bench affinity                  # the default seeds
    .venv/bin/python -m tests.bench.bench_affinity 1 2 3      # seeds of your choice
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.k8s.gateway.envoy.affinity import DEFAULT_HASH_BALANCE_FACTOR
from infra.config import parse
from tests.bench.affinity_live import Clock, LiveReplica, Outcome, run_sessions
from tests.bench.affinity_model import (
    DEFAULT_TIMING,
    Session,
    StepRecord,
    bounded_hash_router,
    capacity_sessions_per_s,
    oracle_router,
    simulate,
    trace,
)
from tests.support.envoy import start_gateway
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer

SEEDS = (34, 35, 36)
LOADS = (0.5, 0.8)
REPLICAS = 4
WINDOW_S = 240.0  # simulated seconds of arrivals; every session then runs to its end
SCALE = 0.1  # real seconds per simulated second
FAIL_AT_S = 120.0  # the failure run: replica 0 crashes then (at the lower load, the first seed)
BALANCE = DEFAULT_HASH_BALANCE_FACTOR  # the kit's default hashBalanceFactor (125), the oracle's load bound too
HEALTH_WAIT_S = 10.0
ISSUER = "https://issuer.bench/realms/aifactory"
POLICIES = ("least-request", "affinity", "affinity (model)", "oracle")


def _raw(affinity: bool) -> dict[str, Any]:
    return {
        "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
        "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
        "tenants": {"alpha": {"gpuQuota": 32, "rateLimit": {"requestsPerSecond": 100000, "burst": 100000}}},
        "models": {"chat": {"model": "meta-llama/Llama-3.1-8B-Instruct", "engine": "vllm", "tenant": "alpha",
                            "pool": "gpu", "sessionAffinity": {"enabled": affinity},
                            "replicas": {"min": 1, "max": REPLICAS}}},  # one hop per replica
        "gateway": {
            "auth": {"issuers": [{"issuer": ISSUER, "jwksUri": f"{ISSUER}/certs", "audiences": [DEFAULT_AUDIENCE]}]},
            # scaled like the time: a check every 5 simulated s, 0.5 s real; with a tighter timeout, a replica on a
            # starved machine misses checks, is taken out and its sessions move (docs/benchmarks.md)
            "healthCheck": {"intervalSeconds": 0.5, "timeoutSeconds": 0.5, "unhealthyThreshold": 2,
                            "healthyThreshold": 1},
        },
        "observability": {"prices": {"dgx-h100": 30.0}, "traceSampleRatio": 0.0},
    }


async def _wait_healthy(envoy: Any, n: int) -> None:
    deadline = time.monotonic() + HEALTH_WAIT_S
    while (await asyncio.to_thread(envoy.stats)).get("cluster.chat.membership_healthy") != n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"Envoy never saw {n} healthy replicas")
        await asyncio.sleep(0.05)


async def _through_envoy(sessions: Sequence[Session], *, affinity: bool, workdir: Path,
                         fail_at: float | None = None) -> tuple[list[Outcome], int]:
    loop = asyncio.get_running_loop()
    clock = Clock(loop, SCALE)
    replicas = [LiveReplica(f"r{i}", clock, DEFAULT_TIMING) for i in range(REPLICAS)]
    for r in replicas:
        await r.start()
    issuer = Issuer(ISSUER)
    try:
        with ExitStack() as stack:
            envoy = start_gateway(stack, parse(_raw(affinity), stack="bench"), workdir, jwks=[issuer.jwks],
                                  endpoints={"chat": [r.address for r in replicas]})
            await _wait_healthy(envoy, REPLICAS)
            headers = {"host": "gateway", "authorization": f"Bearer {issuer.token(tenant='alpha')}",
                       "x-model": "chat", "content-type": "application/json"}
            clock.restart()
            failer = None if fail_at is None else loop.call_at(clock.real(fail_at), replicas[0].fail)
            outcomes = await run_sessions(sessions, envoy.listener_port, headers, clock)
            if failer is not None:
                failer.cancel()
            stats = await asyncio.to_thread(envoy.stats)
            return outcomes, stats.get("cluster.chat.health_check.failure", 0)
    finally:
        for r in replicas:
            await r.stop()


@dataclass(frozen=True)
class Figures:
    cache_share: float
    ttft_p50: float
    ttft_p99: float
    e2e_p50: float
    e2e_p99: float
    max_over_mean: float
    moved_share: float
    unfinished: int

    def row(self) -> str:
        return (f"cache {self.cache_share:.1%}, TTFT p50/p99 {self.ttft_p50:.2f}/{self.ttft_p99:.2f} s, "
                f"e2e p50/p99 {self.e2e_p50:.1f}/{self.e2e_p99:.1f} s, max/mean load {self.max_over_mean:.2f}, "
                f"steps moved {self.moved_share:.0%}, unfinished {self.unfinished}")


def percentile(xs: Sequence[float], q: float) -> float:
    """Nearest rank."""
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def figures(sessions: Sequence[Session], records: Sequence[StepRecord]) -> Figures:
    by_session: dict[int, list[StepRecord]] = {}
    for r in records:
        by_session.setdefault(r.session, []).append(r)
    done = [s for s in sessions if len(by_session.get(s.sid, ())) == len(s.steps)]
    e2e = [max(r.finished_at for r in by_session[s.sid]) - s.start_s for s in done]
    ttft = [r.first_token_at - r.arrival for r in records]
    load = Counter(r.replica for r in records)
    moved = steps = 0
    for rs in by_session.values():
        rs.sort(key=lambda r: r.step)
        steps += len(rs) - 1
        moved += sum(a.replica != b.replica for a, b in zip(rs, rs[1:], strict=False))
    return Figures(sum(r.cached_tokens for r in records) / sum(r.prompt_tokens for r in records),
                   percentile(ttft, 0.5), percentile(ttft, 0.99), percentile(e2e, 0.5), percentile(e2e, 0.99),
                   max(load.values()) / (len(records) / REPLICAS), moved / max(steps, 1), len(sessions) - len(done))


def moved_on_failure(records: Sequence[StepRecord], failed: str, at: float) -> tuple[int, int, int, int]:
    """(sessions on the failed replica that moved, of them all; other sessions that moved, of them all): a session
    counts when a step finished before `at` and another was sent after; it moved when a later step was served
    elsewhere than its last step before `at`."""
    by_session: dict[int, list[StepRecord]] = {}
    for r in records:
        by_session.setdefault(r.session, []).append(r)
    on = on_moved = off = off_moved = 0
    for rs in by_session.values():
        before = [r for r in rs if r.finished_at < at]
        after = [r for r in rs if r.arrival > at]
        if not before or not after:
            continue
        home = max(before, key=lambda r: r.finished_at).replica
        moved = any(r.replica != home for r in after)
        if home == failed:
            on, on_moved = on + 1, on_moved + moved
        else:
            off, off_moved = off + 1, off_moved + moved
    return on_moved, on, off_moved, off


def _policy(name: str, sessions: Sequence[Session], workdir: Path,
            fail_at: float | None = None) -> tuple[list[StepRecord], str]:
    """The steps' records under `name`, and (through Envoy) what the live run adds: the median time the gateway and
    the harness add to a step's TTFT (what the client saw minus what the replica counted), and the health checks
    that failed (a replica answering late on a busy machine is taken out, and its sessions move)."""
    if name in ("oracle", "affinity (model)"):
        fail = None if fail_at is None else (0, fail_at)
        route = oracle_router(BALANCE) if name == "oracle" else bounded_hash_router(BALANCE)
        return simulate(sessions, route, replicas=REPLICAS, fail=fail)[0], ""
    d = Path(tempfile.mkdtemp(dir=workdir))
    outcomes, hc_failed = asyncio.run(_through_envoy(sessions, affinity=name == "affinity", workdir=d,
                                                     fail_at=fail_at))
    overhead = percentile([o.overhead for o in outcomes], 0.5)
    return [o.record for o in outcomes], (f", gateway+harness {overhead * SCALE * 1000:.1f} ms real, "
                                          f"health checks failed {hc_failed}")


def run(seeds: tuple[int, ...] = SEEDS) -> list[tuple[str, str]]:
    capacity = capacity_sessions_per_s(REPLICAS)
    t = DEFAULT_TIMING
    rows = [("machine", f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start"),
            ("model", f"{t.llm.name} BF16 on {t.gpu.name}: {t.llm.kv_bytes_per_token:,} KV bytes/token, "
                      f"{t.kv_blocks:,} blocks of 16 per replica, prefill bound {t.prefill_tokens_per_s:,.0f} "
                      f"tokens/s (MFU {t.mfu}), {REPLICAS} replicas"),
            ("capacity", f"{capacity:.3f} sessions/s (every step finding its own prefix)")]
    means: dict[tuple[float, str], list[Figures]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for load in LOADS:
                sessions = trace(seed, load * capacity, WINDOW_S)
                rows.append((f"seed {seed}, load {load:.0%}", f"{len(sessions)} sessions, "
                                                              f"{sum(len(s.steps) for s in sessions)} steps"))
                for policy in POLICIES:
                    records, live = _policy(policy, sessions, Path(tmp))
                    f = figures(sessions, records)
                    means.setdefault((load, policy), []).append(f)
                    rows.append((f"seed {seed}, load {load:.0%}: {policy}", f.row() + live))
        sessions = trace(seeds[0], LOADS[0] * capacity, WINDOW_S)
        for policy in POLICIES:
            records, _ = _policy(policy, sessions, Path(tmp), FAIL_AT_S)
            on_m, on, off_m, off = moved_on_failure(records, "r0", FAIL_AT_S)
            rows.append((f"replica r0 fails at {FAIL_AT_S:.0f} s, seed {seeds[0]}, load {LOADS[0]:.0%}: {policy}",
                         f"moved: {on_m} of {on} sessions on r0, {off_m} of {off} others"))
    for load in LOADS:
        avg = {p: Figures(*(sum(getattr(f, k) for f in means[(load, p)]) / len(seeds)
                            for k in Figures.__dataclass_fields__)) for p in POLICIES}
        for p in POLICIES:
            rows.append((f"mean over seeds, load {load:.0%}: {p}", avg[p].row()))
        lr, orc = avg["least-request"], avg["oracle"]
        for p in ("affinity", "affinity (model)"):
            aff = avg[p]
            rows.append((f"targets, load {load:.0%}: {p}",
                         f"cache share {aff.cache_share / orc.cache_share:.0%} of the oracle's (>= 90%); "
                         f"e2e p50 {1 - aff.e2e_p50 / lr.e2e_p50:.0%} below least-request "
                         f"(>= {30 if load >= 0.8 else 15}%); TTFT p99 {aff.ttft_p99 / lr.ttft_p99:.2f}x "
                         f"least-request's (<= 1); max/mean {aff.max_over_mean:.2f} (<= 1.25)"))
    return rows


if __name__ == "__main__":
    for label, figure in run(tuple(int(a) for a in sys.argv[1:]) or SEEDS):
        print(f"{label:<60} {figure}", flush=True)
