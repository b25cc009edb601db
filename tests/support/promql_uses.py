"""Which series a PromQL expression reads and how: a small scanner for the tests that check names, types and
labels against upstream references (no PromQL parser ships for Python; promtool 2.42 has no AST dump).

For every vector selector it reports the metric name, the label names of its matchers, the range function it
sits in (rate, increase, changes, ...; None when read as an instant value) and the `by` labels of the innermost
aggregation around it (None when a label_replace/label_join sits in between, since that can add labels).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Use", "uses"]

_TOKEN = re.compile(r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<matchers>\{[^}]*\})
  | (?P<range>\[[^\]]*\])
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<number>[0-9][0-9.eE+\-]*[a-z]*)
  | (?P<open>\()
  | (?P<close>\))
  | (?P<other>\S)
""", re.VERBOSE)
_LABEL_IN_MATCHERS = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

AGGREGATIONS = frozenset({"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
                          "count_values", "group"})
LABEL_CHANGERS = frozenset({"label_replace", "label_join"})
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                      "offset", "inf", "nan", "Inf", "NaN"})


@dataclass(frozen=True)
class Use:
    name: str
    matchers: frozenset[str]
    function: str | None  # innermost enclosing function call (rate, increase, histogram_quantile, ...)
    range_function: str | None  # the enclosing call whose argument is this selector's range, if any
    by: frozenset[str] | None  # `by` labels of the innermost aggregation; None: none, or labels may be added


@dataclass
class _Frame:
    function: str | None
    by: frozenset[str] | None = None
    changes_labels: bool = False


def uses(expr: str) -> list[Use]:
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(expr)]
    out: list[Use] = []
    stack: list[_Frame] = []
    pending_by: frozenset[str] | None = None
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else (None, "")
        if kind == "ident" and text in ("by", "without", "on", "ignoring", "group_left", "group_right") \
                and nxt[0] == "open":
            j = i + 2
            labels = []
            while j < len(tokens) and tokens[j][0] != "close":
                if tokens[j][0] == "ident":
                    labels.append(tokens[j][1])
                j += 1
            if text == "by":
                pending_by = frozenset(labels)
            i = j + 1
            continue
        if kind == "ident" and nxt[0] == "open":
            by = pending_by if text in AGGREGATIONS else None
            stack.append(_Frame(text, by, text in LABEL_CHANGERS))
            pending_by = None
            i += 2
            continue
        if kind == "ident" and nxt[0] == "ident" and nxt[1] == "by" and text in AGGREGATIONS:
            # `sum by (...) (...)`: the aggregation's own parenthesis comes after the by clause
            j = i + 3
            labels = []
            while j < len(tokens) and tokens[j][0] != "close":
                if tokens[j][0] == "ident":
                    labels.append(tokens[j][1])
                j += 1
            stack.append(_Frame(text, frozenset(labels)))
            i = j + 2  # past the by-list's ')' and the aggregation's '('
            continue
        if kind == "open":
            stack.append(_Frame(None))
        elif kind == "close":
            if stack:
                stack.pop()
        elif kind == "ident" and text not in KEYWORDS and not text.startswith("$"):
            matchers = frozenset(_LABEL_IN_MATCHERS.findall(nxt[1])) if nxt[0] == "matchers" else frozenset()
            after = tokens[i + 2] if nxt[0] == "matchers" and i + 2 < len(tokens) else nxt
            ranged = after[0] == "range"
            function = next((f.function for f in reversed(stack) if f.function), None)
            by = None
            for f in reversed(stack):
                if f.changes_labels:
                    break
                if f.function in AGGREGATIONS:
                    by = f.by
                    break
            out.append(Use(text, matchers, function, function if ranged else None, by))
        i += 1
    return out
