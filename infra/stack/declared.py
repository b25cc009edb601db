"""Declared sections of the stack model: a settings dataclass whose fields are `setting(...)`s validated with pydantic.

Each field of such a dataclass (components/k8s/settings/) declares, once, its type (the annotation), default,
bounds, pattern and description; `section_model()` turns the dataclass into a pydantic v2 model (strict types,
`extra="forbid"`, camelCase keys: its values, lists of strings and mappings of strings or numbers), `read()`
validates one stack file mapping with it, reads its nested sections and lists of sections in turn, and reports
pydantic's errors in the house wording (key path, the value received, what is allowed, "did you mean"), and
`json_schema()` gives the editor schema of the section (draft 7) with every field's description.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from components.k8s.engines import ENGINE_NAMES
from components.k8s.settings import ENGINE_REGISTRY, SETTING
from infra.stack.messages import beyond_limits, unknown_key
from infra.stack.messages import got as _got
from infra.stack.messages import kind as _kind
from infra.stack.messages import show as _show

__all__ = ["section_model", "section_schema", "read", "values", "json_schema", "declared_fields", "key_of",
           "validated_fields", "allowed_keys"]

T = TypeVar("T")
_UNITS = re.compile(r"(?<=[a-z])([GM])ib(?![a-z])")
_KINDS = {int: 0, float: 0.0, str: "", bool: False}  # a sample of each scalar type, named by messages.kind


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def declared_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of a settings dataclass that are stack file settings."""
    return [f for f in dataclasses.fields(cls) if SETTING in f.metadata]


@cache
def validated_fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    """The settings pydantic validates (numbers, strings, booleans, choices, lists of strings, mappings of strings or
    numbers), by stack file key."""
    return {key_of(f): f for f in declared_fields(cls) if _annotation(cls, f) is not None}


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


def _annotation(cls: type, f: dataclasses.Field[Any]) -> Any:
    """The type pydantic validates the setting `f` of `cls` with: a number, string, boolean or choice (bounds and
    pattern on the field), a list of strings (the pattern on each) or a mapping of strings or numbers (the pattern on
    each key, the bounds on each value); None for a section, which values() reads in turn, and for the settings the
    section's code reads (a mapping of sections, a list of sections, a key whose stack file form is not the field's)."""
    meta = f.metadata[SETTING]
    annotation = _hints(cls)[f.name]
    bare = _bare(annotation)
    origin, args = typing.get_origin(bare), typing.get_args(bare)
    if meta.get("form") is not None:
        return None
    if (choices := _choices(meta)) is not None:
        return Literal[choices] | None  # type: ignore[valid-type]
    if bare in _KINDS or origin is Literal:
        return annotation
    if origin is tuple and args[0] is str:
        return list[Annotated[str, Field(pattern=meta["pattern"])]]
    if origin is Mapping and args[1] in _KINDS:
        value = Annotated[args[1], Field(ge=meta["ge"], le=meta["le"])]  # type: ignore[valid-type]
        return dict[Annotated[str, Field(pattern=meta["pattern"])], value]  # type: ignore[valid-type]
    return None


@cache
def _sections(cls: type) -> tuple[tuple[str, str, type, bool, bool], ...]:
    """(name, key, settings dataclass, a list of them, optional) of each section setting of `cls`, for values()."""
    out = []
    for f in declared_fields(cls):
        if (section := _section(cls, f)) is not None:
            annotation = _hints(cls)[f.name]
            out.append((f.name, key_of(f), section, typing.get_origin(_bare(annotation)) is tuple,
                        _bare(annotation) is not annotation))
    return tuple(out)


def _section(cls: type, f: dataclasses.Field[Any]) -> type | None:
    """The settings dataclass of a section setting (`replicas: Replicas`, `speculative: Speculative | None`) or of
    each item of a list of sections (`taints: tuple[Taint, ...]`)."""
    bare = _bare(_hints(cls)[f.name])
    bare = typing.get_args(bare)[0] if typing.get_origin(bare) is tuple else bare
    return typing.cast(type, bare) if f.metadata[SETTING].get("form") is None and dataclasses.is_dataclass(bare) \
        else None


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def annotation_of(cls: type, name: str) -> Any:
    """The type of the field `name` of `cls`, its annotation resolved."""
    return _hints(cls)[name]


