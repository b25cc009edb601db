"""A JSON Schema for `stacks/Pulumi.<env>.yaml`, generated from the config reader itself.

infra/config.py's reader is the one definition of the stack config: every key is read through `_Reader` with its
type, default, bounds and choices, and every mapping with its allowed keys. `schema()` walks a corpus of stack
configs with a reader that also records those calls, and turns what it recorded into JSON Schema (draft 7, what
editors support), so the schema is never written by hand and cannot drift from the reader. The corpus is COVERAGE,
configs that take every branch of the reader (both providers, both engines, InfiniBand, capacity types, receiver
types, ...), kept in code so the schema depends on nothing a user edits; `missing_keys()` names any allowed key no
walk reached, and the tests require none.

The schema is an editor aid (completion, typos, types, bounds, choices, defaults): it is looser than the reader,
which also checks what JSON Schema cannot say (cross-key rules, instance types, quotas). Regenerate it with
`aifactory schema --out stacks/aifactory.schema.json`; a test fails when the committed file is stale.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

from infra import config
from infra.config import DNS_LABEL, NAMESPACE, TOP_LEVEL_KEYS, ConfigError, _Reader, parse
from infra.stack import declared
from infra.stack.reader import _REQUIRED

__all__ = ["COVERAGE", "Recorder", "schema", "stack_file_schema", "missing_keys"]

# Draft 7: what editors validate with (VS Code's JSON language service and the YAML language server support draft 7
# fully and later drafts only in part: redhat-developer/yaml-language-server#856, vscode-json-languageservice#117).
DRAFT = "http://json-schema.org/draft-07/schema#"
REQUIRED_KEYS = ("target", "nodePools")  # parse() requires them whatever else the stack sets
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object",
               type(None): "null"}
_INDEX = re.compile(r"\[\d+\]")
T = TypeVar("T")

# The corpus: stack configs that together take every branch of the reader. Only walked (never deployed), so they
# need not be valid as a whole: each reaches keys read only under some other value (a provider, engine, fabric,
# capacity type, speculative method, receiver type, ...).
COVERAGE: tuple[dict[str, Any], ...] = (
    {"target": {"provider": "existing", "kubeconfig": "~/.kube/config", "context": "c", "hostsHaveDrivers": True,
                "storageClass": "fast", "installMetricsServer": False},
     "nodePools": {"ib": {"instanceType": "dgx-h100", "fabric": "infiniband", "nodes": ["n1"], "mig": "all-1g.10gb",
                          "labels": {"a": "b"}, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}],
                          "nodeCheck": {}}},
     "infiniband": {"rails": {"ib": 1}},
     "tenants": {"t": {"rateLimit": {}, "migQuota": {"1g.10gb": 1}}},
     "models": {"m": {"engine": "triton", "model": "m", "uri": "pvc://x", "tenant": "t", "pool": "ib",
                      "speculative": {"method": "eagle", "draftModel": "d"},
                      "quantization": {"method": "fp8", "checkpoint": "load-time"},
                      "variant": {"costPerRequest": 0.01}}},
     "gateway": {"auth": {"issuers": [{"issuer": "https://i", "jwksUri": "https://i/jwks", "audiences": ["a"],
                                       "tenants": ["t"]}]},
                 "routing": {"w": {"policy": "fastest", "marginPercent": 10,
                                   "fidelity": {"suite": "s", "baseline": "m", "job": {"tokenSecret": {}},
                                                "categories": {"c": {"minScore": 0.5}}}}}},
     "observability": {"workflows": {"w": {}}, "prices": {"dgx-h100": 1},
                       "alerting": {"receivers": {"s": {"type": "slack", "secret": {"name": "n", "key": "k"}},
                                                  "p": {"type": "pagerduty"}, "e": {"type": "email"},
                                                  "h": {"type": "webhook"}},
                                    "routes": {}, "heartbeat": {"receiver": "h"}}}},
    {"target": {"provider": "aws", "region": "us-east-1", "availabilityZones": ["us-east-1a", "us-east-1b"]},
     "cluster": {"systemPool": {}},
     "nodePools": {"cb": {"instanceType": "p5.48xlarge", "fabric": "efa",
                          "capacity": {"type": "capacity-block", "reservationId": "cr-0123456789abcdef0",
                                       "startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-02T00:00:00Z"}},
                   "od": {"instanceType": "p5.48xlarge", "capacity": {"type": "on-demand"}},
                   "odcr": {"instanceType": "p5.48xlarge", "capacity": {"type": "odcr",
                                                                         "reservationId": "cr-0123456789abcdef0"}}},
     "models": {"m": {"engine": "vllm", "model": "m", "tenant": "t", "pool": "od",
                      "speculative": {"method": "eagle3", "draftModel": "d", "numSpeculativeTokens": 3},
                      "quantization": "fp8"},
                "n": {"engine": "vllm", "model": "n", "tenant": "t", "pool": "od",
                      "speculative": {"method": "ngram"}}}},
)


@dataclass
class _Node:
    types: set[str] = field(default_factory=set)
    enums: set[tuple[Any, ...] | None] = field(default_factory=set)  # one per read: kept only when all agree
    minimums: set[float | None] = field(default_factory=set)
    maximums: set[float | None] = field(default_factory=set)
    defaults: list[Any] = field(default_factory=list)
    derived_default: bool = False  # the reader computes the default from other values (not a literal)
    conditional: bool = False  # read as required only under a condition (provider, engine, method, ...)
    dynamic_bounds: bool = False  # choices or bounds computed from other values (timeoutSeconds <= intervalSeconds)
    optional: bool = False
    required_reads: int = 0  # reads of this key with no default
    observed: int = 0  # times this mapping was read
    allowed: set[str] | None = None  # keys a mapping takes (None: not known)
    named: bool = False  # a mapping of DNS-label names to objects
    string_items: bool = False  # a list of strings
    values: dict[str, Any] | None = None  # the schema of a map's values (string maps, prices, MIG quotas)
    key_pattern: str | None = None
    schema: dict[str, Any] | None = None  # a declared section's whole schema (infra/stack/declared.py)


class Recorder(_Reader):
    """A reader that also records, per key path (names and list indices generalised), what it accepts."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[str, _Node] = {}
        self._quiet = 0  # > 0 while a recording method reads through another one

    def _path(self, path: str) -> str:
        """`nodePools.gpu-a.taints[0]` -> `nodePools.*.taints[]`: names under a named mapping become '*'."""
        out = ""
        for segment in path.split("."):
            bare = _INDEX.sub("", segment)
            name = "*" if out in self.nodes and self.nodes[out].named else bare
            out = f"{out}.{name}" if out else name
            if bare != segment:
                out += "[]"
        return out

    def _node(self, path: str) -> _Node:
        return self.nodes.setdefault(self._path(path), _Node())

    def _allowed(self, path: str, allowed: tuple[str, ...]) -> _Node:
        node = self._node(path)
        node.allowed = (node.allowed or set()) | set(allowed)
        return node

    def mapping(self, raw: Any, path: str, allowed: tuple[str, ...] | None, *,
                keep_null: bool | tuple[str, ...] = ()) -> dict[str, Any] | None:
        node = self._node(path) if allowed is None else self._allowed(path, allowed)
        node.types.add("object")
        node.observed += 1
        return super().mapping(raw, path, allowed, keep_null=keep_null)

    def allow(self, d: Mapping[str, Any], path: str, allowed: tuple[str, ...]) -> None:
        self._allowed(path, allowed)
        super().allow(d, path, allowed)

    def value(self, d: Mapping[str, Any] | None, key: str, path: str, kind: type | tuple[type, ...],
              default: Any = _REQUIRED, *, choices: tuple[Any, ...] | None = None, minimum: float | None = None,
              maximum: float | None = None, check: Any = None, derived: bool = False) -> Any:
        if not self._quiet and d is not None:
            node = self._node(f"{path}.{key}" if path else key)
            site = _site(sys._getframe(1), key)
            node.types |= {_JSON_TYPES[k] for k in (kind if isinstance(kind, tuple) else (kind,))}
            node.enums.add(choices)
            node.minimums.add(minimum)
            node.maximums.add(maximum)
            node.dynamic_bounds |= site.dynamic_bounds
            if default is _REQUIRED:
                node.required_reads += 1
                node.conditional |= site.conditional
            else:
                node.optional = True
                node.defaults.append(default)
                node.derived_default |= derived or site.derived
        return super().value(d, key, path, kind, default, choices=choices, minimum=minimum, maximum=maximum,
                             check=check, derived=derived)

    def strings(self, d: Mapping[str, Any] | None, key: str, path: str, default: tuple[str, ...] = (),
                check: Any = None, derived: bool = False) -> tuple[str, ...]:
        if d is not None:
            node = self._node(f"{path}.{key}")
            node.types.add("array")
            node.string_items, node.optional = True, True
            node.defaults.append(list(default))
            node.derived_default |= derived or _site(sys._getframe(1), key).derived
        self._quiet += 1
        try:
            return super().strings(d, key, path, default, check, derived)
        finally:
            self._quiet -= 1

    def string_map(self, d: Mapping[str, Any] | None, key: str, path: str) -> dict[str, str]:
        if d is not None:
            node = self._node(f"{path}.{key}")
            node.types.add("object")
            node.values, node.optional = {"type": "string"}, True
        self._quiet += 1
        try:
            return super().string_map(d, key, path)
        finally:
            self._quiet -= 1

    def section(self, cls: type[T], raw: Any, path: str) -> T:
        node = self._node(path)
        node.types.add("object")
        node.schema = declared.json_schema(cls)
        return super().section(cls, raw, path)

    def fields(self, cls: type, raw: Any, path: str, *, handled: tuple[str, ...] = ()) -> dict[str, Any]:
        node = self._node(path)
        node.types.add("object")
        node.schema = declared.json_schema(cls)
        node.allowed = set(declared.allowed_keys(cls, handled))
        return super().fields(cls, raw, path, handled=handled)

    def keyed(self, path: str, value_kind: type, *, key_pattern: str | None = None, minimum: float | None = None
              ) -> None:
        node = self._node(path)
        node.types.add("object")
        node.values = {"type": _JSON_TYPES[value_kind]} | ({"minimum": minimum} if minimum is not None else {})
        node.key_pattern = key_pattern

    def keys_by_hand(self, path: str, allowed: tuple[str, ...]) -> None:
        self._allowed(path, allowed)

    def named(self, raw: Any, path: str, *, keep_null: tuple[str, ...] = ()) -> dict[str, Any]:
        node = self._node(path)
        node.types.add("object")
        node.named = True
        return super().named(raw, path, keep_null=keep_null)


