"""The gateway's day-2 scenarios (issue 44): the real Envoy on the kit's bootstrap in front of stand-in replicas
(tests.support.standin_engines: vLLM's; SGLang's or Triton's too for the rollouts), the model's cluster resolving its
Service's name against a DNS server the scenario changes (tests.support.fake_dns), under a steady mix of streamed and
non-streamed generations. Used by tests/artifacts/test_day2_scenarios_live.py (assertions) and
tests/bench/bench_day2.py (figures).

Times are scaled down, each by what the tested system allows: the DNS refresh (5 s shipped) to DNS_REFRESH_S, the
progress checks (8 s timeout, 2 s interval, one failure shipped) to CHECK_TIMEOUT_S and CHECK_INTERVAL_S (SCALE of
theirs), a replica's preStop wait (longer than
components.k8s.defaults.GATEWAY_DETECTION_SECONDS shipped) to PRESTOP_S, the try idle timeout (30 s shipped, 3 x the
checks' 10 s window) to TRY_IDLE_S (3 x theirs here), a client connection's lifetime and drain (60 s and 5 s shipped:
components.k8s.gateway.envoy.config.CLIENT_CONNECTION_MAX_SECONDS, CLIENT_DRAIN_SECONDS) to CONNECTION_S and
CLIENT_DRAIN_S. Ratios are kept: the preStop outwaits both the DNS refresh and the checks' detection, and a hang is
the checks' to find, not the try idle timeout's.
"""

from __future__ import annotations

import copy
import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.k8s.engines.vllm import served_model_names
from components.k8s.gateway.envoy.base import DNS_CLUSTER_TYPE, model_host
from components.k8s.gateway.envoy.config import bootstrap
from infra.config import PlatformConfig, parse
from tests.support.envoy import await_replicas, rebind
from tests.support.fake_backends import EnvoyProcess, free_port
from tests.support.fake_dns import FakeDns, resolver
from tests.support.standin_engines import StandInEngine
from tests.support.tokens import DEFAULT_AUDIENCE, Issuer

__all__ = ["MODEL", "DNS_REFRESH_S", "SCALE", "CHECK_TIMEOUT_S", "CHECK_INTERVAL_S", "DETECTION_S", "PRESTOP_S",
           "TRY_IDLE_S", "CONNECTION_S", "CLIENT_DRAIN_S", "Call", "Run", "Scenario", "scenario", "SCENARIOS"]

MODEL = "chat"
ISSUER = "https://issuer.day2/realms/aifactory"
DNS_REFRESH_S = 0.2
SCALE = 0.08  # the checks' times and SGLang's own, scaled from those shipped
# check timeout and interval (8 s and 2 s shipped: components.k8s.defaults); unhealthyThreshold 1: a silent replica is
# out within 0.64 + 0.16 s
CHECK_TIMEOUT_S, CHECK_INTERVAL_S = 8 * SCALE, 2 * SCALE
DETECTION_S = 1 * (CHECK_TIMEOUT_S + CHECK_INTERVAL_S)  # the checks' window (GATEWAY_DETECTION_SECONDS, 10 s shipped)
PRESTOP_S = 1.0  # > DNS_REFRESH_S and > the checks' detection (0.8 s), as the shipped preStop > 10 s
TRY_IDLE_S = 2.4  # 3 x DETECTION_S, as shipped (30 s, 3 x 10 s)
CONNECTION_S, CLIENT_DRAIN_S = 0.5, 0.2  # the gateway's max_connection_duration and drain_timeout, where it sets them
TIMEOUT_S = 3.0  # the model's timeoutSeconds
SHUTDOWN_TIMEOUT_S = 5.0  # the stand-ins' --shutdown-timeout: longer than any generation here
TOKENS, TOKEN_S = 10, 0.02  # a generation: 0.2 s
RATE = 80.0  # generations per second, half streamed
READY_S = 10.0  # bounded waits for the gateway to see a replica come or go
CONSECUTIVE_FAILURES = 3  # gateway.outlierDetection.consecutive5xx (default)
# SGLang's /health_generate poll (1 s) and timeout (20 s), and its SIGTERM watchdog's poll (5 s), scaled as the checks
# are
SGLANG_TIMES = {"poll_s": 1 * SCALE, "check_timeout_s": 20 * SCALE, "watchdog_s": 5 * SCALE}
# Every replica saturated: generations per second, fewer than RATE so that the load's threads (64) outnumber the
# generations in flight when each waits its queue
SATURATED_RATE = 40.0


