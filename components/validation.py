"""Input validation for every component (AWS and Kubernetes): each problem collected, raised once with property paths.

Property paths use the schema's (camelCase) names, the same names `pulumi package add` consumers and
the SDK's own missing-input errors use: `capacity.reservationId`, `availabilityZones[1]`.
"""

from __future__ import annotations

import difflib
import functools
import types
from collections.abc import Awaitable
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

import pulumi

__all__ = ["Problems", "check_shape", "shape_problems"]


class Problems:
    """Collects (property path, reason) pairs for one component instance."""

    def __init__(self, component: str, name: str) -> None:
        self._component = component
        self._name = name
        self._errors: list[pulumi.InputPropertyErrorDetails] = []

    def add(self, path: str, reason: str) -> None:
        self._errors.append(pulumi.InputPropertyErrorDetails(property_path=path, reason=reason))

    def raise_any(self) -> None:
        """Raise pulumi.InputPropertiesError naming every problem, if there is one."""
        if self._errors:
            lines = "\n".join(f"  - {e['property_path']}: {e['reason']}" for e in self._errors)
            raise pulumi.InputPropertiesError(
                f"{self._component} {self._name!r}: {len(self._errors)} invalid argument(s):\n{lines}",
                list(self._errors),
            )


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
             tuple: "a list", dict: "a mapping", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(dict.fromkeys(_describe(h) for h in get_args(hint)))
    if is_typeddict(hint):
        return "a mapping"
    if origin is list:
        (item,) = get_args(hint) or (Any,)
        return f"a list of {_describe(item).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return "a mapping"
    if hint is pulumi.Output or origin is pulumi.Output or origin is Awaitable:
        return "an Output"
    return {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}.get(hint, str(hint))


def _type_problems(value: Any, hint: Any, path: str) -> list[tuple[str, str]]:
    """(path, reason) for each place `value` does not have the annotated type; Outputs pass where allowed."""
    origin = get_origin(hint)
    if hint is Any:
        return []
    if origin in (Union, types.UnionType):
        options = [_type_problems(value, h, path) for h in get_args(hint)]
        if any(not found for found in options):
            return []
        nested = [found for found in options if found and found[0][0] != path]
        return nested[0] if nested else [(path, f"expected {_describe(hint)}, got {_kind(value)} {value!r}")]
    if hint is pulumi.Output or origin is pulumi.Output:
        return [] if isinstance(value, pulumi.Output) else [(path, f"expected an Output, got {_kind(value)}")]
    if origin is Awaitable:
        return [] if isinstance(value, Awaitable) else [(path, f"expected an Output, got {_kind(value)}")]
    if is_typeddict(hint):
        return shape_problems(value, hint, path)
    if origin is list or hint is list:
        if not isinstance(value, (list, tuple)):
            return [(path, f"expected {_describe(hint)}, got {_kind(value)} {value!r}")]
        (item,) = get_args(hint) or (Any,)
        return [p for i, v in enumerate(value) for p in _type_problems(v, item, f"{path}[{i}]")]
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return [(path, f"expected a mapping, got {_kind(value)} {value!r}")]
        _, item = get_args(hint) or (Any, Any)
        return [p for k, v in value.items() for p in _type_problems(v, item, _join(path, str(k)))]
    if hint in (str, int, float, bool):
        ok = isinstance(value, hint) and not (isinstance(value, bool) and hint is not bool)
        ok = ok or (hint is float and isinstance(value, int) and not isinstance(value, bool))
        return [] if ok else [(path, f"expected {_describe(hint)}, got {_kind(value)} {value!r}")]
    return []


@functools.cache
def _hints(schema: type) -> dict[str, Any]:
    """A TypedDict's resolved field types, once per schema (every component build checks its args against one).
    pulumi.Input is Union[T, Awaitable[T], "Output[T]"]: its forward reference resolves in pulumi.output."""
    return get_type_hints(schema, localns={k: getattr(pulumi.output, k) for k in ("Output", "T")})


def shape_problems(args: Any, schema: Any, path: str = "") -> list[tuple[str, str]]:
    """Every unknown key, missing required key and wrongly typed value of `args` against a TypedDict `schema`,
    as (camelCase property path, reason) pairs; values that are Outputs pass where the schema allows them."""
    if not isinstance(args, dict):
        return [(path or "args", f"expected a mapping, got {_kind(args)} {args!r}")]
    hints = _hints(schema)
    found = []
    for key in args:
        if key not in hints:
            near = difflib.get_close_matches(str(key), list(hints), n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            found.append((_join(path, _camel(str(key))), f"unknown property {key!r}; {hint}allowed: "
                                                         f"{', '.join(sorted(hints))}"))
    for key in sorted(schema.__required_keys__):
        if key not in args:
            found.append((_join(path, _camel(key)), f"is required ({key!r})"))
    for key, value in args.items():
        if key in hints:
            found.extend(_type_problems(value, hints[key], _join(path, _camel(key))))
    return found


def check_shape(component: str, name: str, args: Any, schema: Any) -> None:
    """Raise pulumi.InputPropertiesError for typos, unknown keys, missing keys and wrong types in `args`,
    before a component reads them (a typo must not surface as a KeyError, a string zone as its letters)."""
    problems = Problems(component, name)
    for path, reason in shape_problems(args, schema):
        problems.add(path, reason)
    problems.raise_any()
