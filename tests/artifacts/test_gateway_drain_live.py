"""The gateway pod's preStop, run as the kit renders it (`bash -c <script> gateway-drain PORT STAT ACCEPT CLOSE BOUND
POLL IO LOG`: components.k8s.gateway.drain), with its timings shortened through the function that builds it, against
the real Envoy 1.40 (.venv/bin/envoy) on a small bootstrap: the admin on a free 127.0.0.1 port and one listener whose
connection manager has the gateway's stat_prefix, routing to a slow fake replica (docs/gateway.md, "A gateway pod's
termination"; docs/contracts.md, "Day 2: the gateway pod's drain").

- idle: the hook ends right after its two fixed phases (accept, then the connections' close), not at its bound;
- one request in flight: it ends only once that request has been answered (Envoy's gauge
  http.gateway.downstream_rq_active back to 0: envoyproxy/envoy@v1.40.0 source/common/http/conn_manager_config.h);
- the admin refusing connections (Envoy gone), accepting and never answering (wedged), or answering without the
  gauge: it ends at its bound, not before, and says why.

And what a client's keep-alive pool meets at the end of a connection's life (docs/gateway.md, "Calling the gateway:
keep-alive pools"), with the kit's max_connection_duration and drain_timeout scaled to 1 s each: a request sent on
an idle connection during its drain is answered with `connection: close`; one sent after the drain, during Envoy's
delayed close (1 s, its default), is reset unanswered.

Before this the preStop was the kubelet's fixed sleep of drain_seconds (prod 1155 s), busy or idle. Every run is
bounded; no fixed sleep.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from components.k8s.gateway import component as gw
from components.k8s.gateway.envoy.config import bootstrap as kit_bootstrap
from tests.support.fake_backends import Behaviour, EnvoyProcess, FakeBackend, request
from tests.support.processes import free_port
from tests.support.stacks import stack_config

ACCEPT_S, CLOSE_S = 0.3, 0.3  # the fixed phases (prod: 180 and 65 s)
POLL_S = 0.1  # prod: 1 s
IO_S = 0.3  # one admin exchange at most (prod: 2 s)
SLOW_S = 1.5  # the request held in flight
SLACK_S = 2.0  # a busy 2-core machine's scheduling, bash's start and Envoy's answers
# the client listener's connection manager's stat_prefix in the kit's own bootstrap
[_KIT_HCM] = kit_bootstrap(stack_config("prod"))["static_resources"]["listeners"][0]["filter_chains"][0]["filters"]
STAT_PREFIX = _KIT_HCM["typed_config"]["stat_prefix"]
STAT = f"http.{STAT_PREFIX}.downstream_rq_active"
_T = "type.googleapis.com/envoy."


@pytest.fixture(scope="module")
def rendered() -> list[str]:
    """prod's gateway preStop as the Deployment carries it: bash -c <script> gateway-drain 9901 <stat> 180 65 1155
    1 2 /proc/1/fd/1."""
    cfg = stack_config("prod")
    [envoy] = gw.deployment(cfg, "{}")["spec"]["template"]["spec"]["containers"]
    command = envoy["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["bash", "-c"] and command[3:] == [
        "gateway-drain", "9901", STAT, "180", "65", "1155", "1", "2", "/proc/1/fd/1"]
    return list(command)


def hook(rendered: list[str], *, admin_port: int, bound_s: float, log: Path | str,
         stat_prefix: str = STAT_PREFIX) -> list[str]:
    """The same script with short timings, built by the function that builds the Deployment's."""
    from components.k8s.gateway.drain import prestop

    command = prestop(stat_prefix=stat_prefix, accept_seconds=ACCEPT_S, close_seconds=CLOSE_S,
                      bound_seconds=bound_s, admin_port=admin_port, poll_seconds=POLL_S,
                      admin_timeout_seconds=IO_S, log=str(log))["exec"]["command"]
    assert command[:4] == rendered[:4]  # bash -c <the same text> gateway-drain
    return list(command)


def bootstrap(admin_port: int, listener_port: int, replica: tuple[str, int], **hcm_options: Any) -> dict[str, Any]:
    hcm = {"name": "envoy.filters.network.http_connection_manager", "typed_config": {
        "@type": _T + "extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": STAT_PREFIX, **hcm_options,
        "route_config": {"virtual_hosts": [{"name": "models", "domains": ["*"], "routes": [
            {"match": {"prefix": "/"}, "route": {"cluster": "replica", "timeout": "10s"}}]}]},
        "http_filters": [{"name": "envoy.filters.http.router",
                          "typed_config": {"@type": _T + "extensions.filters.http.router.v3.Router"}}]}}
    address = {"socket_address": {"address": replica[0], "port_value": replica[1]}}
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {
            "listeners": [{"name": "gateway", "filter_chains": [{"filters": [hcm]}], "address": {
                "socket_address": {"address": "127.0.0.1", "port_value": listener_port}}}],
            "clusters": [{"name": "replica", "type": "STATIC", "connect_timeout": "1s", "load_assignment": {
                "cluster_name": "replica", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address}}]}]}}]}}