def raw_stack(engine: str = "vllm") -> dict[str, Any]:
    return {
        "target": {"provider": "existing", "kubeconfig": "/dev/null", "storageClass": "fast"},
        "nodePools": {"gpu": {"instanceType": "dgx-h100"}},
        "tenants": {"alpha": {"gpuQuota": 32, "rateLimit": {"requestsPerSecond": 10000, "burst": 20000}}},
        "models": {MODEL: {"engine": engine, "model": "org/model", "toolCallParser": "none", "tenant": "alpha",
                           "pool": "gpu", "replicas": {"min": 1, "max": 4}, "timeoutSeconds": TIMEOUT_S,
                           "tryIdleTimeoutSeconds": TRY_IDLE_S}},
        "gateway": {
            "auth": {"issuers": [{"issuer": ISSUER, "jwksUri": f"{ISSUER}/certs", "audiences": [DEFAULT_AUDIENCE]}]},
            "healthCheck": {"intervalSeconds": CHECK_INTERVAL_S, "timeoutSeconds": CHECK_TIMEOUT_S,
                            "unhealthyThreshold": 1, "healthyThreshold": 1},
            "outlierDetection": {"intervalSeconds": 0.1},
        },
        "observability": {"prices": {"dgx-h100": 30.0}, "traceSampleRatio": 0.0},
    }


@dataclass
class Call:
    sent: float  # monotonic
    streamed: bool
    status: int = 0  # 0: no answer (connection failed)
    complete: bool = False  # the whole answer arrived (a stream up to [DONE])
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.complete

    @property
    def cut(self) -> bool:
        """A stream (or answer) that started and did not end."""
        return self.status == 200 and not self.complete


@dataclass
class Run:
    """What a scenario saw: every call, each replica (by name), and named moments (monotonic)."""

    calls: list[Call] = field(default_factory=list)
    replicas: dict[str, StandInEngine] = field(default_factory=dict)
    moments: dict[str, float] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

    def success(self, since: float = 0.0) -> float:
        calls = [c for c in self.calls if c.sent >= since]
        return sum(c.ok for c in calls) / max(len(calls), 1)

    @property
    def cut(self) -> int:
        return sum(c.cut for c in self.calls)


