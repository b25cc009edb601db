"""docs/stack-reference.md: every key of a stack file with its type, default, what is allowed and its description,
generated from the stack model's editor schema (stacks/aifactory.schema.json's source).

Regenerate with `python -m infra.stack.reference > docs/stack-reference.md`; a test fails when the page is stale.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["rows", "render", "main"]

COMMAND = "python -m infra.stack.reference > docs/stack-reference.md"
_NAME = "<name>"  # a key of a mapping of names (a pool, a tenant, a model, a workload)


def _types(node: dict[str, Any]) -> str:
    if "anyOf" in node:
        return " or ".join(_types(branch) for branch in node["anyOf"])
    kinds = node.get("type", "any")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    shown = [k for k in kinds if k != "null"] or ["null"]
    if "array" in shown and isinstance(node.get("items"), dict) and node["items"].get("type") == "string":
        shown = ["list of string" if k == "array" else k for k in shown]
    return " or ".join(shown)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _allowed(node: dict[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append(", ".join(f"`{json.dumps(v)}`" for v in node["enum"] if v is not None))
    if "minimum" in node:
        parts.append(f">= {node['minimum']:g}")
    if "maximum" in node:
        parts.append(f"<= {node['maximum']:g}")
    if "pattern" in node:
        parts.append(f"matches `{node['pattern']}`")
    return "; ".join(parts)


def _default(node: dict[str, Any]) -> str:
    return f"`{json.dumps(node['default'])}`" if "default" in node else ""


def rows(node: dict[str, Any], path: str) -> Iterator[tuple[str, str, str, str, str]]:
    """(key path, type, default, allowed, description) of `node` and every key below it."""
    props = node.get("properties")
    named = node.get("additionalProperties") if "propertyNames" in node else None
    items = node.get("items") if isinstance(node.get("items"), dict) and "properties" in node["items"] else None
    yield (path, _types(node), _default(node), _allowed(node), node.get("description", ""))
    for branch in node.get("anyOf", []):
        if "properties" in branch:
            for row in rows(branch, path):
                if row[0] != path:
                    yield row
    for key, child in sorted((props or {}).items()):
        yield from rows(child, f"{path}.{key}")
    if isinstance(named, dict):
        yield from rows(named, f"{path}.{_NAME}")
    if items is not None:
        yield from rows(items, f"{path}[]")


def render(schema: dict[str, Any]) -> str:
    """The page for a stack file schema (infra.config.stack_file_schema)."""
    out = [
        "# Stack reference",
        "",
        f"<!-- Generated from the stack model by `{COMMAND}`; do not edit by hand. -->",
        "",
        "Every key a stack file (`stacks/Pulumi.<env>.yaml`) may set under `config:` as `aifactory:<key>`. "
        f"`{_NAME}` stands for a name you choose (a DNS label); `[]` for an item of a list. A key set to null is "
        "unset: it takes its default. An empty default is either required or derived from other settings (its "
        "description says which); `aifactory validate <stack>` checks what spans keys.",
        "",
    ]
    for key, node in schema["definitions"].items():
        out += [f"## `{key}`", "", "| Key | Type | Default | Allowed | Description |", "|---|---|---|---|---|"]
        out += [f"| `{p}` | {t} | {_cell(d)} | {_cell(a)} | {_cell(x)} |" for p, t, d, a, x in rows(node, key)]
        out.append("")
    return "\n".join(out)


def main() -> int:
    from infra.config import stack_file_schema

    sys.stdout.write(render(stack_file_schema()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
