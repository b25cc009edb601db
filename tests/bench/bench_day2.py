"""Day 2 at the gateway: rolling update, scale-down, saturated /health, every replica saturated, a replica answering
500, an engine hang.

Each scenario runs the real Envoy on the kit's bootstrap in front of three stand-in vLLM replicas (the rolling update
and the scale-down also SGLang's and Triton's), under a steady mix of streamed and non-streamed generations
(tests.support.day2: times scaled down as it states; the same scenarios are asserted by
tests/artifacts/test_day2_scenarios_live.py). Reported per scenario: requests, success, cut streams
(a stream that started and did not end), the slowest answer, retries, ejections, failed health checks and requests
balanced in panic (no replica passing its checks); for the
hang, how long after it the hung replica got its last request (against the progress checks' window, DETECTION_S),
and, for the requests sent after that window, their success and their slowest answer (bounded by the window plus
one try); the requests it caught (streams under way cut at the try idle timeout, the others 504 at timeoutSeconds).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.support.day2 import DETECTION_S, MODEL, SCENARIOS, TRY_IDLE_S, scenario
from tests.support.standin_engines import STANDIN_ENGINES

HUNG = f"{MODEL}-1"


# The rollouts run once per engine's stand-in (its own SIGTERM and checks), the faults on vLLM's.
PER_ENGINE = ("rolling-update", "scale-down")


def run() -> list[tuple[str, str]]:
    rows = []
    runs = [(name, "vllm") for name in SCENARIOS]
    runs += [(name, engine) for name in PER_ENGINE for engine in STANDIN_ENGINES if engine != "vllm"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, engine in runs:
            (Path(tmp) / f"{name}-{engine}").mkdir()
            r = scenario(name, Path(tmp) / f"{name}-{engine}", engine)
            figure = (f"{len(r.calls)} requests  success {100 * r.success():7.3f}%  cut streams {r.cut}  "
                      f"slowest {max(c.seconds for c in r.calls):5.2f} s  "
                      f"retries {r.stats.get(f'cluster.{MODEL}.upstream_rq_retry', 0)}  "
                      f"ejections {r.stats.get(f'cluster.{MODEL}.outlier_detection.ejections_enforced_total', 0)}  "
                      f"failed checks {r.stats.get(f'cluster.{MODEL}.health_check.failure', 0)}  "
                      f"in panic {r.stats.get(f'cluster.{MODEL}.lb_healthy_panic', 0)}")
            if "hang" in r.moments:
                hang = r.moments["hang"]
                last = max((a for a in r.replicas[HUNG].arrivals if a >= hang), default=hang)
                later = [c for c in r.calls if c.sent >= hang + DETECTION_S]
                caught = [c for c in r.calls if c.sent >= hang and not c.ok]
                figure += (f"  last request to the hung replica {last - hang:4.2f} s after the hang (window "
                           f"{DETECTION_S:g} s); sent after the window: {len(later)}, success "
                           f"{100 * r.success(since=hang + DETECTION_S):7.3f}%, slowest "
                           f"{max((c.seconds for c in later), default=0):4.2f} s "
                           f"(bound {DETECTION_S + TRY_IDLE_S:g} s); caught {len(caught)} "
                           f"({sum(c.streamed for c in caught)} streamed, cut; the others 504 at timeoutSeconds)")
            rows.append((name if engine == "vllm" else f"{name} ({engine})", figure))
    return rows
