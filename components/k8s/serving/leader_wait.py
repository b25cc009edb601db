"""preStop of a multi-node replica's worker: wait until its leader's engine has exited, at most a bound (sent as
`python3 -c`, so it uses only the standard library; components.k8s.serving.lifecycle renders it).

    python3 -c "<this file's text>" PORT BOUND_SECONDS POLL_SECONDS LOG

The leader is `$LWS_LEADER_ADDRESS` (the LWS controller sets it in every container of the group; the kubelet does
not expand `$(VAR)` in an exec hook's command, so it is read here). PORT is the leader's engine port that the worker
reaches directly, outside the mesh's sidecar (Engine.leader_engine_port): it stays open exactly as long as the
leader's engine runs. The name is resolved ONCE, when the wait starts: in a rollout the leader StatefulSet
re-creates a pod of the same name, whose engine port would answer for a leader this worker no longer belongs to;
its own leader's address stays its own (a gone pod's address refuses or does not answer). A name that does not
resolve on two tries a poll apart: the leader is gone. Every POLL_SECONDS the script opens a TCP connection to
that address and closes it at once:
- refused: the leader's engine has exited (the port is closed while the pod still has its address): done at once;
- any other failure (a connect that times out, an unreachable address once the pod is gone): done when the next
  poll fails too, so one lost packet does not end the wait;
- otherwise the leader is still draining: poll again, until BOUND_SECONDS have passed (the leader's whole
  termination: it cannot live longer).
Without LWS_LEADER_ADDRESS it cannot tell, and waits the whole bound. It always exits 0: a preStop's outcome does
not matter to the kubelet, only when it ends.

Why it ended goes to LOG, the container's own log (`/proc/1/fd/1`: the standard output of the container's main
process, which the hook shares the PID namespace of), since the kubelet records an exec hook's output only when
it fails; to its standard output when LOG cannot be opened.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import time

LEADER_ENV = "LWS_LEADER_ADDRESS"
PREFIX = "aifactory leader-wait:"


def probe(host: str, port: int, timeout: float) -> str:
    """'open', 'refused' or 'failed' (any other error) for one TCP connection to host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except OSError as err:
        return "refused" if err.errno == errno.ECONNREFUSED else "failed"


def resolve(host: str) -> str | None:
    """host's first address (a name, or an address as is), or None when it does not resolve."""
    try:
        return str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    except OSError:
        return None


def wait(host: str, port: int, bound: float, every: float) -> str:
    """Poll host's address (resolved once) on port until its engine is gone or `bound` seconds have passed; the
    reason it stopped."""
    deadline = time.monotonic() + bound
    address = resolve(host)
    if address is None:
        time.sleep(max(0.0, min(every, deadline - time.monotonic())))
        address = resolve(host)
        if address is None:
            return f"{host} did not resolve on two tries: the leader is gone"
    where = f"{address}:{port}" if address == host else f"{host} ({address}):{port}"
    failed = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"the leader's port {port} is still open after {bound:g} s, the bound: done"
        state = probe(address, port, max(0.1, min(every, left)))
        if state == "refused":
            return f"{where} refuses connections: the leader's engine has exited"
        failed = failed + 1 if state == "failed" else 0
        if failed >= 2:
            return f"{where} did not answer two polls in a row: the leader is gone"
        time.sleep(max(0.0, min(every, deadline - time.monotonic())))


def report(line: str, log: str) -> None:
    """line to the container's log, else to standard output."""
    try:
        with open(log, "a") as out:
            out.write(line + "\n")
        return
    except OSError:
        pass
    print(line, flush=True)


def main(argv: list[str]) -> int:
    port, bound, every, log = int(argv[1]), float(argv[2]), float(argv[3]), argv[4]
    host = os.environ.get(LEADER_ENV, "")
    if host:
        report(f"{PREFIX} {wait(host, port, bound, every)}", log)
    else:
        report(f"{PREFIX} {LEADER_ENV} is not set: waiting the whole bound ({bound:g} s)", log)
        time.sleep(bound)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
