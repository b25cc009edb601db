"""Storage: the StorageClasses every claim the kit (or a chart it installs) creates names explicitly.

EKS clusters created at 1.30 or later have no default StorageClass (EKS user guide, "Storage classes"),
so a claim without a class stays Pending and the Helm release that made it times out. On AWS the kit
creates two encrypted gp3 classes for the EBS CSI driver, ordered after the EBS CSI add-on: `aifactory-gp3` at gp3's
baseline (3,000 IOPS, 125 MiB/s, which EC2 gives a volume of any size), the cluster default, named by the backends'
claims (Prometheus, Alertmanager, Loki, Jaeger) and any small claim; and `aifactory-gp3-fast` at gp3's maximum
throughput for model caches, which fits only claims of FAST_MIN_GIB and more (components/volumes.py: EC2 refuses
4,000 IOPS on a 1 GiB volume, so Alertmanager's 1 GiB claim on it would stay Pending). `cache_storage_class_name`
picks the fast class only for a claim it fits. On an existing cluster the class is the stack's `target.storageClass`
(required: the kit cannot know which classes exist there, nor whether one is the default).

Model caches: on types with NVMe instance store (p4d/p5/p5en/p6) the cache is shared by the node's pods of a
model, one download per node: nodeadm RAID0s the drives at /mnt/k8s-disks/0 (LocalStorageOptions.MountPath
default "/mnt/k8s-disks/"), a small DaemonSet in the kit's system namespace creates one directory per model there,
owned by the model pods' UID, and each model gets a platform-owned hostPath PersistentVolume pre-bound (claimRef)
to its own claim in its tenant's namespace. Tenant pods stay Pod Security `restricted` (they mount a claim, not a
host path; only the kit creates PersistentVolumes), every node has its own copy under the same path, and the
weights survive pod restarts on that node. Hugging Face downloads take per-file locks in the shared HF_HOME
(huggingface_hub file_download: `.locks`), so a second pod on the node waits for the first pod's files instead
of fetching them again. The pair's names carry the size (a static claim cannot be resized), so a new `cacheGiB`
rolls the pods onto a new pair. A claim deleted by hand leaves its volume Released (Retain keeps the claim's old
uid in claimRef) and a recreated claim would stay Pending: delete the volume too, then `pulumi up --refresh`
recreates both. Elsewhere each model pod gets its own cache volume (a generic
ephemeral volume, ReadWriteOnce): EKS clusters the kit creates run only the EBS CSI driver, which has no
ReadWriteMany. Volumes bind when their pod is scheduled (WaitForFirstConsumer), so each lands in its
pod's zone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import coldstart, naming, security
from components.volumes import gp3_min_size_gib

__all__ = [
    "NODE_CACHE_ROOT",
    "node_cache_path",
    "node_cache_claim_name",
    "node_cache_objects",
    "cache_prep_daemonset",
    "MODEL_CACHE_STORAGE_CLASS",
    "FAST_STORAGE_CLASS",
    "FAST_MIN_GIB",
    "EBS_CSI_PROVISIONER",
    "DEFAULT_CLASS_ANNOTATION",
    "cache_storage_class_name",
    "storage_class",
    "storage_classes",
    "ModelCacheStorage",
]

MODEL_CACHE_STORAGE_CLASS = "aifactory-gp3"  # the general class (the name the backends' claims have always named)
FAST_STORAGE_CLASS = "aifactory-gp3-fast"
EBS_CSI_PROVISIONER = "ebs.csi.aws.com"
# aws-ebs-csi-driver docs/parameters.md: `type`, `encrypted` (the account's default EBS key, aws/ebs), `iops`,
# `throughput` (MiB/s, gp3 only). The general class provisions nothing beyond gp3's baseline, so it fits any size.
EBS_PARAMETERS = {"type": "gp3", "encrypted": "true"}
# gp3 at its maximum throughput instead of the 125 MiB/s baseline, with the IOPS that throughput needs
# (0.25 MiB/s per IOPS): a 140 GB model reads in ~2.2 minutes instead of ~18 (coldstart.py).
FAST_EBS_PARAMETERS = {**EBS_PARAMETERS, "iops": str(coldstart.DEFAULT_GP3_IOPS),
                       "throughput": str(coldstart.DEFAULT_GP3_THROUGHPUT_MIBPS)}
FAST_MIN_GIB = gp3_min_size_gib(FAST_EBS_PARAMETERS)  # 8 GiB: 4,000 IOPS at 500 per GiB
# The annotation that makes a class the default for claims that name none (Kubernetes docs, "Change the
# default StorageClass"; DefaultStorageClass admission plugin).
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


NODE_CACHE_ROOT = "/mnt/k8s-disks/0/aifactory-models"  # on nodeadm's RAID0 array (its default mount path)
CACHE_PREP_NAME = "aifactory-model-cache-prep"
CACHE_PREP_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.27.50"  # Amazon Linux: sh, mkdir, chown, sleep


def node_cache_path(namespace: str, model: str) -> str:
    """The model's directory on every node of its pool (tenant namespace / model: never shared across models)."""
    return f"{NODE_CACHE_ROOT}/{namespace}/{model}"


