"""Declared sections of the stack model: a settings dataclass whose fields are `setting(...)`s validated with pydantic.

Each field of such a dataclass (components/k8s/settings/) declares, once, its type (the annotation), default,
bounds, pattern and description; `section_model()` turns the dataclass into a pydantic v2 model (strict types,
`extra="forbid"`, camelCase keys), `read()` validates one stack file mapping with it and reports pydantic's errors
in the house wording (key path, the value received, what is allowed, "did you mean"), and `json_schema()` gives the
editor schema of the section (draft 7) with every field's description.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from components.k8s.engines import ENGINE_NAMES
from components.k8s.settings import ENGINE_REGISTRY, SETTING
from infra.stack.messages import beyond_limits, unknown_key
from infra.stack.messages import got as _got
from infra.stack.messages import kind as _kind
from infra.stack.messages import show as _show

__all__ = ["section_model", "section_schema", "read", "values", "json_schema", "declared_fields", "key_of",
           "scalar_fields", "allowed_keys"]

T = TypeVar("T")
_UNITS = re.compile(r"(?<=[a-z])([GM])ib(?![a-z])")
_KINDS = {int: 0, float: 0.0, str: "", bool: False}  # a sample of each scalar type, named by reader._kind


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def declared_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of a settings dataclass that are stack file settings."""
    return [f for f in dataclasses.fields(cls) if SETTING in f.metadata]


@cache
def scalar_fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    """The settings pydantic validates (numbers, strings, booleans, choices), by stack file key."""
    return {key_of(f): f for f in declared_fields(cls) if _scalar(cls, f)}


def key_of(f: dataclasses.Field[Any]) -> str:
    """The stack file key of a field: its declared `key`, else its name in camelCase, units as written
    (log_gib_per_day: logGiBPerDay)."""
    if f.metadata[SETTING].get("key"):
        return str(f.metadata[SETTING]["key"])
    first, *rest = f.name.split("_")
    return _UNITS.sub(lambda m: f"{m[1]}iB", first + "".join(p[:1].upper() + p[1:] for p in rest))


def _choices(meta: Mapping[str, Any]) -> tuple[Any, ...] | None:
    choices = meta.get("choices")
    return ENGINE_NAMES if choices == ENGINE_REGISTRY else choices


