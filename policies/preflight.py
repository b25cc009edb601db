"""Preflight: what the real API server, controllers and engine would reject, leave Pending or time out on.

Each rule reads a stack export (synth's state.json or `pulumi stack export`) the way the real system
reads the objects, and returns `Finding`s: the resource, what the real system would do, and the fix.
`aifactory preflight` (infra/preflight.py) runs every rule, with the stack config's facts that a state
cannot hold (where the deployer runs, the node pools of an existing cluster, its storage class); the
rules that need nothing beyond the state are also mandatory policies of the pack (POLICIES below), so
`aifactory policy check`, synth's policy report and CrossGuard run the very same functions.

Upstream facts the rules encode (each constant below names its source):
- ResourceQuota and LimitRange admission: kubernetes.io/docs/concepts/policy/resource-quotas and
  /limit-range. LimitRanger defaults containers at its mutating step, before mutating webhooks run
  (the API server's admission order), so containers a webhook injects get no LimitRange defaults; the
  ResourceQuota plugin validates the final pod, injected containers included.
- Pod Security Standards: kubernetes.io/docs/concepts/security/pod-security-standards (baseline and
  restricted controls, `latest`). PodSecurity validates Pods; for workload objects it only warns, and
  the controller's Pods are then rejected, so the rollout never completes.
- Istio sidecar injection at the pinned istiod chart (components/k8s/versions.py ISTIO_VERSION):
  manifests/charts/istio-control/istio-discovery/files/injection-template.yaml and values.yaml.
- pulumi-kubernetes await logic: provider/pkg/await/deployment.go (DefaultDeploymentTimeoutMins = 10),
  statefulset.go (DefaultStatefulSetTimeoutMins = 10); the `pulumi.com/timeoutSeconds` and
  `pulumi.com/skipAwait` annotations; Helm Release `timeout` (default 300 s, as `helm install --timeout`).
- EKS: clusters created at 1.30 or later have no default StorageClass (EKS user guide, "Storage classes");
  a private-only endpoint answers only from inside the VPC (EKS user guide, "Cluster API server endpoint");
  a public endpoint without publicAccessCidrs is open to 0.0.0.0/0 (EKS API VpcConfigRequest).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs, ResourceValidationPolicy, Severity

from components.aws import catalog
from policies import kube
from policies.base import MANDATORY, stack_policy

__all__ = [
    "Res",
    "Finding",
    "Mesh",
    "PodTemplate",
    "Pool",
    "RULES",
    "from_entries",
    "from_policy_resources",
    "parse_quantity",
    "mesh_of",
    "pod_templates",
    "effective_pod",
    "quota_findings",
    "pss_violations",
    "pod_security_findings",
    "claims",
    "storage_findings",
    "crd_order_findings",
    "await_findings",
    "release_order_findings",
    "endpoint_findings",
    "node_group_pools",
    "system_reserve",
    "allocatable",
    "schedule_findings",
    "POLICIES",
    "DEFAULT_DEPLOYMENT_AWAIT_SECONDS",
    "DEFAULT_HELM_TIMEOUT_SECONDS",
    "DEFAULT_IMAGE_PULL_ALLOWANCE_SECONDS",
    "ISTIO_PROXY_DEFAULT_RESOURCES",
]

# --------------------------------------------------------------------------------------------
# upstream facts

# pulumi-kubernetes provider/pkg/await/deployment.go `DefaultDeploymentTimeoutMins = 10` and
# statefulset.go `DefaultStatefulSetTimeoutMins = 10`; overridden by the annotation or customTimeouts.create.
DEFAULT_DEPLOYMENT_AWAIT_SECONDS = 600
TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
SKIP_AWAIT_ANNOTATION = "pulumi.com/skipAwait"
AWAITED_KINDS = ("Deployment", "StatefulSet")
# Helm Release `timeout`: "Time in seconds to wait for any individual kubernetes operation. Defaults to 300".
DEFAULT_HELM_TIMEOUT_SECONDS = 300
# Not an upstream fact: the kit's allowance for pulling a multi-GB serving image onto a fresh node before the
# startup probe starts counting. default: 300 s
DEFAULT_IMAGE_PULL_ALLOWANCE_SECONDS = 300
# Kubernetes probe defaults (core/v1 Probe): periodSeconds 10, failureThreshold 3, initialDelaySeconds 0.
PROBE_DEFAULTS = {"initialDelaySeconds": 0, "periodSeconds": 10, "failureThreshold": 3}

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

PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
PSS_LEVELS = ("privileged", "baseline", "restricted")
# Pod Security Standards, baseline "Capabilities": what may be added; restricted allows NET_BIND_SERVICE only.
BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
# restricted "Volume Types".
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                                "projected", "secret"})
# baseline "Sysctls": the safe set.
SAFE_SYSCTLS = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                          "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                          "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                          "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                          "net.ipv4.tcp_keepalive_probes"})

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
# EKS still creates the gp2 class (in-tree name, served by the EBS CSI migration) but, from 1.30 on, not as
# the default (EKS user guide, "Storage classes").
EKS_BUILTIN_CLASSES = ("gp2",)

# Which Helm chart installs the CRDs of an API group (the charts at components/k8s/versions.py's pins).
CRD_CHARTS: dict[str, str] = {
    "keda.sh": "keda",
    "leaderworkerset.x-k8s.io": "lws",
    "security.istio.io": "base",
    "networking.istio.io": "base",
    "telemetry.istio.io": "base",
    "extensions.istio.io": "base",
    "monitoring.coreos.com": "kube-prometheus-stack",
    "mellanox.com": "network-operator",
    "sriovnetwork.openshift.io": "network-operator",
    "k8s.cni.cncf.io": "network-operator",
    "nvidia.com": "gpu-operator",
}

# API groups whose CRDs an operator applies at run time, from one of its own custom resources: (group, kind)
# of that resource. The network operator's chart ships no nv-ipam CRD; the operator applies it when it reconciles
# a NicClusterPolicy's nvIpam state (network-operator 26.1.1 manifests/state-nv-ipam-cni/005-*.yaml).
RUNTIME_CRD_OWNERS: dict[str, tuple[str, str]] = {"nv-ipam.nvidia.com": ("mellanox.com", "NicClusterPolicy")}
WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"

CORE = ("", "core")  # the core API group: kubernetes:core/v1:<Kind> in Pulumi type tokens
# Charts whose release runs no pods (Istio's base chart: CRDs, a ServiceAccount, webhook configurations), so
# Helm has no pod to wait for.
CHARTS_WITHOUT_PODS = frozenset({"base"})
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
EKS_ADDON = "aws:eks/addon:Addon"
K8S_PROVIDER = "pulumi:providers:kubernetes"
# EKS managed node group taint effects as the EKS API spells them.
EKS_TAINT_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}
# Add-ons that run pods (need nodes) and what needs them: DNS for every pod, the EBS CSI driver for claims.
DNS_ADDON, EBS_ADDON = "coredns", "aws-ebs-csi-driver"

# System reserve subtracted from a node's capacity (the EKS AMI's kubelet settings, awslabs/amazon-eks-ami
# bootstrap.sh: kube-reserved CPU 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% above;
# memory `get_memory_mebibytes_to_reserve` = 11Mi x max pods + 255Mi; eviction-hard memory.available 100Mi).
# Max pods is approximated as 110 (< 30 vCPUs) or 250 (the AMI reads its ENI table); applied to on-prem servers
# as well (an approximation there). DaemonSet pods' requests are not subtracted.
RESERVE_EVICTION_MIB = 100
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
MIG_PREFIX = "nvidia.com/mig-"


# --------------------------------------------------------------------------------------------
# the state, as rules read it


@dataclass(frozen=True)
class Res:
    """One resource of a stack export: inputs as the engine passed them (camelCase)."""

    urn: str
    type: str
    props: Mapping[str, Any]
    parent: str | None = None
    deps: tuple[str, ...] = ()
    custom_timeout_create: float | None = None

    @property
    def kind(self) -> str:
        return kube.kind_of(self.type)[1]

    @property
    def group(self) -> str:
        return kube.kind_of(self.type)[0]

    @property
    def namespace(self) -> str:
        return kube.namespace_of(self.props)

    @property
    def name(self) -> str:
        return kube.name_of(self.props)

    @property
    def label(self) -> str:
        """kind/namespace/name for Kubernetes objects, else the URN's last part."""
        if self.type.startswith("kubernetes:") and self.name:
            ns = (self.props.get("metadata") or {}).get("namespace")
            return f"{self.kind}/{ns}/{self.name}" if ns else f"{self.kind}/{self.name}"
        if self.type == kube.HELM_RELEASE:
            return f"HelmRelease/{self.props.get('namespace') or 'default'}/{self.props.get('name') or self.urn_name}"
        return self.urn_name

    @property
    def urn_name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