@cache
def section_model(cls: type, *, lenient: bool = False) -> type[BaseModel]:
    """The pydantic model of a settings dataclass: each setting pydantic validates (validated_fields) under its key;
    a setting without a default is required, except in the `lenient` model (read again once a problem has been
    reported, so a missing key is reported once and reads as None)."""
    spec: dict[str, Any] = {}
    for f in validated_fields(cls).values():
        meta = f.metadata[SETTING]
        default = _default(f)
        default = None if lenient and default is dataclasses.MISSING else default
        annotation = _annotation(cls, f)
        scalar = typing.get_origin(annotation) not in (list, dict)  # a collection's bounds are on its items
        bounds = {"ge": meta["ge"], "le": meta["le"], "pattern": meta["pattern"]} if scalar else {}
        spec[f.name] = (annotation, Field(... if default is dataclasses.MISSING else default, alias=key_of(f),
                                          description=meta["doc"], **bounds))
    # python-re: the house patterns use look-ahead (a DNS subdomain's length), which pydantic's Rust engine lacks
    config = ConfigDict(extra="forbid", strict=True, frozen=True, regex_engine="python-re")
    return create_model(cls.__name__, __config__=config, **spec)


_SAMPLES = {**_KINDS, list: [], dict: {}}  # a sample of each kind of stack file value, named by messages.kind


def _expected(annotation: Any) -> str:
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    kinds = [typing.get_origin(a) or a for a in typing.get_args(annotation) if a is not type(None)] if union \
        else [typing.get_origin(annotation) or annotation]
    return " or ".join(_kind(_SAMPLES[k]) if k in _SAMPLES else "null" for k in kinds)


def _message(cls: type, error: Any) -> tuple[str, str]:
    """One pydantic error in the house wording: (the key path below the section, the message)."""
    key, *item = error["loc"]
    f = validated_fields(cls)[key]
    meta, value, kind = f.metadata[SETTING], error["input"], error["type"]
    annotation = _annotation(cls, f)
    if item:  # a list's item ([i]) or a mapping's value (.k) or key (.k, "[key]")
        at = f"{key}[{item[0]}]" if typing.get_origin(annotation) is list else f"{key}.{item[0]}"
        of = typing.get_args(annotation)[-1]
        if item[1:] == ["[key]"]:
            return at, meta["invalid"] if kind == "string_pattern_mismatch" else f"key {_show(value)} is not a string"
        if kind == "string_pattern_mismatch":
            return at, f"{_show(value)} {meta['invalid']}"
        if typing.get_origin(annotation) is list:
            return at, f"expected a string, got {_got(value)}"
        if typing.get_args(of)[0] is str:
            return at, f"expected a string value, got {_got(value)}"
        bounds = " and ".join([*([f">= {meta['ge']:g}"] if meta["ge"] is not None else []),
                               *([f"<= {meta['le']:g}"] if meta["le"] is not None else [])])
        number = "an integer" if typing.get_args(of)[0] is int else "a number"
        return at, f"expected {meta['item']} ({number}{' ' + bounds if bounds else ''}), got {_show(value)}"
    if kind == "missing":
        return key, "is required"
    if float in (annotation, *typing.get_args(annotation)) and type(value) is int:
        value = float(value)  # as it was read: a whole number of a float setting is that float
    if kind == "greater_than_equal":
        return key, f"{_show(value)} is below the minimum {meta['ge']:g}"
    if kind == "less_than_equal":
        return key, f"{_show(value)} is above the maximum {meta['le']:g}"
    if kind == "literal_error":
        choices = _choices(meta) or typing.get_args(annotation)
        return key, f"{_show(value)} is not allowed; choose one of: {', '.join(map(str, choices))}"
    if kind == "string_pattern_mismatch":
        return key, f"{_show(value)} {meta['invalid']}"
    if kind.endswith("_type"):
        return key, f"expected {_expected(annotation)}, got {_got(value)}"
    return key, f"{_show(value)}: {error['msg']}"


