"""Rule native-sidecars: a meshed pod whose Istio sidecar would be a classic one, where that breaks the pod.

Istio 1.28.3 injects the proxy as a native sidecar (an init container with restartPolicy Always, started before the
pod's other init containers and stopped after its containers) when istiod's ENABLE_NATIVE_SIDECARS is `true`, or
`auto` (its default) and every node's kubelet is 1.33 or later; `false`, or one older node anywhere in the cluster,
makes every injected sidecar a classic container; a pod's `sidecar.istio.io/nativeSidecar` annotation overrides
either way (istio/istio@1.28.3: pilot/pkg/features/pilot.go EnableNativeSidecars, pkg/kube/inject/webhook.go
DetectNativeSidecar and reorderPod, pkg/kube/inject/inject.go). A classic sidecar breaks a pod of the kit twice:

- its init containers have no network: the Istio CNI plugin redirects the pod's traffic to the proxy from the
  pod's network set-up on, and a classic proxy starts only with the containers, after the init containers
  (istio.io docs, "Install Istio CNI node agent", compatibility with application init containers). The kit's
  `fetch-model` (an s3:// model) never copies its model and the pod never starts. (Without CNI, istio-init runs last
  and the init containers run before any redirect.)
- its drain: it gets SIGTERM with the engine, when the pod starts terminating, and exits terminationDrainDuration
  later (default 5 s: pkg/envoy/agent.go terminate, pkg/config/mesh/mesh.go), cutting the requests the engine still
  drains within its grace period. The kit's pods set that duration to their grace (`proxy.istio.io/config`,
  components.k8s.serving.lifecycle), which covers it (at a price: such a pod then lives its whole grace period); a
  pod without it is a finding.

The nodes' version is the state's EKS node groups' (their `version`, else the cluster's), or an existing cluster's
declared `kubernetesVersion` (the config's; `aifactory preflight` passes it): nodes outside the kit's pools count
too, which a state cannot show.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from policies import kube
from policies.preflight.drain import grace_seconds
from policies.preflight.pods import ISTIO_CHART, pod_templates, sidecar_injected
from policies.preflight.resources import EKS_CLUSTER, NODE_GROUP, Finding, Res, chart_of, get_path, namespace_labels

__all__ = [
    "NATIVE_SIDECARS_ENV",
    "NATIVE_SIDECAR_ANNOTATION",
    "PROXY_CONFIG_ANNOTATION",
    "NATIVE_SIDECAR_MIN_MINOR",
    "DEFAULT_TERMINATION_DRAIN_SECONDS",
    "sidecar_findings",
]

RULE = "native-sidecars"
NATIVE_SIDECARS_ENV = "ENABLE_NATIVE_SIDECARS"  # istiod's environment (chart values pilot.env)
NATIVE_SIDECAR_ANNOTATION = "sidecar.istio.io/nativeSidecar"  # "true" / "false" on the pod
PROXY_CONFIG_ANNOTATION = "proxy.istio.io/config"  # the pod's ProxyConfig overrides (YAML or JSON)
NATIVE_SIDECAR_MIN_MINOR = 33  # DetectNativeSidecar's minVersion: native sidecars are stable from Kubernetes 1.33
DEFAULT_TERMINATION_DRAIN_SECONDS = 5.0  # ProxyConfig.terminationDrainDuration's default
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s|ms)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_FIX = (f"Run every node at Kubernetes 1.{NATIVE_SIDECAR_MIN_MINOR} or later (kubernetesVersion), and leave istiod's "
        f"{NATIVE_SIDECARS_ENV} at auto or true")


def _seconds(duration: Any) -> float | None:
    """A protobuf duration as Istio reads it ("75s", "1m30s"), in seconds; None when it is not one."""
    text = str(duration).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def _minor(version: Any) -> int | None:
    match = re.fullmatch(r"v?1\.(\d+)(\..*)?", str(version or "").strip())
    return int(match.group(1)) if match else None


def _oldest_nodes(resources: Sequence[Res], declared: str | None) -> tuple[int, str] | None:
    """The oldest kubelet minor the stack's nodes run, and where it is said: the EKS node groups' versions (a node
    group without one runs its cluster's), else the declared version of an existing cluster."""
    cluster = next((r for r in resources if r.type == EKS_CLUSTER), None)
    if cluster is not None:
        default = str(cluster.props.get("version") or "")
        groups = sorted((m, str(r.props.get("version") or default), r.label) for r in resources if r.type == NODE_GROUP
                        if (m := _minor(r.props.get("version") or default)) is not None)
        if groups and groups[0][1] != default:  # a node group behind its cluster
            return groups[0][0], f"node group {groups[0][2]} at Kubernetes {groups[0][1]}"
        where, minor = f"EKS cluster {cluster.label} and its node groups at Kubernetes {default}", _minor(default)
    else:
        where, minor = f"the cluster's declared kubernetesVersion {declared}", _minor(declared)
    return (minor, where) if minor is not None else None


def _classic_reason(resources: Sequence[Res], istiod: Res, declared: str | None) -> str | None:
    """Why istiod injects classic sidecars by default (None: native ones, or nothing says)."""
    mode = str(get_path(istiod.props, "values", "pilot", "env", NATIVE_SIDECARS_ENV, default="auto")).lower()
    if mode == "false":
        return f"{istiod.label} sets pilot.env.{NATIVE_SIDECARS_ENV} false"
    if mode == "true":
        return None
    oldest = _oldest_nodes(resources, declared)
    if oldest is None or oldest[0] >= NATIVE_SIDECAR_MIN_MINOR:
        return None
    return (f"{oldest[1]}: with {NATIVE_SIDECARS_ENV}=auto Istio injects native sidecars only when every node's "
            f"kubelet is 1.{NATIVE_SIDECAR_MIN_MINOR} or later")


def _drain_seconds(annotations: Mapping[str, Any], mesh_default: float) -> float:
    """The sidecar's terminationDrainDuration: the pod's ProxyConfig annotation, else the mesh's."""
    try:
        config = yaml.safe_load(str(annotations.get(PROXY_CONFIG_ANNOTATION) or "")) or {}
    except yaml.YAMLError:
        config = {}
    value = _seconds(config.get("terminationDrainDuration")) if isinstance(config, Mapping) else None
    return mesh_default if value is None else value


def sidecar_findings(resources: Sequence[Res], *, kubernetes_version: str | None = None) -> list[Finding]:
    """Each injected pod template that a classic sidecar breaks: init containers (under the Istio CNI plugin), and a
    grace period longer than the sidecar's drain. `kubernetes_version`: an existing cluster's declared version."""
    istiod = next((r for r in resources if r.type == kube.HELM_RELEASE and chart_of(r) == ISTIO_CHART), None)
    if istiod is None:
        return []
    default_reason = _classic_reason(resources, istiod, kubernetes_version)
    cni = get_path(istiod.props, "values", "pilot", "cni", "enabled", default=False) is True
    mesh_drain = _seconds(get_path(istiod.props, "values", "meshConfig", "defaultConfig",
                                   "terminationDrainDuration")) or DEFAULT_TERMINATION_DRAIN_SECONDS
    namespaces = namespace_labels(resources)
    out = []
    for t in pod_templates(resources):
        if not sidecar_injected(namespaces.get(t.namespace, {}), t.meta):
            continue
        annotations = t.meta.get("annotations") or {}
        native = str(annotations.get(NATIVE_SIDECAR_ANNOTATION, "")).lower()
        reason = (f"its {NATIVE_SIDECAR_ANNOTATION} annotation is false" if native == "false"
                  else None if native == "true" else default_reason)
        if reason is None:
            continue
        inits = [str(c.get("name")) for c in t.spec.get("initContainers") or ()]
        if inits and cni:
            out.append(Finding(
                RULE, t.label,
                f"its Istio sidecar is a classic one ({reason}): its init containers ({', '.join(inits)}) run before "
                "the proxy starts while the Istio CNI plugin already redirects the pod's traffic to it, so their "
                "connections fail and the pod never starts",
                f"{_FIX}; or give the init containers a network of their own (runAsUser 1337, or the "
                "traffic.sidecar.istio.io/excludeOutbound* annotations).", t.res.urn))
        grace = grace_seconds(t.spec)
        drain = _drain_seconds(annotations, mesh_drain)
        if drain < grace:
            out.append(Finding(
                RULE, t.label,
                f"its Istio sidecar is a classic one ({reason}): it gets SIGTERM when the pod starts terminating and "
                f"exits {drain:g} s later (terminationDrainDuration), cutting the requests the pod still serves "
                f"during its {grace:g} s grace period",
                f"{_FIX}; or set the pod's {PROXY_CONFIG_ANNOTATION} annotation to "
                f"{{\"terminationDrainDuration\": \"{grace:g}s\"}} (the kit's model and gateway pods do).", t.res.urn))
    return out
