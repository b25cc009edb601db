"""Reading a stack file's YAML the way the Pulumi CLI's decoder does, and no more generously.

The CLI decodes stack files with go-yaml v3 (gopkg.in/yaml.v3), whose decoder (go-yaml/yaml@v3.0.1:decode.go)
refuses three things that PyYAML accepts without a word:

- a mapping key written twice ("mapping key ... already defined at line N"; `decoder.mapping`, unique keys on by
  default). PyYAML keeps the last value, so a pasted second `chat:` model silently replaces the first;
- excessive aliasing (`decoder.unmarshal`: more than 100 alias-driven decodes out of more than 1,000, at a ratio
  above `allowedAliasRatio`, 0.99 up to 400,000 decodes falling to 0.10 at 4,000,000). A ten-level "billion
  laughs" document is a few hundred bytes; expanded by `json.dumps` it takes minutes and gigabytes;
- an anchor whose value contains itself (`decoder.alias`: "anchor ... value contains itself").

`load` checks the composed node graph for all three before anything is constructed, counting decodes the way
go-yaml does but over the graph (each node once, its expanded size memoised), so a bomb is refused in the time
it takes to read the file. A file over MAX_STACK_FILE_BYTES is refused before it is constructed (`oversized`),
naming the setting that makes it so large from the YAML events of its first OVERSIZED_SCAN_BYTES.

Plain scalars get the types go-yaml v3 gives them (YAML 1.2's core schema), not PyYAML's YAML 1.1 ones, so
`validate` sees the values `pulumi up` will: `yes`, `on` and `12:30` are strings, `1e23` is a number, `0o17` and
`0777` are octal. Unquoted dates and times stay the text they are (`startTime: 2026-12-01T11:30:00Z`), as the
CLI passes them to the program: go-yaml's decode.go sets a timestamp decoded into an interface{} as its string
"for backward compatibility", and the CLI reads stack files into untyped values.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any, BinaryIO

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from infra.stack.messages import STRING_LIMIT

NAMESPACE = "aifactory"  # infra.config.NAMESPACE (not imported: this module sits below the config reader)

__all__ = ["MAX_STACK_FILE_BYTES", "MAX_EXPANDED_VALUES", "OVERSIZED_SCAN_BYTES", "StackYamlError",
           "allowed_alias_ratio", "oversized", "load"]

# A stack file is settings, and every value in it ends up in Pulumi state and Kubernetes objects: 1 MiB is the
# most one ConfigMap or Secret may hold (kubernetes/kubernetes pkg/apis/core/types.go `MaxSecretSize`, applied to
# ConfigMaps by pkg/apis/core/validation/validation.go `ValidateConfigMap`). The bench's generated large stack
# (150 models, 40 pools) is about 40 KB.
MAX_STACK_FILE_BYTES = 1024 * 1024
# How much of a file over that limit is read to name the setting that makes it so large (libyaml's parser reads
# 8 MiB in a fraction of a second; PyYAML's own parser, where PyYAML was built without libyaml, in about 10 s).
OVERSIZED_SCAN_BYTES = 8 * MAX_STACK_FILE_BYTES
# go-yaml v3.0.1 decode.go: alias_ratio_range_low / alias_ratio_range_high.
_ALIAS_RATIO_LOW, _ALIAS_RATIO_HIGH = 400_000, 4_000_000
# go-yaml would still decode up to 4,000,000 values at a 10% alias ratio; nothing the kit reads needs a
# hundredth of that, and every value is turned into JSON text for the program.
MAX_EXPANDED_VALUES = 1_000_000


class StackYamlError(Exception):
    """The file is not YAML the Pulumi CLI would decode: `problems` are (1-based line or None, message), every one
    found (all duplicate keys at once)."""

    def __init__(self, message: str, *, line: int | None = None,
                 problems: list[tuple[int | None, str]] | None = None) -> None:
        self.problems = problems or [(line, message)]
        super().__init__("\n".join(m for _, m in self.problems))


def allowed_alias_ratio(decodes: int) -> float:
    """go-yaml v3.0.1 decode.go `allowedAliasRatio`: the share of decodes that may come from aliases."""
    if decodes <= _ALIAS_RATIO_LOW:
        return 0.99
    if decodes >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decodes - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW)


class _Loader(yaml.SafeLoader):
    """The safe loader, recording which child edges of the composed graph are aliases."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_edges: dict[int, list[Node]] = {}  # id(parent node) -> the nodes its aliases point at

    def resolve(self, kind: type[Node], value: Any, implicit: tuple[bool, bool]) -> str:
        """A plain scalar's tag as go-yaml v3 gives it (`_go_tag`), not PyYAML's YAML 1.1 one."""
        if kind is ScalarNode and implicit[0]:
            return _go_tag(value)
        return str(super().resolve(kind, value, implicit))

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        alias = self.check_event(yaml.AliasEvent)
        node = super().compose_node(parent, index)
        if alias and parent is not None and node is not None:
            self.alias_edges.setdefault(id(parent), []).append(node)
        return node


