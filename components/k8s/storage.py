"""Storage: the one StorageClass every claim the kit (or a chart it installs) creates names explicitly.

EKS clusters created at 1.30 or later have no default StorageClass (EKS user guide, "Storage classes"),
so a claim without a class stays Pending and the Helm release that made it times out. On AWS the kit
creates an encrypted gp3 class for the EBS CSI driver, marks it the cluster default (for claims of charts
that cannot name one) and orders it after the EBS CSI add-on; every claim of the kit names it. On an
existing cluster the class is the stack's `target.storageClass` (required: the kit cannot know which
classes exist there, nor whether one is the default).

Model caches: on types with NVMe instance store (p4d/p5/p5en/p6) the cache is an emptyDir on the node's RAID0
array (serving.cache_volume, coldstart.py). Elsewhere each model pod gets its own cache volume (a generic
ephemeral volume, ReadWriteOnce): EKS clusters the kit creates run only the EBS CSI driver, which has no
ReadWriteMany. Volumes bind when their pod is scheduled (WaitForFirstConsumer), so each lands in its
pod's zone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import coldstart, naming
from infra.config import PlatformConfig

__all__ = [
    "MODEL_CACHE_STORAGE_CLASS",
    "EBS_CSI_PROVISIONER",
    "DEFAULT_CLASS_ANNOTATION",
    "cache_storage_class_name",
    "storage_class",
    "ModelCacheStorage",
]

MODEL_CACHE_STORAGE_CLASS = "aifactory-gp3"
EBS_CSI_PROVISIONER = "ebs.csi.aws.com"
# gp3 at its maximum throughput instead of the 125 MiB/s baseline, with the IOPS that throughput needs
# (0.25 MiB/s per IOPS): a 140 GB model reads in ~2.2 minutes instead of ~18 (coldstart.py). aws-ebs-csi-driver
# docs/parameters.md: `iops`, `throughput` (MiB/s, gp3 only). The account's default EBS key (aws/ebs).
EBS_PARAMETERS = {"type": "gp3", "encrypted": "true", "iops": str(coldstart.DEFAULT_GP3_IOPS),
                  "throughput": str(coldstart.DEFAULT_GP3_THROUGHPUT_MIBPS)}
# The annotation that makes a class the default for claims that name none (Kubernetes docs, "Change the
# default StorageClass"; DefaultStorageClass admission plugin).
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def cache_storage_class_name(cfg: PlatformConfig) -> str:
    """The StorageClass every claim of the stack names: the kit's gp3 class on AWS, `target.storageClass`
    on an existing cluster."""
    if cfg.is_aws:
        return MODEL_CACHE_STORAGE_CLASS
    assert cfg.target.storage_class is not None  # parse() requires it for provider existing
    return cfg.target.storage_class


def storage_class() -> dict[str, Any]:
    """The gp3 StorageClass (cluster-scoped, the cluster default); expandable, deleted with its claim."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": MODEL_CACHE_STORAGE_CLASS, "labels": dict(naming.MANAGED_BY),
                         "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
            "provisioner": EBS_CSI_PROVISIONER,
            "parameters": dict(EBS_PARAMETERS),
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": True}


class ModelCacheStorage(pulumi.ComponentResource):
    """The gp3 StorageClass of AWS stacks, after the add-ons that provision it (`after`: the EBS CSI add-on)."""

    storage_class: k8s.storage.v1.StorageClass

    def __init__(self, name: str, *, after: Sequence[pulumi.Resource] = (),
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:ModelCacheStorage", name, None, opts)
        sc = storage_class()
        self.storage_class = k8s.storage.v1.StorageClass(
            f"{name}-storageclass", metadata=sc["metadata"], provisioner=sc["provisioner"],
            parameters=sc["parameters"], reclaim_policy=sc["reclaimPolicy"],
            volume_binding_mode=sc["volumeBindingMode"], allow_volume_expansion=sc["allowVolumeExpansion"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(after)))
        self.register_outputs({"storageClass": MODEL_CACHE_STORAGE_CLASS})
