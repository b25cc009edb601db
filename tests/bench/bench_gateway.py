"""Envoy gateway overhead on loopback: p50/p99 latency added to a direct call, at 500 and 2,000 req/s.

The backend is a second Envoy answering every request itself (direct_response), so the backend adds
almost nothing and the difference between "client -> backend" and "client -> gateway -> backend" is
the gateway: the dev stack's generated config (routing, rate limit, retries, access log, tracing),
rebound to 127.0.0.1, with the tenant's rate limit raised above the bench rate. Direct and gateway
requests are paced at the same rate and interleaved, so machine noise hits both alike; latency is
measured from send to last byte by the same Python client. Target: p99 overhead under 1 ms.
"""

from __future__ import annotations

import http.client
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from components.k8s.envoy_config import bootstrap, rebind
from infra.config import parse
from tests.support.fake_backends import EnvoyProcess, free_port
from tests.support.stacks import stack_raw

RATES = (500, 2000)
SECONDS = 3.0  # per measurement
CONNECTIONS = 4
WARMUP_REQUESTS = 200
MODEL = "chat"  # the dev stack's model


def backend_bootstrap(port: int, admin_port: int) -> dict[str, Any]:
    """An Envoy that answers 200 with a small JSON body to every request."""
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
                 "HttpConnectionManager",
        "stat_prefix": "backend",
        "route_config": {"virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [{
            "match": {"prefix": "/"},
            "direct_response": {"status": 200, "body": {"inline_string": '{"object":"list","data":[]}'}}}]}]},
        "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}],
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {"listeners": [{
            "name": "backend", "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                            "typed_config": hcm}]}]}]},
    }


def measure(direct_port: int, gateway_port: int, rate: int, seconds: float) -> tuple[list[float], list[float]]:
    """Latencies (ms) of direct and via-gateway GETs, `rate` per second each, interleaved in alternating
    order over CONNECTIONS pairs of keep-alive connections (so background noise hits both alike)."""
    total = int(rate * seconds)
    start = time.perf_counter() + 0.05
    out: dict[int, list[float]] = {direct_port: [], gateway_port: []}
    errors: list[str] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        conns = {p: http.client.HTTPConnection("127.0.0.1", p, timeout=5) for p in out}
        mine: dict[int, list[float]] = {p: [] for p in out}
        try:
            for i in range(k, total, CONNECTIONS):
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                for port in (direct_port, gateway_port) if i % 2 else (gateway_port, direct_port):
                    t0 = time.perf_counter()
                    conns[port].request("GET", "/v1/models", headers={"x-model": MODEL})
                    resp = conns[port].getresponse()
                    resp.read()
                    mine[port].append((time.perf_counter() - t0) * 1000)
                    if resp.status != 200:
                        raise RuntimeError(f"port {port}: status {resp.status}")
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            errors.append(str(exc))
        finally:
            for c in conns.values():
                c.close()
            with lock:
                for p, values in mine.items():
                    out[p] += values

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} connection(s) failed: {errors[0]}")
    return out[direct_port], out[gateway_port]


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1]


def run() -> list[tuple[str, str]]:
    raw = stack_raw("dev")
    for tenant in raw["tenants"].values():  # the bench measures latency, not the tenant's rate limit
        tenant["rateLimit"] = {"requestsPerSecond": 10 * max(RATES), "burst": 10 * max(RATES)}
    cfg = parse(raw, stack="dev")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        b_port, b_admin, g_port, g_admin = free_port(), free_port(), free_port(), free_port()
        (Path(tmp) / "backend").mkdir()
        (Path(tmp) / "gateway").mkdir()
        gateway_cfg = rebind(bootstrap(cfg), listener_port=g_port, stats_port=free_port(), admin_port=g_admin,
                             endpoints={MODEL: [("127.0.0.1", b_port)], "otel_collector": [("127.0.0.1", free_port())]})
        with EnvoyProcess(backend_bootstrap(b_port, b_admin), Path(tmp) / "backend", admin_port=b_admin,
                          listener_port=b_port), \
                EnvoyProcess(gateway_cfg, Path(tmp) / "gateway", admin_port=g_admin, listener_port=g_port,
                             concurrency=2):
            measure(b_port, g_port, 1000, WARMUP_REQUESTS / 1000)
            for rate in RATES:
                direct, via = measure(b_port, g_port, rate, SECONDS)
                for q, label in ((0.5, "p50"), (0.99, "p99")):
                    d, g = percentile(direct, q), percentile(via, q)
                    rows.append((f"{rate} req/s {label}", f"direct {d:6.3f} ms  via gateway {g:6.3f} ms  "
                                                          f"added {g - d:+6.3f} ms"))
    return rows
