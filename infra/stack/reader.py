"""Reading raw stack config: the problems it finds (each with its key path) and the reader that collects them.

`_Reader` walks raw values and reports every problem instead of stopping at the first; the message helpers give the
house wording: the key path, the value received ("an integer 3"), what is allowed, and "did you mean".
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from components.k8s.settings import DNS_LABEL_PATTERN, SETTING
from infra.stack import declared
from infra.stack.messages import beyond_limits, did_you_mean, unknown_key
from infra.stack.messages import got as _got
from infra.stack.messages import kind as _kind
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
_REQUIRED: Any = object()



def _given(d: Mapping[str, Any] | None, key: str) -> bool:
    """Whether `key` is set in a raw mapping `d` (one _Reader.mapping did not read): a key set to null is unset, as
    `_Reader.value` reads it (mapping() leaves null keys out)."""
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
        commented out is YAML null), so every later `key in d` agrees with value(); `keep_null` keeps it for the
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

    def allow(self, d: Mapping[str, Any], path: str, allowed: tuple[str, ...]) -> None:
        """Report each key of an already-read mapping (a named pool, tenant or model) that is not `allowed`."""
        for key in d:
            if key not in allowed:
                self.fail(f"{path}.{key}", unknown_key(key, allowed))

    def value(
        self,
        d: Mapping[str, Any] | None,
        key: str,
        path: str,
        kind: type | tuple[type, ...],
        default: Any = _REQUIRED,
        *,
        choices: tuple[Any, ...] | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
        check: Callable[[Any], str | None] | None = None,
    ) -> Any:
        """The value of `key` in the raw mapping `d` at `path`, checked against its kind, bounds, choices and `check`
        (null or absent: `default`; a setting declared on a dataclass is read with fields() instead)."""
        full = f"{path}.{key}" if path else key
        if d is None or key not in d or d[key] is None:
            if default is _REQUIRED:
                if d is not None:
                    self.fail(full, "is required")
                return None
            return default
        value = d[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok and float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            want = " or ".join(_kind(k()) if k is not type(None) else "null" for k in kinds)
            self.fail(full, f"expected {want}, got {_got(value)}")
            return default if default is not _REQUIRED else None
        if (limit := beyond_limits(value, bounded=maximum is not None)) is not None:
            self.fail(full, limit)
            return default if default is not _REQUIRED else None
        if choices is not None and value not in choices:
            self.fail(full, f"{_show(value)} is not allowed; choose one of: {', '.join(map(str, choices))}")
            return default if default is not _REQUIRED else None
        if minimum is not None and value < minimum:
            self.fail(full, f"{_show(value)} is below the minimum {minimum:g}")
            return default if default is not _REQUIRED else None
        if maximum is not None and value > maximum:
            self.fail(full, f"{_show(value)} is above the maximum {maximum:g}")
            return default if default is not _REQUIRED else None
        if check is not None and (msg := check(value)) is not None:
            self.fail(full, f"{_show(value)} {msg}")
            return default if default is not _REQUIRED else None
        return value

    def listed(self, cls: type, name: str, d: Mapping[str, Any] | None, path: str) -> tuple[str, ...]:
        """The declared list of strings `name` of the section `cls`, from the mapping `d` at `path`: each item
        checked against the field's pattern; absent or null, the field's default."""
        f = next(f for f in declared.declared_fields(cls) if f.name == name)
        meta = f.metadata[SETTING]
        pattern = re.compile(meta["pattern"]) if meta["pattern"] else None
        default: tuple[str, ...] = () if f.default is dataclasses.MISSING else f.default
        return self.strings(d, declared.key_of(f), path, default,
                            check=lambda s: None if pattern is None or pattern.search(s) else meta["invalid"])

    def mapped(self, cls: type, name: str, d: Mapping[str, Any] | None, path: str, *, what: str,
               key_check: Callable[[str], str | None] | None = None) -> dict[str, Any]:
        """The declared mapping of numbers `name` of the section `cls` (`Mapping[str, int]` or `[str, float]`), from
        the mapping `d` at `path`: each key checked against the field's pattern (its `invalid` message) or with
        `key_check`, each value against the value type and the field's bounds (`what` names a value: "a slice
        count"); absent or null, empty. Bad entries are reported at their key and left out."""
        f = next(f for f in declared.declared_fields(cls) if f.name == name)
        meta, key = f.metadata[SETTING], declared.key_of(f)
        kind = typing.get_args(declared.annotation_of(cls, name))[1]
        ge, le = meta["ge"], meta["le"]
        bounds = " and ".join([*([f">= {ge:g}"] if ge is not None else []), *([f"<= {le:g}"] if le is not None
                                                                              else [])])
        wanted = f"expected {what} ({'an integer' if kind is int else 'a number'}{' ' + bounds if bounds else ''})"
        out: dict[str, Any] = {}
        for k, v in (self.value(d, key, path, dict, None) or {}).items():
            at = f"{path}.{key}.{k}"
            if meta["pattern"] is not None and not re.search(meta["pattern"], str(k)):
                self.fail(at, meta["invalid"])
            elif key_check is not None and (msg := key_check(str(k))) is not None:
                self.fail(at, msg)
            elif isinstance(v, bool) or not isinstance(v, int if kind is int else int | float) \
                    or (ge is not None and v < ge) or (le is not None and v > le):
                self.fail(at, f"{wanted}, got {_show(v)}")
            else:
                out[str(k)] = kind(v)
        return out

    def strings(
        self, d: Mapping[str, Any] | None, key: str, path: str, default: tuple[str, ...] = (),
        check: Callable[[str], str | None] | None = None,
    ) -> tuple[str, ...]:
        """A list of strings, each checked with `check`."""
        raw = self.value(d, key, path, list, None)
        if raw is None:
            return default
        out: list[str] = []
        for i, item in enumerate(raw):
            if not isinstance(item, str):
                self.fail(f"{path}.{key}[{i}]", f"expected a string, got {_got(item)}")
            elif check is not None and (msg := check(item)) is not None:
                self.fail(f"{path}.{key}[{i}]", f"{_show(item)} {msg}")
            else:
                out.append(item)
        return tuple(out)

    def string_map(self, d: Mapping[str, Any] | None, key: str, path: str) -> dict[str, str]:
        raw = self.value(d, key, path, dict, None)
        if raw is None:
            return {}
        out: dict[str, str] = {}
        for k, v in raw.items():
            if not isinstance(k, str) or not isinstance(v, str):
                self.fail(f"{path}.{key}.{k}", f"expected a string value, got {_got(v)}")
            else:
                out[k] = v
        return out

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
