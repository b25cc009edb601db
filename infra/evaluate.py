"""`aifactory eval STACK --workload W`: a workload's fidelity suite against each of its variants, with
EleutherAI's lm-evaluation-harness (`lm-eval`, pinned in pyproject.toml's `eval` extra).

Each variant is called through the gateway (or `--url-for VARIANT=URL`) by its model key in the body's
`"model"`: the gateway routes a model key to that model alone (components/k8s/gateway/envoy/config.py, "body
{"model": "<model key>"}"), so the deadline-aware routing of the workload is bypassed and a variant that gets no
traffic yet is reachable. Authenticated like any caller: `Authorization: Bearer <token from --token-file>`.

The harness runs a `generate_until` task written from the suite into a temporary directory: the items as local
JSON (`dataset_path: json`, `dataset_kwargs.data_files`), the prompt as the only user message (the
`local-chat-completions` model, which only takes chat messages: `apply_chat_template=True`), greedy decoding,
and `process_results: !function` naming infra/fidelity_scorers.py through a shim beside the YAML. No tokenizer
(`tokenizer_backend=None`, `tokenized_requests=False`): nothing is downloaded; the datasets cache is a temporary
directory and Hugging Face's hub and datasets are offline. Per-item scores come from `log_samples=True`.
Harness interfaces as of lm-eval 0.4.13: lm_eval/models/openai_completions.py (LocalChatCompletion),
lm_eval/models/api_models.py (TemplateAPI: base_url, num_concurrent, max_retries, timeout, header),
lm_eval/utils.py (import_function), lm_eval/evaluator.py (simple_evaluate).

Exit codes: 0 every variant evaluated (and recorded), 1 an endpoint unreachable or failing (the variants that
completed are still recorded, unless it was the baseline's), 2 config or usage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import json
import logging
import os
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from infra import fidelity
from infra import fidelity_stats as stats
from infra.config import ConfigError, PlatformConfig, Problem
from infra.fidelity_scorers import ANSWERED, METRIC

__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_TIMEOUT_SECONDS", "DEFAULT_MAX_RETRIES", "CHAT_PATH", "EndpointError",
           "VariantScore", "Report", "write_task", "run_items", "evaluate", "record", "format_report",
           "outcomes_file", "outcome_lines",
           "gateway_url", "eval_command", "metric_points", "push_metrics"]

DEFAULT_CONCURRENCY = 8  # requests in flight per variant
DEFAULT_TIMEOUT_SECONDS = 60  # one request, connection to last byte (lm-eval's `timeout`, whole seconds)
DEFAULT_MAX_RETRIES = 2  # tries per request (lm-eval's `max_retries` is the number of attempts)
DEFAULT_CONNECT_SECONDS = 5.0  # the reachability probe before a variant's run
DEFAULT_PUSH_SECONDS = 10.0  # the OTLP push of the scores, retries included (at most --timeout)
CHAT_PATH = "/v1/chat/completions"
TASK_PREFIX = "aifactory_"
_SHIM = "aifactory_scorers"

Progress = Callable[[str], None]


class EndpointError(Exception):
    """A variant's endpoint could not be reached or answered with errors; the message is one line."""


@dataclass(frozen=True, slots=True)
class VariantScore:
    variant: str
    scores: tuple[float, ...]  # per item, in suite order
    answered: tuple[bool, ...]  # per item: the endpoint gave an answer at all (fidelity_scorers.answered)
    harness_score: float  # the harness's own aggregate (the mean), a cross-check
    harness_stderr: float | None  # the harness's standard error of the mean (None if it computed none)

    @property
    def correct(self) -> int:
        return round(sum(self.scores))

    @property
    def score(self) -> float:
        return sum(self.scores) / len(self.scores)