def node_cache_claim_name(model: str, size_gib: int) -> str:
    """The claim's name carries its size: a bound claim of a static volume cannot be resized (the API server
    allows resizing only dynamically provisioned claims of a class with allowVolumeExpansion), so a new
    `cacheGiB` is a new claim and volume, swapped in by the pods' rollout; the weights stay on the node."""
    return f"{model}-node-cache-{size_gib}gi"


def _pv_name(namespace: str, model: str, size_gib: int) -> str:
    return f"aifactory-cache-{namespace}-{model}-{size_gib}gi"


def node_cache_objects(*, namespace: str, model: str, size_gib: int, labels: dict[str, str]
                       ) -> list[dict[str, Any]]:
    """The PersistentVolume (cluster-scoped, pre-bound to the model's claim) and the claim the model's pods mount.

    hostPath type Directory: a pod cannot start on a node before the prep DaemonSet made the directory (the
    kubelet retries the mount), so the cache is never root-owned. ReadWriteOnce: hostPath volumes are not
    attachable, so pods on several nodes each mount their own node's directory."""
    pv = _pv_name(namespace, model, size_gib)
    claim = node_cache_claim_name(model, size_gib)
    size = {"storage": f"{size_gib}Gi"}
    return [
        {"apiVersion": "v1", "kind": "PersistentVolume",
         "metadata": {"name": pv, "labels": {**labels, **naming.MANAGED_BY}},
         "spec": {"capacity": size, "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
                  "storageClassName": "", "volumeMode": "Filesystem",
                  "hostPath": {"path": node_cache_path(namespace, model), "type": "Directory"},
                  "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace,
                               "name": claim}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": claim, "namespace": namespace, "labels": labels},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv,
                  "resources": {"requests": size}}},
    ]


def cache_prep_daemonset(*, paths: list[str], uid: int, pool_names: list[str], pool_label: str,
                         tolerations: list[dict[str, str]], namespace: str) -> dict[str, Any]:
    """Creates every model's cache directory on the NVMe pools' nodes, owned by the model pods' UID, then idles.

    Root in its own container with only CAP_CHOWN (the system namespace is `privileged`); it mounts the cache
    root only. A new model's directory appears when the DaemonSet's pods restart with the new list (rollout).
    Without CAP_FOWNER only a file's owner may chmod it (chmod(2)): each directory is given back to root, set to
    0750, then handed to the pods' UID, so the same script also runs again on a restart."""
    script = "set -eu\n" + "".join(
        f"mkdir -p {p} && chown 0:0 {p} && chmod 0750 {p} && chown {uid}:{uid} {p}\n"
        for p in sorted(paths)) + "exec sleep infinity\n"
    sc = security.container_security_context(add_capabilities=("CHOWN",))
    sc["runAsNonRoot"] = False
    sc["runAsUser"] = 0
    labels = {"app.kubernetes.io/name": CACHE_PREP_NAME, **naming.MANAGED_BY}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": CACHE_PREP_NAME, "namespace": namespace, "labels": labels},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": CACHE_PREP_NAME}},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "automountServiceAccountToken": False,
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": [{"matchExpressions": [
                                 {"key": pool_label, "operator": "In", "values": sorted(pool_names)}]}]}}},
                         "tolerations": tolerations,
                         "containers": [{"name": "prep", "image": CACHE_PREP_IMAGE,
                                         "command": ["/bin/sh", "-c", script],
                                         "resources": security.resources("10m", "16Mi", cpu_limit="100m",
                                                                         memory_limit="64Mi"),
                                         "securityContext": sc,
                                         "volumeMounts": [{"name": "cache-root", "mountPath": NODE_CACHE_ROOT}]}],
                         "volumes": [{"name": "cache-root",
                                      "hostPath": {"path": NODE_CACHE_ROOT, "type": "DirectoryOrCreate"}}],
                     }}}}


