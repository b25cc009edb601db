"""The budget service's image (components/k8s/gateway/budgets/Dockerfile) copies only a few of the kit's files: the
service must run from exactly those (no Pulumi, nothing else of the kit), with the dependencies it pins."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "components/k8s/gateway/budgets/Dockerfile"


def _copied() -> list[str]:
    out = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY "):
            *sources, _ = line.split()[1:]
            out += sources
    return out


def test_the_service_imports_only_the_files_the_image_copies(tmp_path: Path) -> None:
    for src in _copied():
        dest = tmp_path / src
        if src.endswith("/"):
            shutil.copytree(ROOT / src, dest, ignore=shutil.ignore_patterns("__pycache__", "Dockerfile"))
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / src, dest)
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import components.k8s.gateway.budgets.service; "
             "print('\\n'.join(m.__file__ or '' for n, m in sorted(sys.modules.items()) "
             "if n.split('.')[0] in ('components', 'telemetry', 'infra', 'dashboards', 'policies', 'pulumi')))")
    files = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], check=True, capture_output=True,
                           text=True, cwd=tmp_path).stdout.split()
    assert files and all(f.startswith(str(tmp_path)) for f in files), files


def test_the_image_installs_the_budgets_extra_at_its_pins() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["budgets"]
    installed = set(re.findall(r"[\w-]+==[\w.]+", DOCKERFILE.read_text()))
    assert set(extra) <= installed
