"""A real Prometheus (Debian's package) for tests: on 127.0.0.1, over a temporary TSDB, always stopped.

    with PrometheusServer(tmp_path, scrape_targets=["127.0.0.1:9464"]) as prom:
        prom.query("up")

Backfilled data: `backfill(openmetrics_text, tsdb_dir)` runs `promtool tsdb create-blocks-from
openmetrics`; start the server with `tsdb=tsdb_dir` and query at the backfilled timestamps.
Prometheus never evaluates recording rules over history: `backfill_rules(rules_doc, tsdb_dir, ...)`
records them with `promtool tsdb create-blocks-from rules`, one dependency level at a time (promtool
cannot see series recorded in the same run), restarting a server over the TSDB between levels.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.support.processes import die_with_parent, free_port, stop_process

__all__ = ["PrometheusServer", "backfill", "backfill_rules", "serve_recent", "rule_levels", "free_port",
           "require_binaries", "promtool"]

START_TIMEOUT_S = 30.0


def require_binaries() -> tuple[str, str]:
    """Paths of prometheus and promtool; a clear error (not a skip) when `make test` did not install them."""
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if not prom or not tool:
        raise RuntimeError("prometheus/promtool not on PATH: run `make test` (it installs Debian's prometheus)")
    return prom, tool


def promtool(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    _, tool = require_binaries()
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=timeout, check=False)


def backfill(openmetrics: str, tsdb: Path, *, workdir: Path) -> None:
    """Write blocks for `openmetrics` (samples with timestamps in seconds, ending in `# EOF`) into `tsdb`."""
    src = workdir / "backfill.om"
    src.write_text(openmetrics if openmetrics.endswith("# EOF\n") else openmetrics.rstrip("\n") + "\n# EOF\n")
    tsdb.mkdir(parents=True, exist_ok=True)
    res = promtool("tsdb", "create-blocks-from", "openmetrics", str(src), str(tsdb), timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"promtool backfill failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")


def rule_levels(rules: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
    """The recording rules of a rules file, by dependency level: level n reads only levels < n."""
    recs = [r for g in rules["groups"] for r in g["rules"] if "record" in r]
    names = {r["record"] for r in recs}
    refs = {n: re.compile(rf"(?<![\w:]){re.escape(n)}(?![\w:])") for n in names}
    deps = {id(r): {n for n in names if refs[n].search(r["expr"])} for r in recs}
    level: dict[str, int] = {}

    def of(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name in seen:
            raise ValueError(f"recording rules form a cycle through {name}")
        if name not in level:
            level[name] = max((1 + max((of(d, seen | {name}) for d in deps[id(r)]), default=-1)
                               for r in recs if r["record"] == name), default=0)
        return level[name]

    out: list[list[dict[str, Any]]] = [[] for _ in range(1 + max((of(n) for n in names), default=-1))]
    for r in recs:
        out[of(r["record"])].append(r)
    return out


def backfill_rules(rules: Mapping[str, Any], tsdb: Path, *, workdir: Path, start: int, end: int,
                   interval_s: int) -> None:
    """Record every recording rule of `rules` over [start, end] into `tsdb` (which holds the raw data)."""
    for n, level in enumerate(rule_levels(rules)):
        rule_file = workdir / f"rules-level-{n}.yaml"
        rule_file.write_text(yaml.safe_dump({"groups": [{"name": f"level-{n}", "rules": level}]}))
        blocks = workdir / f"rule-blocks-{n}"
        with PrometheusServer(workdir / f"level-{n}", tsdb=tsdb) as prom:
            res = promtool("tsdb", "create-blocks-from", "rules", f"--start={start}", f"--end={end}",
                           f"--url={prom.url}", f"--eval-interval={interval_s}s", f"--output-dir={blocks}",
                           str(rule_file), timeout=600)
        if res.returncode != 0:
            raise RuntimeError(f"promtool rules backfill (level {n}) failed:\n{res.stdout}\n{res.stderr}")
        for block in blocks.iterdir():
            if (block / "meta.json").is_file():
                block.rename(tsdb / block.name)


class PrometheusServer:
    """Context manager running `prometheus` on 127.0.0.1 with its own config and TSDB directory."""

    def __init__(self, workdir: Path, *, tsdb: Path | None = None, scrape_targets: list[str] | None = None,
                 scrape_interval: str = "1s", rule_files: list[Path] | None = None,
                 extra_args: list[str] | None = None, scrape_configs: list[dict[str, Any]] | None = None) -> None:
        """`scrape_targets`: host:port pairs scraped at /metrics (job "test"); `scrape_configs`: more jobs, whole."""
        self.workdir = Path(workdir)
        self.tsdb = tsdb or self.workdir / "tsdb"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.scrape_targets = scrape_targets or []
        self.scrape_interval = scrape_interval
        self.rule_files = rule_files or []
        self.extra_args = extra_args or []
        self.scrape_configs = scrape_configs or []
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.workdir / "prometheus.log"

    def _config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"global": {"scrape_interval": self.scrape_interval,
                                          "evaluation_interval": self.scrape_interval}}
        jobs = [{"job_name": "test", "static_configs": [{"targets": self.scrape_targets}]}] \
            if self.scrape_targets else []
        if jobs or self.scrape_configs:
            cfg["scrape_configs"] = [*jobs, *self.scrape_configs]
        if self.rule_files:
            cfg["rule_files"] = [str(p) for p in self.rule_files]
        return cfg

    def __enter__(self) -> PrometheusServer:
        prom, _ = require_binaries()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tsdb.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "prometheus.yml"
        conf.write_text(yaml.safe_dump(self._config()))
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [prom, f"--config.file={conf}", f"--storage.tsdb.path={self.tsdb}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=100y",
                 "--query.lookback-delta=5m", *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited ({self.proc.returncode}):\n{self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready after {START_TIMEOUT_S}s:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
        self.proc = None

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as err:
            body = json.load(err)
            raise RuntimeError(f"prometheus {path} {params}: {body.get('error')}") from None
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; returns the result vector (each item has 'metric' and 'value')."""
        data = self.api("query", query=expr, time=at)
        return data["result"] if data["resultType"] == "vector" else [{"metric": {}, "value": data["result"]}]

    def scalar(self, expr: str, at: float | None = None) -> float:
        """Instant query expected to return exactly one sample; its value."""
        res = self.query(expr, at)
        if len(res) != 1:
            raise AssertionError(f"{expr!r} at {at}: expected one sample, got {len(res)}: {res[:3]}")
        return float(res[0]["value"][1])


@contextmanager
def serve_recent(work: Path, openmetrics_of: Callable[[list[int]], str], *, minutes: int, step_s: int = 60
                 ) -> Iterator[tuple[PrometheusServer, int]]:
    """A Prometheus over `minutes` of data from `openmetrics_of(sample times)`, starting on the hour at least 5 hours
    ago (clear of the head block's last 3 hours), backfilled into `work`; yields it with the last sample's time."""
    start = (int(time.time()) - 5 * 3600) // 3600 * 3600
    times = list(range(start, start + minutes * 60 + 1, step_s))
    backfill(openmetrics_of(times), work / "tsdb", workdir=work)
    with PrometheusServer(work / "final", tsdb=work / "tsdb") as server:
        yield server, times[-1]
