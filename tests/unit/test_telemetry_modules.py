"""telemetry's modules form no circle, not even through imports made only for type checkers (`if TYPE_CHECKING:`,
which tests/unit/test_layering.py leaves out): a module that needs another's type at run time or only to annotate
needs it all the same, and two modules that need each other are one idea split across files (issue 47).
telemetry/__init__.py is left out: it names every public name for type checkers and imports none at run time."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "telemetry"


def imports_of(path: Path) -> set[str]:
    """The telemetry modules `path` imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "telemetry":
                found.update(f"telemetry.{a.name}" for a in node.names)
            elif node.module.startswith("telemetry."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("telemetry."))
    return found


def test_no_module_needs_another_that_needs_it_back() -> None:
    modules = {f"telemetry.{p.stem}": p for p in sorted(PACKAGE.glob("*.py")) if p.name != "__init__.py"}
    graph = {name: imports_of(path) & set(modules) - {name} for name, path in modules.items()}
    assert graph["telemetry.scopes"] >= {"telemetry.runs"}  # the scan sees the imports it should
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as err:
        raise AssertionError(f"telemetry modules in a circle: {err.args[1]}") from None
    assert order.index("telemetry.runs") < order.index("telemetry.scopes") < order.index("telemetry.instrument")
