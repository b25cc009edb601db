"""Deadline-aware routing (#15): all-fastest vs all-cheapest vs cost-within-deadline on the same arrivals.

The real Envoy on 127.0.0.1 with the kit's generated config, one workload with two variants behind it, each a
fake engine (this module's `Engine`) with a service time drawn per request and a fixed number of slots; a
request that finds every slot busy waits in the engine's queue, and past QUEUE_LIMIT waiting it gets 503 (the
gateway then overflows it to the other variant). Variants, scaled down to seconds:

    cheap  service 0.10 + 0.30 u s (u uniform; p95 0.385 s -> slo.e2eSeconds 0.4), CHEAP_SLOTS slots, cost 1
    fast   service 0.05 + 0.05 u s (p95 0.0975 s -> slo.e2eSeconds 0.1), FAST_SLOTS slots, cost 4 (4x the price)

Workflows arrive as a Poisson process whose rate alternates LOW_RATE / HIGH_RATE every PHASE_S seconds (the
high phase saturates the cheap variant), each with 4-10 sequential steps and a deadline of STEP_DEADLINE_S per
step. Each workflow runs under the real telemetry SDK (workflow(budget_s=deadline, steps=n), one llm step per
request) and sends what telemetry's headers() gives: W3C baggage whose aifactory.budget_ms is the step's share of
the remaining budget (remaining / steps left). Arrivals, step counts and every request's draw u are seeded per
seed, so the policies (gateway.routing.<workload>.policy: fastest, cheapest, cost-within-deadline with the
default margin, with marginPercent 0 for comparison, and with the cheap variant's breaker at its slot count,
variant.maxRequests CHEAP_SLOTS, so a try past its capacity overflows to the fast one) see the same work.
Reported per seed and policy: cost per workflow (the serving variant's cost, read from x-aifactory-variant),
deadline-miss rate (late or failed workflows), requests that overflowed, failed requests, and the share of the
run the cheap variant had every slot busy (saturated); then the means over the seeds. Target (issue #15):
deadline-aware at least 30% cheaper than all-fastest, misses at most 0.5 points above it, far fewer than
all-cheapest.

    .venv/bin/python -m tests.bench variant_routing                 # the default seeds
    .venv/bin/python -m tests.bench.bench_variant_routing 1 2 3 4   # seeds of your choice
"""

from __future__ import annotations

import http.client
import json
import random
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from components.k8s.gateway.envoy.config import bootstrap
from infra.config import parse
from telemetry import Telemetry
from tests.support.envoy import await_replicas, rebind
from tests.support.fake_backends import EnvoyProcess, free_port, is_gateway_check, send_json
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer

SEEDS = (15, 16, 17)  # default: three seeds
ARRIVAL_SECONDS = 30.0
PHASE_S = 3.0
LOW_RATE, HIGH_RATE = 2.0, 7.0  # workflows/s
STEPS = (4, 10)
STEP_DEADLINE_S = 0.3
CHEAP_SLOTS, FAST_SLOTS = 6, 64
QUEUE_LIMIT = 8
COST = {"cheap": 1.0, "fast": 4.0}
# (label, policy, marginPercent or None for the default, the cheap variant's maxRequests or None for the default)
POLICIES = (("fastest", "fastest", None, None), ("cheapest", "cheapest", None, None),
            ("cost-within-deadline", "cost-within-deadline", None, None),
            ("cost-within-deadline, margin 0", "cost-within-deadline", 0, None),
            (f"cost-within-deadline, cheap maxRequests {CHEAP_SLOTS}", "cost-within-deadline", None, CHEAP_SLOTS))
ISSUER = "https://issuer.bench/realms/aifactory"


def service_s(variant: str, u: float) -> float:
    return 0.10 + 0.30 * u if variant == "cheap" else 0.05 + 0.05 * u


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: Engine

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        if is_gateway_check(self.path, self.headers):
            return self._send(200, b"")
        srv = self.server
        with srv.lock:
            if srv.waiting >= QUEUE_LIMIT:
                return self._send(503, b'{"error": "queue full"}')
            srv.waiting += 1
        with srv.slots:
            with srv.lock:
                srv.waiting -= 1
                srv.busy_change(+1)
            time.sleep(service_s(srv.variant, float(self.headers.get("x-bench-draw", "0.5"))))
            with srv.lock:
                srv.busy_change(-1)
        self._send(200, json.dumps({"backend": srv.variant}).encode())

    def _send(self, status: int, body: bytes) -> None:
        send_json(self, status, body)

    do_GET = do_POST = _answer  # noqa: N815


