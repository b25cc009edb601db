"""Pod templates as admission sees them: every workload's templates at their largest replica count, and
what LimitRange defaults and Istio's sidecar injection (at the pinned istiod chart) add to a pod."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from policies import kube
from policies.preflight.resources import Res, chart_of, get_path, parse_quantity

__all__ = [
    "ISTIO_PROXY_DEFAULT_RESOURCES",
    "ISTIO_CHART",
    "ISTIO_INJECTION_LABEL",
    "ISTIO_INJECT_POD_LABEL",
    "ISTIO_RESOURCE_ANNOTATIONS",
    "ISTIO_UID",
    "Mesh",
    "mesh_of",
    "sidecar_injected",
    "PodTemplate",
    "pod_templates",
    "namespace_limit_ranges",
    "EffectivePod",
    "effective_pod",
]


# istio-discovery chart values.yaml: global.proxy.resources (requests 100m / 128Mi, limits 2000m / 1024Mi);
# the injection template gives the istio-validation/istio-init container the same "resources" template.
ISTIO_PROXY_DEFAULT_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "2000m", "memory": "1024Mi"}}

ISTIO_CHART = "istiod"

ISTIO_INJECTION_LABEL = "istio-injection"

ISTIO_INJECT_POD_LABEL = "sidecar.istio.io/inject"

# Pod annotations that override the proxy's resources (injection template, "resources" define).
ISTIO_RESOURCE_ANNOTATIONS = {("requests", "cpu"): "sidecar.istio.io/proxyCPU",
                              ("requests", "memory"): "sidecar.istio.io/proxyMemory",
                              ("limits", "cpu"): "sidecar.istio.io/proxyCPULimit",
                              ("limits", "memory"): "sidecar.istio.io/proxyMemoryLimit"}

ISTIO_UID = 1337


@dataclass(frozen=True)
class Mesh:
    """Sidecar injection as the stack's istiod release configures it (None: no istiod in the stack)."""

    cni: bool  # pilot.cni.enabled: istio-validation instead of the NET_ADMIN/NET_RAW istio-init
    proxy_resources: Mapping[str, Mapping[str, str]]
    release: str  # the istiod release, for messages

    def containers(self, pod_meta: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The init container and the istio-proxy container the injector adds (the template's securityContext
        and resources; no seccompProfile unless global.proxy.seccompProfile, so the pod's applies)."""
        annotations = pod_meta.get("annotations") or {}
        resources: dict[str, dict[str, str]] = {k: dict(v) for k, v in self.proxy_resources.items()}
        if any(a in annotations for a in ISTIO_RESOURCE_ANNOTATIONS.values()):
            resources = {}
            for (part, res), ann in ISTIO_RESOURCE_ANNOTATIONS.items():
                if ann in annotations:
                    resources.setdefault(part, {})[res] = str(annotations[ann])
        proxy_sc = {"allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
                    "runAsGroup": ISTIO_UID, "runAsNonRoot": True, "runAsUser": ISTIO_UID,
                    "capabilities": {"drop": ["ALL"]}}
        if self.cni:
            init = {"name": "istio-validation", "resources": resources, "securityContext": dict(proxy_sc)}
        else:
            init = {"name": "istio-init", "resources": resources, "securityContext": {
                "allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": False,
                "runAsGroup": 0, "runAsNonRoot": False, "runAsUser": 0,
                "capabilities": {"add": ["NET_ADMIN", "NET_RAW"], "drop": ["ALL"]}}}
        return [init, {"name": "istio-proxy", "resources": resources, "securityContext": proxy_sc}]


def mesh_of(resources: Sequence[Res]) -> Mesh | None:
    for r in resources:
        if r.type == kube.HELM_RELEASE and chart_of(r) == ISTIO_CHART:
            values = r.props.get("values") or {}
            return Mesh(cni=get_path(values, "pilot", "cni", "enabled", default=False) is True,
                        proxy_resources=(get_path(values, "global", "proxy", "resources")
                                         or ISTIO_PROXY_DEFAULT_RESOURCES),
                        release=r.label)
    return None


def sidecar_injected(ns_labels: Mapping[str, Any], pod_meta: Mapping[str, Any]) -> bool:
    """istiod's default webhooks: namespace label istio-injection=enabled (unless the pod opts out), or the pod
    label sidecar.istio.io/inject=true in a namespace without istio-injection."""
    pod = str((pod_meta.get("labels") or {}).get(ISTIO_INJECT_POD_LABEL, "")).lower()
    ns = ns_labels.get(ISTIO_INJECTION_LABEL)
    if ns == "enabled":
        return pod != "false"
    return ns is None and pod == "true"


@dataclass(frozen=True)
class PodTemplate:
    """One pod template of a workload, with how many pods of it may exist at once."""

    res: Res
    where: str  # e.g. spec.template, or spec.leaderWorkerTemplate.workerTemplate
    meta: Mapping[str, Any]
    spec: Mapping[str, Any]
    pods: int  # at the largest replica count (HPA / KEDA max) times pods per replica
    replicas_source: str

    @property
    def namespace(self) -> str:
        return self.res.namespace

    @property
    def label(self) -> str:
        return f"{self.res.label} ({self.where})" if self.where != "spec.template" else self.res.label


def _max_replicas(resources: Sequence[Res], r: Res) -> tuple[int, str]:
    """The largest replica count: spec.replicas (default 1), or an HPA's maxReplicas / a KEDA ScaledObject's
    maxReplicaCount (KEDA's default 100) that targets the workload."""
    best, source = int(get_path(r.props, "spec", "replicas", default=1) or 1), "spec.replicas"
    for s in resources:
        ns = s.namespace
        if ns != r.namespace:
            continue
        if s.kind == "HorizontalPodAutoscaler":
            ref, value, what = (get_path(s.props, "spec", "scaleTargetRef") or {},
                                get_path(s.props, "spec", "maxReplicas"), "HPA maxReplicas")
        elif s.kind == "ScaledObject" and s.group == "keda.sh":
            ref, what = get_path(s.props, "spec", "scaleTargetRef") or {}, "ScaledObject maxReplicaCount"
            value = get_path(s.props, "spec", "maxReplicaCount", default=100)
        else:
            continue
        if ref.get("name") == r.name and ref.get("kind", "Deployment") == r.kind and value is not None:
            if int(value) >= best:
                best, source = int(value), f"{what} {s.label}"
    return best, source


def pod_templates(resources: Sequence[Res]) -> list[PodTemplate]:
    """Every pod template of Deployments, StatefulSets, Jobs, DaemonSets and LeaderWorkerSets (leader and
    workers: a group of `size` pods, one leader). DaemonSets count one pod (per node)."""
    out = []
    for r in resources:
        kind = r.kind
        if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
            n, src = _max_replicas(resources, r)
            tpl = get_path(r.props, "spec", "template") or {}
            out.append(PodTemplate(r, "spec.template", tpl.get("metadata") or {}, tpl.get("spec") or {}, n, src))
        elif kind == "Job":
            tpl = get_path(r.props, "spec", "template") or {}
            n = int(get_path(r.props, "spec", "parallelism", default=1) or 1)
            out.append(PodTemplate(r, "spec.template", tpl.get("metadata") or {}, tpl.get("spec") or {}, n,
                                   "spec.parallelism"))
        elif kind == "DaemonSet":
            tpl = get_path(r.props, "spec", "template") or {}
            out.append(PodTemplate(r, "spec.template", tpl.get("metadata") or {}, tpl.get("spec") or {}, 1,
                                   "one per node"))
        elif kind == "LeaderWorkerSet" and r.group == "leaderworkerset.x-k8s.io":
            n, src = _max_replicas(resources, r)
            lwt = get_path(r.props, "spec", "leaderWorkerTemplate") or {}
            size = int(lwt.get("size") or 1)
            worker = lwt.get("workerTemplate") or {}
            leader = lwt.get("leaderTemplate") or worker
            base = "spec.leaderWorkerTemplate"
            out.append(PodTemplate(r, f"{base}.leaderTemplate", leader.get("metadata") or {}, leader.get("spec") or {},
                                   n, src))
            if size > 1:
                out.append(PodTemplate(r, f"{base}.workerTemplate", worker.get("metadata") or {},
                                       worker.get("spec") or {}, n * (size - 1), f"{src} x (size {size} - 1)"))
    return out


def namespace_limit_ranges(resources: Sequence[Res], namespace: str) -> list[Mapping[str, Any]]:
    return [item for r in resources if r.kind == "LimitRange" and r.namespace == namespace
            for item in get_path(r.props, "spec", "limits", default=()) or () if isinstance(item, Mapping)]


def _with_defaults(container: Mapping[str, Any], limits: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """A container's requests and limits after LimitRanger: `default` fills absent limits, `defaultRequest`
    (itself defaulting to `default`) absent requests; a request left unset takes the limit (API defaulting)."""
    res = container.get("resources") or {}
    req = {k: str(v) for k, v in (res.get("requests") or {}).items()}
    lim = {k: str(v) for k, v in (res.get("limits") or {}).items()}
    for item in limits:
        if item.get("type") != "Container":
            continue
        for k, v in (item.get("default") or {}).items():
            lim.setdefault(k, str(v))
        for k, v in (item.get("defaultRequest") or item.get("default") or {}).items():
            if k not in req and (k in lim or k in (item.get("defaultRequest") or {})):
                req[k] = str(v)
    for k, v in lim.items():
        req.setdefault(k, v)
    return {"requests": req, "limits": lim}


@dataclass(frozen=True)
class EffectivePod:
    requests: dict[str, Fraction]
    limits: dict[str, Fraction]
    containers: list[tuple[str, dict[str, dict[str, str]]]]  # name, resources (after defaults)
    sidecar: bool


def effective_pod(t: PodTemplate, *, ns_labels: Mapping[str, Any], limit_ranges: Sequence[Mapping[str, Any]],
                  mesh: Mesh | None) -> EffectivePod:
    """What admission sees of one pod: app containers with LimitRange defaults, plus the injected sidecar
    (no defaults: the webhook runs after LimitRanger); pod usage = max(sum of containers, largest init)."""
    app = [(str(c.get("name")), _with_defaults(c, limit_ranges)) for c in t.spec.get("containers") or ()]
    init = [(str(c.get("name")), _with_defaults(c, limit_ranges)) for c in t.spec.get("initContainers") or ()]
    sidecar = mesh is not None and sidecar_injected(ns_labels, t.meta)
    if sidecar and mesh is not None:
        init_c, proxy = mesh.containers(t.meta)
        init.append((init_c["name"], {k: dict(v) for k, v in init_c["resources"].items()}))
        app.append((proxy["name"], {k: dict(v) for k, v in proxy["resources"].items()}))
    totals: dict[str, dict[str, Fraction]] = {"requests": {}, "limits": {}}
    for part in ("requests", "limits"):
        for _, res in app:
            for k, v in res.get(part, {}).items():
                totals[part][k] = totals[part].get(k, Fraction(0)) + parse_quantity(v)
        for _, res in init:
            for k, v in res.get(part, {}).items():
                totals[part][k] = max(totals[part].get(k, Fraction(0)), parse_quantity(v))
    return EffectivePod(totals["requests"], totals["limits"], app + init, sidecar)
