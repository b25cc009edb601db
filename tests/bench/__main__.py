"""`make bench`: run every benchmark module under tests/bench/ (bench_*.py) and print its figures.

Each module exposes `run() -> list[tuple[str, str]]`: (label, figure) rows. Benchmarks measure and
print; they never fail on time (targets are read by people, not asserted).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import tests.bench as pkg


def main(argv: list[str]) -> int:
    only = set(argv)
    names = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name.startswith("bench_"))
    for name in names:
        if only and name not in only and name.removeprefix("bench_") not in only:
            continue
        mod = importlib.import_module(f"{pkg.__name__}.{name}")
        print(f"== {name.removeprefix('bench_')}: {(mod.__doc__ or '').strip().splitlines()[0]}", flush=True)
        started = time.perf_counter()
        rows = mod.run()
        width = max((len(label) for label, _ in rows), default=0)
        for label, figure in rows:
            print(f"  {label:<{width}}  {figure}", flush=True)
        print(f"  ({time.perf_counter() - started:.1f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
