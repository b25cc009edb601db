"""Burn-in run ON THE NODE (python3 with a CUDA build of PyTorch): BF16 matmul and memory bandwidth per GPU.

node-check sends this file's text to `python3 - TOKEN SECONDS` under `timeout`; it imports nothing from
the kit. All GPUs run at once (one thread each: the GIL is released while kernels run), half of SECONDS
on back-to-back 8192x8192 BF16 matmuls, half on device-to-device copies of a 1 GiB buffer. It prints one
JSON object per GPU, in index order:
    {"gpu": 0, "tflops": 731.4, "bandwidth_gbs": 2921.7}
or {"gpu": 0, "error": "..."} when that GPU could not run. Exit 3: no usable PyTorch/CUDA.
TOKEN only tags the process so node-check can verify that nothing is left behind.
"""

import json
import sys
import threading
import time

MATMUL_N = 8192
COPY_BYTES = 1 << 30
BATCH = 10  # kernels queued between synchronisations


def _timed(fn, budget, sync):
    fn()  # warm-up: cuBLAS heuristics, allocator
    sync()
    done, started = 0, time.perf_counter()
    while True:
        for _ in range(BATCH):
            fn()
        sync()
        done += BATCH
        elapsed = time.perf_counter() - started
        if elapsed >= budget:
            return done, elapsed


def _matmul_tflops(torch, device, budget, sync):
    a = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.bfloat16, device=device)
    b = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.bfloat16, device=device)
    c = torch.empty_like(a)
    n, elapsed = _timed(lambda: torch.mm(a, b, out=c), budget, sync)
    return 2 * MATMUL_N**3 * n / elapsed / 1e12


def _copy_gbs(torch, device, budget, sync):
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    n, elapsed = _timed(lambda: dst.copy_(src), budget, sync)
    return 2 * COPY_BYTES * n / elapsed / 1e9  # each copy reads and writes the buffer


def _measure(torch, index, seconds, out):
    try:
        device = torch.device("cuda", index)
        sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
        tflops = _matmul_tflops(torch, device, seconds / 2, sync)
        gbs = _copy_gbs(torch, device, seconds / 2, sync)
        out[index] = {"gpu": index, "tflops": round(tflops, 1), "bandwidth_gbs": round(gbs, 1)}
    except Exception as err:  # noqa: BLE001 - reported per GPU, the others still run
        out[index] = {"gpu": index, "error": f"{type(err).__name__}: {err}"}


def main(argv):
    seconds = float(argv[2])
    try:
        import torch
    except ImportError:
        print("burn-in needs PyTorch with CUDA on the node (python3 -c 'import torch' failed)", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("PyTorch sees no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 3
    count = torch.cuda.device_count()
    out = [None] * count
    threads = [threading.Thread(target=_measure, args=(torch, i, seconds, out), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for row in out:
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