def _timeout(entry: Mapping[str, Any]) -> float | None:
    ct = entry.get("customTimeouts") or {}
    value = ct.get("create") if isinstance(ct, Mapping) else None
    return float(value) if isinstance(value, int | float) and value > 0 else None


def from_entries(entries: Iterable[Mapping[str, Any]]) -> list[Res]:
    """Resources of a stack export (`deployment.resources`), the stack itself left out."""
    return [Res(e["urn"], e["type"], e.get("inputs") or e.get("outputs") or {}, e.get("parent"),
                tuple(e.get("dependencies") or ()), _timeout(e))
            for e in entries if e["type"] != "pulumi:pulumi:Stack"]


def from_policy_resources(resources: Sequence[Any]) -> list[Res]:
    """CrossGuard's StackValidationArgs.resources (PolicyResource) as the rules read them."""
    out = []
    for r in resources:
        timeouts = getattr(getattr(r, "opts", None), "custom_timeouts", None)
        create = getattr(timeouts, "create_seconds", 0) or None
        out.append(Res(r.urn, r.resource_type, r.props, r.parent.urn if r.parent is not None else None,
                       tuple(d.urn for d in r.dependencies or ()), float(create) if create else None))
    return out


@dataclass(frozen=True)
class Finding:
    rule: str
    resource: str  # kind/namespace/name for Kubernetes objects, else the resource's name
    message: str  # what the real system would do
    fix: str
    urn: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "resource": self.resource, "urn": self.urn, "message": self.message,
                "fix": self.fix}


