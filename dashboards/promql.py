"""Small PromQL builders shared by the rules and the dashboards, and two rewriters used by tests/benchmarks.

- `series(cfg, metric, *matchers)`: a selector with the metric family's configured selector added;
- `le(value)`: a bucket matcher that matches both `le="30"` (Go clients) and `le="30.0"` (Python clients);
- `by_node(expr)`: DCGM series with a `node` label whichever of Hostname/hostname the exporter set;
- `substitute(expr, variables)`: Grafana template variables replaced, as Grafana would before querying;
- `expand(expr, records)`: recorded series replaced by the expressions that record them (raw PromQL).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Protocol

from dashboards.config import Family, ObservabilityConfig
from telemetry.names import DCGM

__all__ = [
    "family_of",
    "series",
    "le",
    "bucket_at_or_below",
    "by_node",
    "regex_any",
    "substitute",
    "expand",
    "BUILTIN_VARIABLES",
]

_PREFIXES: tuple[tuple[str, Family], ...] = (
    ("DCGM_", "dcgm"), ("vllm:", "vllm"), ("nv_", "triton"), ("sglang:", "sglang"), ("istio_", "istio"),
    ("envoy_", "envoy"),
    ("kube_", "ksm"), ("aifactory_", "kit"), ("gen_ai_", "kit"), ("traces_span_metrics_", "kit"),
    ("otelcol_", "pipeline"), ("loki_", "pipeline"),
)

# What Grafana puts in for its own variables when a test or benchmark runs a panel's query directly.
BUILTIN_VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}


def family_of(metric: str) -> Family:
    for prefix, family in _PREFIXES:
        if metric.startswith(prefix):
            return family
    raise ValueError(f"{metric!r} belongs to no exporter family; prefixes: {', '.join(p for p, _ in _PREFIXES)}")


def series(cfg: ObservabilityConfig, metric: str, *matchers: str) -> str:
    """`metric{family selector, matchers...}`; empty braces are left out."""
    parts = [m for m in (cfg.selectors.of(family_of(metric)), *matchers) if m]
    return f"{metric}{{{', '.join(parts)}}}" if parts else metric


def le(value: float) -> str:
    """Bucket matcher for one boundary; Prometheus 2.x keeps `le` as the client wrote it."""
    if float(value).is_integer():
        return f'le=~"{int(value)}(\\\\.0)?"'
    return f'le="{value!r}"'


def bucket_at_or_below(buckets: Iterable[float], threshold: float) -> float:
    """The largest boundary <= threshold: a latency SLI counted on it never calls a slow request good."""
    below = [b for b in buckets if b <= threshold]
    if not below:
        raise ValueError(f"threshold {threshold}s is below the first bucket boundary {min(buckets)}s")
    return max(below)


def by_node(expr: str) -> str:
    """`expr` with a `node` label copied from Hostname (DCGM exporter <= 4.5.3) or hostname (newer)."""
    for source in DCGM.HOSTNAME_LABELS:
        expr = f'label_replace({expr}, "node", "$1", "{source}", "(.+)")'
    return expr


def regex_any(values: Iterable[str]) -> str:
    """A regex alternation matching exactly `values` (for `=~` / `!~`)."""
    return "|".join(re.escape(v).replace("\\", "\\\\") for v in values)


_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)(?::\w+)?\}|\$([A-Za-z_]\w*)")


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """Replace `$name` and `${name}` / `${name:fmt}` with `variables` (then Grafana's built-ins)."""
    values = {**BUILTIN_VARIABLES, **variables}

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in values:
            raise KeyError(f"template variable ${name} has no value; given: {', '.join(sorted(variables))}")
        return values[name]

    return _VARIABLE.sub(repl, expr)


class _Recorded(Protocol):
    record: str
    expr: str
    labels: Mapping[str, str]


_SELECTOR = re.compile(r"(?<![\w:])([a-zA-Z_:][\w:]*:[\w:]*)(\{[^}]*\})?")
_MATCHER = re.compile(r'\s*(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _parse_matchers(text: str) -> list[tuple[str, str, str]]:
    out = []
    body = text[1:-1] if text else ""
    pos = 0
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if not m:
            raise ValueError(f"cannot parse matchers {text!r}")
        out.append((m.group(1), m.group(2), m.group(3)))
        pos = m.end()
    return out


def expand(expr: str, records: Mapping[str, list[_Recorded]]) -> str:
    """`expr` with every recorded series replaced by its recording expression, recursively.

    Equality matchers on a rule's static labels pick the rules they match; other equality matchers filter
    the expanded result; any other matcher must be a match-all (`=~".*"`), as a dashboard sends with
    every variable on All.
    """

    def repl(m: re.Match[str]) -> str:
        name, matchers = m.group(1), _parse_matchers(m.group(2) or "")
        if name not in records:
            return m.group(0)
        rules = records[name]
        keep: list[tuple[str, str]] = []
        for label, op, value in matchers:
            if op == "=" and any(label in r.labels for r in rules):
                rules = [r for r in rules if r.labels.get(label) == value]
            elif op == "=":
                keep.append((label, value))
            elif not (op == "=~" and value == ".*"):
                raise ValueError(f"{m.group(0)}: only equality or match-all matchers expand")
        if not rules:
            raise ValueError(f"{m.group(0)}: no recording rule matches")
        parts = []
        for r in rules:
            body = expand(r.expr, records)
            for key, val in sorted(r.labels.items()):
                body = f'label_replace({body}, "{key}", "{val}", "", "")'
            parts.append(f"({body})")
        out = parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"
        for label, value in keep:  # an equality on a label the rule keeps filters its result
            out = f'({out} and on ({label}) label_replace(vector(1), "{label}", "{value}", "", ""))'
        if m.string[:m.start()].rstrip().endswith(("group_left", "group_right")):
            out = "() " + out  # `group_left (` would read as a label list
        return out

    return _SELECTOR.sub(repl, expr)