class Reporter(Protocol):
    def fail(self, path: str, message: str) -> None: ...


def read(r: Reporter, cls: type[T], raw: Any, path: str) -> T:
    """The settings dataclass `cls` from the stack file mapping `raw` at `path` (null or absent: every default).

    Every problem is reported to `r` at its key path; a key set to null is unset, and a key reported bad reads as
    its default, so the checks that build on this section still run."""
    return cls(**values(r, cls, raw, path))


def values(r: Reporter, cls: type, raw: Any, path: str, *, handled: tuple[str, ...] = ()) -> dict[str, Any]:
    """The declared fields of `cls` read from `raw` at `path`, by attribute name, as read() reads them: pydantic
    validates the values, lists and mappings (a bad item of a list or mapping is reported and left out), and each
    section is read in turn; the keys in `handled`, and the settings pydantic does not validate, are allowed and left
    to the caller."""
    mapping = raw is None or isinstance(raw, dict)
    if not mapping:
        r.fail(path, f"expected a mapping, got {_got(raw)}")  # one problem: its keys are not also "required"
    raw = raw if isinstance(raw, dict) else {}
    allowed = allowed_keys(cls, handled)
    validated = validated_fields(cls)
    given: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            r.fail(path, f"key {_show(key)} is not a string")
        elif key not in allowed:
            r.fail(_at(path, key), unknown_key(key, allowed))
        elif value is not None and key in validated and key not in handled:
            given[key] = value
    model = section_model(cls, lenient=not mapping)
    while True:
        try:
            checked = model.model_validate(given)
        except ValidationError as err:
            items: dict[str, set[Any]] = {}  # the bad items of a list or mapping, left out
            for error in err.errors():
                at, message = _message(cls, error)
                r.fail(_at(path, at), message)
                key, *item = error["loc"]
                if item:
                    items.setdefault(str(key), set()).add(item[0])
                else:
                    given.pop(str(key), None)  # read it as its default
            for key, bad in items.items():
                if isinstance(given.get(key), list):
                    given[key] = [x for i, x in enumerate(given[key]) if i not in bad]
                elif key in given:
                    given[key] = {k: x for k, x in given[key].items() if k not in bad}
            model = section_model(cls, lenient=True)
            continue
        break
    out = {f.name: _plain(getattr(checked, f.name)) for f in validated.values()}
    for key, f in validated.items():
        beyond = list(beyond_limits(out[f.name], bounded=f.metadata[SETTING]["le"] is not None, at=_at(path, key)))
        for at, problem in beyond if key in given else ():
            r.fail(at, problem)
            out[f.name] = None if (default := _default(f)) is dataclasses.MISSING else _plain(default)
    for name, key, section, many, optional in _sections(cls):
        sub = raw.get(key)
        if key in handled:
            continue
        if many:  # a list of sections
            if sub is not None and not isinstance(sub, list):
                r.fail(_at(path, key), f"expected a list, got {_got(sub)}")
            out[name] = tuple(read(r, section, x, f"{_at(path, key)}[{i}]") for i, x in enumerate(sub)) \
                if isinstance(sub, list) else _default(next(f for f in declared_fields(cls) if f.name == name))
        else:
            out[name] = None if optional and sub is None else read(r, section, sub, _at(path, key))
    return out


def value_of(r: Reporter, cls: type, name: str, value: Any, path: str) -> Any:
    """The setting `name` of the section `cls` written as a bare value at `path` (a section's short form:
    `quantization: fp8` for {method: fp8}), checked as its declaration says; a problem is reported at `path`."""
    key = next(key_of(f) for f in declared_fields(cls) if f.name == name)
    return values(_Here(r, path), cls, {key: value}, path)[name]


@dataclasses.dataclass(frozen=True)
class _Here:
    """A Reporter that reports every problem at one path."""

    r: Reporter
    path: str

    def fail(self, at: str, message: str) -> None:
        self.r.fail(self.path, message)


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _plain(value: Any) -> Any:
    """A validated value as the settings dataclasses hold it: a list as a tuple."""
    return tuple(value) if isinstance(value, list) else value


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
