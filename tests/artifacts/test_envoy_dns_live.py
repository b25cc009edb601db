"""The hops' DNS names on the real Envoy 1.40 (c-ares), against a DNS server on 127.0.0.1 that logs every query.

A hop resolves its replica's absolute name (components.k8s.gateway.envoy.hops.replica_host: a trailing dot). Its pod's
resolv.conf has search domains and `ndots:5`; here c-ares gets them from LOCALDOMAIN and RES_OPTIONS (c-ares reads
them as it reads resolv.conf), so a relative name would also be tried under each search domain.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.k8s import naming
from components.k8s.gateway.envoy.base import _address
from components.k8s.gateway.envoy.hops import hop_cluster, replica_host
from infra.config import parse
from tests.artifacts.test_envoy_input_live import RAW
from tests.support.fake_backends import EnvoyProcess, FakeBackend, free_port

SEARCH = ("alpha.svc.cluster.local", "svc.cluster.local", "cluster.local")  # a pod's search list, less the host's
WAIT_S = 20.0  # bounded wait for Envoy's first resolutions (it resolves at start, then every few seconds)


class FakeDns:
    """UDP DNS on 127.0.0.1: A for the names in `answers`, NXDOMAIN for any other; every question logged."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers, self.queries = answers, list[str]()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> FakeDns:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(512)
            except TimeoutError:
                continue
            labels, i = [], 12
            while data[i]:
                labels.append(data[i + 1:i + 1 + data[i]].decode())
                i += 1 + data[i]
            question = data[12:i + 5]
            name = ".".join(labels)
            self.queries.append(name)
            ip = self.answers.get(name)
            flags = 0x8180 if ip else 0x8183  # a response, recursion available; NXDOMAIN without an answer
            out = data[:2] + struct.pack(">HHHHH", flags, 1, 1 if ip else 0, 0, 0) + question
            if ip:
                out += struct.pack(">HHHIH", 0xC00C, 1, 1, 5, 4) + socket.inet_aton(ip)
            self.sock.sendto(out, peer)


@pytest.fixture
def search_domains(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("LOCALDOMAIN", " ".join(SEARCH))
    monkeypatch.setenv("RES_OPTIONS", "ndots:5")
    yield


def _resolver(port: int) -> dict[str, Any]:
    return {"name": "envoy.network.dns_resolver.cares", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig",
        "resolvers": [{"socket_address": {"address": "127.0.0.1", "port_value": port, "protocol": "UDP"}}]}}


def test_a_hop_queries_its_replicas_absolute_name_only(search_domains: None, tmp_path: Path) -> None:
    """`spare` runs replica 0 of 4: hop 0's name resolves (its replica passes the hop's checks), hop 1's does not
    (NXDOMAIN), and each is queried as is, never under a search domain; hop 2's name made relative (its dot
    removed), beside them, is also tried under the search domains."""
    cfg = parse(RAW, stack="dns")
    model = cfg.models["spare"]
    present, absent, other = (replica_host(cfg, model, i) for i in range(3))
    assert present.endswith(".svc.cluster.local.") and absent.endswith(".svc.cluster.local.")
    with FakeBackend("spare-0") as replica, FakeDns({present.rstrip("."): replica.address[0]}) as dns:
        clusters = [hop_cluster(cfg, model, 0), hop_cluster(cfg, model, 1)]
        relative = hop_cluster(cfg, model, 2)
        clusters.append(relative)
        for c in clusters:
            endpoint = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
            host = endpoint["address"]["socket_address"]["address"]
            assert endpoint["address"]["socket_address"]["port_value"] == naming.MODEL_HTTP_PORT
            endpoint["address"] = _address(host.rstrip(".") if c is relative else host, replica.address[1])
            c["load_assignment"]["cluster_name"] = c["name"]
            c["cluster_type"]["typed_config"]["typed_dns_resolver_config"] = _resolver(dns.port)
        admin = free_port()
        config = {"admin": {"address": _address("127.0.0.1", admin)},
                  "static_resources": {"clusters": clusters}}
        with EnvoyProcess(config, tmp_path, admin_port=admin, listener_port=free_port()) as envoy:
            deadline = time.monotonic() + WAIT_S
            while not (envoy.stats().get("cluster.spare__replica-0.membership_healthy", 0) == 1
                       and envoy.stats().get("cluster.spare__replica-1.update_attempt", 0) >= 2
                       and envoy.stats().get("cluster.spare__replica-2.update_attempt", 0) >= 2):
                assert time.monotonic() < deadline, dns.queries
                time.sleep(0.1)
            stats = envoy.stats()
    names = {h.rstrip(".") for h in (present, absent, other)}
    assert names <= set(dns.queries)
    # only the relative name went under a search domain
    searched = {q for q in dns.queries if q not in names}
    assert searched and {q.removeprefix(other.rstrip(".") + ".") for q in searched} <= set(SEARCH), dns.queries
    assert stats["cluster.spare__replica-0.membership_total"] == 1
    # Envoy counts an NXDOMAIN as a resolution that succeeded with no host: an absent ordinal is re-resolved at
    # dns_refresh_rate, never at a failure refresh rate
    assert stats.get("cluster.spare__replica-1.membership_total", 0) == 0
    assert stats["cluster.spare__replica-1.update_success"] >= 2
    assert stats.get("cluster.spare__replica-1.update_failure", 0) == 0
