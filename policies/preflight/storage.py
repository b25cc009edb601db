"""Rule storage-class: every claim names a class that exists, or the cluster has a default one (EKS
clusters created at 1.30 or later have none: EKS user guide, "Storage classes")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies import kube
from policies.preflight.pods import pod_templates
from policies.preflight.resources import CORE, Finding, Res, chart_of, get_path

__all__ = [
    "DEFAULT_CLASS_ANNOTATION",
    "EKS_BUILTIN_CLASSES",
    "Claim",
    "claims",
    "storage_findings",
]


DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"

# EKS still creates the gp2 class (in-tree name, served by the EBS CSI migration) but, from 1.30 on, not as
# the default (EKS user guide, "Storage classes").
EKS_BUILTIN_CLASSES = ("gp2",)


@dataclass(frozen=True)
class Claim:
    res: Res
    where: str
    storage_class: str | None  # None: no storageClassName (the cluster's default class)
    size: Any = None  # the requested storage quantity ("1Gi"), where the object or the values say it


def _helm_claims(r: Res) -> list[Claim]:
    """Claims the charts the kit installs create, from the release values and the charts' defaults:
    grafana/loki production/helm/loki/values.yaml (6.x): singleBinary.persistence.enabled true,
    write/backend.persistence.volumeClaimsEnabled true, storageClass null; its minio subchart: persistence
    enabled, storageClass "" (no class); kube-prometheus-stack: storageSpec / alertmanager storage empty by
    default (emptyDir, no claim), grafana.persistence.enabled false; jaeger: a claim only with the bundled
    Cassandra (provisionDataStore.cassandra)."""
    v = r.props.get("values") or {}
    chart = chart_of(r)
    out: list[Claim] = []

    def add(where: str, cls: Any, size: Any = None) -> None:
        out.append(Claim(r, f"values.{where}", str(cls) if cls not in (None, "", "-") else None, size))

    if chart == "loki":
        mode = v.get("deploymentMode", "SimpleScalable")
        if mode == "SingleBinary" and int(get_path(v, "singleBinary", "replicas", default=1) or 0) > 0 \
                and get_path(v, "singleBinary", "persistence", "enabled", default=True):
            add("singleBinary.persistence", get_path(v, "singleBinary", "persistence", "storageClass"),
                get_path(v, "singleBinary", "persistence", "size"))
        if mode != "SingleBinary":
            for target in ("write", "backend"):
                if int(get_path(v, target, "replicas", default=1) or 0) > 0 and \
                        get_path(v, target, "persistence", "volumeClaimsEnabled", default=True):
                    add(f"{target}.persistence", get_path(v, target, "persistence", "storageClass"),
                        get_path(v, target, "persistence", "size"))
        if get_path(v, "minio", "enabled", default=False) and \
                get_path(v, "minio", "persistence", "enabled", default=True):
            add("minio.persistence", get_path(v, "minio", "persistence", "storageClass"),
                get_path(v, "minio", "persistence", "size"))
    elif chart == "kube-prometheus-stack":
        for where, path in (("prometheus.prometheusSpec.storageSpec",
                             ("prometheus", "prometheusSpec", "storageSpec", "volumeClaimTemplate")),
                            ("alertmanager.alertmanagerSpec.storage",
                             ("alertmanager", "alertmanagerSpec", "storage", "volumeClaimTemplate"))):
            tpl = get_path(v, *path)
            if isinstance(tpl, Mapping):
                add(where, get_path(tpl, "spec", "storageClassName"), _requested(tpl.get("spec")))
        if get_path(v, "grafana", "persistence", "enabled", default=False):
            add("grafana.persistence", get_path(v, "grafana", "persistence", "storageClassName"),
                get_path(v, "grafana", "persistence", "size"))
    elif chart == "jaeger" and get_path(v, "provisionDataStore", "cassandra", default=False):
        add("cassandra.persistence", get_path(v, "cassandra", "persistence", "storageClass"),
            get_path(v, "cassandra", "persistence", "size"))
    return out


def _requested(spec: Any) -> Any:
    return get_path(spec, "resources", "requests", "storage") if isinstance(spec, Mapping) else None


def claims(resources: Sequence[Res]) -> list[Claim]:
    """Every PersistentVolumeClaim the stack makes: claims, StatefulSet claim templates, generic ephemeral
    volumes of pod templates, and the claims of the Helm charts above."""
    out: list[Claim] = []
    for r in resources:
        if r.kind == "PersistentVolumeClaim" and r.group in CORE:
            out.append(Claim(r, "spec", get_path(r.props, "spec", "storageClassName"), _requested(r.props.get("spec"))))
        elif r.kind == "StatefulSet":
            for i, tpl in enumerate(get_path(r.props, "spec", "volumeClaimTemplates", default=()) or ()):
                out.append(Claim(r, f"spec.volumeClaimTemplates[{i}]", get_path(tpl, "spec", "storageClassName"),
                                 _requested(tpl.get("spec"))))
        elif r.type == kube.HELM_RELEASE:
            out.extend(_helm_claims(r))
    for t in pod_templates(resources):
        for v in t.spec.get("volumes") or ():
            tpl = get_path(v, "ephemeral", "volumeClaimTemplate")
            if isinstance(tpl, Mapping):
                out.append(Claim(t.res, f"{t.where}.volumes[{v.get('name')}].ephemeral",
                                 get_path(tpl, "spec", "storageClassName"), _requested(tpl.get("spec"))))
    return out


def storage_findings(resources: Sequence[Res], *, eks: bool, configured_class: str | None) -> list[Finding]:
    """Claims whose class does not exist, or that rely on a default class the cluster does not have.

    eks: the cluster is the stack's EKS cluster (created at 1.30+: no default class; gp2 exists).
    configured_class: on an existing cluster, the class the config says exists there (target.storageClass)."""
    classes = {r.name: r for r in resources if r.kind == "StorageClass" and r.group == "storage.k8s.io"}
    default = sorted(n for n, r in classes.items()
                     if str(((r.props.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION))
                     == "true")
    known = set(classes) | (set(EKS_BUILTIN_CLASSES) if eks else set()) | \
        ({configured_class} if configured_class else set())
    # storageClassName "" asks for no class at all: the claim binds only to a PersistentVolume without a class
    # (core/v1 PersistentVolumeClaimSpec.storageClassName; static provisioning), named by its volumeName.
    classless_pvs = {r.name for r in resources if r.kind == "PersistentVolume" and r.group in CORE
                     and not get_path(r.props, "spec", "storageClassName")}
    out = []
    for c in claims(resources):
        if c.storage_class == "":
            volume = get_path(c.res.props, "spec", "volumeName") if c.where == "spec" else None
            if volume not in classless_pvs:
                out.append(Finding("storage-class", c.res.label,
                                   f"{c.where}: storageClassName \"\" binds only to a pre-created PersistentVolume "
                                   "without a class, and the stack creates none for it (volumeName "
                                   f"{volume!r}): the claim stays Pending",
                                   "Create the PersistentVolume (no storageClassName) and name it in the claim's "
                                   "spec.volumeName, or give the claim a class.", c.res.urn))
        elif c.storage_class is None:
            if default or (configured_class and not eks):
                continue
            what = "EKS clusters created at 1.30 or later have no default StorageClass and the stack marks none" \
                if eks else "the config names no storage class of this cluster (target.storageClass)"
            out.append(Finding("storage-class", c.res.label,
                               f"{c.where}: the claim names no storageClassName and relies on a default class; {what}: "
                               "it stays Pending and whatever waits for it times out",
                               "Set the claim's storageClassName to a class the stack creates (or mark one "
                               f"'{DEFAULT_CLASS_ANNOTATION}: \"true\"'); on an existing cluster set "
                               "aifactory:target.storageClass.", c.res.urn))
        elif c.storage_class not in known:
            out.append(Finding("storage-class", c.res.label,
                               f"{c.where}: StorageClass {c.storage_class!r} does not exist in the stack"
                               f"{' or on EKS' if eks else ' or the config'}: the claim stays Pending",
                               f"Create the class, or use one of: {', '.join(sorted(known)) or '(none)'}.", c.res.urn))
    return out