class Scenario:
    """A running gateway, its DNS and its replicas (127.0.0.<10 + k>, one shared port), and a load. Replica `ordinal`
    is pod `chat-<ordinal>`: its Service publishes its address under the Service's name and under its own
    (`chat-<ordinal>.chat.<namespace>...`, a StatefulSet pod's stable name) while it is ready."""

    def __init__(self, stack: ExitStack, workdir: Path, replicas: int, engine: str = "vllm") -> None:
        self.engine = engine
        self.cfg: PlatformConfig = parse(raw_stack(engine), stack="day2")
        self.issuer = Issuer(ISSUER)
        self.port = free_port()
        self._stack = stack
        self._started = 0
        self.pods: dict[int, StandInEngine] = {}  # ordinal -> its ready pod (published)
        self.run = Run()
        self.service = model_host(self.cfg, self.cfg.models[MODEL])
        self.dns = stack.enter_context(FakeDns({}))
        for ordinal in range(replicas):
            self.add_replica(ordinal)
        self.envoy = stack.enter_context(EnvoyProcess(self._config(), workdir, admin_port=self._admin,
                                                      listener_port=self._listener))
        await_replicas(self.envoy, {MODEL: replicas}, timeout=READY_S)

    def _config(self) -> dict[str, Any]:
        """The kit's bootstrap on loopback ports, each cluster that resolves a name under the model's Service (its
        own, or each replica's) resolving it against the scenario's DNS, every DNS_REFRESH_S."""
        self._admin, self._listener = free_port(), free_port()
        original = {c["name"]: c for c in bootstrap(self.cfg)["static_resources"]["clusters"]}
        config = rebind(bootstrap(self.cfg), listener_port=self._listener, stats_port=free_port(),
                        admin_port=self._admin, jwks=[self.issuer.jwks],
                        endpoints={MODEL: [("127.0.0.1", self.port)], "otel_collector": [("127.0.0.1", free_port())]})

        def resolved(c: dict[str, Any]) -> dict[str, Any]:
            o = original.get(c["name"], {})
            if o.get("cluster_type", {}).get("name") != DNS_CLUSTER_TYPE:
                return c
            out = copy.deepcopy(o)
            [endpoint] = out["load_assignment"]["endpoints"][0]["lb_endpoints"]
            address = endpoint["endpoint"]["address"]["socket_address"]
            if not address["address"].rstrip(".").endswith(self.service):
                return c
            address["port_value"] = self.port
            out["cluster_type"]["typed_config"]["dns_refresh_rate"] = f"{DNS_REFRESH_S}s"
            out["cluster_type"]["typed_config"]["typed_dns_resolver_config"] = resolver(self.dns.port)
            return out

        config["static_resources"]["clusters"] = [resolved(c) for c in config["static_resources"]["clusters"]]
        [listener] = [li for li in config["static_resources"]["listeners"] if li["name"] == "gateway"]
        hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
        if "max_connection_duration" in hcm["common_http_protocol_options"]:
            hcm["common_http_protocol_options"]["max_connection_duration"] = f"{CONNECTION_S}s"
        if "drain_timeout" in hcm:
            hcm["drain_timeout"] = f"{CLIENT_DRAIN_S}s"
        return config

    def _publish(self) -> None:
        self.dns.set(self.service, [p.host for p in self.pods.values()])
        for ordinal in range(4):
            pod = self.pods.get(ordinal)
            self.dns.set(f"{MODEL}-{ordinal}.{self.service}", [pod.host] if pod else [])

    def add_replica(self, ordinal: int) -> StandInEngine:
        """Pod `chat-<ordinal>` starts (a new address), then its records appear (it is ready)."""
        name = f"{MODEL}-{ordinal}" + (f"#{self._started}" if self._started >= 3 else "")
        served = tuple(served_model_names(self.cfg.models[MODEL]))
        replica = self._stack.enter_context(StandInEngine(name, f"127.0.0.{10 + self._started}", self.port,
                                                          kind=self.engine, served=served, tokens=TOKENS,
                                                          token_s=TOKEN_S, shutdown_timeout_s=SHUTDOWN_TIMEOUT_S,
                                                          **SGLANG_TIMES))
        self._started += 1
        self.run.replicas[name] = replica
        self.pods[ordinal] = replica
        self._publish()
        return replica

    def delete_pod(self, ordinal: int) -> None:
        """Pod `chat-<ordinal>` is deleted (rollout, scale-in, drain): its endpoint leaves the Service's ready
        addresses at once, its preStop waits PRESTOP_S, then its engine gets SIGTERM and drains; returns once the
        process is gone."""
        replica = self.pods.pop(ordinal)
        self._publish()
        self.run.moments[f"{replica.name} deleted"] = time.monotonic()
        time.sleep(PRESTOP_S)  # the preStop hook's wait
        self.run.moments[f"{replica.name} sigterm"] = time.monotonic()
        replica.sigterm()
        replica.exited.wait(SHUTDOWN_TIMEOUT_S + 1)

    def await_healthy(self, n: int) -> None:
        await_replicas(self.envoy, {MODEL: n}, timeout=READY_S)

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self._listener, timeout=2 * TIMEOUT_S)

    def exchange(self, conn: http.client.HTTPConnection, streamed: bool) -> tuple[Call, str | None]:
        """One generation on `conn` (kept open): the call and the answer's Connection header."""
        c = Call(sent=time.monotonic(), streamed=streamed)
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                           "stream": streamed}).encode()
        connection = None
        try:
            conn.request("POST", "/v1/chat/completions", body=body, headers={
                **self.issuer.bearer("alpha"), "content-type": "application/json"})
            resp = conn.getresponse()
            c.status, connection = resp.status, resp.getheader("connection")
            raw = resp.read()
            c.complete = raw.endswith(b"data: [DONE]\n\n") if streamed else (
                resp.status == 200 and json.loads(raw).get("tokens") == TOKENS)
        except (OSError, http.client.HTTPException, ValueError):
            pass
        finally:
            c.seconds = time.monotonic() - c.sent
        return c, connection

    def call(self, streamed: bool) -> Call:
        conn = self.connect()
        try:
            return self.exchange(conn, streamed)[0]
        finally:
            conn.close()

    @contextmanager
    def load(self, rate: float = RATE) -> Iterator[None]:
        """Generations `rate` per second (alternately streamed and not) while the block runs, then until answered."""
        stop = threading.Event()
        pool = ThreadPoolExecutor(64)
        futures = []

        def pace() -> None:
            start, i = time.monotonic(), 0
            while not stop.is_set():
                futures.append(pool.submit(self.call, i % 2 == 0))
                i += 1
                stop.wait(max(0.0, start + i / rate - time.monotonic()))

        pacer = threading.Thread(target=pace, daemon=True)
        pacer.start()
        try:
            yield
        finally:
            stop.set()
            pacer.join(timeout=5)
            self.run.calls.extend(f.result() for f in futures)
            pool.shutdown()
            self.run.stats = self.envoy.stats()


