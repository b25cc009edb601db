"""Platform on its own args (no stack config): each part named from the platform's name, and a misspelt part
named before anything is built."""

import pulumi
import pytest

from components.k8s.platform import Platform, PlatformArgs
from tests.unit.test_aws_node_pool import register

RELEASE = "kubernetes:helm.sh/v3:Release"


def args(**extra) -> PlatformArgs:
    a: PlatformArgs = {
        "tenancy": {"tenants": {"chat": {"gpu_quota": 4, "cpu_quota": "48", "memory_quota": "512Gi"}}},
        "gpu": {"pools": {"l40s": {}}},
        "mesh": {"tenants": {"chat": {}}},
        "observability": {"storage_class": "fast-ssd"},
    }
    a.update(extra)  # type: ignore[typeddict-item]
    return a


def test_platform_from_its_own_args_on_an_existing_cluster() -> None:
    res = register(lambda: Platform("base", args(install_metrics_server=False)))
    components = sorted(r.type for r in res if r.type.startswith("aifactory:k8s:"))
    assert components == ["aifactory:k8s:Fabric", "aifactory:k8s:GpuStack", "aifactory:k8s:Mesh",
                          "aifactory:k8s:Observability", "aifactory:k8s:Platform", "aifactory:k8s:Tenancy"]
    releases = sorted(r.name for r in res if r.type == RELEASE)
    assert releases == ["base-gpu-operator", "base-mesh-base", "base-mesh-cni", "base-mesh-istiod",
                        "base-observability-alloy", "base-observability-collector", "base-observability-jaeger",
                        "base-observability-kube-prometheus-stack", "base-observability-loki"]
    ns = next(r for r in res if r.name == "base-tenancy-chat").inputs["metadata"]
    assert ns["name"] == "chat" and ns["labels"]["istio-injection"] == "enabled"


def test_a_misspelt_part_is_named_before_anything_is_built() -> None:
    bad = args()
    bad["tenency"] = bad.pop("tenancy")  # type: ignore[typeddict-unknown-key, typeddict-item]
    with pytest.raises(pulumi.InputPropertiesError) as err:
        register(lambda: Platform("base", bad))
    assert [e["property_path"] for e in err.value.errors] == ["tenency", "tenancy"]
