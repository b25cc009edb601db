"""Reading Kubernetes resources as the engine passes them (camelCase props): where pod specs live,
their containers, images, tolerations and node targeting, and the pod fragments of Helm values.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.base import is_seq

__all__ = [
    "expression_matches",
    "selector_matches",
    "HELM_RELEASE",
    "NAMESPACE",
    "SERVICE",
    "NETWORK_POLICY",
    "RESOURCE_QUOTA",
    "POD_TEMPLATE_PATHS",
    "GPU_RESOURCE",
    "PodSite",
    "kind_of",
    "namespace_of",
    "name_of",
    "pod_sites",
    "helm_pod_fragments",
    "containers",
    "gpu_resources",
    "quantity",
    "requests_gpu",
    "tolerated_keys",
    "targeted_label_keys",
    "env_value",
    "Image",
    "parse_image",
    "registry_allowed",
]

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
SERVICE = "kubernetes:core/v1:Service"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
RESOURCE_QUOTA = "kubernetes:core/v1:ResourceQuota"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

_TEMPLATE = ("spec", "template", "spec")
# Where each workload kind keeps its pod specs.
POD_TEMPLATE_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "kubernetes:core/v1:Pod": (("spec",),),
    "kubernetes:apps/v1:Deployment": (_TEMPLATE,),
    "kubernetes:apps/v1:StatefulSet": (_TEMPLATE,),
    "kubernetes:apps/v1:DaemonSet": (_TEMPLATE,),
    "kubernetes:apps/v1:ReplicaSet": (_TEMPLATE,),
    "kubernetes:batch/v1:Job": (_TEMPLATE,),
    "kubernetes:batch/v1:CronJob": (("spec", "jobTemplate", "spec", "template", "spec"),),
    "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet": (
        ("spec", "leaderWorkerTemplate", "leaderTemplate", "spec"),
        ("spec", "leaderWorkerTemplate", "workerTemplate", "spec"),
    ),
}


@dataclass(frozen=True, slots=True)
class PodSite:
    """One pod spec a resource creates. `complete` is False for fragments of Helm values, where an
    absent field means the chart's default rather than Kubernetes' default."""

    namespace: str
    where: str
    spec: Mapping[str, Any]
    complete: bool = True


def kind_of(resource_type: str) -> tuple[str, str]:
    """('security.istio.io', 'PeerAuthentication') from kubernetes:security.istio.io/v1:PeerAuthentication."""
    if not resource_type.startswith("kubernetes:") or resource_type.count(":") != 2:
        return "", ""
    _, api_version, kind = resource_type.split(":")
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    return group, kind


def _get(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


# Kinds the Kubernetes API serves cluster-wide (`kubectl api-resources --namespaced=false`): they have no
# namespace, so "default" must not be read into them.
CLUSTER_SCOPED_KINDS = frozenset({
    "Namespace", "Node", "NodePatch", "PersistentVolume", "StorageClass", "ClusterRole", "ClusterRoleBinding",
    "CustomResourceDefinition", "PriorityClass", "RuntimeClass", "IngressClass", "CSIDriver",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "APIService",
})


def namespace_of(props: Mapping[str, Any]) -> str:
    return _get(props, "metadata", "namespace") or "default"


def name_of(props: Mapping[str, Any]) -> str:
    return _get(props, "metadata", "name") or ""


def pod_sites(resource_type: str, props: Mapping[str, Any]) -> list[PodSite]:
    """Every pod spec the resource creates: workload templates, and pod fragments of Helm values."""
    if resource_type == HELM_RELEASE:
        ns = props.get("namespace") or "default"
        return [PodSite(ns, f"values.{path}" if path else "values", spec, complete=False)
                for path, spec in helm_pod_fragments(props.get("values") or {})]
    ns = namespace_of(props)
    out = []
    for path in POD_TEMPLATE_PATHS.get(resource_type, ()):
        spec = _get(props, *path)
        if isinstance(spec, Mapping):
            out.append(PodSite(ns, ".".join(path), spec))
    return out


def helm_pod_fragments(values: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Pod specs found in Helm values: embedded pod specs (a `containers` list) as they are, and every
    mapping that sets pod keys (image, securityContext, tolerations, resources, env, host namespaces)
    as a one-container pod spec."""
    if not isinstance(values, Mapping):
        return
    if is_seq(values.get("containers")):
        yield path, values
    elif _sets_pod_keys(values):
        yield path, _fragment_spec(path, values)
    for key, child in values.items():
        child_path = f"{path}.{key}" if path else str(key)
        if isinstance(child, Mapping):
            yield from helm_pod_fragments(child, child_path)
        elif is_seq(child) and key != "containers":
            for i, item in enumerate(child):
                yield from helm_pod_fragments(item, f"{child_path}[{i}]")


def _sets_pod_keys(values: Mapping[str, Any]) -> bool:
    """Whether a values mapping configures pods: keys of a pod spec, with values of a pod spec's shape
    (so RBAC `resources` lists or a `hostNetwork` that is not a boolean do not count)."""
    resources = values.get("resources")
    return (isinstance(values.get("image"), str | Mapping)
            or any(isinstance(values.get(k), Mapping)
                   for k in ("securityContext", "containerSecurityContext", "podSecurityContext"))
            or any(isinstance(values.get(k), bool) for k in ("hostNetwork", "hostPID", "hostIPC"))
            or is_seq(values.get("tolerations")) or is_seq(values.get("env"))
            or (isinstance(resources, Mapping) and bool({"requests", "limits"} & set(resources))))