# --------------------------------------------------------------------------------------------
# quantities

_SUFFIX: dict[str, int | Fraction] = {
    "": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(e[+-]?[0-9]+)?([a-zA-Z]*)$")


def parse_quantity(value: Any) -> Fraction:
    """A Kubernetes resource quantity ("100m", "819Gi", 8, "1.5") as an exact number of base units."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Fraction(value)
    m = _QUANTITY.match(str(value).strip())
    if not m or m.group(3) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    exponent = int(m.group(2)[1:]) if m.group(2) else 0
    return Fraction(m.group(1)) * Fraction(10) ** exponent * _SUFFIX[m.group(3)]


def _show(resource: str, amount: Fraction) -> str:
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        gib = amount / 2**30
        return f"{float(gib):.4g}Gi" if gib >= 1 else f"{float(amount / 2**20):.4g}Mi"
    if resource == "cpu":
        return f"{float(amount):.4g}"
    return f"{float(amount):g}"


# --------------------------------------------------------------------------------------------
# dependencies: what a resource is created after


def created_after(resources: Sequence[Res]) -> dict[str, frozenset[str]]:
    """URN -> every URN the engine finishes creating before it: recorded dependencies (a dependency on a
    component is recorded as its children) and, transitively, those of its ancestors (children register
    after their parent, whose own dependencies it waited for)."""
    by_urn = {r.urn: r for r in resources}
    memo: dict[str, frozenset[str]] = {}

    def walk(urn: str, seen: frozenset[str]) -> frozenset[str]:
        if urn in memo:
            return memo[urn]
        r = by_urn.get(urn)
        if r is None or urn in seen:
            return frozenset()
        out: set[str] = set()
        seen = seen | {urn}
        for d in r.deps:
            out.add(d)
            out |= walk(d, seen)
        if r.parent:
            out |= walk(r.parent, seen)
        memo[urn] = frozenset(out)
        return memo[urn]

    return {r.urn: walk(r.urn, frozenset()) for r in resources}


# --------------------------------------------------------------------------------------------
# the mesh: what sidecar injection adds to a pod


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


def _get(value: Any, *path: str, default: Any = None) -> Any:
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return default
        value = value[key]
    return value


def _chart(r: Res) -> str:
    """The chart a Helm release installs: its name, or the last part of an oci:// reference."""
    return str(r.props.get("chart") or "").rstrip("/").rsplit("/", 1)[-1]


def mesh_of(resources: Sequence[Res]) -> Mesh | None:
    for r in resources:
        if r.type == kube.HELM_RELEASE and _chart(r) == ISTIO_CHART:
            values = r.props.get("values") or {}
            return Mesh(cni=_get(values, "pilot", "cni", "enabled", default=False) is True,
                        proxy_resources=_get(values, "global", "proxy", "resources") or ISTIO_PROXY_DEFAULT_RESOURCES,
                        release=r.label)
    return None


def _injected(ns_labels: Mapping[str, Any], pod_meta: Mapping[str, Any]) -> bool:
    """istiod's default webhooks: namespace label istio-injection=enabled (unless the pod opts out), or the pod
    label sidecar.istio.io/inject=true in a namespace without istio-injection."""
    pod = str((pod_meta.get("labels") or {}).get(ISTIO_INJECT_POD_LABEL, "")).lower()
    ns = ns_labels.get(ISTIO_INJECTION_LABEL)
    if ns == "enabled":
        return pod != "false"
    return ns is None and pod == "true"


# --------------------------------------------------------------------------------------------
# pod templates


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
    best, source = int(_get(r.props, "spec", "replicas", default=1) or 1), "spec.replicas"
    for s in resources:
        ns = s.namespace
        if ns != r.namespace:
            continue
        if s.kind == "HorizontalPodAutoscaler":
            ref, value, what = _get(s.props, "spec", "scaleTargetRef") or {}, _get(s.props, "spec", "maxReplicas"), \
                "HPA maxReplicas"
        elif s.kind == "ScaledObject" and s.group == "keda.sh":
            ref, what = _get(s.props, "spec", "scaleTargetRef") or {}, "ScaledObject maxReplicaCount"
            value = _get(s.props, "spec", "maxReplicaCount", default=100)
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
            tpl = _get(r.props, "spec", "template") or {}
            out.append(PodTemplate(r, "spec.template", tpl.get("metadata") or {}, tpl.get("spec") or {}, n, src))
        elif kind == "Job":
            tpl = _get(r.props, "spec", "template") or {}
            n = int(_get(r.props, "spec", "parallelism", default=1) or 1)
            out.append(PodTemplate(r, "spec.template", tpl.get("metadata") or {}, tpl.get("spec") or {}, n,
                                   "spec.parallelism"))
        elif kind == "DaemonSet":
            tpl = _get(r.props, "spec", "template") or {}
            out.append(PodTemplate(r, "spec.template", tpl.get("metadata") or {}, tpl.get("spec") or {}, 1,
                                   "one per node"))
        elif kind == "LeaderWorkerSet" and r.group == "leaderworkerset.x-k8s.io":
            n, src = _max_replicas(resources, r)
            lwt = _get(r.props, "spec", "leaderWorkerTemplate") or {}
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


def _namespaces(resources: Sequence[Res]) -> dict[str, Mapping[str, Any]]:
    return {r.name: (r.props.get("metadata") or {}).get("labels") or {} for r in resources
            if r.type == kube.NAMESPACE and r.name}


# --------------------------------------------------------------------------------------------
# quota and LimitRange admission

COMPUTE = ("cpu", "memory", "ephemeral-storage")


def _limit_ranges(resources: Sequence[Res], namespace: str) -> list[Mapping[str, Any]]:
    return [item for r in resources if r.kind == "LimitRange" and r.namespace == namespace
            for item in _get(r.props, "spec", "limits", default=()) or () if isinstance(item, Mapping)]


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
    sidecar = mesh is not None and _injected(ns_labels, t.meta)
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
    namespaces = _namespaces(resources)
    quotas: dict[str, list[Res]] = {}
    for r in resources:
        if r.kind == "ResourceQuota" and r.group in CORE:
            quotas.setdefault(r.namespace, []).append(r)
    out: list[Finding] = []
    totals: dict[str, dict[str, tuple[Fraction, list[str]]]] = {}
    surges: list[tuple[PodTemplate, Res, int, dict[str, Fraction]]] = []  # (template, quota, surge pods, per pod)
    for t in pod_templates(resources):
        limits = _limit_ranges(resources, t.namespace)
        pod = effective_pod(t, ns_labels=namespaces.get(t.namespace, {}), limit_ranges=limits, mesh=mesh)
        with_sidecar = " (istio-proxy sidecar included)" if pod.sidecar else ""
        for problem in _limit_range_problems(pod, limits):
            out.append(Finding("quota-admission", t.label, f"LimitRanger rejects every pod: {problem}",
                               "Keep container requests and limits within the namespace's LimitRange.", t.res.urn))
        for q in quotas.get(t.namespace, ()):
            hard = _get(q.props, "spec", "hard") or {}
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
                    over.append(f"{key} {_show(res, need)} > {value}")
                elif need:
                    acc = totals.setdefault(q.urn, {})
                    prev, who = acc.get(key, (Fraction(0), []))
                    acc[key] = (prev + need * t.pods, [*who, f"{t.label} {t.pods} x {_show(res, need)}"])
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
        hard = _get(q.props, "spec", "hard") or {}
        exceeded = {key: (total, who) for key, (total, who) in sorted(acc.items())
                    if total > parse_quantity(hard[key])}
        if exceeded:
            contributors = next(iter(exceeded.values()))[1]
            keys = ", ".join(f"{key} {_show(key.partition('.')[2] or key, total)} > {hard[key]}"
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
    integer or a percentage rounded up (apps/v1 RollingUpdateDeployment; default 25%); 0 for Recreate."""
    if t.res.kind != "Deployment":
        return 0
    strategy = _get(t.res.props, "spec", "strategy") or {}
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
        hard = _get(q.props, "spec", "hard") or {}
        short = [f"{key} {_show(key.partition('.')[2] or key, totals[q.urn][key][0] + surge * need)} > {hard[key]}"
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
                    f"{_show(res, amount)} slice(s) are admitted without any limit",
                    f"Add requests.{res} to the namespace's quota (the tenant's share of slices).", t.res.urn)
            for res, amount in sorted(pod.requests.items())
            if res.startswith(MIG_PREFIX) and f"requests.{res}" not in hard and amount > 0]


# --------------------------------------------------------------------------------------------
# Pod Security admission


def _sc(c: Mapping[str, Any]) -> Mapping[str, Any]:
    return c.get("securityContext") or {}


def pss_violations(level: str, spec: Mapping[str, Any]) -> list[str]:
    """What the Pod Security Standards' `level` (latest) forbids in a pod spec; [] for privileged."""
    if level not in ("baseline", "restricted"):
        return []
    out: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    conts = kube.containers(spec)
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key) is True:
            out.append(f"{key}: true")
    for v in spec.get("volumes") or ():
        if isinstance(v, Mapping) and v.get("hostPath") is not None:
            out.append(f"volume {v.get('name')!r} is a hostPath")
    for c in conts:
        name, sc = c.get("name"), _sc(c)
        if sc.get("privileged") is True:
            out.append(f"container {name!r} is privileged")
        added = [x for x in (sc.get("capabilities") or {}).get("add") or () if x not in BASELINE_CAPABILITIES]
        if added:
            out.append(f"container {name!r} adds capabilities {', '.join(added)}")
        for p in c.get("ports") or ():
            if isinstance(p, Mapping) and p.get("hostPort"):
                out.append(f"container {name!r} uses hostPort {p['hostPort']}")
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"container {name!r} sets procMount {sc['procMount']}")
    for where, sc in [("pod", pod_sc), *((f"container {c.get('name')!r}", _sc(c)) for c in conts)]:
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"{where} sets seccompProfile Unconfined")
    for s in pod_sc.get("sysctls") or ():
        if isinstance(s, Mapping) and s.get("name") not in SAFE_SYSCTLS:
            out.append(f"sysctl {s.get('name')} is not in the safe set")
    if level == "baseline":
        return out
    for v in spec.get("volumes") or ():
        if isinstance(v, Mapping):
            kinds = [k for k in v if k != "name"]
            if kinds and kinds[0] not in RESTRICTED_VOLUMES and kinds[0] != "hostPath":
                out.append(f"volume {v.get('name')!r} is of type {kinds[0]}")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    for c in conts:
        name, sc = c.get("name"), _sc(c)
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"container {name!r} does not set allowPrivilegeEscalation: false")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            out.append(f"container {name!r} does not run with runAsNonRoot: true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"container {name!r} runs as UID 0")
        if (sc.get("seccompProfile") or {}).get("type", pod_seccomp) not in ("RuntimeDefault", "Localhost"):
            out.append(f"container {name!r} has no seccompProfile RuntimeDefault or Localhost")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or ()):
            out.append(f"container {name!r} does not drop ALL capabilities")
        # capabilities outside the baseline set are reported above; restricted allows NET_BIND_SERVICE only
        extra = [x for x in caps.get("add") or () if x != "NET_BIND_SERVICE" and x in BASELINE_CAPABILITIES]
        if extra:
            out.append(f"container {name!r} adds capabilities {', '.join(extra)}")
    if pod_sc.get("runAsUser") == 0:
        out.append("pod runs as UID 0")
    return out


