"""Day 2 at the gateway: rolling update, scale-down, saturated /health, a replica answering 500, an engine hang.

Each scenario runs the real Envoy on the kit's bootstrap in front of three stand-in vLLM replicas, under a steady mix
of streamed and non-streamed generations (tests.support.day2: times scaled down as it states; the same scenarios
are asserted by tests/artifacts/test_day2_scenarios_live.py). Reported per scenario: requests, success, cut streams
(a stream that started and did not end), the slowest answer, retries and ejections; for the hang, how long after it
the hung replica got its last request (the detection window) and the success of the requests sent after that.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.support.day2 import MODEL, SCENARIOS, scenario

HUNG = f"{MODEL}-1"


def run() -> list[tuple[str, str]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in SCENARIOS:
            (Path(tmp) / name).mkdir()
            r = scenario(name, Path(tmp) / name)
            figure = (f"{len(r.calls)} requests  success {100 * r.success():7.3f}%  cut streams {r.cut}  "
                      f"slowest {max(c.seconds for c in r.calls):5.2f} s  "
                      f"retries {r.stats.get(f'cluster.{MODEL}.upstream_rq_retry', 0)}  "
                      f"ejections {r.stats.get(f'cluster.{MODEL}.outlier_detection.ejections_enforced_total', 0)}")
            if "hang" in r.moments:
                hang = r.moments["hang"]
                last = max((a for a in r.replicas[HUNG].arrivals if a >= hang), default=hang)
                caught = [c for c in r.calls if c.sent >= hang and not c.ok]
                figure += (f"  last request to the hung replica {last - hang:4.2f} s after the hang; after that: "
                           f"success {100 * r.success(since=last):7.3f}%; caught {len(caught)} "
                           f"({sum(c.streamed for c in caught)} streamed, cut; the others 504 at timeoutSeconds)")
            rows.append((name, figure))
    return rows