_STR, _INT, _FLOAT, _BOOL, _NULL, _MERGE = (f"tag:yaml.org,2002:{t}" for t in
                                           ("str", "int", "float", "bool", "null", "merge"))
# go-yaml/yaml@v3.0.1 resolve.go: the words a plain scalar may be (YAML 1.2's core schema: `yes`, `on` and `off`
# stay strings), then by its first character a number (strconv.ParseInt with base 0, ParseUint, yamlStyleFloat)
# or a timestamp (kept as its text, see above); there are no base-60 numbers (`12:30` is a string).
_GO_WORDS = {**dict.fromkeys(("true", "True", "TRUE", "false", "False", "FALSE"), _BOOL),
             **dict.fromkeys(("", "~", "null", "Null", "NULL"), _NULL),
             **dict.fromkeys((f"{sign}.{word}" for sign in ("", "+", "-") for word in ("inf", "Inf", "INF")),
                             _FLOAT),
             **dict.fromkeys((".nan", ".NaN", ".NAN"), _FLOAT), "<<": _MERGE}
_GO_INT = re.compile(r"^[-+]?(?:0[xX][0-9a-fA-F]+|0[oO]?[0-7]+|0[bB][01]+|[0-9]+)$")  # ParseInt(s, 0, 64), `_` removed
_GO_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")  # yamlStyleFloat
_GO_DOT_FLOAT = re.compile(r"^\.[0-9]+(?:[eE][-+]?[0-9]+)?$")  # what ParseFloat takes from a plain `.`-scalar


def _go_tag(text: str) -> str:
    """The tag go-yaml v3 gives a plain scalar."""
    if text in _GO_WORDS:
        return _GO_WORDS[text]
    if text[:1] == ".":
        return _FLOAT if _GO_DOT_FLOAT.match(text) else _STR
    if text[:1] in "+-0123456789":
        plain = text.replace("_", "")
        if _GO_INT.match(plain):
            return _INT
        if _GO_FLOAT.match(plain):
            return _FLOAT
    return _STR


def _construct_int(loader: yaml.SafeLoader, node: ScalarNode) -> int:
    plain = str(loader.construct_scalar(node)).replace("_", "")
    sign, digits = (-1, plain[1:]) if plain[:1] == "-" else (1, plain.lstrip("+"))
    if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():  # Go's base 0: a leading 0 is octal
        return sign * int(digits, 8)
    return sign * int(digits, 0)


_Loader.add_constructor(_INT, _construct_int)