def _literal(node: ast.expr) -> bool:
    """A default written as a constant: a literal, a NAMED_CONSTANT, or a list/tuple of them."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name | ast.Attribute):  # DEFAULT_X, or module.DEFAULT_X
        return (node.id if isinstance(node, ast.Name) else node.attr).isupper()
    if isinstance(node, ast.Subscript):
        return isinstance(node.value, ast.Name) and node.value.id.isupper()
    if isinstance(node, ast.Tuple | ast.List):
        return all(_literal(e) for e in node.elts)
    return False


def _under_condition(node: ast.AST, parents: Mapping[ast.AST, ast.AST]) -> bool:
    """Whether `node` runs only under a condition within its function (an if, a conditional expression, the
    right-hand side of and/or): a key read there as required is required only in some configs."""
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, ast.FunctionDef):
        if isinstance(parent, ast.If | ast.IfExp) and child is not parent.test:
            return True
        if isinstance(parent, ast.BoolOp) and child is not parent.values[0]:
            return True
        child, parent = parent, parents.get(parent)
    return False


@dataclass(frozen=True)
class _Site:
    """What the source says of one reader call: its default is computed, its key is required only under a
    condition, its choices or bounds are computed."""

    derived: bool
    conditional: bool
    dynamic_bounds: bool


_UNKNOWN_SITE = _Site(derived=True, conditional=True, dynamic_bounds=True)  # claim nothing a call site may break


def _site(frame: Any, key: str) -> _Site:
    """The call site reading `key` in the caller's frame; outside infra/config.py and infra/stack (a reader helper
    elsewhere) or where the source names no key, nothing is claimed."""
    module = frame.f_globals.get("__name__")
    if module != config.__name__ and not str(module).startswith("infra.stack."):
        return _UNKNOWN_SITE
    sites = _call_sites(module)
    return sites.get((frame.f_lineno, key)) or sites.get((frame.f_lineno, "*")) or _Site(False, False, False)


def _literal_args(call: ast.Call, names: tuple[str, ...]) -> bool:
    return all(_literal(k.value) for k in call.keywords if k.arg in names)


@cache
def _call_sites(module: str) -> dict[tuple[int, str], _Site]:
    """(line, key) -> _Site for every reader call in `module` (infra.config or an infra.stack module; every line a
    call spans; key "*" where the source computes the key, e.g. in a loop over keys: such a site claims nothing)."""
    tree = ast.parse(inspect.getsource(sys.modules[module]))
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    out: dict[tuple[int, str], _Site] = {}
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("value", "strings")
                and len(n.args) > 1):
            continue
        at = 4 if n.func.attr == "value" else 3
        default = n.args[at] if len(n.args) > at else next((k.value for k in n.keywords if k.arg == "default"), None)
        literal_key = isinstance(n.args[1], ast.Constant)
        site = _Site(derived=not literal_key or (default is not None and not _literal(default)),
                     conditional=not literal_key or (default is None and _under_condition(n, parents)),
                     dynamic_bounds=not literal_key or not _literal_args(n, ("choices", "minimum", "maximum")))
        key = str(n.args[1].value) if isinstance(n.args[1], ast.Constant) else "*"
        for line in range(n.lineno, (n.end_lineno or n.lineno) + 1):
            out[(line, key)] = site
    return out


def _walk(corpus: Iterable[Mapping[str, Any]]) -> Recorder:
    recorder = Recorder()
    for i, raw in enumerate(corpus):
        recorder.problems = []
        try:
            parse(raw, stack=f"schema-{i}", reader=recorder)
        except ConfigError:
            pass  # COVERAGE is only walked: a branch's keys are recorded whether or not the whole config is valid
    return recorder


def _children(nodes: Mapping[str, _Node], path: str) -> dict[str, str]:
    """The direct children of `path`: key -> full path (list items are `path[]`, named entries `path.*`)."""
    prefix = f"{path}." if path else ""
    out = {}
    for full in nodes:
        if full.startswith(prefix) and full != path:
            rest = full[len(prefix):]
            if "." not in rest:
                out[rest] = full
    return out


def _to_json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _build(nodes: Mapping[str, _Node], path: str) -> dict[str, Any]:
    node = nodes[path]
    if node.schema is not None:  # a declared section, with the keys its caller reads built as any other
        out = dict(node.schema)
        if "." not in path or path.endswith((".*", "[]")):
            out["type"] = "object"  # a top-level key, a named entry or a list item must be a mapping
        built = _object(nodes, path, node)
        out["properties"] = dict(sorted((built.get("properties", {}) | node.schema["properties"]).items()))
        if required := sorted({*out.get("required", ()), *built.get("required", ())}):
            out["required"] = required
        return out
    # A section below the top level reads null as empty (`replicas:` with every child commented out); a top-level
    # key, a named entry (a pool, a model) or a list item must be a mapping.
    nullable = "object" in node.types and "." in path and not path.endswith((".*", "[]"))
    scalars = node.types - {"object"}
    if "object" in node.types and scalars and (node.allowed is not None or _children(nodes, path)):
        # a key that takes a scalar or a mapping (`quantization: fp8` or `{method, checkpoint}`): one branch each,
        # so the scalar's choices do not apply to the mapping
        scalar, mapping = _scalar(node, scalars, nullable=nullable), _object(nodes, path, node)
        return {"anyOf": [scalar, mapping]} | ({"default": scalar.pop("default")} if "default" in scalar else {})
    return _scalar(node, node.types, nullable=nullable) | _object(nodes, path, node)


def _scalar(node: _Node, types_: set[str], *, nullable: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    types = sorted(types_)
    if node.optional or nullable:
        types.append("null")  # a key set to null reads as unset (its default), a section as empty
    out["type"] = types[0] if len(types) == 1 else types
    if len(node.enums) == 1 and (enum := next(iter(node.enums))) is not None and not node.dynamic_bounds:
        out["enum"] = [_to_json(v) for v in enum] + ([None] if node.optional else [])
    if len(node.minimums) == 1 and (lo := next(iter(node.minimums))) is not None and not node.dynamic_bounds:
        out["minimum"] = lo
    if len(node.maximums) == 1 and (hi := next(iter(node.maximums))) is not None and not node.dynamic_bounds:
        out["maximum"] = hi
    constant = {json.dumps(_to_json(d)) for d in node.defaults}
    if node.derived_default:
        out["description"] = "default: derived from other settings (infra/stack says how)"
    elif len(constant) == 1 and None not in node.defaults:
        out["default"] = json.loads(constant.pop())
    if node.string_items:
        out["items"] = {"type": "string"}
    if node.values is not None:
        out["additionalProperties"] = node.values
    if node.key_pattern is not None:
        out["propertyNames"] = {"pattern": node.key_pattern}
    return out


def _object(nodes: Mapping[str, _Node], path: str, node: _Node) -> dict[str, Any]:
    """The structure under a mapping (or list) key: its properties, required keys, items, named entries."""
    out: dict[str, Any] = {}
    if "object" in node.types and len(node.types) > 1 and (node.allowed is not None or _children(nodes, path)):
        out["type"] = "object"
    children = _children(nodes, path)
    if f"{path}[]" in nodes:
        out["items"] = _build(nodes, f"{path}[]")
    if node.named:
        item = f"{path}.*"
        out["propertyNames"] = {"pattern": DNS_LABEL.pattern}
        out["additionalProperties"] = _build(nodes, item) if item in nodes else {"type": "object"}
        return out
    props = {k: _build(nodes, full) for k, full in sorted(children.items()) if not k.endswith("[]")}
    props |= {k: {} for k in sorted(node.allowed or ()) if k not in props}  # missing_keys() names these
    if props:
        out["properties"] = props
        required = sorted(k for k, full in children.items() if k in props and node.observed
                          and nodes[full].required_reads >= node.observed and not nodes[full].optional
                          and not nodes[full].conditional)
        if required:
            out["required"] = required
    if node.allowed is not None:
        out["additionalProperties"] = False
    return out


def schema(corpus: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The schema of the `aifactory:*` values (the structured config under `config:`), by top-level key."""
    nodes = _walk(corpus).nodes
    return {key: _build(nodes, key) for key in TOP_LEVEL_KEYS if key in nodes}


