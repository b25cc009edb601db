"""The model clusters' DNS names on the real Envoy 1.40 (c-ares), against a DNS server on 127.0.0.1 that logs every
query (tests.support.fake_dns).

A model's cluster resolves its headless Service's absolute name (components.k8s.gateway.envoy.replicas.replicas_host:
a trailing dot), and each address it answers is a replica. The gateway pod's resolv.conf has search domains and
`ndots:5`; here c-ares gets them from LOCALDOMAIN and RES_OPTIONS (c-ares reads them as it reads resolv.conf), so a
relative name would also be tried under each search domain.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.k8s import naming
from components.k8s.gateway.envoy.base import _address
from components.k8s.gateway.envoy.replicas import model_cluster, replicas_host
from infra.config import parse
from tests.artifacts.test_envoy_input_live import RAW
from tests.support.fake_backends import EnvoyProcess, FakeBackend, free_port
from tests.support.fake_dns import FakeDns, resolver

SEARCH = ("alpha.svc.cluster.local", "svc.cluster.local", "cluster.local")  # a pod's search list, less the host's
WAIT_S = 20.0  # bounded wait for Envoy's first resolutions (it resolves at start, then every few seconds)


@pytest.fixture
def search_domains(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("LOCALDOMAIN", " ".join(SEARCH))
    monkeypatch.setenv("RES_OPTIONS", "ndots:5")
    yield


def test_a_model_queries_its_services_absolute_name_only_once_per_refresh(search_domains: None,
                                                                          tmp_path: Path) -> None:
    """`spare` may run 4 replicas and runs 2: its cluster asks for its Service's name, as is (never under a search
    domain), one question per refresh whatever replicas.max is (before: one name per ordinal, absent ones
    included: issue 44 item 12), and both addresses are its hosts; `pool` (its name made relative, its dot
    removed), beside it, is also tried under the search domains."""
    cfg = parse(RAW, stack="dns")
    spare, pool = cfg.models["spare"], cfg.models["pool"]
    name, other = replicas_host(cfg, spare), replicas_host(cfg, pool)
    assert name == "spare.alpha.svc.cluster.local."
    # two replicas on two loopback addresses, one port: the Service's records carry addresses only
    with FakeBackend("spare-0") as replica, FakeDns({name.rstrip("."): ["127.0.0.1", "127.0.0.2"]}) as dns:
        clusters = []
        for m, host in ((spare, name), (pool, other.rstrip("."))):
            c = model_cluster(cfg, m)
            endpoint = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
            assert endpoint["address"]["socket_address"]["port_value"] == naming.MODEL_HTTP_PORT
            endpoint["address"] = _address(host, replica.address[1])
            c["cluster_type"]["typed_config"]["typed_dns_resolver_config"] = resolver(dns.port)
            c["cluster_type"]["typed_config"]["dns_refresh_rate"] = "0.5s"
            del c["health_checks"]
            clusters.append(c)
        admin = free_port()
        config = {"admin": {"address": _address("127.0.0.1", admin)}, "static_resources": {"clusters": clusters}}
        with EnvoyProcess(config, tmp_path, admin_port=admin, listener_port=free_port()) as envoy:
            deadline = time.monotonic() + WAIT_S
            while not (envoy.stats().get("cluster.spare.update_attempt", 0) >= 3
                       and envoy.stats().get("cluster.pool.update_attempt", 0) >= 2):
                assert time.monotonic() < deadline, dns.queries
                time.sleep(0.1)
            stats = envoy.stats()
    asked = [q for q in dns.queries if q.startswith("spare")]
    assert set(asked) == {name.rstrip(".")}
    assert len(asked) <= stats["cluster.spare.update_attempt"]  # one question per resolution
    assert stats["cluster.spare.membership_total"] == 2
    searched = {q for q in dns.queries if q.startswith("pool") and q != other.rstrip(".")}
    assert searched and {q.removeprefix(other.rstrip(".") + ".") for q in searched} <= set(SEARCH), dns.queries
