"""A DNS server on 127.0.0.1 (UDP) for the real Envoy's resolver (c-ares): A records from a mapping that a test may
change while it serves (a pod leaving or joining its Service's ready addresses), NXDOMAIN for any other name, every
question logged. `resolver(port)` is the DnsCluster.typed_dns_resolver_config that points c-ares at it."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FakeDns", "resolver", "RECORD_TTL_S"]

RECORD_TTL_S = 5  # the TTL of every answer: CoreDNS's kubernetes plugin default


class FakeDns:
    """`answers`: name (no trailing dot) -> its A records; `set(name, ips)` replaces one name's records."""

    def __init__(self, answers: Mapping[str, str | Sequence[str]]) -> None:
        self._answers = {n: [ips] if isinstance(ips, str) else list(ips) for n, ips in answers.items()}
        self.queries: list[str] = []
        self._lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="fake-dns")

    def set(self, name: str, ips: Sequence[str]) -> None:
        with self._lock:
            self._answers[name] = list(ips)

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
            with self._lock:
                self.queries.append(name)
                ips = list(self._answers.get(name, ()))
            flags = 0x8180 if ips else 0x8183  # a response, recursion available; NXDOMAIN without an answer
            out = data[:2] + struct.pack(">HHHHH", flags, 1, len(ips), 0, 0) + question
            for ip in ips:
                out += struct.pack(">HHHIH", 0xC00C, 1, 1, RECORD_TTL_S, 4) + socket.inet_aton(ip)
            self.sock.sendto(out, peer)


def resolver(port: int) -> dict[str, Any]:
    """c-ares asking only the fake server on `port` (Envoy's CaresDnsResolverConfig)."""
    return {"name": "envoy.network.dns_resolver.cares", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig",
        "resolvers": [{"socket_address": {"address": "127.0.0.1", "port_value": port, "protocol": "UDP"}}]}}
