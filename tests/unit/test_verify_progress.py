"""`aifactory verify` says what it does while it does it (issue 46 item 8): each hop on stderr as it is tried and what
it waits for, each hop that passes, and every so often the hops still broken with their last answer; a name that
does not resolve is never waited on. Local servers on 127.0.0.1 and `.invalid` names (RFC 6761: never resolve)."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from infra import cli
from infra.verify import signals
from infra.verify.report import Hop
from infra.verify.signals import Check, await_hops

JAEGER = "http://jaeger.invalid:16686"  # RFC 6761 section 6.4: .invalid names never resolve
NOT_RESOLVED = r"jaeger\.invalid does not resolve here \(.+\)"


class _Platform(BaseHTTPRequestHandler):
    """The gateway (a chat completion, whole or streamed) and Prometheus', Loki's and Alertmanager's query APIs,
    with no data but the Watchdog."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _send(self, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if req["stream"]:
            self._send(b'data: {"choices": [{"delta": {"content": "OK"}}]}\n\ndata: [DONE]\n\n', "text/event-stream")
        else:
            self._send(json.dumps({"choices": [{"message": {"role": "assistant", "content": "OK"}}]}).encode())

    def do_GET(self) -> None:  # noqa: N802
        path = urllib.parse.urlsplit(self.path).path
        if path == "/api/v2/alerts":
            self._send(b'[{"labels": {"alertname": "Watchdog"}, "startsAt": "2026-12-01T00:00:00Z"}]')
        else:  # Prometheus' and Loki's answer with no data
            self._send(b'{"status": "success", "data": {"resultType": "vector", "result": []}}')


@pytest.fixture(scope="module")
def platform() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Platform)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _verify(capsys: pytest.CaptureFixture[str], *, wait: str, **urls: str) -> tuple[int, str, str]:
    flags = [arg for key, url in urls.items() for arg in (f"--{key}-url", url)]
    code = cli.main(["verify", "dev", "--wait", wait, *flags])
    out = capsys.readouterr()
    return code, out.out, out.err


def _match(lines: list[str], patterns: list[str]) -> None:
    assert len(lines) == len(patterns), "\n".join(lines)
    for line, pattern in zip(lines, patterns, strict=True):
        assert re.fullmatch(pattern, line), f"{line!r} !~ {pattern!r}"