@dataclass
class _Counts:
    decodes: int  # nodes go-yaml would decode for this subtree, aliases expanded
    aliased: int  # of which inside an alias expansion


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _count(root: Node, alias_edges: dict[int, list[Node]]) -> dict[int, _Counts]:
    """Decodes and alias-driven decodes of every node of the document (by id), each node's expansion computed once
    (iteratively: a deep document must not exhaust Python's stack here)."""
    done: dict[int, _Counts] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if expanded:
            on_path.discard(key)
            aliases = list(alias_edges.get(key, ()))
            decodes, aliased = 1, 0
            for child in _children(node):
                counts = done[id(child)]
                if aliases and any(child is a for a in aliases):
                    aliases.remove(next(a for a in aliases if a is child))
                    decodes += 1 + counts.decodes  # the alias node, then its target again
                    aliased += counts.decodes
                else:
                    decodes += counts.decodes
                    aliased += counts.aliased
            done[key] = _Counts(decodes, aliased)
            continue
        if key in done:
            continue
        if key in on_path:
            raise StackYamlError("an anchor's value contains itself (a YAML alias to the anchor inside it); the "
                                 "Pulumi CLI refuses such a file", line=node.start_mark.line + 1)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in done)
    return done


def _most_expanded(root: Node, alias_edges: dict[int, list[Node]], counts: dict[int, _Counts]) -> tuple[str, Node]:
    """The key path (and node) under which most of the document's alias expansion happens: from the root down to
    the child holding more than half of it, stopping at the collection whose own aliases expand it."""
    path, node = "", root
    while True:
        aliases = alias_edges.get(id(node), [])
        pairs = (node.value if isinstance(node, MappingNode) else
                 [(None, item) for item in node.value] if isinstance(node, SequenceNode) else [])
        heavy = [(i, key, child) for i, (key, child) in enumerate(pairs)
                 if 2 * counts[id(child)].decodes > counts[id(node)].decodes]
        if not heavy or any(heavy[0][2] is a for a in aliases):
            return _key_path(path), node
        i, key, node = heavy[0]
        where = key.value if isinstance(key, ScalarNode) else f"[{i}]"
        path = f"{path}{'' if where.startswith('[') or not path else '.'}{where}"


def _key_path(path: str) -> str:
    """`config.aifactory:models.chat` as validate names it: `models.chat` (other namespaces keep theirs)."""
    return path.removeprefix("config.").removeprefix(f"{NAMESPACE}:")