def missing_keys(corpus: Iterable[Mapping[str, Any]]) -> list[str]:
    """Allowed keys of a mapping that no walk of the corpus read: the schema would know them only by name."""
    nodes = _walk(corpus).nodes
    return sorted(f"{path}.{key}" for path, node in nodes.items() for key in node.allowed or ()
                  if f"{path}.{key}" not in nodes and f"{path}.{key}[]" not in nodes
                  and key not in (node.schema or {}).get("properties", {}))


def stack_file_schema(corpus: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The schema of a whole Pulumi stack settings file: `aifactory:<key>` (or a bare `<key>`, which Pulumi reads
    in the project's namespace) under `config:`, other namespaces (aws:, pulumi:, ...) left open."""
    keys = schema(corpus)
    props: dict[str, Any] = {}
    for key in keys:
        props[f"{NAMESPACE}:{key}"] = props[key] = {"$ref": f"#/definitions/{key}"}
    known = "|".join(re.escape(k) for k in TOP_LEVEL_KEYS)
    return {
        "$schema": DRAFT,
        "definitions": keys,
        "title": "aifactory stack settings (stacks/Pulumi.<env>.yaml)",
        "description": "Generated by `aifactory schema` from the stack model (infra/stack); do not edit by hand.",
        "type": "object",
        "properties": {"config": {
            "type": "object",
            "properties": props,
            # unknown aifactory:* keys, and unknown keys without a namespace (Pulumi reads those in the project's,
            # aifactory), are typos, as the reader says; other namespaces (aws:, pulumi:) are not ours
            "patternProperties": {f"^{NAMESPACE}:(?!(?:{known})$)": False, f"^(?!(?:{known})$)[^:]+$": False},
            "allOf": [{"anyOf": [{"required": [f"{NAMESPACE}:{key}"]}, {"required": [key]}]}
                      for key in REQUIRED_KEYS],
        }},
        "required": ["config"],
    }