@dataclass(frozen=True, slots=True)
class Report:
    stack: str
    workload: str
    suite: fidelity.Suite
    baseline: str
    max_drop: float
    variants: tuple[VariantScore, ...]  # cheapest first, as cfg.variants_of; only those that completed
    facts: Mapping[str, Mapping[str, Any]]  # variant -> fidelity.evaluated_facts
    failed: Mapping[str, str] = dataclasses.field(default_factory=dict)  # variant -> its endpoint's error


def gateway_url(cfg: PlatformConfig) -> str:
    """The gateway's in-cluster address (what the evaluation Job uses; from outside, give --url)."""
    from components.k8s.gateway import SERVICE_PORT
    from components.k8s.naming import GATEWAY_APP

    return f"http://{GATEWAY_APP}.{cfg.gateway.namespace}.svc:{SERVICE_PORT}"


def write_task(suite: fidelity.Suite, into: Path) -> str:
    """The harness task of `suite` in directory `into` (data, YAML, scorer shim); returns the task name."""
    data = into / "items.jsonl"
    with data.open("w") as f:  # one shape for every row: the datasets JSON loader wants one type per column
        for i in suite.items:
            f.write(json.dumps({"id": i.id, "prompt": i.prompt, "scorer": i.scorer, "reference": i.reference,
                                "tolerance": i.tolerance}) + "\n")
    (into / f"{_SHIM}.py").write_text(
        "from infra.fidelity_scorers import doc_to_target, doc_to_text, process_results  # noqa: F401\n")
    name = TASK_PREFIX + suite.name.replace("-", "_")
    task: dict[str, Any] = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(into / "datasets-cache")},
        "test_split": "test",
        "output_type": "generate_until",
        # functions, not Jinja templates: the harness compiles a template string again for every document
        # (lm_eval/utils.py apply_template), a third of a 200-item run's time
        "doc_to_text": "DOC_TO_TEXT",
        "doc_to_target": "DOC_TO_TARGET",
        "generation_kwargs": {"until": [], "max_gen_toks": suite.max_tokens, "temperature": 0.0,
                              "do_sample": False},
        "process_results": "PROCESS_RESULTS",
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in (METRIC, ANSWERED)],
        "metadata": {"version": 1},
    }
    text = yaml.safe_dump(task, sort_keys=False)
    for key, function in (("PROCESS_RESULTS", "process_results"), ("DOC_TO_TEXT", "doc_to_text"),
                          ("DOC_TO_TARGET", "doc_to_target")):
        text = text.replace(key, f"!function {_SHIM}.{function}")
    (into / f"{name}.yaml").write_text(text)
    return name


@contextlib.contextmanager
def _offline(task_dir: Path) -> Iterator[None]:
    """No downloads: the suite is local; the harness's datasets and hub clients must not look elsewhere. Without
    an HF_HOME of the caller's, the hub's home is a directory of the run's own (removed with it), for the run only."""
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    own = "HF_HOME" not in os.environ
    if own:
        os.environ["HF_HOME"] = str(task_dir / "hf-home")
    try:
        yield
    finally:
        if own:
            os.environ.pop("HF_HOME", None)