def _duplicate_keys(root: Node) -> list[tuple[int | None, str]]:
    """Every key written twice in one mapping, as go-yaml reports it (same kind, same text), with its key path."""
    found: list[tuple[int | None, str]] = []
    seen: set[int] = set()
    stack: list[tuple[Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            first: dict[tuple[type, str], int] = {}
            for key, value in node.value:
                text = key.value if isinstance(key, ScalarNode) else None
                if isinstance(text, str):
                    line = key.start_mark.line + 1
                    where = f"{path}.{text}" if path else text
                    if (prior := first.get((type(key), text))) is not None:
                        found.append((line, f"{_key_path(where)}: key {text!r} is already defined at line {prior}; "
                                            "the Pulumi CLI refuses duplicate keys (keep one, merge what you meant)"))
                    else:
                        first[(type(key), text)] = line
                    stack.append((value, where))
                else:
                    stack.append((value, path))
        elif isinstance(node, SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
    return sorted(found, key=lambda p: p[0] or 0)


@dataclass
class _Value:
    key: str  # its key path, as validate names it
    line: int
    chars: int
    cut: bool = False  # it runs past what was read: at least `chars` characters


@dataclass
class _Open:
    """A collection being read: its path, and where its next value goes."""

    path: str
    mapping: bool
    key: str | None = None  # a mapping's key awaiting its value (None: the next scalar is a key)
    index: int = 0  # a sequence's next item

    def key_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def next_path(self) -> str:
        if self.mapping:
            at, self.key = self.key_path(str(self.key)), None
            return at
        self.index += 1
        return f"{self.path}[{self.index - 1}]"


def _largest_value(head: bytes, *, more: bool) -> _Value | None:
    """The longest scalar value in `head`, the start of a stack file (`more`: the file goes on), from its YAML
    events only: nothing is constructed, nothing kept but the path being read."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where PyYAML has it: megabyte scalars fast
    open_: list[_Open] = []
    best = last = None
    awaiting: tuple[_Value, int] | None = None  # a key whose value has not come yet, and where that value starts
    try:
        for event in yaml.parse(head, Loader=loader):
            start, end = event.start_mark, event.end_mark
            assert start is not None and end is not None  # the parser marks every event
            if isinstance(event, yaml.ScalarEvent) and open_ and open_[-1].mapping and open_[-1].key is None:
                open_[-1].key = event.value
                awaiting = _Value(_key_path(open_[-1].key_path(event.value)), start.line + 1, 0, cut=True), end.index
                continue
            awaiting = None
            if isinstance(event, yaml.ScalarEvent | yaml.AliasEvent):
                last = _Value(_key_path(open_[-1].next_path() if open_ else ""), start.line + 1,
                              len(event.value) if isinstance(event, yaml.ScalarEvent) else 0)
                best = last if best is None or last.chars > best.chars else best
            elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                open_.append(_Open(open_[-1].next_path() if open_ else "", isinstance(event, yaml.MappingStartEvent)))
                last = None
            elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                open_.pop()
        if more and last is not None and last is best:  # the value read last was cut off where the read ended
            best.cut = True
    except yaml.YAMLError as err:  # the cut, inside a value that never ended (a quoted one)
        mark = getattr(err, "problem_mark", None)
        if more and awaiting is not None and mark is not None:
            value, starts = awaiting
            value.chars = mark.index - starts
            best = value if best is None or value.chars > best.chars else best
    return best


def oversized(stream: BinaryIO, size: int) -> StackYamlError:
    """The refusal of a stack file of `size` bytes, over MAX_STACK_FILE_BYTES, read from `stream` (its start),
    naming the key path and line of a value over a setting's STRING_LIMIT when one makes the file so large."""
    limit = f"a stack file holds settings, not data, and may be at most {MAX_STACK_FILE_BYTES:,} bytes"
    found = _largest_value(stream.read(OVERSIZED_SCAN_BYTES), more=size > OVERSIZED_SCAN_BYTES)
    if found is not None and found.chars > STRING_LIMIT:
        return StackYamlError(f"{found.key}: is {'at least ' if found.cut else ''}{found.chars:,} characters; a "
                              f"setting is at most {STRING_LIMIT:,}, and this value makes the file {size:,} bytes: "
                              f"{limit}", line=found.line)
    return StackYamlError(f"is {size:,} bytes, and no setting is over {STRING_LIMIT:,} characters (comments, or "
                          f"very many settings?): {limit}")


def load(text: str) -> Any:
    """The document in `text`, constructed only once it is known the Pulumi CLI would decode it too."""
    encoded = text.encode("utf-8")
    if len(encoded) > MAX_STACK_FILE_BYTES:
        raise oversized(io.BytesIO(encoded), len(encoded))
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        every = _count(root, loader.alias_edges)
        counts = every[id(root)]
        if counts.decodes > MAX_EXPANDED_VALUES or (
                counts.aliased > 100 and counts.decodes > 1000
                and counts.aliased / counts.decodes > allowed_alias_ratio(counts.decodes)):
            key, node = _most_expanded(root, loader.alias_edges, every)
            raise StackYamlError(
                f"{key or '(the document)'}: YAML aliases expand the file to {counts.decodes:,} values, "
                f"{counts.aliased:,} of them from aliases, {every[id(node)].decodes:,} under this key; the Pulumi CLI "
                "refuses excessive aliasing (go-yaml v3), and the kit reads at most "
                f"{MAX_EXPANDED_VALUES:,} values: write the values out, or use fewer nested aliases",
                line=node.start_mark.line + 1)
        if duplicates := _duplicate_keys(root):
            raise StackYamlError("duplicate keys", problems=duplicates)
        return loader.construct_document(root)
    finally:
        loader.dispose()
