"""Rule schedulable: every pod template fits some node pool (allocatable after the EKS AMI's system
reserve, taints, labels and affinity)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from components import catalog
from policies import kube
from policies.preflight.pods import effective_pod, mesh_of, namespace_limit_ranges, pod_templates
from policies.preflight.resources import (
    GPU,
    MIG_PREFIX,
    NODE_GROUP,
    Finding,
    Res,
    get_path,
    namespace_labels,
    show_quantity,
)

__all__ = [
    "EKS_TAINT_EFFECTS",
    "RESERVE_EVICTION_MIB",
    "MIG_CONFIG_LABEL",
    "EFA",
    "Pool",
    "system_reserve",
    "allocatable",
    "node_group_pools",
    "schedule_findings",
]


# EKS managed node group taint effects as the EKS API spells them.
EKS_TAINT_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}

# System reserve subtracted from a node's capacity (the EKS AMI's kubelet settings, awslabs/amazon-eks-ami
# bootstrap.sh: kube-reserved CPU 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% above;
# memory `get_memory_mebibytes_to_reserve` = 11Mi x max pods + 255Mi; eviction-hard memory.available 100Mi).
# Max pods is approximated as 110 (< 30 vCPUs) or 250 (the AMI reads its ENI table); applied to on-prem servers
# as well (an approximation there). DaemonSet pods' requests are not subtracted.
RESERVE_EVICTION_MIB = 100

MIG_CONFIG_LABEL = "nvidia.com/mig.config"

EFA = "vpc.amazonaws.com/efa"


@dataclass(frozen=True)
class Pool:
    """A node pool as the scheduler sees its nodes: labels, taints and allocatable resources."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect)
    allocatable: Mapping[str, Fraction] = field(default_factory=dict)
    instance_type: str = ""


def system_reserve(vcpus: int) -> tuple[Fraction, Fraction, int]:
    """(CPU cores, memory bytes, max pods) the kubelet keeps for the system on a node (see the constants)."""
    cpu, left = Fraction(0), vcpus
    for share, cores in ((Fraction(6, 100), 1), (Fraction(1, 100), 1), (Fraction(5, 1000), 2)):
        cpu += share * min(cores, max(0, left))
        left -= cores
    cpu += Fraction(25, 10000) * max(0, left)
    max_pods = 110 if vcpus < 30 else 250
    return cpu, Fraction((255 + 11 * max_pods + RESERVE_EVICTION_MIB) * 2**20), max_pods


def allocatable(instance_type: str, *, mig: str | None = None) -> dict[str, Fraction]:
    """Allocatable of one node of a catalog type: capacity minus the system reserve; GPUs, or MIG slices of
    the layout when one is applied (mixed strategy: a MIG GPU is advertised as slices, not nvidia.com/gpu)."""
    t = catalog.get(instance_type)
    cpu, memory, max_pods = system_reserve(t.vcpus)
    out = {"cpu": t.vcpus - cpu, "memory": t.memory_gib * 2**30 - memory, "pods": Fraction(max_pods)}
    if t.gpu_count:
        layout = mig.removeprefix("all-") if mig and mig.startswith("all-") else None
        if layout and re.match(r"^\d+g\.\d+gb$", layout):
            per_gpu = catalog.mig_devices_per_gpu(f"all-{layout}", t.gpu) if t.gpu is not None else None
            out[f"{MIG_PREFIX}{layout}"] = Fraction(t.gpu_count * (per_gpu or 0))
        elif mig is None:
            out[GPU] = Fraction(t.gpu_count)
    if t.efa_devices:
        out[EFA] = Fraction(t.efa_devices)
    return out


