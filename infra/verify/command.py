"""`aifactory verify STACK`: the requests, then the signals, then the report; the URLs' checks and the exit code."""

from __future__ import annotations

import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from infra.config import ConfigError, PlatformConfig, Problem
from infra.outputs import EXIT_FAILURE, EXIT_OK, write_json
from infra.verify.endpoints import Endpoints, default_endpoints, kube_access, proxied_endpoints, unresolved_names
from infra.verify.gateway import request_hops
from infra.verify.report import Hop, Progress, Report, format_report, report_doc
from infra.verify.signals import Check, await_hops, gpu_check, logs_check, metric_checks, trace_check, watchdog_check

__all__ = [
    "DEFAULT_WAIT_SECONDS",
    "DEFAULT_REQUEST_TIMEOUT_SECONDS",
    "DEFAULT_QUERY_TIMEOUT_SECONDS",
    "DEFAULT_POLL_SECONDS",
    "LOG_LOOKBACK_SECONDS",
    "verify",
    "verify_command",
]


DEFAULT_WAIT_SECONDS = 120.0  # how long signals may take to arrive after the requests

DEFAULT_REQUEST_TIMEOUT_SECONDS = 60.0  # one request through the gateway, a cold engine's first answer included

DEFAULT_QUERY_TIMEOUT_SECONDS = 10.0  # one query to Prometheus, Jaeger, Loki or Alertmanager

DEFAULT_POLL_SECONDS = 2.0

LOG_LOOKBACK_SECONDS = 600


def verify(cfg: PlatformConfig, *, stack: str, endpoints: Endpoints, token: str | None,
           models: Iterable[str] | None = None, wait_seconds: float = DEFAULT_WAIT_SECONDS,
           request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
           query_timeout_seconds: float = DEFAULT_QUERY_TIMEOUT_SECONDS,
           poll_seconds: float = DEFAULT_POLL_SECONDS, progress: Progress | None = None) -> Report:
    """Requests through the gateway for each model (`models`: default every model of the stack), then every signal
    check, retried until `wait_seconds` after the requests. An endpoint whose name does not resolve here is not
    asked (its hops are broken at once, never waited on). `progress` hears each hop as it is tried and what it
    waits for."""
    say = progress or (lambda _msg: None)
    chosen = [cfg.models[m] for m in sorted(models if models is not None else cfg.models)]
    since = time.time() - LOG_LOOKBACK_SECONDS
    unresolved = unresolved_names(endpoints)
    hops: list[Hop] = []
    checks: list[Check] = []
    q = query_timeout_seconds
    say(f"[1/2] requests {len(chosen)} model(s) through {endpoints.gateway}, each request up to "
        f"{request_timeout_seconds:g}s")
    for model in chosen:
        sent_hops, sent = request_hops(endpoints, model, token, timeout=request_timeout_seconds,
                                       unresolved=unresolved.get("gateway"), progress=say)
        hops += sent_hops
        if sent.answered:  # a request that never arrived leaves no signal to look for
            checks += [trace_check(endpoints, sent, timeout=q), logs_check(endpoints, cfg, sent, since, timeout=q)]
        checks += metric_checks(endpoints, cfg, model, timeout=q)
    gpu = gpu_check(endpoints, cfg, timeout=q)
    checks += [*([gpu] if gpu is not None else []), watchdog_check(endpoints, timeout=q)]
    say(f"[2/2] signals  {len(checks)} hop(s), each asked every {poll_seconds:g}s until it passes or "
        f"{wait_seconds:g}s have passed")
    hops += await_hops(checks, wait_seconds=wait_seconds, poll_seconds=poll_seconds, unresolved=unresolved,
                       progress=say)
    return Report(stack, endpoints, tuple(hops))


def _url(flag: str, value: str) -> Problem | None:
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return Problem(flag, f"{value!r} is not an http(s):// URL with a host")
    return None


def verify_command(stack: str, *, urls: Mapping[str, str | None], token_file: Path | None = None,
                   kubeconfig: Path | None = None,
                   models: Sequence[str] | None = None, stacks_dir: Path | None = None,
                   wait_seconds: float = DEFAULT_WAIT_SECONDS,
                   request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
                   json_out: Path | None = None) -> int:
    """`aifactory verify`: ConfigError (exit 2) for bad input; exit 1 when a hop is broken. `urls` maps each
    Endpoints field to a URL given on the command line (None: the in-cluster default)."""
    from infra.synth import load_stack

    cfg = load_stack(stack, stacks_dir)
    problems = [p for f, u in urls.items() if u is not None and (p := _url(f"--{f}-url", u)) is not None]
    unknown = sorted(set(models or ()) - set(cfg.models))
    if unknown:
        problems.append(Problem("--model", f"{', '.join(unknown)}: not a model of {stack}; models: "
                                           f"{', '.join(sorted(cfg.models))}"))
    if wait_seconds < 0 or request_timeout_seconds <= 0:
        problems.append(Problem("--wait" if wait_seconds < 0 else "--timeout", "must be a positive number of seconds"))
    token = None
    if token_file is not None:
        try:
            token = token_file.read_text().strip() or None
        except OSError as err:
            problems.append(Problem("--token-file", f"{str(token_file)!r}: {err.strerror}"))
    if problems:
        raise ConfigError(problems)
    with tempfile.TemporaryDirectory(prefix="aifactory-verify-") as scratch:
        base = default_endpoints(cfg)
        if kubeconfig is not None:
            base = proxied_endpoints(cfg, kube_access(kubeconfig, scratch=Path(scratch)),
                                     gateway=urls.get("gateway") or base.gateway)
        given: dict[str, Any] = {f: u for f, u in urls.items() if u is not None}
        report = verify(cfg, stack=stack, endpoints=replace(base, **given), token=token, models=models or None,
                        wait_seconds=wait_seconds, request_timeout_seconds=request_timeout_seconds,
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
    human = sys.stderr if json_out is not None and str(json_out) == "-" else sys.stdout
    human.write(format_report(report))
    human.flush()
    if json_out is not None:
        write_json(json_out, report_doc(report))
    return EXIT_OK if report.ok else EXIT_FAILURE
