"""Reading raw stack config: the problems it finds (each with its key path) and the reader that collects them.

`_Reader` walks the stack's sections and mappings of named objects, reports every problem instead of stopping at the
first, and has infra/stack/declared.py validate each declared section with pydantic in the house wording: the key
path, the value received ("an integer 3"), what is allowed, and "did you mean".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from components.k8s.settings import DNS_LABEL_PATTERN
from infra.stack import declared
from infra.stack.messages import did_you_mean, unknown_key
from infra.stack.messages import got as _got
from infra.stack.messages import show as _show

__all__ = ["Problem", "ConfigError", "did_you_mean", "unknown_key", "DNS_LABEL"]

DNS_LABEL = re.compile(DNS_LABEL_PATTERN)


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ConfigError(Exception):
    """Every problem found in one stack's config, each with its key path."""

    def __init__(self, problems: list[Problem], *, source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s){where}:\n{lines}")


T = TypeVar("T")


def _given(d: Mapping[str, Any] | None, key: str) -> bool:
    """Whether `key` is set in a raw mapping `d` (one _Reader.mapping did not read): a key set to null is unset, as
    the declared sections read it (mapping() leaves null keys out)."""
    return d is not None and d.get(key) is not None


class _Reader:
    """Walks raw config, collecting problems instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def problems_at(self, path: str) -> bool:
        """Whether a problem was already reported at or below `path` (later checks build on sound values)."""
        return any(p.path == path or p.path.startswith((f"{path}.", f"{path}[")) for p in self.problems)

    def is_set(self, d: Mapping[str, Any] | None, path: str, key: str) -> bool:
        """Whether the raw mapping `d` at `path` sets `key` (not null) to a value read without a problem: else a
        derived default holds (the resolve step computes it from other settings)."""
        return _given(d, key) and not self.problems_at(f"{path}.{key}")

    def mapping(self, raw: Any, path: str, allowed: tuple[str, ...] | None, *,
                keep_null: bool | tuple[str, ...] = ()) -> dict[str, Any] | None:
        """The mapping's good keys. A key set to null is left out, as if unset (`replicas:` with every child
        commented out is YAML null), so every later `key in d` agrees with fields(); `keep_null` keeps it for the
        listed keys (or all: a mapping of names, whose null entries are reported where they are read)."""
        if not isinstance(raw, dict):
            self.fail(path, f"expected a mapping, got {_got(raw)}")
            return None
        good: dict[str, Any] = {}
        for key, value in raw.items():
            if not isinstance(key, str):
                self.fail(path, f"key {_show(key)} is not a string")
            elif allowed is not None and key not in allowed:
                self.fail(f"{path}.{key}", unknown_key(key, allowed))
            elif value is not None or keep_null is True or (keep_null and key in keep_null):
                good[key] = value
        return good

    def section(self, cls: type[T], raw: Any, path: str) -> T:
        """The declared section `cls` (a settings dataclass of `setting(...)` fields) from `raw` at `path`:
        infra/stack/declared.py validates it."""
        return declared.read(self, cls, raw, path)

    def fields(self, cls: type, raw: Any, path: str, *, handled: tuple[str, ...] = ()) -> dict[str, Any]:
        """The declared fields of the section `cls` at `path` by attribute name; the keys in `handled` are the
        caller's to read (infra/stack/declared.py, values())."""
        return declared.values(self, cls, raw, path, handled=handled)

    def named(self, raw: Any, path: str, *, keep_null: tuple[str, ...] = ()) -> dict[str, Any]:
        """A mapping of DNS-label names to objects (pools, tenants, models); `keep_null`: keys of the objects whose
        null means something (see mapping())."""
        d = self.mapping(raw, path, None, keep_null=True)
        if d is None:
            return {}
        out = {}
        for name, body in d.items():
            if not DNS_LABEL.match(name):
                self.fail(f"{path}.{name}", "name must be a DNS label (lowercase letters, digits and '-', at most 63 "
                                            + (f"characters; it has {len(name)})" if len(name) > 63 else "characters)"))
            elif (m := self.mapping(body, f"{path}.{name}", None, keep_null=keep_null)) is not None:
                out[name] = m
        return out