def _fragment_spec(path: str, values: Mapping[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = {"name": path or "values"}
    image = _helm_image(values.get("image"))
    if image:
        container["image"] = image
    sc = values.get("securityContext") or values.get("containerSecurityContext")
    for key, value in (("securityContext", sc), ("resources", values.get("resources")),
                       ("env", values.get("env"))):
        if value:
            container[key] = value
    spec: dict[str, Any] = {"containers": [container]}
    for key in ("hostNetwork", "hostPID", "hostIPC", "tolerations", "nodeSelector", "affinity"):
        if values.get(key) is not None:
            spec[key] = values[key]
    if isinstance(values.get("podSecurityContext"), Mapping):
        spec["securityContext"] = values["podSecurityContext"]
    return spec


def _helm_image(image: Any) -> str:
    """An image reference from the usual Helm shapes: a string; {registry, repository, tag|digest};
    NVIDIA's {repository, image, version} (a missing tag means the chart's own appVersion)."""
    if isinstance(image, str):
        return image
    if not isinstance(image, Mapping) or not isinstance(image.get("repository"), str):
        return ""
    ref = image["repository"]
    if isinstance(image.get("registry"), str) and image["registry"]:
        ref = f"{image['registry']}/{ref}"
    if isinstance(image.get("image"), str):
        ref = f"{ref}/{image['image']}"
    tag = image.get("tag") or image.get("version")
    if image.get("digest"):
        return f"{ref}@{image['digest']}"
    return f"{ref}:{tag}" if tag else ref


def containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for key in ("initContainers", "containers", "ephemeralContainers"):
        items = spec.get(key)
        if is_seq(items):
            out.extend(c for c in items if isinstance(c, Mapping))
    return out


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _is_gpu(resource: str) -> bool:
    return resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)


def gpu_resources(container: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(requests, limits) of GPU and MIG resources, quantities as strings."""
    res = _mapping(container.get("resources"))
    requests, limits = (
        {k: quantity(v) for k, v in _mapping(res.get(part)).items() if _is_gpu(k)} for part in ("requests", "limits"))
    return requests, limits


def quantity(value: Any) -> str:
    """A resource quantity as Kubernetes writes it: 8, 8.0 and "8" are all "8"."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def requests_gpu(spec: Mapping[str, Any]) -> bool:
    for c in containers(spec):
        req, lim = gpu_resources(c)
        if any(v not in ("0", "") for v in (*req.values(), *lim.values())):
            return True
    return False


def tolerated_keys(spec: Mapping[str, Any]) -> list[str]:
    """Taint keys the pod tolerates; '*' for a toleration that tolerates every taint (no key, Exists)."""
    out = []
    for t in spec.get("tolerations") or ():
        if isinstance(t, Mapping):
            out.append(t.get("key") or ("*" if t.get("operator") == "Exists" else ""))
    return [k for k in out if k]


def targeted_label_keys(spec: Mapping[str, Any]) -> set[str]:
    """Node label keys the pod requires: nodeSelector keys, and keys every required affinity term names."""
    keys = set((spec.get("nodeSelector") or {}).keys()) if isinstance(spec.get("nodeSelector"), Mapping) else set()
    terms = _get(spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                 "nodeSelectorTerms")
    if is_seq(terms) and terms:
        per_term = [{e.get("key") for e in (t.get("matchExpressions") or ()) if isinstance(e, Mapping)
                     and e.get("operator") == "In"} for t in terms if isinstance(t, Mapping)]
        if per_term:
            keys |= set.intersection(*per_term)
    return keys


def env_value(container: Mapping[str, Any], name: str) -> str | None:
    env = container.get("env")
    if isinstance(env, Mapping):
        value = env.get(name)
        return None if value is None else str(value)
    for item in env or ():
        if isinstance(item, Mapping) and item.get("name") == name:
            return None if item.get("value") is None else str(item.get("value"))
    return None


@dataclass(frozen=True, slots=True)
class Image:
    registry: str
    path: str
    tag: str
    digest: str

    @property
    def source(self) -> str:
        return f"{self.registry}/{self.path}"


def parse_image(ref: str) -> Image:
    """Docker's normalisation: nginx -> docker.io/library/nginx; a first part with '.' or ':' is a host."""
    rest, _, digest = ref.partition("@")
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = "docker.io", rest if sep else f"library/{rest}"
    last = path.rsplit("/", 1)[-1]
    tag = ""
    if ":" in last:
        path, _, tag = path.rpartition(":")
    return Image(registry, path, tag, digest)


def registry_allowed(image: Image, allowed: Sequence[str]) -> bool:
    source = image.source
    return any(fnmatch.fnmatchcase(source, pattern) or fnmatch.fnmatchcase(source, f"{pattern}/*")
               for pattern in allowed)


def expression_matches(expr: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """One label-selector requirement (In, NotIn, Exists, DoesNotExist; Gt and Lt of node affinity) against labels."""
    key, op, values = str(expr.get("key")), expr.get("operator"), [str(v) for v in expr.get("values") or ()]
    if op == "In":
        return key in labels and str(labels[key]) in values
    if op == "NotIn":
        return key not in labels or str(labels[key]) not in values
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


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """A label selector's matchLabels and matchExpressions against labels."""
    match = selector.get("matchLabels")
    if isinstance(match, Mapping) and any(labels.get(k) != v for k, v in match.items()):
        return False
    return all(expression_matches(e, labels) for e in selector.get("matchExpressions") or ())
