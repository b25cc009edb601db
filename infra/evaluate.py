"""`aifactory eval STACK --workload W`: a workload's fidelity suite against each of its variants, with
EleutherAI's lm-evaluation-harness (`lm-eval`, pinned in pyproject.toml's `eval` extra).

Each variant is called through the gateway (or `--url-for VARIANT=URL`) by its model key in the body's
`"model"`: the gateway routes a model key to that model alone (components/k8s/envoy_config.py, "body
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

Exit codes: 0 every variant evaluated (and recorded), 1 an endpoint unreachable or failing, 2 config or usage.
"""

from __future__ import annotations

import datetime
import gc
import json
import logging
import os
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from infra import fidelity
from infra.config import ConfigError, PlatformConfig, Problem
from infra.fidelity_scorers import METRIC

__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_TIMEOUT_SECONDS", "DEFAULT_MAX_RETRIES", "CHAT_PATH", "EndpointError",
           "VariantScore", "Report", "write_task", "run_items", "evaluate", "record", "format_report",
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
    variants: tuple[VariantScore, ...]  # cheapest first, as cfg.variants_of
    facts: Mapping[str, Mapping[str, Any]]  # variant -> fidelity.evaluated_facts


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
    (into / f"{_SHIM}.py").write_text("from infra.fidelity_scorers import process_results  # noqa: F401\n")
    name = TASK_PREFIX + suite.name.replace("-", "_")
    task: dict[str, Any] = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(into / "datasets-cache")},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{prompt}}",
        "doc_to_target": "{{reference}}",
        "generation_kwargs": {"until": [], "max_gen_toks": suite.max_tokens, "temperature": 0.0,
                              "do_sample": False},
        "process_results": "PROCESS_RESULTS",
        "metric_list": [{"metric": METRIC, "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1},
    }
    text = yaml.safe_dump(task, sort_keys=False).replace("PROCESS_RESULTS", f"!function {_SHIM}.process_results")
    (into / f"{name}.yaml").write_text(text)
    return name


def _offline() -> None:
    """No downloads: the suite is local; the harness's datasets and hub clients must not look elsewhere."""
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="aifactory-eval-hf-"))


