"""Isolation between tenants and between workloads and nodes (Kubernetes and Istio)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pulumi_policy import Severity

from policies import kube
from policies.base import (
    ADVISORY,
    AGENT_NAMESPACES,
    ALLOWED_CAPABILITIES,
    ALLOWED_REGISTRIES,
    GATEWAY_NAMESPACES,
    GPU_TAINT_KEYS,
    MANDATORY,
    MESH_ROOT_NAMESPACE,
    PLATFORM_NAMESPACES,
    POOL_LABEL_KEY,
    ResourceCheck,
    resource_policy,
    stack_policy,
)

__all__ = [
    "POLICIES",
    "tenant_namespaces",
    "denied_directions",
    "is_allow_nothing",
    "limits_gpus",
    "mtls_downgrades",
    "privilege_problems",
    "root_problems",
    "gpu_limit_problems",
    "gpu_placement_problems",
    "gpu_toleration_problems",
    "pin_problems",
    "source_problems",
    "platform_namespace_problems",
    "POD_TYPES",
]

ISTIO_SECURITY = "security.istio.io"
POD_TYPES = (*kube.POD_TEMPLATE_PATHS, kube.HELM_RELEASE)
Found = list[tuple[str, str | None]]


# ---------------------------------------------------------------------------------------------
# tenant namespaces (stack)


def tenant_namespaces(resources: Sequence[Any], platform: Sequence[str]) -> dict[str, str]:
    """Namespace name -> URN for every Namespace the stack creates outside the platform's namespaces."""
    out = {}
    for r in resources:
        if r.resource_type == kube.NAMESPACE and (name := kube.name_of(r.props)) and name not in platform:
            out[name] = r.urn
    return dict(sorted(out.items()))


def _in_namespace(resources: Sequence[Any], group: str, kind: str) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for r in resources:
        if kube.kind_of(r.resource_type) == (group, kind):
            out.setdefault(kube.namespace_of(r.props), []).append(r.props)
    return out


def denied_directions(props: Mapping[str, Any]) -> set[str]:
    """The directions ('Ingress', 'Egress') a NetworkPolicy denies for every pod of its namespace."""
    spec = props.get("spec") or {}
    selector = spec.get("podSelector") or {}
    if selector.get("matchLabels") or selector.get("matchExpressions"):
        return set()
    types = set(spec.get("policyTypes") or ["Ingress"])
    return {t for t in types if not spec.get(t.lower())}


def _default_deny(resources: Sequence[Any], cfg: dict[str, Any]) -> Found:
    denied: dict[str, set[str]] = {}
    for ns, policies in _in_namespace(resources, "networking.k8s.io", "NetworkPolicy").items():
        for p in policies:
            denied.setdefault(ns, set()).update(denied_directions(p))
    out: Found = []
    for ns, urn in tenant_namespaces(resources, cfg[PLATFORM_NAMESPACES.name]).items():
        missing = sorted({"Ingress", "Egress"} - denied.get(ns, set()))
        if missing:
            out.append((f"tenant namespace {ns!r} has no default-deny NetworkPolicy for {' and '.join(missing)}",
                        urn))
    return out


def is_allow_nothing(props: Mapping[str, Any]) -> bool:
    """Istio's allow-nothing AuthorizationPolicy: no selector, action ALLOW (the default), no rules."""
    spec = props.get("spec") or {}
    return (not spec.get("selector") and not spec.get("targetRef") and not spec.get("targetRefs")
            and spec.get("action", "ALLOW") == "ALLOW" and not spec.get("rules"))


def _tenants_lacking(resources: Sequence[Any], cfg: dict[str, Any], kind: tuple[str, str],
                     ok: Callable[[Mapping[str, Any]], bool], what: str) -> Found:
    """Tenant namespaces without an object of `kind` (group, kind) that satisfies `ok`."""
    has = {ns for ns, objs in _in_namespace(resources, *kind).items() if any(ok(o) for o in objs)}
    return [(f"tenant namespace {ns!r} has no {what}", urn)
            for ns, urn in tenant_namespaces(resources, cfg[PLATFORM_NAMESPACES.name]).items() if ns not in has]


def _allow_nothing(resources: Sequence[Any], cfg: dict[str, Any]) -> Found:
    return _tenants_lacking(resources, cfg, (ISTIO_SECURITY, "AuthorizationPolicy"), is_allow_nothing,
                            "allow-nothing AuthorizationPolicy")