def pod_security_findings(resources: Sequence[Res]) -> list[Finding]:
    """Each pod (with what sidecar injection adds) against its namespace's enforce level. A namespace
    without the label runs at the cluster default, privileged unless an AdmissionConfiguration says otherwise."""
    mesh = mesh_of(resources)
    namespaces = _namespaces(resources)
    out = []
    for t in pod_templates(resources):
        labels = namespaces.get(t.namespace, {})
        level = str(labels.get(PSA_ENFORCE, "privileged"))
        spec = dict(t.spec)
        injected = mesh is not None and _injected(labels, t.meta)
        if injected and mesh is not None:
            init_c, proxy = mesh.containers(t.meta)
            spec["initContainers"] = [*(spec.get("initContainers") or ()), init_c]
            spec["containers"] = [*(spec.get("containers") or ()), proxy]
        problems = pss_violations(level, spec)
        if not problems:
            continue
        fix = "Make the pod spec meet the level (components/k8s/security.py defaults)"
        if injected and any("istio-init" in p for p in problems):
            fix += "; the injected istio-init needs NET_ADMIN/NET_RAW: enable the Istio CNI plugin " \
                   "(istiod values pilot.cni.enabled: true and the cni chart)"
        out.append(Finding("pod-security-admission", t.label,
                           f"PodSecurity '{level}' (namespace {t.namespace}) rejects its pods"
                           f"{' after sidecar injection' if injected else ''}: {'; '.join(problems)}",
                           f"{fix}, or run it in a namespace whose enforce level allows it.", t.res.urn))
    return out


