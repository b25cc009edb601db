"""The gateway's generated bootstrap, pointed at loopback: listeners on 127.0.0.1 ports, each model's DNS cluster
replaced by static endpoints (fake backends), local JWKS instead of the issuers' remote ones. For the live tests and
benches that run the real Envoy on the kit's config."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from components.k8s.envoy_base import ADMIN_CLUSTER, DNS_CLUSTER_TYPE, _address
from components.k8s.envoy_config import GatewayView, bootstrap
from tests.support.fake_backends import EnvoyProcess
from tests.support.processes import free_port

__all__ = ["rebind", "start_gateway"]


def start_gateway(stack: ExitStack, cfg: GatewayView, workdir: Path, *,
                  endpoints: Mapping[str, Sequence[tuple[str, int]]], jwks: Sequence[str]) -> EnvoyProcess:
    """The real Envoy on the kit's bootstrap for `cfg`, rebound to 127.0.0.1 ports with `endpoints` per cluster and
    an OTLP Collector address nothing listens on (spans are dropped), entered into `stack` (stopped with it)."""
    admin, listener, stats = free_port(), free_port(), free_port()
    config = rebind(bootstrap(cfg), listener_port=listener, stats_port=stats, admin_port=admin,
                    endpoints={**endpoints, "otel_collector": [("127.0.0.1", free_port())]}, jwks=list(jwks))
    return stack.enter_context(EnvoyProcess(config, workdir, admin_port=admin, listener_port=listener))


def rebind(config: Mapping[str, Any], *, listener_port: int, stats_port: int, admin_port: int,
           endpoints: Mapping[str, Sequence[tuple[str, int]]], jwks: Sequence[str] = ()) -> dict[str, Any]:
    """A copy of `config` listening on 127.0.0.1 ports, each DNS cluster replaced by static endpoints.

    `endpoints` maps every DNS cluster name to the (address, port) pairs to use instead. `jwks`
    gives each issuer (in config order) a local JWKS document instead of its remote one; the JWKS
    clusters are dropped.
    """
    out = copy.deepcopy(dict(config))
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
            meta = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0].get("metadata")
            c["load_assignment"]["endpoints"] = [{"lb_endpoints": [
                {"endpoint": {"address": _address(host, port)}, **({"metadata": meta} if meta else {})}
                for host, port in endpoints[c["name"]]]}]
    return out