def rolling_update(s: Scenario) -> None:
    """A StatefulSet rollout: highest ordinal first, each pod deleted (preStop, drain), its successor started and
    ready before the next."""
    with s.load():
        time.sleep(0.5)
        for ordinal in sorted(s.pods, reverse=True):
            s.delete_pod(ordinal)
            s.add_replica(ordinal)
            s.await_healthy(len(s.pods))
        time.sleep(0.5)


def scale_down(s: Scenario) -> None:
    """KEDA scales in: the highest ordinal's pod is deleted (preStop, drain)."""
    with s.load():
        time.sleep(0.5)
        s.delete_pod(max(s.pods))
        time.sleep(1.0)


def _fault(moment: str, fault: Callable[[StandInEngine], None], s: Scenario) -> None:
    """Replica 1 turns bad half a second in (the moment named `moment`), under load for three more seconds."""
    with s.load():
        time.sleep(0.5)
        s.run.moments[moment] = time.monotonic()
        fault(s.run.replicas[f"{MODEL}-1"])
        time.sleep(3.0)


def _saturate(r: StandInEngine) -> None:
    """From 2 generations in flight the replica's /health, on the busy event loop, answers after one and a half check
    timeouts, and a new generation (the progress check too) waits as long in its queue: it fails its checks, well
    inside any try idle timeout."""
    r.saturate(busy_at=2, busy_s=1.5 * CHECK_TIMEOUT_S)


def saturated_health(s: Scenario) -> None:
    """One replica saturated (_saturate)."""
    _fault("saturate", _saturate, s)


def all_saturated(s: Scenario) -> None:
    """Every replica saturated (_saturate) half a second in, under SATURATED_RATE for three more seconds: each fails
    its checks, so the model has no replica passing them."""
    with s.load(SATURATED_RATE):
        time.sleep(0.5)
        s.run.moments["saturate"] = time.monotonic()
        for replica in s.pods.values():
            _saturate(replica)
        time.sleep(3.0)


def replica_500(s: Scenario) -> None:
    """One replica answers 500 to every generation while its /health passes."""
    _fault("fail", StandInEngine.fail, s)


def engine_hang(s: Scenario) -> None:
    """One replica's engine core hangs: no token comes (the progress check's neither), /health still passes (vLLM's
    check_health)."""
    _fault("hang", StandInEngine.hang, s)


SCENARIOS: dict[str, Callable[[Scenario], None]] = {
    "rolling-update": rolling_update,
    "scale-down": scale_down,
    "saturated-health": saturated_health,
    "all-saturated": all_saturated,
    "replica-500": replica_500,
    "engine-hang": engine_hang,
}
REPLICAS = 3


def scenario(name: str, workdir: Path, engine: str = "vllm") -> Run:
    """Run scenario `name` on a gateway of its own (REPLICAS replicas of `engine`'s stand-in); everything is stopped
    when it returns."""
    with ExitStack() as stack:
        s = Scenario(stack, workdir, REPLICAS, engine)
        SCENARIOS[name](s)
        return s.run