# --------------------------------------------------------------------------------------------
# storage


@dataclass(frozen=True)
class Claim:
    res: Res
    where: str
    storage_class: str | None  # None: no storageClassName (the cluster's default class)


def _helm_claims(r: Res) -> list[Claim]:
    """Claims the charts the kit installs create, from the release values and the charts' defaults:
    grafana/loki production/helm/loki/values.yaml (6.x): singleBinary.persistence.enabled true,
    write/backend.persistence.volumeClaimsEnabled true, storageClass null; its minio subchart: persistence
    enabled, storageClass "" (no class); kube-prometheus-stack: storageSpec / alertmanager storage empty by
    default (emptyDir, no claim), grafana.persistence.enabled false; jaeger: a claim only with the bundled
    Cassandra (provisionDataStore.cassandra)."""
    v = r.props.get("values") or {}
    chart = _chart(r)
    out: list[Claim] = []

    def add(where: str, cls: Any) -> None:
        out.append(Claim(r, f"values.{where}", str(cls) if cls not in (None, "", "-") else None))

    if chart == "loki":
        mode = v.get("deploymentMode", "SimpleScalable")
        if mode == "SingleBinary" and int(_get(v, "singleBinary", "replicas", default=1) or 0) > 0 \
                and _get(v, "singleBinary", "persistence", "enabled", default=True):
            add("singleBinary.persistence", _get(v, "singleBinary", "persistence", "storageClass"))
        if mode != "SingleBinary":
            for target in ("write", "backend"):
                if int(_get(v, target, "replicas", default=1) or 0) > 0 and \
                        _get(v, target, "persistence", "volumeClaimsEnabled", default=True):
                    add(f"{target}.persistence", _get(v, target, "persistence", "storageClass"))
        if _get(v, "minio", "enabled", default=False) and _get(v, "minio", "persistence", "enabled", default=True):
            add("minio.persistence", _get(v, "minio", "persistence", "storageClass"))
    elif chart == "kube-prometheus-stack":
        for where, path in (("prometheus.prometheusSpec.storageSpec",
                             ("prometheus", "prometheusSpec", "storageSpec", "volumeClaimTemplate")),
                            ("alertmanager.alertmanagerSpec.storage",
                             ("alertmanager", "alertmanagerSpec", "storage", "volumeClaimTemplate"))):
            tpl = _get(v, *path)
            if isinstance(tpl, Mapping):
                add(where, _get(tpl, "spec", "storageClassName"))
        if _get(v, "grafana", "persistence", "enabled", default=False):
            add("grafana.persistence", _get(v, "grafana", "persistence", "storageClassName"))
    elif chart == "jaeger" and _get(v, "provisionDataStore", "cassandra", default=False):
        add("cassandra.persistence", _get(v, "cassandra", "persistence", "storageClass"))
    return out


