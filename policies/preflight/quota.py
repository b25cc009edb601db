"""Rule quota-admission: every pod template fits its namespace's ResourceQuota and LimitRange at its
largest replica count and during a rolling update, injected sidecars included (kubernetes.io/docs/concepts/
policy/resource-quotas and /limit-range)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from policies.preflight.pods import (
    EffectivePod,
    PodTemplate,
    effective_pod,
    mesh_of,
    namespace_limit_ranges,
    pod_templates,
)
from policies.preflight.resources import (
    CORE,
    GPU,
    MIG_PREFIX,
    Finding,
    Res,
    get_path,
    namespace_labels,
    parse_quantity,
    show_quantity,
)

__all__ = [
    "COMPUTE",
    "quota_findings",
    "rollout_surge",
]


COMPUTE = ("cpu", "memory", "ephemeral-storage")


def _tracked(key: str) -> tuple[str, str] | None:
    """(requests|limits, resource) a quota key counts; None for object counts."""
    if key in COMPUTE:
        return "requests", key
    part, _, res = key.partition(".")
    if part in ("requests", "limits") and res:
        return part, res
    return None


def _limit_range_problems(pod: EffectivePod, limits: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for item in limits:
        kind = str(item.get("type"))
        targets = pod.containers if kind == "Container" else \
            [("pod", {"requests": {k: str(v) for k, v in pod.requests.items()},
                      "limits": {k: str(v) for k, v in pod.limits.items()}})] if kind == "Pod" else []
        for name, res in targets:
            for k, v in (item.get("max") or {}).items():
                have = res.get("limits", {}).get(k)
                if have is None or parse_quantity(have) > parse_quantity(v):
                    out.append(f"{kind.lower()} {name!r}: limit {k} {have or 'unset'} exceeds the LimitRange max {v}")
            for k, v in (item.get("min") or {}).items():
                have = res.get("requests", {}).get(k)
                if have is None or parse_quantity(have) < parse_quantity(v):
                    out.append(f"{kind.lower()} {name!r}: request {k} {have or 'unset'} is below the LimitRange "
                               f"min {v}")
    return out


def quota_findings(resources: Sequence[Res]) -> list[Finding]:
    """ResourceQuota and LimitRange admission of every pod template, at its largest replica count."""
    mesh = mesh_of(resources)
    namespaces = namespace_labels(resources)
    quotas: dict[str, list[Res]] = {}
    for r in resources:
        if r.kind == "ResourceQuota" and r.group in CORE:
            quotas.setdefault(r.namespace, []).append(r)
    out: list[Finding] = []
    totals: dict[str, dict[str, tuple[Fraction, list[str]]]] = {}
    surges: list[tuple[PodTemplate, Res, int, dict[str, Fraction]]] = []  # (template, quota, surge pods, per pod)
    for t in pod_templates(resources):
        limits = namespace_limit_ranges(resources, t.namespace)
        pod = effective_pod(t, ns_labels=namespaces.get(t.namespace, {}), limit_ranges=limits, mesh=mesh)
        with_sidecar = " (istio-proxy sidecar included)" if pod.sidecar else ""
        for problem in _limit_range_problems(pod, limits):
            out.append(Finding("quota-admission", t.label, f"LimitRanger rejects every pod: {problem}",
                               "Keep container requests and limits within the namespace's LimitRange.", t.res.urn))
        for q in quotas.get(t.namespace, ()):
            hard = get_path(q.props, "spec", "hard") or {}
            unspecified, over = [], []
            per_pod: dict[str, Fraction] = {}
            for key, value in sorted(hard.items()):
                tracked = _tracked(key)
                if tracked is None:
                    continue
                part, res = tracked
                missing = [n for n, c in pod.containers if res not in c.get(part, {})] if res in COMPUTE else []
                need = (pod.requests if part == "requests" else pod.limits).get(res, Fraction(0))
                if missing:
                    unspecified.append(f"{key} ({', '.join(missing)})")
                elif need > parse_quantity(value):
                    over.append(f"{key} {show_quantity(res, need)} > {value}")
                elif need:
                    acc = totals.setdefault(q.urn, {})
                    prev, who = acc.get(key, (Fraction(0), []))
                    acc[key] = (prev + need * t.pods, [*who, f"{t.label} {t.pods} x {show_quantity(res, need)}"])
                    per_pod[key] = need
            if (surge := rollout_surge(t)) and per_pod:
                surges.append((t, q, surge, dict(per_pod)))
            if unspecified:
                out.append(Finding(
                    "quota-admission", t.label,
                    f"{q.label} rejects every pod ('must specify'): containers set no {'; '.join(unspecified)}",
                    "Set requests and limits on every container, or give the namespace a LimitRange default.",
                    t.res.urn))
            if over:
                out.append(Finding(
                    "quota-admission", t.label,
                    f"{q.label} rejects every pod: one pod{with_sidecar} needs more than the whole namespace's "
                    f"quota: {', '.join(over)}",
                    f"Size the quota for {t.pods} such pods ({t.replicas_source}) or make the pod smaller.",
                    t.res.urn))
            out.extend(_unquoted_mig(q, hard, pod, t))
    by_urn = {r.urn: r for r in resources}
    for q_urn, acc in sorted(totals.items()):
        q = by_urn[q_urn]
        hard = get_path(q.props, "spec", "hard") or {}
        exceeded = {key: (total, who) for key, (total, who) in sorted(acc.items())
                    if total > parse_quantity(hard[key])}
        if exceeded:
            contributors = next(iter(exceeded.values()))[1]
            keys = ", ".join(f"{key} {show_quantity(key.partition('.')[2] or key, total)} > {hard[key]}"
                             for key, (total, _) in exceeded.items())
            out.append(Finding(
                "quota-admission", q.label,
                f"at their largest replica counts ({'; '.join(contributors)}) the namespace's pods need {keys}: "
                "pods beyond the quota are rejected and scale-out stops",
                "Raise the quota to what the workloads need at their maximum replicas, or lower those maxima.", q.urn))
    out.extend(_surge_findings(surges, totals))
    return out


def rollout_surge(t: PodTemplate) -> int:
    """Pods a Deployment's rolling update adds above its replica count (at its largest one): maxSurge, an
    integer or a percentage rounded up (apps/v1 RollingUpdateDeployment; default 25%); 0 for Recreate. 0 for every
    other kind: a StatefulSet deletes a pod before creating its successor (apps/v1 StatefulSetUpdateStrategy has no
    surge), and the kit's LeaderWorkerSets set maxSurge 0."""
    if t.res.kind != "Deployment":
        return 0
    strategy = get_path(t.res.props, "spec", "strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0
    value = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * t.pods / 100)
    return int(value)


