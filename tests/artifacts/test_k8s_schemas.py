"""Every Kubernetes object each shipped stack renders validates against the upstream OpenAPI schemas of
the stack's Kubernetes version (kubernetes-validate, strict: unknown fields are errors). Custom
resources have no schema there: they must name an API group the kit installs a controller for, and
their fields are asserted where they are built (tests/unit/test_k8s_*.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.stacks import SHIPPED_STACKS

# API groups of custom resources, and the component whose CRDs define them.
CUSTOM_GROUPS = {
    "security.istio.io": "Istio base",
    "telemetry.istio.io": "Istio base",
    "networking.istio.io": "Istio base",
    "monitoring.coreos.com": "kube-prometheus-stack",
    "mellanox.com": "NVIDIA network operator",
    "nv-ipam.nvidia.com": "NVIDIA network operator (nv-ipam)",
    "sriovnetwork.openshift.io": "SR-IOV network operator",
    "leaderworkerset.x-k8s.io": "LeaderWorkerSet",
    "keda.sh": "KEDA",
    "inference.networking.k8s.io": "Gateway API Inference Extension",
    "inference.networking.x-k8s.io": "Gateway API Inference Extension",
    "gateway.networking.k8s.io": "Gateway API",
    "nvidia.com": "NVIDIA GPU operator",
}


def _objects(out: Path) -> list[tuple[str, dict[str, Any]]]:
    paths = sorted((out / "manifests").rglob("*.yaml"))
    return [(str(p.relative_to(out)), yaml.safe_load(p.read_text())) for p in paths]


def _group(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_builtin_object_validates_strictly(stack: str, synthesized: Callable[[str], Path]) -> None:
    out = synthesized(stack)
    version = yaml.safe_load((out / "state.json").read_text())["deployment"]["resources"][0]["outputs"][
        "kubernetesVersion"]
    failures, custom = [], []
    for rel, obj in _objects(out):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            custom.append((rel, obj))
        except kubernetes_validate.ValidationError as exc:
            failures.append(f"{rel}: {exc.message} at {'.'.join(map(str, exc.path))}")
    assert failures == []
    unknown = [f"{rel}: {obj['apiVersion']} {obj['kind']}" for rel, obj in custom
               if _group(obj["apiVersion"]) not in CUSTOM_GROUPS]
    assert unknown == [], "objects with no schema and no known CRD (a typo in apiVersion or kind?)"