def claims(resources: Sequence[Res]) -> list[Claim]:
    """Every PersistentVolumeClaim the stack makes: claims, StatefulSet claim templates, generic ephemeral
    volumes of pod templates, and the claims of the Helm charts above."""
    out: list[Claim] = []
    for r in resources:
        if r.kind == "PersistentVolumeClaim" and r.group in CORE:
            out.append(Claim(r, "spec", _get(r.props, "spec", "storageClassName")))
        elif r.kind == "StatefulSet":
            for i, tpl in enumerate(_get(r.props, "spec", "volumeClaimTemplates", default=()) or ()):
                out.append(Claim(r, f"spec.volumeClaimTemplates[{i}]", _get(tpl, "spec", "storageClassName")))
        elif r.type == kube.HELM_RELEASE:
            out.extend(_helm_claims(r))
    for t in pod_templates(resources):
        for v in t.spec.get("volumes") or ():
            tpl = _get(v, "ephemeral", "volumeClaimTemplate")
            if isinstance(tpl, Mapping):
                out.append(Claim(t.res, f"{t.where}.volumes[{v.get('name')}].ephemeral",
                                 _get(tpl, "spec", "storageClassName")))
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
                     and not _get(r.props, "spec", "storageClassName")}
    out = []
    for c in claims(resources):
        if c.storage_class == "":
            volume = _get(c.res.props, "spec", "volumeName") if c.where == "spec" else None
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


# --------------------------------------------------------------------------------------------
# custom resources before their CRDs


def crd_order_findings(resources: Sequence[Res], *, require_installer: bool = True) -> list[Finding]:
    """A custom resource must be created after the Helm release that installs its CRD: the API server
    answers 'no matches for kind' until then, and the engine fails the create.

    require_installer: also report custom resources whose CRDs no release of the stack installs (preflight does;
    the pack's policy does not, since a cluster may have them installed already)."""
    after = created_after(resources)
    releases: dict[str, list[Res]] = {}
    for r in resources:
        if r.type == kube.HELM_RELEASE:
            releases.setdefault(_chart(r), []).append(r)
    out = []
    for r in resources:
        if r.group in RUNTIME_CRD_OWNERS and r.type.startswith("kubernetes:"):
            out.extend(_runtime_crd_finding(r, resources, after))
            continue
        chart = CRD_CHARTS.get(r.group)
        if chart is None or not r.type.startswith("kubernetes:"):
            continue
        installers = releases.get(chart, [])
        if not installers and require_installer:
            out.append(Finding("crd-before-custom-resource", r.label,
                               f"no Helm release of chart {chart!r} in the stack installs the {r.group} CRDs: "
                               f"the API server rejects {r.kind} unless they already exist",
                               f"Install the {chart} chart in the stack and make the resource depend on it.", r.urn))
        elif installers and not any(i.urn in after[r.urn] for i in installers):
            out.append(Finding("crd-before-custom-resource", r.label,
                               f"created without waiting for {installers[0].label}, which installs the {r.group} CRDs: "
                               f"the API server may answer 'no matches for kind {r.kind}' and the create fails",
                               f"Add depends_on=[the {chart} release] to the resource or its component.", r.urn))
    return out


def _runtime_crd_finding(r: Res, resources: Sequence[Res], after: Mapping[str, frozenset[str]]) -> list[Finding]:
    """A custom resource whose CRD an operator applies while reconciling its owner resource: created after that
    owner, and the owner awaited until ready (pulumi-kubernetes awaits no custom resource without
    `pulumi.com/waitFor`, and retries 'no matches for kind' for about a minute only)."""
    group, kind = RUNTIME_CRD_OWNERS[r.group]
    owners = [o for o in resources if (o.group, o.kind) == (group, kind) and o.urn in after[r.urn]]
    if not owners:
        return [Finding("crd-before-custom-resource", r.label,
                        f"the {r.group} CRDs are applied by the operator when it reconciles a {kind}, and {r.kind} "
                        f"is not created after one: the create fails with 'no matches for kind {r.kind}'",
                        f"Add depends_on=[the {kind}] and give the {kind} a pulumi.com/waitFor annotation.", r.urn)]
    awaited = [o for o in owners if WAIT_FOR_ANNOTATION in ((o.props.get("metadata") or {}).get("annotations") or {})]
    if not awaited:
        return [Finding("crd-before-custom-resource", r.label,
                        f"created after {owners[0].label}, which is not awaited: the operator applies the {r.group} "
                        f"CRDs only once it reconciles it, and the create may fail with 'no matches for kind "
                        f"{r.kind}'",
                        f"Annotate the {kind} with pulumi.com/waitFor (e.g. jsonpath={{.status.state}}=ready).",
                        r.urn)]
    return []