def _probe(url: str, *, seconds: float = DEFAULT_CONNECT_SECONDS) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointError(f"{url!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=seconds).close()
    except OSError as err:
        raise EndpointError(f"cannot reach {parts.hostname}:{port} ({err.strerror or err})") from None


def _cause(err: BaseException) -> str:
    """The error under the harness's retries (tenacity's RetryError holds the last try's)."""
    from tenacity import RetryError

    while isinstance(err, RetryError) and (last := err.last_attempt.exception()) is not None:
        err = last
    status = getattr(err, "status", None)
    text = getattr(err, "message", None) or str(err) or type(err).__name__
    return f"HTTP {status}: {text}" if isinstance(status, int) else f"{type(err).__name__}: {text}"


def run_items(*, task_dir: Path, task: str, url: str, model_key: str, token: str | None,
              concurrency: int = DEFAULT_CONCURRENCY, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
              max_retries: int = DEFAULT_MAX_RETRIES, system: str | None = None,
              ids: Sequence[str] = ()) -> VariantScore:
    """One variant's per-item scores (in `ids` order) from the real harness; EndpointError on failure."""
    _offline()
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
    quiet = [logging.getLogger(name) for name in ("lm_eval", "asyncio")]
    levels = [log.level for log in quiet]
    for log in quiet:
        log.setLevel(logging.CRITICAL)
    try:
        out = lm_eval.simple_evaluate(model="local-chat-completions", model_args=args, tasks=[task],
                                      task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
                                      log_samples=True, apply_chat_template=True, system_instruction=system,
                                      bootstrap_iters=0)
    except Exception as err:  # the harness surfaces aiohttp/tenacity errors as they are
        raise EndpointError(_cause(err)) from None
    finally:
        gc.collect()
        for log, level in zip(quiet, levels, strict=True):
            log.setLevel(level)
    if out is None:
        raise EndpointError("the harness returned no results")
    by_id = {s["doc"]["id"]: float(s[METRIC]) for s in out["samples"][task]}
    res = out["results"][task]
    stderr = res.get(f"{METRIC}_stderr,none")
    return VariantScore(model_key, tuple(by_id[i] for i in ids), float(res[f"{METRIC},none"]),
                        float(stderr) if isinstance(stderr, int | float) else None)


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
    # routing (components/k8s/envoy_config.py routes(): only keys other than the workload get a body route).
    shadowed = sorted(v.name for v in variants if v.name == workload and v.name not in (url_for or {}))
    if shadowed:
        raise ConfigError([Problem("--url-for", f"is required for variant {n!r}: it is named like its workload, and "
                                                "the gateway routes that name to the workload's routing, not to this "
                                                f"variant; give --url-for {n}=URL (its engine's base URL)")
                           for n in shadowed])
    order = sorted(variants, key=lambda m: m.name != gate.baseline)
    ids = [i.id for i in suite.items]
    scores: dict[str, VariantScore] = {}
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
                raise EndpointError(f"variant {v.name!r} at {where}: {err}") from None
            say(f"      {scores[v.name].correct}/{len(ids)} right")
    return Report(cfg.stack, workload, suite, gate.baseline, gate.max_drop,
                  tuple(scores[v.name] for v in variants),
                  {v.name: fidelity.evaluated_facts(cfg, v) for v in variants})


def _entry(report: Report, s: VariantScore, base: VariantScore) -> dict[str, Any]:
    low, high = fidelity.wilson(s.correct, len(s.scores))
    out: dict[str, Any] = {"fingerprint": fidelity.fingerprint(report.facts[s.variant]),
                           "evaluated": dict(report.facts[s.variant]), "score": round(s.score, 6),
                           "correct": s.correct, "ci95": [round(low, 6), round(high, 6)]}
    if s.variant != report.baseline:
        d, dl, dh = fidelity.paired_difference(s.scores, base.scores)
        out["vsBaseline"] = {"difference": round(d, 6), "ci95": [round(dl, 6), round(dh, 6)]}
    return out


def record(results: Mapping[str, Any], report: Report, *, now: str) -> dict[str, Any]:
    """`results` with the workload's entry replaced by `report` (other workloads kept as they are)."""
    base = next(s for s in report.variants if s.variant == report.baseline)
    workloads = dict(results.get("workloads") or {})
    workloads[report.workload] = {
        "suite": report.suite.name, "suiteDigest": report.suite.digest, "items": len(report.suite.items),
        "baseline": report.baseline, "evaluatedAt": now,
        "variants": {s.variant: _entry(report, s, base) for s in report.variants}}
    return {"stack": report.stack, "workloads": workloads}


def format_report(report: Report, found: Sequence[fidelity.Verdict]) -> str:
    base = next(s for s in report.variants if s.variant == report.baseline)
    n = len(report.suite.items)
    lines = [f"eval {report.stack} {report.workload}: suite {report.suite.name!r}, {n} items, baseline "
             f"{report.baseline!r}, maxDrop {report.max_drop:.3f}",
             f"  {'variant':<24} {'score':>6}  {'95% CI':<13}  {'vs baseline (paired, 95% CI)':<30}  gate"]
    verdict = {v.variant: v for v in found if v.workload == report.workload}
    for s in report.variants:
        low, high = fidelity.wilson(s.correct, n)
        if s.variant == report.baseline:
            diff = "-"
        else:
            d, dl, dh = fidelity.paired_difference(s.scores, base.scores)
            diff = f"{d:+.3f} [{dl:+.3f}, {dh:+.3f}]"
        v = verdict.get(s.variant)
        lines.append(f"  {s.variant:<24} {s.score:>6.3f}  {low:.3f}-{high:.3f}    {diff:<30}  "
                     f"{v.status if v else '-'}")
    lines += [f"  {v.message}" for v in found if v.workload == report.workload and v.status == "failed"]
    return "\n".join(lines) + "\n"


def metric_points(report: Report, found: Sequence[fidelity.Verdict]) -> list[tuple[str, float, dict[str, str]]]:
    """(OTel instrument name, value, attributes) per variant for telemetry.names.FIDELITY_METRICS."""
    from telemetry import names

    base = next(s for s in report.variants if s.variant == report.baseline)
    status = {v.variant: v.status for v in found if v.workload == report.workload}
    out = []
    for s in report.variants:
        attrs = {names.L_WORKLOAD: report.workload, names.L_VARIANT: s.variant, names.L_SUITE: report.suite.name}
        bound = 0.0 if s.variant == report.baseline else -fidelity.paired_difference(s.scores, base.scores)[1]
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
    sys.stdout.write(format_report(report, found))
    if write:
        fidelity.write_results(path, results)
        print(f"recorded in {path}", file=sys.stderr, flush=True)
    if otlp_endpoint is not None:
        try:
            push_metrics(metric_points(report, found), endpoint=otlp_endpoint,
                         timeout_seconds=min(timeout_seconds, DEFAULT_PUSH_SECONDS))
        except EndpointError as err:
            print(f"aifactory: eval: {err}", file=sys.stderr, flush=True)
            return 1
        print(f"scores pushed to {otlp_endpoint}", file=sys.stderr, flush=True)
    return 0
