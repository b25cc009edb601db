"""The gateway pod's preStop: keep serving while new connections may still arrive, then wait until no client request
is in flight on the gateway's listener, at most a bound; then the kubelet sends SIGTERM and Envoy exits (it does not
drain on SIGTERM). Sent as `bash -c` (the image envoyproxy/envoy:v1.40.0 is Ubuntu with bash and coreutils, no curl
or python: envoyproxy/envoy@v1.40.0 ci/Dockerfile-envoy, stage `envoy`; ci/docker-entrypoint.sh execs Envoy, so it
is the container's PID 1):

    bash -c "<DRAIN_WAIT_SCRIPT>" gateway-drain ADMIN_PORT STAT ACCEPT CLOSE BOUND POLL IO LOG

1. ACCEPT seconds: Envoy keeps accepting new connections (behind an AWS NLB with `ip` targets, the window in which the
   NLB may still open them after deregistration; otherwise the seconds the pod's endpoint takes to leave kube-proxy's
   and the sidecars' tables).
2. CLOSE seconds more (CLIENT_CONNECTION_MAX_SECONDS + CLIENT_DRAIN_SECONDS): every client connection opened before
   has reached `max_connection_duration` and the connection manager's drain, so it is closed, or holds requests that
   began before; no new request starts on this pod after that.
3. Every POLL seconds, Envoy's admin (127.0.0.1:ADMIN_PORT, where the bootstrap binds it) is asked for STAT, the
   gateway listener's connection manager gauge `http.<stat_prefix>.downstream_rq_active`: at 0 the hook ends. Not
   `downstream_cx_active`: it also counts connections that hold no request (the kubelet's TCP liveness probe, the
   NLB's TCP health checks), which SIGTERM cuts at no cost, so it would only make the wait longer.
   Each admin exchange is a bash /dev/tcp connection inside coreutils' `timeout IO`: an admin that refuses or does
   not answer (Envoy wedged), or answers without the gauge (a stats matcher that drops it), is unknown, never 0, so
   the wait goes on to the bound; it never hangs past it.
4. At BOUND seconds from the hook's start (the pod's drain_seconds: the two phases, the longest request a route
   allows, a margin) it ends whatever the gauge says.

Why it ended (drained / bound reached with N requests in flight / admin unreachable), after how many seconds, goes to
LOG, the container's log (`/proc/1/fd/1`, Envoy's standard output; as components/k8s/serving/leader_wait.py does),
or to the hook's own standard output when LOG cannot be written. It always exits 0: a preStop's exit status does not
matter to the kubelet, only when it ends. The timings are decimal seconds (the live test runs the same script with
short ones: tests/artifacts/test_gateway_drain_live.py).

Not used: Envoy's admin `POST /drain_listeners?graceful&inboundonly`. It drains only listeners whose
traffic_direction is INBOUND (the gateway's and the stats listener leave it unset, so nothing would change), and
without `inboundonly` it drains every listener and stops them all after --drain-time-s, the stats listener
(Prometheus, /ready) included (envoyproxy/envoy@v1.40.0 source/server/admin/listeners_handler.cc,
source/server/drain_manager_impl.cc drainClose). At the poll's start every client connection already drains
(phase 2), so it would close none sooner.
"""

from __future__ import annotations

from typing import Any

from components.k8s import naming

__all__ = ["DRAIN_WAIT_SCRIPT", "DRAIN_LOG", "POLL_SECONDS", "ADMIN_TIMEOUT_SECONDS", "PREFIX", "active_requests_stat",
           "prestop"]

PREFIX = "aifactory gateway-drain:"
DRAIN_LOG = "/proc/1/fd/1"  # the container's log: Envoy's (PID 1's) standard output
POLL_SECONDS = 1  # between two reads of the gauge
ADMIN_TIMEOUT_SECONDS = 2  # one admin exchange (connect, request, answer) at most