# --------------------------------------------------------------------------------------------
# awaits


def startup_budget_seconds(spec: Mapping[str, Any]) -> int | None:
    """The longest startup probe allowance of a pod: initialDelaySeconds + periodSeconds x failureThreshold."""
    budgets = []
    for c in spec.get("containers") or ():
        probe = c.get("startupProbe") if isinstance(c, Mapping) else None
        if isinstance(probe, Mapping):
            p = {k: int(probe.get(k, d) or d) for k, d in PROBE_DEFAULTS.items()}
            budgets.append(p["initialDelaySeconds"] + p["periodSeconds"] * p["failureThreshold"])
    return max(budgets) if budgets else None


def _await_problem(r: Res, pull_allowance: int) -> str | None:
    if r.kind not in AWAITED_KINDS or not r.type.startswith("kubernetes:apps/"):
        return None
    annotations = (r.props.get("metadata") or {}).get("annotations") or {}
    if str(annotations.get(SKIP_AWAIT_ANNOTATION, "")).lower() == "true":
        return None
    budget = startup_budget_seconds(_get(r.props, "spec", "template", "spec") or {})
    if budget is None:
        return None
    need = budget + pull_allowance
    if TIMEOUT_ANNOTATION in annotations:
        timeout, source = int(float(annotations[TIMEOUT_ANNOTATION])), f"annotation {TIMEOUT_ANNOTATION}"
    elif r.custom_timeout_create:
        timeout, source = int(r.custom_timeout_create), "customTimeouts.create"
    else:
        timeout, source = DEFAULT_DEPLOYMENT_AWAIT_SECONDS, "pulumi-kubernetes' default"
    if timeout >= need:
        return None
    return (f"pulumi-kubernetes waits {timeout} s ({source}) for the {r.kind} to become ready, but its pods may "
            f"take {need} s (startup probe {budget} s + {pull_allowance} s image pull): `pulumi up` fails a rollout "
            f"that would succeed; set {TIMEOUT_ANNOTATION} to at least {need}")


def await_findings(resources: Sequence[Res], *, pull_allowance: int = DEFAULT_IMAGE_PULL_ALLOWANCE_SECONDS
                   ) -> list[Finding]:
    """Deployments and StatefulSets whose await timeout is shorter than their pods' declared start-up budget."""
    return [Finding("await-timeout", r.label, problem,
                    f"Set metadata.annotations['{TIMEOUT_ANNOTATION}'] (or customTimeouts) to the start-up budget "
                    "plus the image pull.", r.urn)
            for r in resources if (problem := _await_problem(r, pull_allowance)) is not None]


def release_order_findings(resources: Sequence[Res]) -> list[Finding]:
    """On an EKS stack, an awaited Helm release waits (its `timeout`, default 300 s) for its pods: it must be
    created after a node group (somewhere to run), the coredns add-on (DNS), and, for charts that make claims,
    the EBS CSI add-on (a provisioner). Started earlier, its wait overlaps their creation and times out."""
    if not any(r.type == EKS_CLUSTER for r in resources):
        return []
    after = created_after(resources)
    groups = {r.urn for r in resources if r.type == NODE_GROUP}
    addons = {str(r.props.get("addonName")): r.urn for r in resources if r.type == EKS_ADDON}
    has_claims = {c.res.urn for c in claims(resources) if c.res.type == kube.HELM_RELEASE}
    out = []
    for r in resources:
        if r.type != kube.HELM_RELEASE or r.props.get("skipAwait") is True or _chart(r) in CHARTS_WITHOUT_PODS:
            continue
        before = after[r.urn]
        missing = []
        if not groups & before:
            missing.append("a node group")
        for addon in (DNS_ADDON, *((EBS_ADDON,) if r.urn in has_claims else ())):
            if addon not in addons:
                missing.append(f"the {addon} add-on (not in the stack)")
            elif addons[addon] not in before:
                missing.append(f"the {addon} add-on")
        if missing:
            timeout = r.props.get("timeout") or DEFAULT_HELM_TIMEOUT_SECONDS
            out.append(Finding("release-bring-up-order", r.label,
                               f"Helm waits {timeout} s for the release's resources, but it is not created after "
                               f"{', '.join(missing)}: it starts while they are still being created and times out",
                               "Make the release depend on the cluster's node groups and add-ons (e.g. depends_on the "
                               "GpuCluster and GpuNodePool components).", r.urn))
    return out


# --------------------------------------------------------------------------------------------
# API endpoint reachability


