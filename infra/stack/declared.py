"""Declared sections of the stack model: a settings dataclass whose fields are `setting(...)`s validated with pydantic.

Each field of such a dataclass (components/k8s/settings.py) declares, once, its type (the annotation), default,
bounds, pattern and description; `section_model()` turns the dataclass into a pydantic v2 model (strict types,
`extra="forbid"`, camelCase keys), `read()` validates one stack file mapping with it and reports pydantic's errors
in the house wording (key path, the value received, what is allowed, "did you mean"), and `json_schema()` gives the
editor schema of the section (draft 7) with every field's description.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from functools import cache
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from components.k8s.settings import SETTING
from infra.stack.messages import beyond_limits, unknown_key
from infra.stack.messages import got as _got
from infra.stack.messages import kind as _kind
from infra.stack.messages import show as _show

__all__ = ["section_model", "read", "json_schema", "declared_fields"]

T = TypeVar("T")
_UNITS = re.compile(r"(?<=[a-z])([GM])ib(?![a-z])")
_KINDS = {int: 0, float: 0.0, str: "", bool: False}  # a sample of each scalar type, named by reader._kind


def declared_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of a settings dataclass that are stack file settings."""
    return [f for f in dataclasses.fields(cls) if SETTING in f.metadata]


def _key(f: dataclasses.Field[Any]) -> str:
    """The stack file key of a field: its name in camelCase, units as written (log_gib_per_day: logGiBPerDay)."""
    first, *rest = f.name.split("_")
    return _UNITS.sub(lambda m: f"{m[1]}iB", first + "".join(p[:1].upper() + p[1:] for p in rest))


@cache
def section_model(cls: type, *, lenient: bool = False) -> type[BaseModel]:
    """The pydantic model of a settings dataclass: each `setting(...)` field under its camelCase key; a setting
    without a default is required, except in the `lenient` model (read again once a problem has been reported, so
    a missing key is reported once and reads as None)."""
    hints = typing.get_type_hints(cls)
    spec: dict[str, Any] = {}
    for f in declared_fields(cls):
        meta = f.metadata[SETTING]
        default = None if lenient and f.default is dataclasses.MISSING else f.default
        spec[f.name] = (hints[f.name], Field(... if default is dataclasses.MISSING else default, alias=_key(f),
                                             description=meta["doc"], ge=meta["ge"], le=meta["le"],
                                             pattern=meta["pattern"]))
    # python-re: the house patterns use look-ahead (a DNS subdomain's length), which pydantic's Rust engine lacks
    config = ConfigDict(extra="forbid", strict=True, frozen=True, regex_engine="python-re")
    return create_model(cls.__name__, __config__=config, **spec)


def _expected(annotation: Any) -> str:
    kinds = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    return " or ".join(_kind(_KINDS[k]) if k in _KINDS else "null" for k in kinds)


def _message(cls: type, error: Any) -> str:
    """One pydantic error in the house wording."""
    f = next(f for f in declared_fields(cls) if _key(f) == error["loc"][0])
    meta, value, kind = f.metadata[SETTING], error["input"], error["type"]
    annotation = typing.get_type_hints(cls)[f.name]
    if kind == "missing":
        return "is required"
    if float in (annotation, *typing.get_args(annotation)) and type(value) is int:
        value = float(value)  # as it was read: a whole number of a float setting is that float
    if kind == "greater_than_equal":
        return f"{_show(value)} is below the minimum {meta['ge']:g}"
    if kind == "less_than_equal":
        return f"{_show(value)} is above the maximum {meta['le']:g}"
    if kind == "literal_error":
        choices = typing.get_args(annotation)
        return f"{_show(value)} is not allowed; choose one of: {', '.join(map(str, choices))}"
    if kind == "string_pattern_mismatch":
        return f"{_show(value)} {meta['invalid']}"
    if kind.endswith("_type"):
        return f"expected {_expected(annotation)}, got {_got(value)}"
    return f"{_show(value)}: {error['msg']}"


class Reporter(Protocol):
    def fail(self, path: str, message: str) -> None: ...


def read(r: Reporter, cls: type[T], raw: Any, path: str) -> T:
    """The settings dataclass `cls` from the stack file mapping `raw` at `path` (null or absent: every default).

    Every problem is reported to `r` at its key path; a key set to null is unset, and a key reported bad reads as
    its default, so the checks that build on this section still run."""
    return cls(**values(r, cls, raw, path))


def values(r: Reporter, cls: type, raw: Any, path: str, *, handled: tuple[str, ...] = ()) -> dict[str, Any]:
    """The declared fields of `cls` read from `raw` at `path`, by attribute name, as read() reads them; the keys in
    `handled` are also allowed, and left to the caller (nested sections, mappings of names)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        r.fail(path, f"expected a mapping, got {_got(raw)}")
        raw = {}
    allowed = allowed_keys(cls, handled)
    given: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            r.fail(path, f"key {_show(key)} is not a string")
        elif key not in allowed:
            r.fail(f"{path}.{key}", unknown_key(key, allowed))
        elif value is not None and key not in handled:
            given[key] = value
    model = section_model(cls)
    while True:
        try:
            validated = model.model_validate(given)
        except ValidationError as err:
            for error in err.errors():
                key = str(error["loc"][0])
                r.fail(f"{path}.{key}", _message(cls, error))
                given.pop(key, None)  # read it as its default
            model = section_model(cls, lenient=True)
            continue
        out = {f.name: getattr(validated, f.name) for f in declared_fields(cls)}
        for f in declared_fields(cls):
            if _key(f) in given and (problem := beyond_limits(out[f.name], bounded=f.metadata[SETTING]["le"]
                                                              is not None)) is not None:
                r.fail(f"{path}.{_key(f)}", problem)
                out[f.name] = None if f.default is dataclasses.MISSING else f.default
        return out


def allowed_keys(cls: type, handled: tuple[str, ...] = ()) -> list[str]:
    """The keys of a section: its fields' in their order (declared or handled by the caller), then other handled
    ones."""
    keys = [_key(f) for f in dataclasses.fields(cls) if SETTING in f.metadata or _key(f) in handled]
    return keys + [k for k in handled if k not in keys]


def json_schema(cls: type) -> dict[str, Any]:
    """The editor schema (draft 7) of a section: pydantic's, each key also taking null (unset), no titles."""
    generated = section_model(cls).model_json_schema(by_alias=True)
    props: dict[str, Any] = {}
    derived = {_key(f) for f in declared_fields(cls) if f.metadata[SETTING]["derived"]}
    for key, prop in generated["properties"].items():
        prop = {k: v for k, v in prop.items() if k != "title" and not (k == "default" and key in derived)}
        branches = prop.pop("anyOf", None)
        if branches is not None:  # X | None: one branch of X plus null
            [branch] = [b for b in branches if b != {"type": "null"}]
            prop |= branch
            if prop.get("default") is None:
                prop.pop("default", None)
        if key not in generated.get("required", ()):  # a required key set to null is reported as missing
            if "enum" in prop:
                prop["enum"] = [*prop["enum"], None]
            prop["type"] = [prop["type"], "null"]
        props[key] = dict(sorted(prop.items()))
    out: dict[str, Any] = {"additionalProperties": False, "properties": props, "type": ["object", "null"]}
    if generated.get("required"):
        out["required"] = sorted(generated["required"])
    return out