DRAIN_WAIT_SCRIPT = r"""# the gateway pod's drain: components/k8s/gateway/drain.py in the aifactory kit
port=$1 stat=$2 accept=$3 close=$4 bound=$5 poll=$6 io=$7 log=$8
t0=${EPOCHREALTIME/[.,]/}
us() { local s=$1 f=""; [[ $s == *.* ]] && f=${s#*.}; f=${f}000000; us=$(( 10#${s%%.*} * 1000000 + 10#${f:0:6} )); }
sec() { printf -v sec '%d.%06d' $(( $1 / 1000000 )) $(( $1 % 1000000 )); }
now() { local t=${EPOCHREALTIME/[.,]/}; now=$(( 10#$t - 10#$t0 )); }
pause_until() { now; if (( $1 > now )); then sec $(( $1 - now )); sleep "$sec"; fi; }
say() {
  local line; now; printf -v line '%s %s after %d.%d s' "PREFIX" "$1" $(( now / 1000000 )) $(( now % 1000000 / 100000 ))
  { echo "$line" >"$log"; } 2>/dev/null || echo "$line"
}
active() {
  sec "$1"
  timeout "$sec" bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "GET /stats?filter=%s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" "$2" >&3
    answered=1
    while IFS= read -r line <&3; do
      answered=3
      line=${line%[[:cntrl:]]}
      if [[ $line == "$2: "* ]]; then echo "${line#"$2: "}"; exit 0; fi
    done
    exit $answered' active "$port" "$stat" 2>/dev/null
}
us "$bound"; bound_us=$us; us "$io"; io_us=$us; us "$poll"; poll_us=$us
us "$accept"; fixed=$us; us "$close"; pause_until $(( fixed + us ))
last=""
while now; (( now < bound_us )); do
  left=$(( bound_us - now ))
  n=$(active $(( left < io_us ? left : io_us ))); rc=$?
  if (( rc == 0 )) && [[ $n =~ ^[0-9]+$ ]]; then
    if (( n == 0 )); then say "drained: no request in flight on $stat"; exit 0; fi
    last=$n
  elif (( rc == 3 )); then
    last=missing
  else
    last=""
  fi
  now; next=$(( now + poll_us ))
  pause_until $(( next < bound_us ? next : bound_us ))
done
if [[ -z $last ]]; then
  say "admin unreachable: Envoy's admin at 127.0.0.1:$port did not answer, requests in flight unknown: bound reached"
elif [[ $last == missing ]]; then
  say "bound reached: Envoy's admin answered without $stat, requests in flight unknown"
else
  say "bound reached: $last requests still in flight on $stat"
fi
exit 0
""".replace("PREFIX", PREFIX)


def active_requests_stat(stat_prefix: str) -> str:
    """The connection manager's gauge of requests in flight, for the listener whose HCM has `stat_prefix`
    (envoyproxy/envoy@v1.40.0 source/common/http/conn_manager_config.h, ALL_HTTP_CONN_MAN_STATS)."""
    return f"http.{stat_prefix}.downstream_rq_active"


def prestop(*, stat_prefix: str, accept_seconds: float, close_seconds: float, bound_seconds: float,
            admin_port: int = naming.ENVOY_ADMIN_PORT, poll_seconds: float = POLL_SECONDS,
            admin_timeout_seconds: float = ADMIN_TIMEOUT_SECONDS, log: str = DRAIN_LOG) -> dict[str, Any]:
    """The gateway container's preStop hook: DRAIN_WAIT_SCRIPT run by bash with these settings (see the module's
    docstring). Raises ValueError for timings that cannot hold: each must be positive and the bound at least the
    two fixed phases."""
    timings = {"accept_seconds": accept_seconds, "close_seconds": close_seconds, "bound_seconds": bound_seconds,
               "poll_seconds": poll_seconds, "admin_timeout_seconds": admin_timeout_seconds}
    for key, value in timings.items():
        if not value > 0:
            raise ValueError(f"{key}: {value!r} is not a positive number of seconds")
    if bound_seconds < accept_seconds + close_seconds:
        raise ValueError(f"bound_seconds: {bound_seconds!r} is shorter than accept_seconds + close_seconds "
                         f"({accept_seconds!r} + {close_seconds!r}): the bound must cover both fixed phases")
    args = [str(admin_port), active_requests_stat(stat_prefix),
            *(_seconds(v) for v in (accept_seconds, close_seconds, bound_seconds, poll_seconds,
                                    admin_timeout_seconds)), log]
    return {"exec": {"command": ["bash", "-c", DRAIN_WAIT_SCRIPT, "gateway-drain", *args]}}


def _seconds(value: float) -> str:
    """Decimal seconds as the script reads them: 180, 0.25 (no exponent, at most microseconds)."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"
