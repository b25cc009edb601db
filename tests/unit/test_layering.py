"""Layering (shared/DESIGN.md, "Layering"): the shared vocabulary imports nothing of the kit, and libraries do
not import infra/ (the application layer above them)."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KIT = ("infra", "components", "dashboards", "policies", "telemetry")


def _loaded_after(statement: str) -> list[str]:
    """Modules of the kit and of the Pulumi/OTel SDKs that a fresh interpreter holds after `statement`."""
    probe = (f"import sys; {statement}; print('\\n'.join(sorted(m for m in sys.modules "
             f"if m.split('.')[0] in {KIT + ('pulumi', 'pulumi_kubernetes', 'opentelemetry')!r})))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return out.split()


def test_the_vocabulary_loads_nothing_of_the_kit_or_the_sdks() -> None:
    assert _loaded_after("import components.vocabulary") == ["components", "components.vocabulary"]


def test_the_yaml_rendering_and_label_keys_have_one_home() -> None:
    import components.vocabulary as vocabulary
    import infra.artifacts
    import infra.config
    from components.k8s import naming

    assert infra.artifacts.dump_yaml is vocabulary.dump_yaml
    assert (infra.config.POOL_LABEL, infra.config.GPU_TAINT_KEY) == ("aifactory.io/pool", "nvidia.com/gpu")
    assert naming.LABEL_POOL is vocabulary.POOL_LABEL
    assert vocabulary.dump_yaml({"b": 1, "a": "x\ny\n"}) == "b: 1\na: |\n  x\n  y\n"


LIBRARIES = ("components", "dashboards", "policies", "telemetry")
# The only modules under the libraries that import infra/: grafanalib's entry scripts (`generate-dashboard` loads
# dashboards/*.dashboard.py by path), which read the stack through infra.dashboard_scripts like any application
# would. A library module that starts importing infra/ fails here.
STILL_IMPORTING_INFRA = {
    "dashboards/compound_latency.dashboard.py", "dashboards/gpu_cost.dashboard.py",
    "dashboards/gpu_fleet.dashboard.py", "dashboards/mesh.dashboard.py", "dashboards/serving.dashboard.py",
}


def _imports(path: Path) -> set[str]:
    """Every module `path` imports (module level, in functions, under TYPE_CHECKING), as written."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_no_library_module_but_the_known_ones_imports_infra() -> None:
    importing = {str(p.relative_to(REPO)) for lib in LIBRARIES for p in sorted((REPO / lib).rglob("*.py"))
                 if any(m == "infra" or m.startswith("infra.") for m in _imports(p))}
    assert importing == STILL_IMPORTING_INFRA


def test_the_components_with_typed_args_and_what_they_read_import_nothing_of_infra() -> None:
    for module in ("tenancy", "gateway", "envoy_config", "serving", "storage", "gpu_stack", "mesh", "fabric",
                   "autoscaler", "observability", "otel_config", "fidelity", "values", "defaults", "naming"):
        imported = _imports(REPO / "components" / "k8s" / f"{module}.py")
        assert not [m for m in imported if m.split(".")[0] == "infra"], module


def test_components_import_nothing_of_infra() -> None:
    importing = [str(p.relative_to(REPO)) for p in sorted((REPO / "components").rglob("*.py"))
                 if any(m.split(".")[0] == "infra" for m in _imports(p))]
    assert importing == []