class Engine(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # Envoy closing idle upstream connections at shutdown resets them: not an error here

    def __init__(self, variant: str, slots: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.variant, self.slots, self.lock, self.waiting = variant, threading.BoundedSemaphore(slots), \
            threading.Lock(), 0
        self.capacity, self.busy, self.saturated_s, self._since = slots, 0, 0.0, 0.0

    def busy_change(self, delta: int) -> None:
        """Under self.lock: one slot taken (+1) or freed (-1); adds up the time every slot was busy."""
        now = time.monotonic()
        if self.busy == self.capacity:
            self.saturated_s += now - self._since
        self.busy += delta
        self._since = now


@dataclass(frozen=True)
class Workflow:
    start_s: float
    draws: tuple[float, ...]  # one per step

    @property
    def deadline_s(self) -> float:
        return STEP_DEADLINE_S * len(self.draws)


def arrivals(seed: int) -> list[Workflow]:
    rng = random.Random(seed)
    out, t = [], 0.0
    while True:
        rate = HIGH_RATE if int(t // PHASE_S) % 2 else LOW_RATE
        t += rng.expovariate(rate)
        if t >= ARRIVAL_SECONDS:
            return out
        out.append(Workflow(t, tuple(rng.random() for _ in range(rng.randint(*STEPS)))))


def _raw(policy: str, margin: float | None, cheap_max: int | None) -> dict[str, Any]:
    m = {"engine": "vllm", "model": "org/model", "toolCallParser": "none",
         "tenant": "alpha", "pool": "gpu", "workload": "agent"}
    return {
        "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
        "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
        "tenants": {"alpha": {"gpuQuota": 16, "rateLimit": {"requestsPerSecond": 100000, "burst": 100000}}},
        "models": {"cheap": {**m, "slo": {"e2eSeconds": 0.4}, "variant": {
                       "costPerRequest": COST["cheap"], **({} if cheap_max is None else {"maxRequests": cheap_max})}},
                   "fast": {**m, "slo": {"e2eSeconds": 0.1}, "variant": {"costPerRequest": COST["fast"]}}},
        "gateway": {"auth": {"issuers": [{"issuer": ISSUER, "jwksUri": f"{ISSUER}/certs",
                                          "audiences": [DEFAULT_AUDIENCE]}]},
                    # scaled like the time above: a shedding engine is ejected for 1 s, not 30 s
                    "outlierDetection": {"intervalSeconds": 0.5, "baseEjectionSeconds": 1.0},
                    "routing": {"agent": {"policy": policy,
                                          **({} if margin is None else {"marginPercent": margin})}}},
        "observability": {"prices": {"dgx-h100": 30.0}},
    }


@dataclass
class Outcome:
    cost: float = 0.0
    late: bool = False
    overflowed: int = 0
    failed: int = 0


def _run_workflow(tel: Telemetry, port: int, token: str, wf: Workflow, t0: float) -> Outcome:
    time.sleep(max(0.0, t0 + wf.start_s - time.monotonic()))
    began, out = time.monotonic(), Outcome()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        with tel.workflow("agent", budget_s=wf.deadline_s, steps=len(wf.draws)):
            for i, u in enumerate(wf.draws):
                with tel.step("llm", f"step-{i}"):
                    conn.request("POST", "/v1/chat/completions", body=b"{}", headers={
                        "authorization": f"Bearer {token}", "x-model": "agent", "content-type": "application/json",
                        **tel.headers(), "x-bench-draw": f"{u:.6f}"})
                    resp = conn.getresponse()
                    resp.read()
                served = resp.getheader("x-aifactory-variant") or ""
                chosen = (resp.getheader("x-aifactory-route") or "").split(";")[0]
                if resp.status != 200:
                    out.failed += 1
                    out.late = True
                    continue
                out.cost += COST[served]
                out.overflowed += served != chosen
    finally:
        conn.close()
    out.late = out.late or time.monotonic() - began > wf.deadline_s
    return out


def run_policy(policy: str, margin: float | None, cheap_max: int | None, work: list[Workflow],
               tmp: Path) -> tuple[list[Outcome], float]:
    """Each workflow's outcome, and the share of the run the cheap variant had every slot busy."""
    issuer = Issuer(ISSUER)
    tel = Telemetry(tenant="alpha")  # over the global OTel providers: no-ops here, only the budget headers matter
    cfg = parse(_raw(policy, margin, cheap_max), stack="bench")
    engines = {"cheap": Engine("cheap", CHEAP_SLOTS), "fast": Engine("fast", FAST_SLOTS)}
    threads = [threading.Thread(target=e.serve_forever, daemon=True) for e in engines.values()]
    for t in threads:
        t.start()
    try:
        admin, listener = free_port(), free_port()
        endpoints = {n: [("127.0.0.1", e.server_address[1])] for n, e in engines.items()}
        endpoints["otel_collector"] = [("127.0.0.1", free_port())]
        config = rebind(bootstrap(cfg), listener_port=listener, stats_port=free_port(), admin_port=admin,
                        endpoints=endpoints, jwks=[issuer.jwks])
        workdir = Path(tempfile.mkdtemp(dir=tmp))
        with EnvoyProcess(config, workdir, admin_port=admin, listener_port=listener, concurrency=2) as envoy:
            token = issuer.token(tenant="alpha")
            await_replicas(envoy, {n: 1 for n in engines})  # first health checks (no panic mode)
            t0 = time.monotonic() + 0.2
            with ThreadPoolExecutor(max_workers=128) as pool:
                outs = list(pool.map(lambda wf: _run_workflow(tel, listener, token, wf, t0), work))
            return outs, engines["cheap"].saturated_s / (time.monotonic() - t0)
    finally:
        for e in engines.values():
            e.shutdown()
            e.server_close()


def run(seeds: tuple[int, ...] = SEEDS) -> list[tuple[str, str]]:
    rows = []
    saving: dict[str, list[float]] = {label: [] for label, *_ in POLICIES}
    extra_misses: dict[str, list[float]] = {label: [] for label, *_ in POLICIES}
    with tempfile.TemporaryDirectory() as d:
        for seed in seeds:
            work = arrivals(seed)
            rows.append((f"seed {seed}: workflows (same arrivals for each policy)",
                         f"{len(work)}, {sum(len(w.draws) for w in work)} steps"))
            results = {label: run_policy(policy, margin, cheap_max, work, Path(d))
                       for label, policy, margin, cheap_max in POLICIES}
            base_cost = sum(o.cost for o in results["fastest"][0]) / len(work)
            base_misses = sum(o.late for o in results["fastest"][0]) / len(work)
            for label, (outs, saturated) in results.items():
                cost = sum(o.cost for o in outs) / len(work)
                misses = sum(o.late for o in outs) / len(work)
                saving[label].append(cost / base_cost - 1)
                extra_misses[label].append(misses - base_misses)
                rows.append((f"seed {seed}: {label}",
                             f"cost/workflow {cost:.2f} ({cost / base_cost - 1:+.1%}), misses {misses:.1%}, "
                             f"overflowed/failed {sum(o.overflowed for o in outs)}/{sum(o.failed for o in outs)}, "
                             f"cheap saturated {saturated:.0%}"))
    for label, *_ in POLICIES:
        rows.append((f"mean over seeds {', '.join(map(str, seeds))}: {label}",
                     f"cost {sum(saving[label]) / len(seeds):+.1%} vs all-fastest, misses "
                     f"{100 * sum(extra_misses[label]) / len(seeds):+.1f} points vs all-fastest"))
    return rows


if __name__ == "__main__":
    for label, figure in run(tuple(int(a) for a in sys.argv[1:]) or SEEDS):
        print(f"{label:<70} {figure}", flush=True)