def _gateway_posture(resources: Sequence[Any], cfg: dict[str, Any]) -> Found:
    """Gateway namespaces the stack creates: default-deny both ways and an allow-nothing policy, as tenants."""
    denied: dict[str, set[str]] = {}
    for ns, policies in _in_namespace(resources, "networking.k8s.io", "NetworkPolicy").items():
        for p in policies:
            denied.setdefault(ns, set()).update(denied_directions(p))
    allow_nothing = {ns for ns, objs in _in_namespace(resources, ISTIO_SECURITY, "AuthorizationPolicy").items()
                     if any(is_allow_nothing(o) for o in objs)}
    gateways = set(cfg[GATEWAY_NAMESPACES.name])
    out: Found = []
    for r in resources:
        if r.resource_type != kube.NAMESPACE or (ns := kube.name_of(r.props)) not in gateways:
            continue
        missing = sorted({"Ingress", "Egress"} - denied.get(ns, set()))
        if missing:
            out.append((f"gateway namespace {ns!r} has no default-deny NetworkPolicy for {' and '.join(missing)}",
                        r.urn))
        if ns not in allow_nothing:
            out.append((f"gateway namespace {ns!r} has no allow-nothing AuthorizationPolicy", r.urn))
    return out


def limits_gpus(props: Mapping[str, Any]) -> bool:
    return f"requests.{kube.GPU_RESOURCE}" in ((props.get("spec") or {}).get("hard") or {})


def _quota(resources: Sequence[Any], cfg: dict[str, Any]) -> Found:
    return _tenants_lacking(resources, cfg, ("core", "ResourceQuota"), limits_gpus,
                            f"ResourceQuota limiting requests.{kube.GPU_RESOURCE}")


# ---------------------------------------------------------------------------------------------
# mesh mTLS


def _mtls_mode(spec: Mapping[str, Any]) -> str:
    return ((spec.get("mtls") or {}).get("mode") or "UNSET").upper()


def _mesh_strict(resources: Sequence[Any], cfg: dict[str, Any]) -> Found:
    """Applies to stacks that deploy to Kubernetes (an AWS-only stack has no mesh to check)."""
    if not any(r.resource_type.startswith("kubernetes:") for r in resources):
        return []
    root = cfg[MESH_ROOT_NAMESPACE.name]
    for ns, policies in _in_namespace(resources, ISTIO_SECURITY, "PeerAuthentication").items():
        if ns == root and any(not (p.get("spec") or {}).get("selector") and _mtls_mode(p.get("spec") or {})
                              == "STRICT" for p in policies):
            return []
    return [(f"no mesh-wide PeerAuthentication with mtls.mode STRICT in the root namespace {root!r}", None)]


def mtls_downgrades(props: Mapping[str, Any]) -> list[str]:
    """The modes weaker than STRICT a PeerAuthentication sets, with where it sets them."""
    spec = props.get("spec") or {}
    out = []
    if _mtls_mode(spec) in ("PERMISSIVE", "DISABLE"):
        out.append(f"mtls.mode {_mtls_mode(spec)}")
    for port, setting in sorted((spec.get("portLevelMtls") or {}).items()):
        mode = ((setting or {}).get("mode") or "").upper()
        if mode in ("PERMISSIVE", "DISABLE"):
            out.append(f"portLevelMtls[{port}].mode {mode}")
    return out


def _no_downgrade(resource_type: str, props: Mapping[str, Any], cfg: dict[str, Any]) -> list[str]:
    ns = kube.namespace_of(props)
    if kube.kind_of(resource_type) != (ISTIO_SECURITY, "PeerAuthentication") or ns in cfg[PLATFORM_NAMESPACES.name]:
        return []
    return [f"PeerAuthentication {kube.name_of(props)!r} in tenant namespace {ns!r} sets {what}"
            for what in mtls_downgrades(props)]


# ---------------------------------------------------------------------------------------------
# pods


