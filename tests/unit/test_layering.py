"""The layering of docs/design.md, read from the code's imports (every `import`/`from` in the tree, function
bodies included; not those under `if TYPE_CHECKING:`, which never run): infra/ on top; components/, dashboards/,
policies/ and telemetry/ are libraries that never import infra/ and talk to each other only through the shared
vocabulary; no module imports itself back through others.

KNOWN lists the imports still to be removed (#18): a new upward or sideways import fails here, and so does a listed
edge once it is gone (so the list only shrinks)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("infra", "components", "dashboards", "policies", "telemetry")
LIBRARIES = ("components", "dashboards", "policies", "telemetry")
# The bottom: names and facts every layer reads, each importing nothing of the kit (checked below): label and taint
# keys and the YAML rendering, metric names, instance facts, and the names the kit gives Kubernetes objects.
VOCABULARY = ("components.vocabulary", "telemetry.names", "components.catalog", "components.nodes",
              "components.identity", "components.k8s.naming", "components.volumes")
# grafanalib's `generate-dashboards` runs these files by path; nothing imports them (application entry scripts).
ENTRY_SCRIPTS = ".dashboard.py"

# (importer, imported) module pairs that break the layering, to be removed: none left (#18). A new upward or
# sideways import fails the test below; an entry here that is gone from the code fails it too.
KNOWN: frozenset[tuple[str, str]] = frozenset()


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(node: ast.AST, *, type_only: bool = False) -> Iterator[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:` (imports that only name argument types never run); with
    `type_only`, those too."""
    yield node
    for child in ast.iter_child_nodes(node):
        test = child.test if isinstance(child, ast.If) else None
        if not type_only and test is not None and (getattr(test, "id", None) or getattr(test, "attr", None)) == \
                "TYPE_CHECKING":
            yield from (n for orelse in child.orelse for n in _runtime_nodes(orelse))
            continue
        yield from _runtime_nodes(child, type_only=type_only)


def _imports(path: Path, modules: set[str], *, type_only: bool = False) -> Iterator[str]:
    """Kit modules `path` imports (absolute and relative imports): `from pkg import mod` imports pkg.mod, and
    `from pkg.mod import name` imports pkg.mod."""
    here = _module(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path)), type_only=type_only):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                if f"{module}.{alias.name}" in modules:
                    yield f"{module}.{alias.name}"
                elif module in modules:
                    yield module


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                  if not p.name.endswith(ENTRY_SCRIPTS) and "__pycache__" not in p.parts)


def _graph(*, type_only: bool = False) -> dict[str, set[str]]:
    """module -> kit modules it imports (only names that are modules of the tree); with `type_only`, also the
    imports under `if TYPE_CHECKING:`."""
    modules = {_module(p): p for p in _sources()}
    return {m: {n for n in _imports(p, set(modules), type_only=type_only) if n != m} for m, p in modules.items()}


def _layer(module: str) -> str:
    return module if module in VOCABULARY else module.split(".")[0]


def test_libraries_import_neither_infra_nor_each_other_but_through_the_vocabulary() -> None:
    found = {(importer, target) for importer, imported in _graph().items() for target in imported
             if _layer(importer) in LIBRARIES and _layer(target) not in (_layer(importer), *VOCABULARY)}
    assert sorted(found - KNOWN) == [], "new upward or sideways imports"
    assert sorted(KNOWN - found) == [], "gone from the code: remove them from KNOWN"


def test_the_kubernetes_layer_imports_no_cloud_layer() -> None:
    """components/k8s runs on any cluster (EKS or one of your own): what it needs of a cloud comes in through the
    vocabulary (instance facts, node defaults, tags) or an argument (components.identity.WorkloadIdentity), never
    by importing components.aws, at run time or for types."""
    found = sorted((importer, target) for importer, imported in _graph(type_only=True).items() for target in imported
                   if importer.startswith("components.k8s") and target.startswith("components.aws"))
    assert found == []


def test_the_vocabulary_imports_nothing_of_the_kit_but_itself() -> None:
    graph = _graph()
    assert {m: sorted(graph[m] - set(VOCABULARY)) for m in VOCABULARY if graph[m] - set(VOCABULARY)} == {}


def test_no_module_imports_itself_back_through_others() -> None:
    """No circle in the module graph (Tarjan's strongly connected components larger than one module), imports that
    only name types included: two modules that need each other, even for types, are one idea split in two."""
    graph = _graph(type_only=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                circles.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == [], circles


def _loaded_after(statement: str) -> list[str]:
    """Modules of the kit and of the Pulumi/OTel SDKs that a fresh interpreter holds after `statement`."""
    probe = (f"import sys; {statement}; print('\\n'.join(sorted(m for m in sys.modules "
             f"if m.split('.')[0] in {PACKAGES + ('pulumi', 'pulumi_kubernetes', 'opentelemetry')!r})))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return out.split()


def test_the_vocabulary_loads_nothing_of_the_kit_or_the_sdks() -> None:
    assert _loaded_after("import components.vocabulary") == ["components", "components.vocabulary"]
    assert _loaded_after("import components.k8s.naming") == [
        "components", "components.k8s", "components.k8s.naming", "components.vocabulary"]
    assert _loaded_after("import components.catalog") == ["components", "components.catalog"]
    assert _loaded_after("import telemetry.names") == ["telemetry", "telemetry.names"]


def test_the_yaml_rendering_and_label_keys_have_one_home() -> None:
    import components.vocabulary as vocabulary
    import infra.artifacts
    from components.k8s import naming
    from infra.stack import pools

    assert infra.artifacts.dump_yaml is vocabulary.dump_yaml
    assert (vocabulary.POOL_LABEL, vocabulary.GPU_TAINT_KEY) == ("aifactory.io/pool", "nvidia.com/gpu")
    assert naming.LABEL_POOL is vocabulary.POOL_LABEL
    assert pools.POOL_LABEL is vocabulary.POOL_LABEL and pools.GPU_TAINT_KEY is vocabulary.GPU_TAINT_KEY
    assert vocabulary.dump_yaml({"b": 1, "a": "x\ny\n"}) == "b: 1\na: |\n  x\n  y\n"