def _bare(annotation: Any) -> Any:
    """`X | None` -> X."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
    return annotation


def _scalar(cls: type, f: dataclasses.Field[Any]) -> bool:
    """Whether pydantic validates the field (a number, string, boolean or choice); the other settings (sections,
    lists, mappings, keys whose stack file form is not the field's) are read by the section's code."""
    meta = f.metadata[SETTING]
    bare = _bare(_hints(cls)[f.name])
    return meta.get("form") is None and (bare in _KINDS or typing.get_origin(bare) is Literal)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def annotation_of(cls: type, name: str) -> Any:
    """The type of the field `name` of `cls`, its annotation resolved."""
    return _hints(cls)[name]


def default_of(cls: type, name: str) -> Any:
    """The declared default of the field `name` of `cls`, for code that needs it before or beside the reader (the
    declaration is the one place it is written)."""
    return _default(next(f for f in declared_fields(cls) if f.name == name))


@cache
def section_model(cls: type, *, lenient: bool = False) -> type[BaseModel]:
    """The pydantic model of a settings dataclass: each scalar `setting(...)` field under its key; a setting
    without a default is required, except in the `lenient` model (read again once a problem has been reported, so
    a missing key is reported once and reads as None)."""
    hints = _hints(cls)
    spec: dict[str, Any] = {}
    for f in declared_fields(cls):
        if not _scalar(cls, f):
            continue
        meta = f.metadata[SETTING]
        default = _default(f)
        default = None if lenient and default is dataclasses.MISSING else default
        choices = _choices(meta)
        annotation = hints[f.name] if choices is None else Literal[choices] | None  # type: ignore[valid-type]
        spec[f.name] = (annotation, Field(... if default is dataclasses.MISSING else default, alias=key_of(f),
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
    f = next(f for f in declared_fields(cls) if key_of(f) == error["loc"][0])
    meta, value, kind = f.metadata[SETTING], error["input"], error["type"]
    annotation = _hints(cls)[f.name]
    if kind == "missing":
        return "is required"
    if float in (annotation, *typing.get_args(annotation)) and type(value) is int:
        value = float(value)  # as it was read: a whole number of a float setting is that float
    if kind == "greater_than_equal":
        return f"{_show(value)} is below the minimum {meta['ge']:g}"
    if kind == "less_than_equal":
        return f"{_show(value)} is above the maximum {meta['le']:g}"
    if kind == "literal_error":
        choices = _choices(meta) or typing.get_args(annotation)
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
    """The scalar declared fields of `cls` read from `raw` at `path`, by attribute name, as read() reads them; its
    other settings (sections, lists, mappings) and the keys in `handled` are allowed, and left to the caller."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        r.fail(path, f"expected a mapping, got {_got(raw)}")
        raw = {}
    allowed = allowed_keys(cls, handled)
    scalars = scalar_fields(cls)
    given: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            r.fail(path, f"key {_show(key)} is not a string")
        elif key not in allowed:
            r.fail(f"{path}.{key}" if path else key, unknown_key(key, allowed))
        elif value is not None and key in scalars and key not in handled:
            given[key] = value
    model = section_model(cls)
    while True:
        try:
            validated = model.model_validate(given)
        except ValidationError as err:
            for error in err.errors():
                key = str(error["loc"][0])
                r.fail(f"{path}.{key}" if path else key, _message(cls, error))
                given.pop(key, None)  # read it as its default
            model = section_model(cls, lenient=True)
            continue
        out = {f.name: getattr(validated, f.name) for f in scalars.values()}
        for key, f in scalars.items():
            if key in given and (problem := beyond_limits(out[f.name], bounded=f.metadata[SETTING]["le"]
                                                          is not None)) is not None:
                r.fail(f"{path}.{key}" if path else key, problem)
                out[f.name] = None if f.default is dataclasses.MISSING else f.default
        return out


@cache
def allowed_keys(cls: type, handled: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The keys of a section: its settings' in their order, then other keys its caller reads."""
    keys = tuple(key_of(f) for f in declared_fields(cls))
    return keys + tuple(k for k in handled if k not in keys)


_JSON = {int: "integer", float: "number", str: "string", bool: "boolean"}


def _to_json(value: Any) -> Any:
    return [_to_json(v) for v in value] if isinstance(value, tuple | list) else value


def _schema_of(annotation: Any, meta: Mapping[str, Any]) -> dict[str, Any]:
    """The schema of one stack file value of type `annotation`, with the declaration's bounds, pattern, choices."""
    bare = _bare(annotation)
    origin, args = typing.get_origin(bare), typing.get_args(bare)
    out: dict[str, Any]
    if (choices := _choices(meta)) is not None or origin is Literal:
        values_ = list(choices if choices is not None else args)
        out = {"enum": values_, "type": _JSON[type(values_[0])]}
    elif origin in (typing.Union, types.UnionType):  # a value or a mapping (`quantization: fp8` or {method, ...})
        return {"anyOf": [_schema_of(a, {}) for a in args]}
    elif dataclasses.is_dataclass(bare):
        return section_schema(typing.cast(type, bare))
    elif origin is tuple:
        item = {"pattern": meta["pattern"]} if meta.get("pattern") else {}
        out = {"items": _schema_of(args[0], {}) | item, "type": "array"}
    elif origin in (Mapping, dict):
        value = _schema_of(args[1], {"ge": meta.get("ge"), "le": meta.get("le")})
        out = {"additionalProperties": value, "type": "object"}
        if meta.get("pattern"):
            out["propertyNames"] = {"pattern": meta["pattern"]}
        return out
    else:
        out = {"type": _JSON[bare]}
        if meta.get("pattern"):
            out["pattern"] = meta["pattern"]
    if meta.get("ge") is not None:
        out["minimum"] = meta["ge"]
    if meta.get("le") is not None:
        out["maximum"] = meta["le"]
    return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` also taking null: a key set to null is unset (its default), a section null is empty."""
    if "anyOf" in schema:
        first, *rest = schema["anyOf"]
        return {**schema, "anyOf": [_nullable(first), *rest]}
    out = dict(schema)
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    out["type"] = [out["type"], "null"]
    return out


def section_schema(cls: type) -> dict[str, Any]:
    """The editor schema (draft 7) of a settings dataclass, from its declarations: every setting with its
    description, bounds, choices and pattern, its default where one holds whatever the other settings are, and
    null (unset) wherever the key is optional."""
    hints = _hints(cls)
    props: dict[str, Any] = {}
    required = []
    for f in declared_fields(cls):
        meta = f.metadata[SETTING]
        prop = _schema_of(meta.get("form") or hints[f.name], meta)
        default = _default(f)
        if default is dataclasses.MISSING:
            required.append(key_of(f))
        else:
            prop = _nullable(prop)
            if not meta["derived"] and (isinstance(default, str | int | float) or meta.get("form") is None and
                                        isinstance(default, tuple)):
                prop["default"] = _to_json(default)
        prop["description"] = meta["doc"]
        props[key_of(f)] = dict(sorted(prop.items()))
    out: dict[str, Any] = {"additionalProperties": False, "properties": dict(sorted(props.items())),
                           "type": "object"}
    if required:
        out["required"] = sorted(required)
    return out


def json_schema(cls: type) -> dict[str, Any]:
    """The editor schema of a section as a key of another: a section may be null (empty)."""
    return _nullable(section_schema(cls))
