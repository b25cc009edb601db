"""Storage for model caches: on AWS an encrypted gp3 StorageClass for the EBS CSI driver.

Each model pod gets its own cache volume (a generic ephemeral volume, ReadWriteOnce, see
serving.cache_volume): EKS clusters the kit creates run only the EBS CSI driver, which has no
ReadWriteMany. Volumes bind when their pod is scheduled (WaitForFirstConsumer), so each lands in its
pod's zone. On existing clusters the cache uses the cluster's default StorageClass.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming
from infra.config import PlatformConfig

__all__ = [
    "MODEL_CACHE_STORAGE_CLASS",
    "EBS_CSI_PROVISIONER",
    "cache_storage_class_name",
    "storage_class",
    "ModelCacheStorage",
]

MODEL_CACHE_STORAGE_CLASS = "aifactory-gp3"
EBS_CSI_PROVISIONER = "ebs.csi.aws.com"
EBS_PARAMETERS = {"type": "gp3", "encrypted": "true"}  # the account's default EBS key (aws/ebs)


def cache_storage_class_name(cfg: PlatformConfig) -> str | None:
    """The StorageClass model caches use: the kit's gp3 class on AWS, None (the cluster default) elsewhere."""
    return MODEL_CACHE_STORAGE_CLASS if cfg.is_aws else None


def storage_class() -> dict[str, Any]:
    """The gp3 StorageClass (cluster-scoped); expandable, deleted with its claim."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": MODEL_CACHE_STORAGE_CLASS, "labels": dict(naming.MANAGED_BY)},
            "provisioner": EBS_CSI_PROVISIONER,
            "parameters": dict(EBS_PARAMETERS),
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": True}


class ModelCacheStorage(pulumi.ComponentResource):
    """The StorageClass of model caches on AWS stacks (existing clusters use their default class)."""

    storage_class: k8s.storage.v1.StorageClass

    def __init__(self, name: str, *, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:ModelCacheStorage", name, None, opts)
        sc = storage_class()
        self.storage_class = k8s.storage.v1.StorageClass(
            f"{name}-storageclass", metadata=sc["metadata"], provisioner=sc["provisioner"],
            parameters=sc["parameters"], reclaim_policy=sc["reclaimPolicy"],
            volume_binding_mode=sc["volumeBindingMode"], allow_volume_expansion=sc["allowVolumeExpansion"],
            opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({"storageClass": MODEL_CACHE_STORAGE_CLASS})