def _surge_findings(surges: Sequence[tuple[PodTemplate, Res, int, dict[str, Fraction]]],
                    totals: Mapping[str, Mapping[str, tuple[Fraction, list[str]]]]) -> list[Finding]:
    """A rolling update at the largest replica count needs its surge pods on top: a quota sized for the
    maximum refuses them (ResourceQuota admission), and the rollout stalls until its progress deadline."""
    out = []
    for t, q, surge, per_pod in surges:
        hard = get_path(q.props, "spec", "hard") or {}
        short = [f"{key} {show_quantity(key.partition('.')[2] or key, totals[q.urn][key][0] + surge * need)} "
                 f"> {hard[key]}"
                 for key, need in sorted(per_pod.items())
                 if totals[q.urn][key][0] + surge * need > parse_quantity(hard[key])]
        if short:
            out.append(Finding(
                "quota-admission", t.label,
                f"a rolling update at {t.pods} replicas ({t.replicas_source}) adds {surge} surge pod(s) "
                f"(maxSurge), which {q.label} refuses: {', '.join(short)}; the rollout stalls until its "
                "progress deadline",
                "Replace pods before starting new ones (strategy.rollingUpdate maxSurge 0, maxUnavailable 1), or "
                "leave the quota headroom for the surge.", t.res.urn))
    return out


def _unquoted_mig(q: Res, hard: Mapping[str, Any], pod: EffectivePod, t: PodTemplate) -> list[Finding]:
    """A quota that caps whole GPUs but not the MIG slices a pod requests lets those slices through unbounded."""
    if f"requests.{GPU}" not in hard:
        return []
    return [Finding("quota-admission", t.label,
                    f"{q.label} caps requests.{GPU} but not requests.{res}: up to {t.pods} pods x "
                    f"{show_quantity(res, amount)} slice(s) are admitted without any limit",
                    f"Add requests.{res} to the namespace's quota (the tenant's share of slices).", t.res.urn)
            for res, amount in sorted(pod.requests.items())
            if res.startswith(MIG_PREFIX) and f"requests.{res}" not in hard and amount > 0]
