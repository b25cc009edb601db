"""The gateway's generated bootstrap, pointed at loopback: listeners on 127.0.0.1 ports, each DNS cluster replaced by
static endpoints (fake backends: a model's replicas), local JWKS instead of the issuers' remote ones.
For the live tests and benches that run the real Envoy on the kit's config."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from components.k8s.gateway.envoy.base import ADMIN_CLUSTER, DNS_CLUSTER_TYPE, _address
from components.k8s.gateway.envoy.budgets import (
    BUDGETS_CLOSED_FILTER,
    BUDGETS_CLUSTER,
    BUDGETS_FILTER,
    BUDGETS_METER_FILTER,
)
from components.k8s.gateway.envoy.config import GatewayView, bootstrap
from components.k8s.naming import LAST_RESORT_SUFFIX
from tests.support.fake_backends import EnvoyProcess
from tests.support.processes import free_port

FLUSH_INTERVAL_KEY = "tracing.opentelemetry.flush_interval_ms"
TEST_FLUSH_INTERVAL_MS = 100
BUDGET_FILTERS = (BUDGETS_FILTER, BUDGETS_CLOSED_FILTER, BUDGETS_METER_FILTER)

__all__ = ["rebind", "start_gateway", "await_replicas"]

READY_TIMEOUT_S = 30.0  # bounded wait for every replica's first passing checks


def start_gateway(stack: ExitStack, cfg: GatewayView, workdir: Path, *,
                  endpoints: Mapping[str, Sequence[tuple[str, int]]], jwks: Sequence[str],
                  down: Sequence[str] = (),
                  adjust: Callable[[dict[str, Any]], None] | None = None) -> EnvoyProcess:
    """The real Envoy on the kit's bootstrap for `cfg`, rebound to 127.0.0.1 ports with `endpoints` per cluster and
    an OTLP Collector address nothing listens on (spans are dropped), entered into `stack` (stopped with it), once
    every model's replicas are healthy (but the models in `down`, whose replicas are meant to fail their checks).
    `adjust` changes the rebound bootstrap in place first (a test's deliberate departure from the kit's)."""
    admin, listener, stats = free_port(), free_port(), free_port()
    config = rebind(bootstrap(cfg), listener_port=listener, stats_port=stats, admin_port=admin,
                    endpoints={**endpoints, "otel_collector": [("127.0.0.1", free_port())]}, jwks=list(jwks))
    if adjust is not None:
        adjust(config)
    envoy = stack.enter_context(EnvoyProcess(config, workdir, admin_port=admin, listener_port=listener))
    await_replicas(envoy, {m: len(endpoints[m]) for m in cfg.models if m in endpoints and m not in down})
    return envoy


def await_replicas(envoy: EnvoyProcess, replicas: Mapping[str, int], *, timeout: float = READY_TIMEOUT_S) -> None:
    """Until each model's cluster has its `replicas` healthy (each passed its checks; the model's cluster has no panic
    mode, so until then it answers 503), bounded by `timeout`."""
    deadline = time.monotonic() + timeout
    while short := {m: n for m, n in replicas.items()
                    if envoy.stats().get(f"cluster.{m}.membership_healthy", 0) < n}:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Envoy never saw every replica healthy within {timeout} s: {short}")
        time.sleep(0.05)


def _without_budgets(config: dict[str, Any]) -> dict[str, Any]:
    config["static_resources"]["clusters"] = [c for c in config["static_resources"]["clusters"]
                                              if c["name"] != BUDGETS_CLUSTER]
    for listener in config["static_resources"]["listeners"]:
        for chain in listener.get("filter_chains", []):
            for f in chain["filters"]:
                hcm = f.get("typed_config", {})
                if "http_filters" in hcm:
                    hcm["http_filters"] = [h for h in hcm["http_filters"] if h["name"] not in BUDGET_FILTERS]
    return config


def rebind(config: Mapping[str, Any], *, listener_port: int, stats_port: int, admin_port: int,
           endpoints: Mapping[str, Sequence[tuple[str, int]]], jwks: Sequence[str] = ()) -> dict[str, Any]:
    """A copy of `config` listening on 127.0.0.1 ports, each DNS cluster replaced by static endpoints.

    `endpoints` maps every DNS cluster name to the (address, port) pairs to use instead (a model's: its running
    replicas). `jwks` gives each issuer (in config order) a local JWKS document instead of its remote one; the JWKS
    clusters are dropped. A test that gives the token budget service no endpoints runs without the budget filters
    and their cluster (a fail-closed tenant's requests would otherwise be refused with no service to ask).
    """
    out = copy.deepcopy(dict(config))
    # Spans are exported at once rather than every 5 s (Envoy's default OpenTelemetry flush interval), so a test
    # waiting for a span waits for the span, not for the timer (envoyproxy/envoy@v1.40.0
    # source/extensions/tracers/opentelemetry/tracer.cc: runtime tracing.opentelemetry.flush_interval_ms).
    for layer in out.get("layered_runtime", {}).get("layers", []):
        if "static_layer" in layer:
            layer["static_layer"] = {**layer["static_layer"], FLUSH_INTERVAL_KEY: TEST_FLUSH_INTERVAL_MS}
    if BUDGETS_CLUSTER not in endpoints:
        out = _without_budgets(out)
    ports = {"gateway": listener_port, "stats": stats_port}
    for listener in out["static_resources"]["listeners"]:
        if "internal_listener" in listener:
            continue  # in process: nothing to bind
        listener["address"] = _address("127.0.0.1", ports[listener["name"]])
        for f in listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]:
            if f["name"] == "envoy.filters.http.jwt_authn":
                providers = f["typed_config"]["providers"]
                if len(jwks) != len(providers):
                    raise ValueError(f"rebind: {len(providers)} issuer(s) need as many local JWKS, got {len(jwks)}")
                for provider, doc in zip(providers.values(), jwks, strict=True):
                    del provider["remote_jwks"]
                    provider["local_jwks"] = {"inline_string": doc}
    out["admin"]["address"] = _address("127.0.0.1", admin_port)
    clusters = [c for c in out["static_resources"]["clusters"] if c.get("type") != "LOGICAL_DNS"]
    out["static_resources"]["clusters"] = clusters
    dns = [c for c in clusters if c.get("cluster_type", {}).get("name") == DNS_CLUSTER_TYPE]
    # a variant's last resort resolves the variant's Service: the same replicas, unless the test gives its own
    endpoints = {**{c["name"]: endpoints[m] for c in dns
                    if (m := c["name"].removesuffix(LAST_RESORT_SUFFIX)) != c["name"] and m in endpoints},
                 **endpoints}
    missing = sorted({c["name"] for c in dns} - set(endpoints))
    if missing:
        raise ValueError(f"rebind: no endpoints for cluster(s) {', '.join(missing)}")
    for c in clusters:
        if c["name"] == ADMIN_CLUSTER:
            c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] = \
                _address("127.0.0.1", admin_port)
        elif c in dns:
            del c["cluster_type"]
            c["type"] = "STATIC"
            addresses = list(endpoints[c["name"]])
            meta = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0].get("metadata")
            c["load_assignment"]["endpoints"] = [{"lb_endpoints": [
                {"endpoint": {"address": _address(host, port)}, **({"metadata": meta} if meta else {})}
                for host, port in addresses]}]
    return out