class _HarnessTasks(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" for the harness's own requests: when one request fails
    for good, the harness's gather leaves its other requests' failed tasks behind, and asyncio logs each when it is
    garbage-collected, which can be long after the run (the failure itself is reported as one EndpointError line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith("Task exception was never retrieved") and "amodel_call" in text)


_HARNESS_TASKS = _HarnessTasks()


def _probe(url: str, *, seconds: float = DEFAULT_CONNECT_SECONDS) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointError(f"{url!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=seconds).close()
    except OSError as err:
        raise EndpointError(f"cannot reach {parts.hostname}:{port} ({err.strerror or err})") from None


def _cause(err: BaseException, *, timeout_seconds: int) -> str:
    """The error under the harness's retries (tenacity's RetryError holds the last try's)."""
    from tenacity import RetryError

    while isinstance(err, RetryError) and (last := err.last_attempt.exception()) is not None:
        err = last
    if isinstance(err, TimeoutError):  # aiohttp's total timeout (asyncio.TimeoutError is TimeoutError)
        return (f"a request took longer than --timeout {timeout_seconds}s (lm-eval's `timeout`: connection to last "
                "byte, each try); raise --timeout, or lower --concurrency if the endpoint queues")
    status = getattr(err, "status", None)
    text = getattr(err, "message", None) or str(err) or type(err).__name__
    return f"HTTP {status}: {text}" if isinstance(status, int) else f"{type(err).__name__}: {text}"


def run_items(*, task_dir: Path, task: str, url: str, model_key: str, token: str | None,
              concurrency: int = DEFAULT_CONCURRENCY, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
              max_retries: int = DEFAULT_MAX_RETRIES, system: str | None = None,
              ids: Sequence[str] = ()) -> VariantScore:
    """One variant's per-item scores (in `ids` order) from the real harness; EndpointError on failure."""
    with _offline(task_dir):
        return _run_items(task_dir=task_dir, task=task, url=url, model_key=model_key, token=token,
                          concurrency=concurrency, timeout_seconds=timeout_seconds, max_retries=max_retries,
                          system=system, ids=ids)


def _run_items(*, task_dir: Path, task: str, url: str, model_key: str, token: str | None, concurrency: int,
               timeout_seconds: int, max_retries: int, system: str | None, ids: Sequence[str]) -> VariantScore:
    import lm_eval
    from lm_eval.tasks import TaskManager

    _probe(url)
    args: dict[str, Any] = {"base_url": url.rstrip("/") + CHAT_PATH, "model": model_key,
                            "num_concurrent": concurrency, "max_retries": max_retries, "timeout": timeout_seconds,
                            "tokenized_requests": False, "tokenizer_backend": None}
    if token is not None:
        args["header"] = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    # The harness logs each failed try with the request's headers, the bearer token included, and a failed run
    # leaves its other requests' tasks to asyncio's "exception never retrieved" tracebacks: both loggers stay quiet
    # until those tasks are collected (a failure ends the run as one EndpointError line instead).
    if _HARNESS_TASKS not in logging.getLogger("asyncio").filters:
        logging.getLogger("asyncio").addFilter(_HARNESS_TASKS)
    quiet = [logging.getLogger(name) for name in ("lm_eval", "asyncio")]
    levels = [log.level for log in quiet]
    for log in quiet:
        log.setLevel(logging.CRITICAL)
    failure: str | None = None
    try:
        out = lm_eval.simple_evaluate(model="local-chat-completions", model_args=args, tasks=[task],
                                      task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
                                      log_samples=True, apply_chat_template=True, system_instruction=system,
                                      bootstrap_iters=0)
    except Exception as err:  # the harness surfaces aiohttp/tenacity errors as they are
        failure = _cause(err, timeout_seconds=timeout_seconds)  # raised below, without the harness's tasks attached
    finally:
        if failure is not None:  # a failed run's other tasks, collected while their loggers are quiet
            gc.collect()
        for log, level in zip(quiet, levels, strict=True):
            log.setLevel(level)
    if failure is not None:
        raise EndpointError(failure)
    if out is None:
        raise EndpointError("the harness returned no results")
    by_id = {s["doc"]["id"]: (float(s[METRIC]), bool(s[ANSWERED])) for s in out["samples"][task]}
    res = out["results"][task]
    stderr = res.get(f"{METRIC}_stderr,none")
    return VariantScore(model_key, tuple(by_id[i][0] for i in ids), tuple(by_id[i][1] for i in ids),
                        float(res[f"{METRIC},none"]), float(stderr) if isinstance(stderr, int | float) else None)


def evaluate(cfg: PlatformConfig, workload: str, *, stacks_dir: Path, url: str | None = None,
             url_for: Mapping[str, str] | None = None, token: str | None = None,
             concurrency: int = DEFAULT_CONCURRENCY, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
             max_retries: int = DEFAULT_MAX_RETRIES, progress: Progress | None = None) -> Report:
    """The workload's suite against each of its variants (baseline first), the same items for each."""
    say = progress or (lambda _m: None)
    gate = cfg.gateway.fidelity.get(workload)
    if gate is None:
        gated = ", ".join(sorted(cfg.gateway.fidelity)) or "(none)"
        raise ConfigError([Problem(f"gateway.routing.{workload}.fidelity",
                                   f"is required to evaluate workload {workload!r} (suite, baseline, maxDrop); "
                                   f"workloads with a fidelity gate: {gated}")], source=f"stack {cfg.stack!r}")
    fidelity.suite_digests(cfg, stacks_dir)  # a missing or broken suite: ConfigError at the gate's key path
    suite = fidelity.load_suite(stacks_dir, gate.suite)
    variants = cfg.variants_of(workload)
    unknown = sorted(set(url_for or {}) - {v.name for v in variants})
    if unknown:
        raise ConfigError([Problem("--url-for", f"{', '.join(unknown)}: not a variant of workload {workload!r}; "
                                                f"its variants: {', '.join(v.name for v in variants)}")])
    # A model named like its workload has no route of its own: the gateway sends that name to the workload's
    # routing (components/k8s/gateway/envoy/config.py routes(): only keys other than the workload get a body route).
    shadowed = sorted(v.name for v in variants if v.name == workload and v.name not in (url_for or {}))
    if shadowed:
        raise ConfigError([Problem("--url-for", f"is required for variant {n!r}: it is named like its workload, and "
                                                "the gateway routes that name to the workload's routing, not to this "
                                                f"variant; give --url-for {n}=URL (its engine's base URL)")
                           for n in shadowed])
    order = sorted(variants, key=lambda m: m.name != gate.baseline)
    ids = [i.id for i in suite.items]
    scores: dict[str, VariantScore] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="aifactory-eval-") as tmp:
        task = write_task(suite, Path(tmp))
        for n, v in enumerate(order, start=1):
            where = (url_for or {}).get(v.name) or url or gateway_url(cfg)
            say(f"[{n}/{len(order)}] {v.name}{' (baseline)' if v.name == gate.baseline else ''}: "
                f"{len(ids)} items at {where}, {concurrency} at a time")
            try:
                scores[v.name] = run_items(task_dir=Path(tmp), task=task, url=where, model_key=v.name, token=token,
                                           concurrency=concurrency, timeout_seconds=timeout_seconds,
                                           max_retries=max_retries, system=suite.system, ids=ids)
            except EndpointError as err:
                if v.name == gate.baseline:  # nothing can be compared without it
                    raise EndpointError(f"variant {v.name!r} at {where}: {err}") from None
                failed[v.name] = f"variant {v.name!r} at {where}: {err}"
                say(f"      failed: {err}")
                continue
            s = scores[v.name]
            say(f"      {s.correct}/{len(ids)} right, {len(ids) - sum(s.answered)} unanswered")
    return Report(cfg.stack, workload, suite, gate.baseline, gate.max_drop,
                  tuple(scores[v.name] for v in variants if v.name in scores),
                  {v.name: fidelity.evaluated_facts(cfg, v) for v in variants if v.name in scores}, failed)


def _categories(report: Report, s: VariantScore) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for item, right in zip(report.suite.items, s.scores, strict=True):
        if item.category is not None:
            c = out.setdefault(item.category, {"items": 0, "correct": 0})
            c["items"] += 1
            c["correct"] += round(right)
    return out


def outcomes_file(results_path: Path, fp: str) -> Path:
    """Per-item outcomes of the variant whose fingerprint is `fp`, beside the results file:
    `<stack>.items/<first 16 hex digits of the fingerprint>.jsonl`."""
    return results_path.parent / f"{results_path.stem}.items" / f"{fp.removeprefix('sha256:')[:16]}.jsonl"


def outcome_lines(report: Report, s: VariantScore) -> str:
    """One JSON line per item: its id, category, and whether the variant answered it and was right."""
    fp, digest = fidelity.fingerprint(report.facts[s.variant]), report.suite.digest  # once: digest hashes the suite
    return "".join(json.dumps({"fingerprint": fp, "suiteDigest": digest, "id": item.id,
                               "category": item.category, "answered": answered, "right": bool(round(right))},
                              sort_keys=True) + "\n"
                   for item, right, answered in zip(report.suite.items, s.scores, s.answered, strict=True))


def _entry(report: Report, s: VariantScore, base: VariantScore, stack: str) -> dict[str, Any]:
    n = len(s.scores)
    low, high = stats.wilson(s.correct, n, z=stats.z_for(stats.ALPHA))
    fp = fidelity.fingerprint(report.facts[s.variant])
    out: dict[str, Any] = {"fingerprint": fp, "evaluated": dict(report.facts[s.variant]), "score": round(s.score, 6),
                           "correct": s.correct, "answered": sum(s.answered), "ci95": [round(low, 6), round(high, 6)],
                           "outcomes": f"{stack}.items/{fp.removeprefix('sha256:')[:16]}.jsonl"}
    if (cats := _categories(report, s)):
        out["categories"] = cats
    if s.variant != report.baseline:
        t = stats.Table.of(base.scores, s.scores)
        out["vsBaseline"] = {"bothRight": int(t.both), "lost": int(t.baseline_only), "gained": int(t.variant_only),
                             "drop": round(t.drop, 6)}
    return out


def _run(entries: Mapping[str, Mapping[str, Any]], report: Report, now: str) -> dict[str, Any]:
    """The compact history line of one run: what each variant was and how it did, and which failed to answer."""
    keep = ("fingerprint", "correct", "answered")
    variants = {k: {**{f: e[f] for f in keep},
                    **{f: e["vsBaseline"][f] for f in ("bothRight", "lost", "gained") if "vsBaseline" in e}}
                for k, e in entries.items()}
    run: dict[str, Any] = {"evaluatedAt": now, "suiteDigest": report.suite.digest, "baseline": report.baseline,
                           "variants": variants}
    if report.failed:
        run["failed"] = dict(report.failed)
    return run


def record(results: Mapping[str, Any], report: Report, *, now: str) -> dict[str, Any]:
    """`results` with the workload's latest run replaced by `report` and the run appended to its `runs` (other
    workloads kept as they are). A variant whose endpoint failed has no result in this run."""
    base = next(s for s in report.variants if s.variant == report.baseline)
    workloads = dict(results.get("workloads") or {})
    before = workloads.get(report.workload) or {}
    entries = {s.variant: _entry(report, s, base, report.stack) for s in report.variants}
    workloads[report.workload] = {
        "suite": report.suite.name, "suiteDigest": report.suite.digest, "items": len(report.suite.items),
        "baseline": report.baseline, "evaluatedAt": now, "variants": entries,
        "runs": [*(before.get("runs") or []), _run(entries, report, now)]}
    return {"stack": report.stack, "workloads": workloads}


def _worst_categories(report: Report, base: VariantScore, s: VariantScore, *, top: int = 3) -> str:
    mine, theirs = _categories(report, s), _categories(report, base)
    drops = sorted(((theirs[c]["correct"] - m["correct"]) / m["items"], c) for c, m in mine.items())
    worst = [(d, c) for d, c in reversed(drops) if d > 0][:top]
    return ", ".join(f"{c} {mine[c]['correct']}/{mine[c]['items']} (baseline {theirs[c]['correct']}, "
                     f"-{d:.3f})" for d, c in worst)


def format_report(report: Report, found: Sequence[fidelity.Verdict], gate: Any = None,
                  results: Mapping[str, Any] | None = None) -> str:
    """The printed report: per variant its score, unanswered items, drop and its bound at the level it was tested
    at, what the suite could show (the smallest bound, items needed for maxDrop), the verdict; the worst
    categories; the verdicts' reasons."""
    base = next(s for s in report.variants if s.variant == report.baseline)
    n = len(report.suite.items)
    rec = ((results or {}).get("workloads") or {}).get(report.workload) or {}
    judged = fidelity.judgements(gate, rec) if gate is not None and rec else {}
    lines = [f"eval {report.stack} {report.workload}: suite {report.suite.name!r}, {n} items, baseline "
             f"{report.baseline!r}, maxDrop {report.max_drop:.3f}",
             f"  {'variant':<24} {'score':>6}  {'95% CI':<11}  {'unanswered':>10}  {'drop, at most':<24}  "
             f"{'could show':>10}  {'items for maxDrop':>17}  gate"]
    verdict = {v.variant: v for v in found if v.workload == report.workload}
    for s in report.variants:
        low, high = stats.wilson(s.correct, n, z=stats.z_for(stats.ALPHA))
        j = judged.get(s.variant)
        if s.variant == report.baseline or j is None:
            drop, show, need = "-", "-", "-"
        else:
            drop = f"{j.drop:+.3f} <= {j.bound:.3f} ({j.level * 100:.3g}%)"
            show = f"{j.resolution:.3f}"
            need = str(j.items_needed) if j.items_needed is not None else "none"
        v = verdict.get(s.variant)
        lines.append(f"  {s.variant:<24} {s.score:>6.3f}  {low:.3f}-{high:.3f}  {n - sum(s.answered):>10}  "
                     f"{drop:<24}  {show:>10}  {need:>17}  {v.status if v else '-'}")
    for name, err in sorted(report.failed.items()):
        lines.append(f"  {name:<24} not evaluated: {err}")
    if report.suite.categories:
        for s in report.variants:
            if s.variant != report.baseline and (worst := _worst_categories(report, base, s)):
                lines.append(f"  worst categories of {s.variant}: {worst}")
    lines += [f"  {v.message}" for v in found if v.workload == report.workload and v.status not in ("baseline",)
              and v.variant in {s.variant for s in report.variants}]
    return "\n".join(lines) + "\n"


def metric_points(report: Report, found: Sequence[fidelity.Verdict], gate: Any = None,
                  results: Mapping[str, Any] | None = None) -> list[tuple[str, float, dict[str, str]]]:
    """(OTel instrument name, value, attributes) per variant for telemetry.names.FIDELITY_METRICS."""
    from telemetry import names

    rec = ((results or {}).get("workloads") or {}).get(report.workload) or {}
    judged = fidelity.judgements(gate, rec) if gate is not None and rec else {}
    status = {v.variant: v.status for v in found if v.workload == report.workload}
    out = []
    for s in report.variants:
        attrs = {names.L_WORKLOAD: report.workload, names.L_VARIANT: s.variant, names.L_SUITE: report.suite.name}
        j = judged.get(s.variant)
        bound = j.bound if j is not None else 0.0
        out += [(names.FIDELITY_SCORE.otel, s.score, attrs), (names.FIDELITY_DROP_BOUND.otel, bound, attrs),
                (names.FIDELITY_PASSED.otel, 1.0 if status.get(s.variant) in ("baseline", "passed") else 0.0, attrs)]
    return out


def push_metrics(points: Sequence[tuple[str, float, Mapping[str, str]]], *, endpoint: str,
                 timeout_seconds: float = 10.0) -> None:
    """Push the points once as OTLP/HTTP gauges to `endpoint` (the Collector's base URL); EndpointError if refused."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
    from opentelemetry.sdk.resources import Resource

    from telemetry import names

    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=Resource.create({"service.name": "aifactory-eval"}), metric_readers=[reader])
    meter = provider.get_meter("aifactory.fidelity")
    gauges = {m.otel: meter.create_gauge(m.otel, unit=m.unit, description=m.description)
              for m in names.FIDELITY_METRICS}
    for name, value, attrs in points:
        gauges[name].set(value, dict(attrs))
    data = reader.get_metrics_data()
    provider.shutdown()
    exporter = OTLPMetricExporter(endpoint=endpoint.rstrip("/") + "/v1/metrics", timeout=timeout_seconds)
    quiet = logging.getLogger("opentelemetry.exporter.otlp")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # its retries log tracebacks; the outcome is one line below
    try:
        result = exporter.export(data) if data is not None else MetricExportResult.FAILURE
    finally:
        quiet.setLevel(level)
        exporter.shutdown()
    if result is not MetricExportResult.SUCCESS:
        raise EndpointError(f"scores not exported to {endpoint} (OTLP/HTTP)")


def _url_for(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        name, sep, url = p.partition("=")
        if not sep or not name or not url:
            raise ConfigError([Problem("--url-for", f"{p!r} is not VARIANT=URL")])
        out[name] = url
    return out


def eval_command(stack: str, *, workload: str, url: str | None = None, url_for: Sequence[str] = (),
                 token_file: Path | None = None, concurrency: int = DEFAULT_CONCURRENCY,
                 timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS, stacks_dir: Path | None = None,
                 write: bool = True, now: str | None = None, otlp_endpoint: str | None = None) -> int:
    """Evaluate, print the report, record the results (unless `write` is false). ConfigError for bad input."""
    from infra.synth import DEFAULT_STACKS_DIR, load_stack

    sdir = stacks_dir or DEFAULT_STACKS_DIR
    cfg = load_stack(stack, stacks_dir)
    if concurrency < 1 or timeout_seconds < 1:
        raise ConfigError([Problem("--concurrency" if concurrency < 1 else "--timeout",
                                   f"{min(concurrency, timeout_seconds)} is below the minimum 1")])
    token = None
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as err:
            raise ConfigError([Problem("--token-file", f"{str(token_file)!r}: {err.strerror}")]) from None
    try:
        report = evaluate(cfg, workload, stacks_dir=sdir, url=url, url_for=_url_for(url_for), token=token,
                          concurrency=concurrency, timeout_seconds=timeout_seconds,
                          progress=lambda m: print(m, file=sys.stderr, flush=True))
    except EndpointError as err:
        print(f"aifactory: eval: {err}", file=sys.stderr, flush=True)
        return 1
    path = fidelity.results_file(sdir, stack)
    stamp = now or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    results = record(fidelity.read_results(path), report, now=stamp)
    found = fidelity.verdicts(cfg, results, suite_digests={report.suite.name: report.suite.digest})
    gate = cfg.gateway.fidelity[workload]
    sys.stdout.write(format_report(report, found, gate, results))
    if write:
        for s in report.variants:
            fidelity.write_text(outcomes_file(path, fidelity.fingerprint(report.facts[s.variant])),
                                outcome_lines(report, s))
        fidelity.write_results(path, results)
        print(f"recorded in {path}", file=sys.stderr, flush=True)
    # an endpoint that failed, or one whose answers are no evidence (a silent or failing baseline, a variant that
    # left too many items unanswered): the evaluation failed, whatever was recorded
    failures = [*report.failed.values(),
                *(v.message for v in found if v.workload == workload and v.status == "error")]
    for failure in failures:
        print(f"aifactory: eval: {failure}", file=sys.stderr, flush=True)
    if otlp_endpoint is not None:
        try:
            push_metrics(metric_points(report, found, gate, results), endpoint=otlp_endpoint,
                         timeout_seconds=min(timeout_seconds, DEFAULT_PUSH_SECONDS))
        except EndpointError as err:
            print(f"aifactory: eval: {err}", file=sys.stderr, flush=True)
            return 1
        print(f"scores pushed to {otlp_endpoint}", file=sys.stderr, flush=True)
    return 1 if failures else 0