def privilege_problems(spec: Mapping[str, Any], allowed_caps: Sequence[str]) -> list[str]:
    out = [f"{key}: true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key) is True]
    for v in spec.get("volumes") or ():
        if isinstance(v, Mapping) and v.get("hostPath"):
            out.append(f"volume {v.get('name')!r} mounts hostPath {(v['hostPath'] or {}).get('path')}")
    for c in kube.containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("privileged") is True:
            out.append(f"container {c.get('name')!r} is privileged")
        added = [cap for cap in ((sc.get("capabilities") or {}).get("add") or ()) if cap not in allowed_caps]
        if added:
            out.append(f"container {c.get('name')!r} adds capabilities {', '.join(added)}")
    return out


def root_problems(spec: Mapping[str, Any], *, complete: bool) -> list[str]:
    """Containers that may run as root. Incomplete specs (Helm values) fail only on explicit root settings."""
    pod = spec.get("securityContext") or {}
    out = []
    for c in kube.containers(spec):
        sc = c.get("securityContext") or {}
        non_root = sc.get("runAsNonRoot", pod.get("runAsNonRoot"))
        uid = sc.get("runAsUser", pod.get("runAsUser"))
        if uid == 0 or non_root is False:
            out.append(f"container {c.get('name')!r} runs as root")
        elif complete and non_root is not True:
            out.append(f"container {c.get('name')!r} does not set runAsNonRoot: true")
    return out


def gpu_limit_problems(spec: Mapping[str, Any]) -> list[str]:
    out = []
    for c in kube.containers(spec):
        req, lim = kube.gpu_resources(c)
        for res in sorted(set(req) | set(lim)):
            if res not in lim:
                out.append(f"container {c.get('name')!r} requests {res}: {req[res]} without a limit")
            elif res in req and req[res] != lim[res]:
                out.append(f"container {c.get('name')!r} requests {res}: {req[res]} but limits it to {lim[res]}")
    return out


def gpu_placement_problems(spec: Mapping[str, Any], pool_label: str, gpu_taints: Sequence[str]) -> list[str]:
    if not kube.requests_gpu(spec):
        return []
    out = []
    if pool_label not in kube.targeted_label_keys(spec):
        out.append(f"GPU pod does not select a GPU pool by node label {pool_label!r}")
    others = [k for k in kube.tolerated_keys(spec) if k not in gpu_taints]
    if others:
        out.append(f"GPU pod tolerates non-GPU taints: {', '.join(others)}")
    return out


def gpu_toleration_problems(spec: Mapping[str, Any], gpu_taints: Sequence[str]) -> list[str]:
    if kube.requests_gpu(spec):
        return []
    hits = [k for k in kube.tolerated_keys(spec) if k in gpu_taints or k == "*"]
    return [f"pod without GPUs tolerates the GPU taint {k!r}" for k in hits]


def _images(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(container name, image reference) of every container that names an image."""
    return [(str(c.get("name")), c["image"]) for c in kube.containers(spec) if isinstance(c.get("image"), str)
            and c["image"]]


def pin_problems(spec: Mapping[str, Any], *, complete: bool) -> list[str]:
    """Images on a mutable tag; in complete specs also images without a tag or digest (Helm values may
    leave the tag to the chart's pinned appVersion)."""
    out = []
    for name, ref in _images(spec):
        image = kube.parse_image(ref)
        if image.tag == "latest" and not image.digest:
            out.append(f"container {name!r} image {ref!r} uses the mutable tag 'latest'")
        elif not image.tag and not image.digest and complete:
            out.append(f"container {name!r} image {ref!r} has no tag or digest")
    return out


def source_problems(spec: Mapping[str, Any], registries: Sequence[str]) -> list[str]:
    return [f"container {name!r} image {ref!r} is not from an allowed registry"
            for name, ref in _images(spec) if not kube.registry_allowed(kube.parse_image(ref), registries)]


def _pod_check(problems: Callable[[kube.PodSite, dict[str, Any]], list[str]], *, exempt_agents: bool
               ) -> ResourceCheck:
    """A resource check that runs `problems(site, cfg)` on every pod spec of a workload or Helm release."""

    def check(resource_type: str, props: Mapping[str, Any], cfg: dict[str, Any]) -> list[str]:
        out: list[str] = []
        for site in kube.pod_sites(resource_type, props):
            if exempt_agents and site.namespace in cfg[AGENT_NAMESPACES.name]:
                continue
            out.extend(f"{site.where}: {p}" for p in problems(site, cfg))
        return out

    return check


TENANT_LABEL = "aifactory.io/tenant"  # components.k8s.naming.LABEL_TENANT: what the kit puts on tenant objects


def platform_namespace_problems(resource_type: str, props: Mapping[str, Any], cfg: dict[str, Any]) -> list[str]:
    """A tenant's object (labelled aifactory.io/tenant) in, or as, a platform namespace (or any kube-*)."""
    if not resource_type.startswith("kubernetes:") or resource_type == kube.HELM_RELEASE:
        return []
    meta = props.get("metadata") or {}
    tenant = (meta.get("labels") or {}).get(TENANT_LABEL)
    if tenant is None or (resource_type != kube.NAMESPACE and
                          kube.kind_of(resource_type)[1] in kube.CLUSTER_SCOPED_KINDS):
        return []  # a cluster-scoped object (a tenant's model-cache PersistentVolume) is in no namespace
    ns = kube.name_of(props) if resource_type == kube.NAMESPACE else kube.namespace_of(props)
    if ns in cfg[PLATFORM_NAMESPACES.name] or ns.startswith("kube-"):
        what = "is the namespace" if resource_type == kube.NAMESPACE else "is in namespace"
        return [f"{kube.kind_of(resource_type)[1]} {kube.name_of(props)!r} of tenant {tenant!r} {what} {ns!r}, "
                "which belongs to the platform"]
    return []


def _service_check(resource_type: str, props: Mapping[str, Any], cfg: dict[str, Any]) -> list[str]:
    kind = (props.get("spec") or {}).get("type") or "ClusterIP"
    ns = kube.namespace_of(props)
    if kind in ("LoadBalancer", "NodePort") and ns not in cfg[GATEWAY_NAMESPACES.name]:
        return [f"Service {kube.name_of(props)!r} in namespace {ns!r} is of type {kind}; only the gateway "
                f"({', '.join(cfg[GATEWAY_NAMESPACES.name])}) is exposed outside the cluster"]
    return []


POLICIES = [
    stack_policy(
        name="tenant-default-deny",
        description="Every tenant namespace has a NetworkPolicy that denies all ingress and egress by default.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Create a NetworkPolicy in the namespace with podSelector: {} and policyTypes [Ingress, Egress] "
                    "and no rules (components.k8s tenancy does this per tenant); allow traffic with further policies.",
        check=_default_deny, settings=(PLATFORM_NAMESPACES,),
    ),
    resource_policy(
        name="tenant-outside-platform-namespaces",
        description="No tenant workload, quota or network/mesh policy is created in (or as) a platform namespace.",
        severity=Severity.CRITICAL, enforcement=MANDATORY,
        remediation="Give the tenant a namespace of its own (tenants.<name>.namespace); the platform's namespaces "
                    "(kube-*, default, istio-system, the kit's system, gateway and monitoring namespaces) hold "
                    "no tenant objects.",
        types=None, check=platform_namespace_problems, settings=(PLATFORM_NAMESPACES,),
    ),
    stack_policy(
        name="mesh-strict-mtls",
        description="A mesh-wide PeerAuthentication requires STRICT mutual TLS.",
        severity=Severity.CRITICAL, enforcement=MANDATORY,
        remediation="Create a PeerAuthentication without a selector in Istio's root namespace (istio-system) "
                    "with spec.mtls.mode: STRICT.",
        check=_mesh_strict, settings=(MESH_ROOT_NAMESPACE,),
    ),
    resource_policy(
        name="no-mtls-downgrade",
        description="No tenant namespace weakens mutual TLS with a PERMISSIVE or DISABLE PeerAuthentication.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Delete the PeerAuthentication or set its mode (and every portLevelMtls mode) to STRICT.",
        types=None, check=_no_downgrade, settings=(PLATFORM_NAMESPACES,),
    ),
    stack_policy(
        name="tenant-allow-nothing",
        description="Every tenant namespace has an allow-nothing Istio AuthorizationPolicy.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Create an AuthorizationPolicy with an empty spec ({}) in the namespace; allow callers with "
                    "further ALLOW policies that name their principals.",
        check=_allow_nothing, settings=(PLATFORM_NAMESPACES,),
    ),
    stack_policy(
        name="gateway-namespace-default-deny",
        description="Every gateway namespace denies all traffic by default (NetworkPolicy both ways and an "
                    "allow-nothing Istio AuthorizationPolicy), like a tenant namespace.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Create a NetworkPolicy with podSelector: {} and policyTypes [Ingress, Egress] and no rules, "
                    "and an AuthorizationPolicy with an empty spec, in the namespace (components.k8s.gateway "
                    "does both); allow the listener, Prometheus, models, DNS, istiod and the Collector explicitly.",
        check=_gateway_posture, settings=(GATEWAY_NAMESPACES,),
    ),
    stack_policy(
        name="tenant-gpu-quota",
        description="Every tenant namespace has a ResourceQuota that limits GPU requests.",
        severity=Severity.MEDIUM, enforcement=MANDATORY,
        remediation=f"Create a ResourceQuota in the namespace with spec.hard['requests.{kube.GPU_RESOURCE}'] set "
                    "to the tenant's gpuQuota (0 for tenants without GPUs).",
        check=_quota, settings=(PLATFORM_NAMESPACES,),
    ),
    resource_policy(
        name="no-privileged-pods",
        description="Outside node-agent namespaces, pods are not privileged, use no host namespaces or host paths "
                    "and add no capabilities beyond the allow-list.",
        severity=Severity.CRITICAL, enforcement=MANDATORY,
        remediation="Remove privileged, hostNetwork/hostPID/hostIPC, hostPath volumes and added capabilities "
                    "(components.k8s.security.container_security_context gives the secure defaults), or run the "
                    "workload in a namespace listed in agentNamespaces.",
        types=POD_TYPES, settings=(AGENT_NAMESPACES, ALLOWED_CAPABILITIES),
        check=_pod_check(lambda site, cfg: privilege_problems(site.spec, cfg[ALLOWED_CAPABILITIES.name]),
                         exempt_agents=True),
    ),
    resource_policy(
        name="pods-run-as-non-root",
        description="Outside node-agent namespaces, every container runs with runAsNonRoot.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Set securityContext.runAsNonRoot: true and a non-zero runAsUser on the pod or each container "
                    "(components.k8s.security.pod_security_context).",
        types=POD_TYPES, settings=(AGENT_NAMESPACES,),
        check=_pod_check(lambda site, cfg: root_problems(site.spec, complete=site.complete), exempt_agents=True),
    ),
    resource_policy(
        name="gpu-limits-equal-requests",
        description="Containers that request GPUs or MIG slices set limits equal to requests.",
        severity=Severity.MEDIUM, enforcement=MANDATORY,
        remediation="Set resources.limits for nvidia.com/gpu (and nvidia.com/mig-*) to the same quantity as "
                    "resources.requests (components.k8s.security.resources(extra=...) does both).",
        types=POD_TYPES,
        check=_pod_check(lambda site, cfg: gpu_limit_problems(site.spec), exempt_agents=False),
    ),
    resource_policy(
        name="gpu-pods-on-gpu-pools",
        description="Pods that request GPUs select a GPU pool by node label and tolerate only GPU taints.",
        severity=Severity.MEDIUM, enforcement=ADVISORY,
        remediation="Add nodeSelector {aifactory.io/pool: <gpu pool>} and keep only tolerations of GPU taints.",
        types=POD_TYPES, settings=(POOL_LABEL_KEY, GPU_TAINT_KEYS),
        check=_pod_check(lambda site, cfg: gpu_placement_problems(site.spec, cfg[POOL_LABEL_KEY.name],
                                                                  cfg[GPU_TAINT_KEYS.name]), exempt_agents=False),
    ),
    resource_policy(
        name="cpu-pods-avoid-gpu-nodes",
        description="Outside node-agent namespaces, pods that request no GPUs never tolerate the GPU taint.",
        severity=Severity.MEDIUM, enforcement=MANDATORY,
        remediation="Remove the toleration of the GPU taint (and any toleration without a key): pods without "
                    "GPUs belong on CPU nodes.",
        types=POD_TYPES, settings=(AGENT_NAMESPACES, GPU_TAINT_KEYS),
        check=_pod_check(lambda site, cfg: gpu_toleration_problems(site.spec, cfg[GPU_TAINT_KEYS.name]),
                         exempt_agents=True),
    ),
    resource_policy(
        name="external-services-gateway-only",
        description="Only the inference gateway's Services are of type LoadBalancer or NodePort.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Use type ClusterIP and route external traffic through the gateway.",
        types=(kube.SERVICE,), check=_service_check, settings=(GATEWAY_NAMESPACES,),
    ),
    resource_policy(
        name="images-pinned",
        description="Container images are pinned: a version tag or digest, never 'latest'.",
        severity=Severity.MEDIUM, enforcement=MANDATORY,
        remediation="Reference images as registry/name:version or registry/name@sha256:digest.",
        types=POD_TYPES,
        check=_pod_check(lambda site, cfg: pin_problems(site.spec, complete=site.complete), exempt_agents=False),
    ),
    resource_policy(
        name="images-from-allowed-registries",
        description="Container images come from the allowed registries.",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Mirror the image into an allowed registry, or add its registry to allowedRegistries in the "
                    "pack config after review.",
        types=POD_TYPES, settings=(ALLOWED_REGISTRIES,),
        # The configured list extends the kit's defaults (the platform's own images must stay allowed).
        check=_pod_check(lambda site, cfg: source_problems(
            site.spec, [*ALLOWED_REGISTRIES.default, *cfg[ALLOWED_REGISTRIES.name]]), exempt_agents=False),
    ),
]