def test_names_that_do_not_resolve_are_not_waited_on(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Outside the cluster the default endpoints are in-cluster Service names: with a 600 s wait verify used to
    retry them, silent, for ten minutes. Now every hop is broken at once, naming the host and the fix, and verify
    never sleeps."""
    def no_wait(seconds: float) -> None:
        raise AssertionError(f"verify waited {seconds}s on names that do not resolve")

    monkeypatch.setattr(signals.time, "sleep", no_wait)
    code, out, err = _verify(capsys, wait="600")
    assert code == 1
    gw = r"aifactory-gateway\.aifactory-gateway\.svc does not resolve here \(.+\)"
    prom = r"kps-prometheus\.monitoring\.svc does not resolve here \(.+\)"
    _match(err.splitlines(), [
        r"\[1/2\] requests 1 model\(s\) through http://aifactory-gateway\.aifactory-gateway\.svc:80, each request up "
        r"to 60s",
        rf" {{15}}request             chat: not sent: {gw}",
        rf" {{15}}stream              chat: not sent: {gw}",
        r"\[2/2\] signals  6 hop\(s\), each asked every 2s until it passes or 600s have passed",
        rf" {{15}}metrics:gateway     chat: not asked: {prom}",
        rf" {{15}}metrics:engine      chat: not asked: {prom}",
        rf" {{15}}metrics:sidecar     chat: not asked: {prom}",
        rf" {{15}}metrics:autoscaling chat: not asked: {prom}",
        rf" {{15}}gpu-metrics         not asked: {prom}",
        r" {15}alerting            not asked: kps-alertmanager\.monitoring\.svc does not resolve here \(.+\)",
    ])
    rows = out.splitlines()
    assert rows[-1] == "8 hop(s), 8 broken"
    assert rows[2].strip() == ("likely: the in-cluster Service names resolve only where cluster DNS does: run verify "
                               "from a pod, or give --gateway-url (the gateway's load balancer)")
    assert rows[6].strip() == ("likely: the in-cluster Service names resolve only where cluster DNS does: run verify "
                               "from a pod, or give --prometheus-url (a port-forward, an ingress) or --kubeconfig")


def test_each_hop_is_said_as_it_is_tried_with_what_it_waits_for(platform: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A reachable platform with no data yet, Jaeger's name unresolvable: the requests, each signal hop with what
    it waits for, the Watchdog passing; the trace hop broken at once, the others retried for the (short) wait."""
    code, out, err = _verify(capsys, wait="0.3", gateway=platform, prometheus=platform, loki=platform,
                             alertmanager=platform, jaeger=JAEGER)
    assert code == 1
    p = re.escape(platform)
    _match(err.splitlines(), [
        rf"\[1/2\] requests 1 model\(s\) through {p}, each request up to 60s",
        r" {15}request             chat: POST /v1/chat/completions",
        r" {15}stream              chat: POST /v1/chat/completions, streamed",
        r"\[2/2\] signals  8 hop\(s\), each asked every 2s until it passes or 0.3s have passed",
        rf" {{15}}trace               chat: not asked: {NOT_RESOLVED}",
        rf" {{15}}logs                chat: waiting for the gateway's log line with trace id [0-9a-f]{{32}} in Loki "
        rf"\({p}\)",
        rf" {{15}}metrics:gateway     chat: waiting for data for sum\(envoy_cluster_upstream_rq_total"
        rf"\{{envoy_cluster_name=\"chat\"\}}\) in Prometheus \({p}\)",
        r" {15}metrics:engine      chat: waiting for data for count\(.+\) in Prometheus \(.+\)",
        r" {15}metrics:sidecar     chat: waiting for data for sum\(istio_requests_total\{.+\}\) in Prometheus \(.+\)",
        r" {15}metrics:autoscaling chat: waiting for data for sum\(.+\) in Prometheus \(.+\)",
        rf" {{15}}gpu-metrics         waiting for DCGM series from every node of pool\(s\) gpu-small in Prometheus "
        rf"\({p}\)",
        rf" {{15}}alerting            waiting for the always-firing Watchdog in Alertmanager \({p}\)",
        r" {15}alerting            ok after \d+\.\ds",
    ])
    broken = [line.split()[1] for line in out.splitlines() if line.startswith("  BROKEN")]
    assert broken == ["trace", "logs", "metrics:gateway", "metrics:engine", "metrics:sidecar", "metrics:autoscaling",
                      "gpu-metrics"]
    assert "  BROKEN  trace                chat  not asked: jaeger.invalid does not resolve here (" in out


def _check(hop: str, answers: list[bool], asked: list[str]) -> Check:
    def ask() -> Hop:
        asked.append(f"ask {hop}")
        return Hop(hop, "m", answers.pop(0), "no data yet" if answers else "data")
    return Check(hop, "m", "prometheus", f"{hop}'s series", ask)


def test_the_wait_says_each_hop_before_asking_it_and_which_stay_broken() -> None:
    """Each hop is said before it is asked (a query that hangs is named while it hangs), a hop that passes is
    said once, and the hops still broken are named with their last answer at every progress interval."""
    said: list[str] = []
    hops = await_hops([_check("a", [False, True], said), _check("b", [False] * 100, said)],
                      wait_seconds=0.2, poll_seconds=0.05, progress=said.append, progress_seconds=0.0)
    assert [(h.hop, h.ok) for h in hops] == [("a", True), ("b", False)]
    _match(said[:10], [
        r" {15}a +m: waiting for a's series",
        r"ask a",
        r" {15}b +m: waiting for b's series",
        r"ask b",
        r" {15}a +m: still broken, 0s left: no data yet",
        r" {15}b +m: still broken, 0s left: no data yet",
        r"ask a",
        r" {15}a +m: ok after 0\.\ds",
        r"ask b",
        r" {15}b +m: still broken, 0s left: no data yet",
    ])
