"""The gateway's generated bootstrap, pointed at loopback: listeners on 127.0.0.1 ports, each DNS cluster replaced by
static endpoints (fake backends: a model's replica i behind its hop i), local JWKS instead of the issuers' remote ones.
For the live tests and benches that run the real Envoy on the kit's config."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from components.k8s.gateway.envoy.base import ADMIN_CLUSTER, DNS_CLUSTER_TYPE, _address
from components.k8s.gateway.envoy.config import GatewayView, bootstrap
from components.k8s.gateway.envoy.hops import HOP_SEPARATOR, HOP_SOCKET_PREFIX
from tests.support.fake_backends import EnvoyProcess
from tests.support.processes import free_port

__all__ = ["rebind", "start_gateway", "await_replicas"]

READY_TIMEOUT_S = 30.0  # the kit's default checks: the hop's first check, then the cluster's next one


def start_gateway(stack: ExitStack, cfg: GatewayView, workdir: Path, *,
                  endpoints: Mapping[str, Sequence[tuple[str, int]]], jwks: Sequence[str],
                  down: Sequence[str] = ()) -> EnvoyProcess:
    """The real Envoy on the kit's bootstrap for `cfg`, rebound to 127.0.0.1 ports with `endpoints` per cluster and
    an OTLP Collector address nothing listens on (spans are dropped), entered into `stack` (stopped with it), once
    every model's replicas are healthy (but the models in `down`, whose replicas are meant to fail their checks)."""
    admin, listener, stats = free_port(), free_port(), free_port()
    config = rebind(bootstrap(cfg), listener_port=listener, stats_port=stats, admin_port=admin,
                    endpoints={**endpoints, "otel_collector": [("127.0.0.1", free_port())]}, jwks=list(jwks))
    envoy = stack.enter_context(EnvoyProcess(config, workdir, admin_port=admin, listener_port=listener))
    await_replicas(envoy, {m: len(endpoints[m]) for m in cfg.models if m in endpoints and m not in down})
    return envoy


def await_replicas(envoy: EnvoyProcess, replicas: Mapping[str, int], *, timeout: float = READY_TIMEOUT_S) -> None:
    """Until each model's cluster has its `replicas` healthy (each passed its hop's check, then the cluster's own
    through the hop; the model's cluster has no panic mode, so until then it answers 503), bounded by `timeout`."""
    deadline = time.monotonic() + timeout
    while short := {m: n for m, n in replicas.items()
                    if envoy.stats().get(f"cluster.{m}.membership_healthy", 0) < n}:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Envoy never saw every replica healthy within {timeout} s: {short}")
        time.sleep(0.05)


def rebind(config: Mapping[str, Any], *, listener_port: int, stats_port: int, admin_port: int,
           endpoints: Mapping[str, Sequence[tuple[str, int]]], jwks: Sequence[str] = ()) -> dict[str, Any]:
    """A copy of `config` listening on 127.0.0.1 ports, each DNS cluster replaced by static endpoints.

    `endpoints` maps every DNS cluster name to the (address, port) pairs to use instead; a model's name stands for
    its replicas: the hop cluster of ordinal i (`<model>__replica-<i>`) gets the model's i-th pair, and ordinals
    past the pairs get none (a replica that does not exist: no DNS record). `jwks` gives each issuer (in config
    order) a local JWKS document instead of its remote one; the JWKS clusters are dropped. The hops' abstract
    socket names get `listener_port` in them, so that several gateways can run at once.
    """
    out = copy.deepcopy(dict(config))
    ports = {"gateway": listener_port, "stats": stats_port}
    for listener in out["static_resources"]["listeners"]:
        if "internal_listener" in listener or "pipe" in listener["address"]:
            continue  # in process, or a hop: nothing to bind
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
    hops = {c["name"]: c["name"].rpartition(HOP_SEPARATOR) for c in dns if HOP_SEPARATOR in c["name"]}
    missing = sorted({hops[c["name"]][0] if c["name"] in hops else c["name"] for c in dns} - set(endpoints))
    if missing:
        raise ValueError(f"rebind: no endpoints for cluster(s) {', '.join(missing)}")
    for model in {m for m, _, _ in hops.values()}:
        ordinals = sum(1 for m, _, _ in hops.values() if m == model)
        if len(endpoints[model]) > ordinals:
            raise ValueError(f"rebind: {len(endpoints[model])} replicas for model {model}, which has "
                             f"{ordinals} hop(s) (its replicas.max)")
    for c in clusters:
        if c["name"] == ADMIN_CLUSTER:
            c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] = \
                _address("127.0.0.1", admin_port)
        elif c in dns:
            del c["cluster_type"]
            c["type"] = "STATIC"
            if c["name"] in hops:
                model, _, ordinal = hops[c["name"]]
                addresses = list(endpoints[model])[int(ordinal):int(ordinal) + 1]
            else:
                addresses = list(endpoints[c["name"]])
            meta = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0].get("metadata")
            c["load_assignment"]["endpoints"] = [{"lb_endpoints": [
                {"endpoint": {"address": _address(host, port)}, **({"metadata": meta} if meta else {})}
                for host, port in addresses]}]
    _own_sockets(out, listener_port)
    return out


def _own_sockets(node: Any, tag: int) -> None:
    """Every hop socket name (listeners and the model clusters' hosts) made unique to this gateway."""
    if isinstance(node, dict):
        pipe = node.get("pipe")
        if isinstance(pipe, dict) and pipe.get("path", "").startswith(HOP_SOCKET_PREFIX):
            pipe["path"] = f"{HOP_SOCKET_PREFIX}{tag}/{pipe['path'].removeprefix(HOP_SOCKET_PREFIX)}"
        for v in node.values():
            _own_sockets(v, tag)
    elif isinstance(node, list):
        for v in node:
            _own_sockets(v, tag)