def node_group_pools(resources: Sequence[Res]) -> list[Pool]:
    """Pools of an EKS stack: its managed node groups (labels, taints, instance type from the state)."""
    out = []
    for r in resources:
        if r.type != NODE_GROUP:
            continue
        labels = {str(k): str(v) for k, v in (r.props.get("labels") or {}).items()}
        taints = tuple((str(t.get("key")), str(t.get("value") or ""), EKS_TAINT_EFFECTS.get(str(t.get("effect")),
                                                                                              str(t.get("effect"))))
                       for t in r.props.get("taints") or () if isinstance(t, Mapping))
        types = [t for t in r.props.get("instanceTypes") or () if t in catalog.CATALOG]
        alloc = allocatable(types[0], mig=labels.get(MIG_CONFIG_LABEL)) if types else {}
        out.append(Pool(r.urn_name, labels, taints, alloc, types[0] if types else ""))
    return out


def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: tuple[str, str, str]) -> bool:
    key, value, effect = taint
    for t in tolerations:
        if t.get("effect") not in (None, "", effect):
            continue
        op = t.get("operator", "Equal")
        if op == "Exists" and t.get("key") in (None, "", key):
            return True
        if op == "Equal" and t.get("key") == key and str(t.get("value") or "") == value:
            return True
    return False


def _label_problems(spec: Mapping[str, Any], pool: Pool) -> list[str]:
    out = []
    selector = spec.get("nodeSelector") or {}
    wrong = {k: v for k, v in selector.items() if pool.labels.get(k) != str(v)}
    if wrong:
        out.append(f"nodeSelector {wrong} does not match its labels")
    terms = get_path(spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                 "nodeSelectorTerms", default=()) or ()
    if terms and not any(all(kube.expression_matches(e, pool.labels) for e in (t.get("matchExpressions") or ()))
                         for t in terms if isinstance(t, Mapping)):
        out.append("no required node affinity term matches its labels")
    return out


def _fit_problems(spec: Mapping[str, Any], pool: Pool, requests: Mapping[str, Fraction]) -> list[str]:
    out = []
    untolerated = [f"{k}={v}:{e}" if v else f"{k}:{e}" for k, v, e in pool.taints
                   if e in ("NoSchedule", "NoExecute") and not _tolerates(spec.get("tolerations") or (), (k, v, e))]
    if untolerated:
        out.append(f"taints {', '.join(untolerated)} are not tolerated")
    if pool.allocatable:
        for res, need in sorted(requests.items()):
            # what a node's catalog entry tells: CPU, memory, GPUs, MIG slices, EFA devices (not hugepages, RDMA)
            if need <= 0 or not (res in ("cpu", "memory", GPU, EFA) or res.startswith(MIG_PREFIX)):
                continue
            have = pool.allocatable.get(res, Fraction(0))
            if need > have:
                out.append(f"requests {res} {show_quantity(res, need)} > allocatable {show_quantity(res, have)}"
                           f"{' (' + pool.instance_type + ')' if pool.instance_type else ''}")
    return out


def schedule_findings(resources: Sequence[Res], pools: Sequence[Pool]) -> list[Finding]:
    """Pods and DaemonSets that no pool can run: taints without tolerations, selectors or required affinity
    matching no pool's labels, requests above a node's allocatable (system reserve subtracted)."""
    if not pools:
        return []
    mesh = mesh_of(resources)
    namespaces = namespace_labels(resources)
    out = []
    for t in pod_templates(resources):
        pod = effective_pod(t, ns_labels=namespaces.get(t.namespace, {}),
                            limit_ranges=namespace_limit_ranges(resources, t.namespace), mesh=mesh)
        selected = [p for p in pools if not _label_problems(t.spec, p)]
        if not selected:
            why = "; ".join(f"{p.name}: {', '.join(_label_problems(t.spec, p))}" for p in sorted(pools, key=_name))
        else:
            fits = {p.name: _fit_problems(t.spec, p, pod.requests) for p in selected}
            if not all(fits.values()):
                continue
            why = "; ".join(f"{name}: {', '.join(ps)}" for name, ps in sorted(fits.items()))
        what = "the DaemonSet runs no pod" if t.res.kind == "DaemonSet" else "its pods stay Pending"
        out.append(Finding("schedulable", t.label, f"no node pool can run it, {what} ({why})",
                           "Select a pool by its labels, tolerate that pool's taints and keep requests within "
                           "one node's allocatable.", t.res.urn))
    return out


def _name(pool: Pool) -> str:
    return pool.name
