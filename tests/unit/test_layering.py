"""Layering (shared/DESIGN.md, "Layering"): the shared vocabulary imports nothing of the kit, and libraries do
not import infra/ (the application layer above them)."""

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