class StorageTargetView(Protocol):
    @property
    def storage_class(self) -> str | None: ...  # the class an existing cluster's claims name


class StorageView(Protocol):
    """What the cache's StorageClass depends on: the kit's PlatformConfig or a component's spec."""

    @property
    def is_aws(self) -> bool: ...

    @property
    def target(self) -> StorageTargetView: ...


def cache_storage_class_name(cfg: StorageView, *, size_gib: int | None = None) -> str:
    """The StorageClass a claim of the stack names: on AWS the fast gp3 class for a claim of `size_gib` it fits
    (FAST_MIN_GIB and more: model caches), else the general one; `target.storageClass` on an existing cluster."""
    if cfg.is_aws:
        return FAST_STORAGE_CLASS if size_gib is not None and size_gib >= FAST_MIN_GIB else MODEL_CACHE_STORAGE_CLASS
    assert cfg.target.storage_class is not None  # parse() requires it for provider existing
    return cfg.target.storage_class


def storage_class(*, fast: bool = False) -> dict[str, Any]:
    """A gp3 StorageClass (cluster-scoped; the general one is the cluster default); expandable, deleted with its
    claim."""
    annotations = {} if fast else {"annotations": {DEFAULT_CLASS_ANNOTATION: "true"}}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": FAST_STORAGE_CLASS if fast else MODEL_CACHE_STORAGE_CLASS,
                         "labels": dict(naming.MANAGED_BY), **annotations},
            "provisioner": EBS_CSI_PROVISIONER,
            "parameters": dict(FAST_EBS_PARAMETERS if fast else EBS_PARAMETERS),
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": True}


def storage_classes() -> list[dict[str, Any]]:
    """The general class, then the fast one."""
    return [storage_class(), storage_class(fast=True)]


class ModelCacheStorage(pulumi.ComponentResource):
    """The gp3 StorageClasses of AWS stacks, after the add-ons that provision them (`after`: the EBS CSI add-on).

    `storage_class` is the general class (its Pulumi name unchanged); `fast_storage_class` the model caches'. The
    general class's parameters changed (no provisioned IOPS): Kubernetes refuses a change of a class's parameters, so
    Pulumi replaces it (same name: delete, then create); claims bound before keep their volumes."""

    storage_class: k8s.storage.v1.StorageClass
    fast_storage_class: k8s.storage.v1.StorageClass

    def __init__(self, name: str, *, after: Sequence[pulumi.Resource] = (),
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:ModelCacheStorage", name, None, opts)
        made = [k8s.storage.v1.StorageClass(
            f"{name}-storageclass{suffix}", metadata=sc["metadata"], provisioner=sc["provisioner"],
            parameters=sc["parameters"], reclaim_policy=sc["reclaimPolicy"],
            volume_binding_mode=sc["volumeBindingMode"], allow_volume_expansion=sc["allowVolumeExpansion"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(after)))
            for suffix, sc in zip(("", "-fast"), storage_classes(), strict=True)]
        self.storage_class, self.fast_storage_class = made
        self.register_outputs({"storageClass": MODEL_CACHE_STORAGE_CLASS, "fastStorageClass": FAST_STORAGE_CLASS})