@pytest.fixture(scope="module")
def envoy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EnvoyProcess, FakeBackend]]:
    with ExitStack() as stack:
        replica = stack.enter_context(FakeBackend("slow", Behaviour.SLOW, delay=SLOW_S))
        admin, listener = free_port(), free_port()
        proc = stack.enter_context(EnvoyProcess(bootstrap(admin, listener, replica.address),
                                                tmp_path_factory.mktemp("drain"), admin_port=admin,
                                                listener_port=listener))
        yield proc, replica


def run(command: list[str], timeout: float) -> tuple[float, str]:
    """The hook as the kubelet runs it (exit status 0 expected); its duration and standard output."""
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return time.monotonic() - started, done.stdout


def test_an_idle_gateway_pods_hook_ends_right_after_its_fixed_phases(
        rendered: list[str], envoy: tuple[EnvoyProcess, FakeBackend], tmp_path: Path) -> None:
    proc, _ = envoy
    log = tmp_path / "container.log"
    took, out = run(hook(rendered, admin_port=proc.admin_port, bound_s=10, log=log), timeout=15)
    assert ACCEPT_S + CLOSE_S <= took < ACCEPT_S + CLOSE_S + SLACK_S, took
    assert out == ""  # the line went to LOG, the container's log
    [line] = log.read_text().splitlines()
    assert line.startswith(f"aifactory gateway-drain: drained: no request in flight on {STAT} after 0.")


def test_a_gateway_pods_hook_waits_for_the_request_in_flight_and_ends_when_it_is_answered(
        rendered: list[str], envoy: tuple[EnvoyProcess, FakeBackend], tmp_path: Path) -> None:
    proc, replica = envoy
    answered: list[tuple[int, float]] = []

    def call() -> None:
        status, _ = request(proc.listener_port, "/v1/chat/completions", timeout=10)
        answered.append((status, time.monotonic()))

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    deadline = time.monotonic() + 5
    while proc.stats().get(STAT, 0) != 1:
        assert time.monotonic() < deadline, "the request never reached Envoy"
        time.sleep(0.02)
    started = time.monotonic()
    log = tmp_path / "container.log"
    took, _ = run(hook(rendered, admin_port=proc.admin_port, bound_s=10, log=log), timeout=15)
    ended = started + took
    caller.join(timeout=10)
    [(status, at)] = answered
    assert status == 200 and replica.hits >= 1
    # not before the answer (the fixed phases alone end SLOW_S - 0.6 s earlier), and within a poll or so after it
    assert took > ACCEPT_S + CLOSE_S + 0.3 and at <= ended < at + POLL_S + SLACK_S, (took, ended - at)
    assert "drained: no request in flight" in log.read_text()


class Wedged:
    """A port that accepts connections (the kernel's backlog) and never answers: a hung admin."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]


@pytest.mark.parametrize("admin", ["refused", "wedged"])
def test_a_gateway_pods_hook_with_no_admin_answer_waits_to_its_bound_and_says_why(
        rendered: list[str], admin: str) -> None:
    bound = 1.5
    wedged = Wedged() if admin == "wedged" else None
    try:
        port = wedged.port if wedged else free_port()  # nothing listens on a free port: refused
        # LOG cannot be opened here: the line goes to the hook's standard output
        took, out = run(hook(rendered, admin_port=port, bound_s=bound, log="/nonexistent/aifactory-drain.log"),
                        timeout=bound + 10)
    finally:
        if wedged:
            wedged.sock.close()
    assert bound <= took < bound + SLACK_S, took
    assert out == (f"aifactory gateway-drain: admin unreachable: Envoy's admin at 127.0.0.1:{port} did not answer, "
                   "requests in flight unknown: bound reached after 1.5 s\n")



def test_a_gateway_pods_hook_whose_gauge_the_admin_lacks_waits_to_its_bound_and_says_so(
        rendered: list[str], envoy: tuple[EnvoyProcess, FakeBackend]) -> None:
    """An admin that answers without the gauge (a stats matcher dropping it, another stat_prefix) is no answer
    either: never taken for 0."""
    proc, _ = envoy
    took, out = run(hook(rendered, admin_port=proc.admin_port, bound_s=1.0, log="/nonexistent/aifactory-drain.log",
                         stat_prefix="absent"), timeout=11)
    assert 1.0 <= took < 1.0 + SLACK_S, took
    assert out == ("aifactory gateway-drain: bound reached: Envoy's admin answered without "
                   "http.absent.downstream_rq_active, requests in flight unknown after 1.0 s\n")

CONNECTION_S = DRAIN_S = 1.0  # max_connection_duration and drain_timeout (shipped: 60 and 5 s)


def _post_at(port: int, at: float, results: dict[float, str]) -> None:
    """Open a keep-alive connection, GET once, leave it idle, POST on it `at` seconds after opening: the answer's
    status and Connection header, or what happened instead."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    opened = time.monotonic()
    try:
        conn.request("GET", "/")
        first = conn.getresponse()
        first.read()
        assert first.status == 200 and not first.will_close
        time.sleep(max(0.0, at - (time.monotonic() - opened)))
        conn.request("POST", "/", body=b"hi")
        answer = conn.getresponse()
        answer.read()
        results[at] = f"{answer.status} connection: {answer.getheader('connection')}"
    except ConnectionResetError:
        results[at] = "reset"
    except http.client.RemoteDisconnected:
        results[at] = "closed unanswered"
    finally:
        conn.close()