def endpoint_findings(resources: Sequence[Res], *, deployer_in_vpc: bool) -> list[Finding]:
    """The stack's Kubernetes objects are created through the EKS endpoint: private-only answers only inside the
    VPC; public without publicAccessCidrs is open to 0.0.0.0/0."""
    out = []
    for r in resources:
        if r.type != EKS_CLUSTER:
            continue
        vpc = r.props.get("vpcConfig") or {}
        public = vpc.get("endpointPublicAccess", True) is not False
        if not public and not deployer_in_vpc:
            out.append(Finding("api-endpoint-reachable", r.label,
                               "the API endpoint is private only (endpointPublicAccess false) and the config does "
                               "not declare an in-VPC deployer: every Kubernetes resource of the stack fails to "
                               "connect from outside the VPC",
                               "Either list your networks in aifactory:cluster.publicAccessCidrs (public + private "
                               "endpoint) or run `pulumi up` from inside the VPC and set "
                               "aifactory:cluster.deployerInVpc: true.", r.urn))
        elif public and not vpc.get("publicAccessCidrs"):
            out.append(Finding("api-endpoint-reachable", r.label,
                               "the API endpoint is public without publicAccessCidrs: EKS opens it to 0.0.0.0/0",
                               "Set publicAccessCidrs (aifactory:cluster.publicAccessCidrs) to your networks.", r.urn))
    return out


# --------------------------------------------------------------------------------------------
# scheduling


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


def _expr_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = str(expr.get("key")), expr.get("operator"), [str(v) for v in expr.get("values") or ()]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _label_problems(spec: Mapping[str, Any], pool: Pool) -> list[str]:
    out = []
    selector = spec.get("nodeSelector") or {}
    wrong = {k: v for k, v in selector.items() if pool.labels.get(k) != str(v)}
    if wrong:
        out.append(f"nodeSelector {wrong} does not match its labels")
    terms = _get(spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                 "nodeSelectorTerms", default=()) or ()
    if terms and not any(all(_expr_matches(e, pool.labels) for e in (t.get("matchExpressions") or ()))
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
                out.append(f"requests {res} {_show(res, need)} > allocatable {_show(res, have)}"
                           f"{' (' + pool.instance_type + ')' if pool.instance_type else ''}")
    return out


def schedule_findings(resources: Sequence[Res], pools: Sequence[Pool]) -> list[Finding]:
    """Pods and DaemonSets that no pool can run: taints without tolerations, selectors or required affinity
    matching no pool's labels, requests above a node's allocatable (system reserve subtracted)."""
    if not pools:
        return []
    mesh = mesh_of(resources)
    namespaces = _namespaces(resources)
    out = []
    for t in pod_templates(resources):
        pod = effective_pod(t, ns_labels=namespaces.get(t.namespace, {}),
                            limit_ranges=_limit_ranges(resources, t.namespace), mesh=mesh)
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


RULES = ("quota-admission", "pod-security-admission", "storage-class", "crd-before-custom-resource",
         "await-timeout", "release-bring-up-order", "api-endpoint-reachable", "schedulable", "fidelity-gate")


# --------------------------------------------------------------------------------------------
# the rules that need only the state, as mandatory policies of the pack


def _stack_check(rule: Any) -> Any:
    def check(resources: Sequence[Any], _cfg: dict[str, Any]) -> list[tuple[str, str | None]]:
        return [(f"{f.resource}: {f.message}", f.urn) for f in rule(from_policy_resources(resources))]

    return check


def _await_validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    """The resource's own customTimeouts.create (CrossGuard passes it in opts) counts like the annotation."""
    timeouts = getattr(getattr(args, "opts", None), "custom_timeouts", None)
    create = float(getattr(timeouts, "create_seconds", 0) or 0) or None
    problem = _await_problem(Res(args.urn, args.resource_type, args.props, custom_timeout_create=create),
                             DEFAULT_IMAGE_PULL_ALLOWANCE_SECONDS)
    if problem:
        report_violation(problem, None)


POLICIES = [
    ResourceValidationPolicy(
        name="await-covers-startup",
        description="A Deployment or StatefulSet is awaited at least as long as its pods' startup probe plus an "
                    "image pull may take.",
        validate=_await_validate, enforcement_level=MANDATORY, severity=Severity.HIGH,
        remediation_steps=f"Set metadata.annotations['{TIMEOUT_ANNOTATION}'] (or customTimeouts.create) to the "
                          "startup budget plus the image pull.",
    ),
    stack_policy(
        name="quota-admits-pods",
        description="Every pod template fits its namespace's ResourceQuota and LimitRange at its largest replica "
                    "count, injected sidecars included.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Size the namespace's quota for its workloads at their maximum replicas (and quota MIG slices), "
                    "or make the pods smaller.",
        check=_stack_check(quota_findings),
    ),
    stack_policy(
        name="pod-security-admits-pods",
        description="Every pod, with what sidecar injection adds, meets its namespace's Pod Security enforce level.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Meet the level's controls (components/k8s/security.py); for sidecars use the Istio CNI plugin.",
        check=_stack_check(pod_security_findings),
    ),
    stack_policy(
        name="crds-before-custom-resources",
        description="Custom resources are created after the Helm release that installs their CRDs.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Make the custom resource (or its component) depend on the release that installs its CRDs.",
        check=_stack_check(lambda resources: crd_order_findings(resources, require_installer=False)),
    ),
]

