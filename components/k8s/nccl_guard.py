"""Start-up guard of a multi-node vLLM leader (sent as `python3 -c`, so it uses only the standard library).

    python3 -c "<this file's text>" FABRIC -- vllm serve ...

Runs the engine, copies its output line by line, and stops it loudly (exit 3) when NCCL did not select the
fabric's network: NCCL's INFO log (NCCL_DEBUG=INFO) prints `NCCL INFO Using network <name>` for every
communicator (NVIDIA/nccl src/init.cc): `Libfabric` (aws-ofi-nccl 1.9+; `AWS Libfabric` before) on EFA, `IB`
on InfiniBand, `Socket` when it fell back to TCP. aws-ofi-nccl also prints `NET/OFI Selected Provider is <p>`
(src/nccl_ofi_net.c), `efa` on EFA. The same lines fabric-check judges (infra/nodecheck/fabric.py). Ray forwards
the workers' output to the leader's process (ray.init log_to_driver), so the leader sees every rank's lines.
When the API server reports `Application startup complete` without any `Using network` line, the fabric is
unproven: also fatal. SIGTERM/SIGINT are passed on to the engine.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys

NETWORK = re.compile(r"NCCL INFO Using network (\S.*?)\s*$")
# aws-ofi-nccl: "Selected Provider is efa (found 32 nics)" in 1.x releases, "Selected provider is efa, fabric is
# efa-direct (found 32 nics)" in current ones (nccl_net_ofi_query_provider_capabilities)
PROVIDER = re.compile(r"NCCL INFO NET/OFI Selected [Pp]rovider is ([\w-]+)")
IB_NETWORKS = ("IB", "IBext")  # NCCL's own verbs transport; IBext when the SHARP plugin (nccl-rdma-sharp) is in
READY = "Application startup complete"
EXPECTED = {"efa": "Libfabric (aws-ofi-nccl) with provider efa", "infiniband": "IB"}
FATAL_EXIT = 3
STOP_SECONDS = 30


def problem(fabric: str, line: str, seen: set[str]) -> str | None:
    """Why this line proves the fabric unused, or None."""
    m = NETWORK.search(line)
    if m:
        name = m.group(1)
        seen.add(name)
        ok = "Libfabric" in name if fabric == "efa" else name in IB_NETWORKS
        return None if ok else f"NCCL uses network {name!r}, expected {EXPECTED[fabric]}"
    m = PROVIDER.search(line)
    if m and fabric == "efa" and m.group(1) != "efa":
        return f"aws-ofi-nccl selected libfabric provider {m.group(1)!r}, not efa"
    if READY in line and not seen:
        return "the engine is up but NCCL printed no 'Using network' line (NCCL_DEBUG=INFO unset?)"
    return None


def main(argv: list[str]) -> int:
    fabric, sep, command = argv[0], argv[1], argv[2:]
    if fabric not in EXPECTED or sep != "--" or not command:
        print(f"usage: nccl_guard {{{','.join(EXPECTED)}}} -- COMMAND...", file=sys.stderr)
        return 2
    # Handlers first, then the engine: a SIGTERM that comes while the engine starts is passed on once it has a pid,
    # never lost (as the container's PID 1 the guard has no default action: pid_namespaces(7)) nor left to kill the
    # guard alone while its engine runs on.
    pending: list[int] = []
    child: subprocess.Popen[str] | None = None

    def forward(sig: int, _frame: object) -> None:
        if child is None:
            pending.append(sig)
        else:
            child.send_signal(sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                             errors="replace")
    for pending_sig in pending:
        child.send_signal(pending_sig)
    seen: set[str] = set()
    verdict = None
    assert child.stdout is not None
    for line in child.stdout:
        sys.stdout.write(line)
        if verdict is None:
            why = problem(fabric, line, seen)
            if why is not None:
                print(f"aifactory nccl-guard: FATAL: {why}: cross-node traffic is not on the {fabric} fabric; "
                      "stopping the engine", file=sys.stderr, flush=True)
                child.terminate()
                try:
                    child.wait(STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    child.kill()
                return FATAL_EXIT
            if READY in line:
                verdict = "ok"
                print(f"aifactory nccl-guard: NCCL uses network {', '.join(sorted(seen))} "
                      f"({EXPECTED[fabric]} expected)", flush=True)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