def test_an_idle_client_connection_is_drained_at_its_maximum_age_then_closed_and_a_late_request_is_lost(
        tmp_path: Path) -> None:
    """envoyproxy/envoy@v1.40.0 source/common/http/conn_manager_impl.cc: onConnectionDurationTimeout starts the
    drain (HTTP/1.1: answers say `connection: close`), onDrainTimeout closes the connection with the listener's
    delayed close (1 s by default): a request written then gets no answer. So a pool that reuses a connection idle
    for longer than the drain (5 s shipped) may lose a POST there; httpx's 5 s keepalive_expiry never does."""
    with ExitStack() as stack:
        replica = stack.enter_context(FakeBackend("fast", Behaviour.OK))
        admin, listener = free_port(), free_port()
        stack.enter_context(EnvoyProcess(
            bootstrap(admin, listener, replica.address, drain_timeout=f"{DRAIN_S:g}s",
                      common_http_protocol_options={"max_connection_duration": f"{CONNECTION_S:g}s"}),
            tmp_path, admin_port=admin, listener_port=listener))
        results: dict[float, str] = {}
        in_drain, after_drain = CONNECTION_S + DRAIN_S / 2, CONNECTION_S + DRAIN_S + 0.5
        callers = [threading.Thread(target=_post_at, args=(listener, at, results)) for at in (in_drain, after_drain)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(timeout=10)
    assert results[in_drain] == "200 connection: close", results
    assert results[after_drain] in ("reset", "closed unanswered"), results


@pytest.mark.parametrize(("query", "connection"), [("graceful&inboundonly", None), ("graceful", "close")])
def test_drain_listeners_inboundonly_leaves_the_kits_listener_undrained(
        tmp_path: Path, query: str, connection: str | None) -> None:
    """Why the hook does not call Envoy's `POST /drain_listeners?graceful&inboundonly`: the kit's listeners leave
    traffic_direction unset, and an inbound-only drain drains only INBOUND ones (envoyproxy/envoy@v1.40.0
    source/server/drain_manager_impl.cc drainClose; source/server/admin/listeners_handler.cc), so answers on the
    client listener go on without `connection: close`; only a drain of every listener (which then stops them all,
    the stats listener included, after --drain-time-s) reaches it. Envoy runs with the Deployment's drain options."""
    [envoy] = gw.deployment(stack_config("prod"), "{}")["spec"]["template"]["spec"]["containers"]
    at = envoy["args"].index("--drain-time-s")
    drain_options = envoy["args"][at:at + 4]
    assert drain_options == ["--drain-time-s", "20", "--drain-strategy", "immediate"]
    with ExitStack() as stack:
        replica = stack.enter_context(FakeBackend("fast", Behaviour.OK))
        admin, listener = free_port(), free_port()
        stack.enter_context(EnvoyProcess(bootstrap(admin, listener, replica.address), tmp_path, admin_port=admin,
                                         listener_port=listener, args=drain_options))
        conn = http.client.HTTPConnection("127.0.0.1", listener, timeout=5)
        stack.callback(conn.close)
        drained = urllib.request.urlopen(urllib.request.Request(  # noqa: S310 - loopback admin
            f"http://127.0.0.1:{admin}/drain_listeners?{query}", method="POST"), timeout=5)
        assert drained.status == 200
        conn.request("GET", "/")
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 200 and answer.getheader("connection") == connection
