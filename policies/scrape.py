"""Prometheus scrapes of meshed pods: every ServiceMonitor / PodMonitor endpoint that reaches a port the Istio
sidecar captures, in a namespace with sidecar injection, presents the mesh's workload certificate over TLS.

Under STRICT mTLS the sidecar refuses plain HTTP on every port it captures, and Prometheus's own scrape traffic
bypasses its sidecar (it only mounts the certificate), so a plain-HTTP endpoint there is a target that is always down
and a set of series that never exists (issue 44: the token budget service's, with every budget alert on them).

Which pods an endpoint reaches is read from the rendered objects: a ServiceMonitor's Services (by label, in the
namespaces it selects), the Service's port by name, its targetPort resolved in the containers of the workloads the
Service selects, and those pods' capture annotations. An endpoint whose pods the stack does not render (a chart's)
counts as captured: in an injected namespace that is the sidecar's default.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import Severity

from policies import kube
from policies.base import MANDATORY, is_seq, stack_policy
from policies.preflight.pods import ISTIO_INJECT_POD_LABEL, ISTIO_INJECTION_LABEL

__all__ = ["POLICIES", "MeshScrape", "mesh_scrapes", "plain_mesh_scrapes", "injected_namespaces"]

MONITORING_GROUP = "monitoring.coreos.com"
REVISION_LABEL = "istio.io/rev"
INCLUDE_INBOUND = "traffic.sidecar.istio.io/includeInboundPorts"
EXCLUDE_INBOUND = "traffic.sidecar.istio.io/excludeInboundPorts"
# The sidecar's own Prometheus port: declared by the injected istio-proxy container and never redirected into it
# (istio/istio@1.28.3: manifests/charts/istio-control/istio-discovery/files/injection-template.yaml, containerPort
# 15090 named http-envoy-prom; excluded from inbound capture with 15021 and 15020).
SIDECAR_OWN_PORTS = {"http-envoy-prom": 15090}
SIDECAR_OWN_NUMBERS = frozenset({15020, 15021, 15090})
TLS_FILES = ("caFile", "certFile", "keyFile")


@dataclass(frozen=True, slots=True)
class MeshScrape:
    """One monitor endpoint that reaches a captured port of pods in an injected namespace."""

    kind: str  # ServiceMonitor or PodMonitor
    monitor: str  # namespace/name
    index: int  # the endpoint's position in the monitor's endpoints
    port: str  # the endpoint's port (name or number)
    namespace: str  # the injected namespace of the pods it reaches
    endpoint: Mapping[str, Any]
    urn: str | None


def _labels(props: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    value = kube._get(props, *path)
    return value if isinstance(value, Mapping) else {}


def injected_namespaces(resources: Sequence[Any]) -> set[str]:
    """Namespaces the stack creates with sidecar injection on (istio-injection=enabled, or a revision label)."""
    out = set()
    for r in resources:
        if r.resource_type == kube.NAMESPACE:
            labels = _labels(r.props, "metadata", "labels")
            if labels.get(ISTIO_INJECTION_LABEL) == "enabled" or (REVISION_LABEL in labels
                                                            and labels.get(ISTIO_INJECTION_LABEL) != "disabled"):
                out.add(kube.name_of(r.props))
    return out


def _targets(props: Mapping[str, Any], injected: set[str]) -> list[str]:
    sel = _labels(props, "spec", "namespaceSelector")
    if sel.get("any"):
        return sorted(injected)
    names = sel.get("matchNames")
    return sorted(n for n in (names if is_seq(names) else [kube.namespace_of(props)]) if n in injected)


@dataclass(frozen=True, slots=True)
class _Pods:
    namespace: str
    labels: Mapping[str, Any]
    annotations: Mapping[str, Any]
    spec: Mapping[str, Any]


def _pods(resources: Sequence[Any]) -> list[_Pods]:
    out = []
    for r in resources:
        for path in kube.POD_TEMPLATE_PATHS.get(r.resource_type, ()):
            spec = kube._get(r.props, *path)
            if isinstance(spec, Mapping):
                meta = _labels(r.props, *path[:-1], "metadata") if path != ("spec",) else _labels(r.props, "metadata")
                out.append(_Pods(kube.namespace_of(r.props), _labels(meta, "labels"), _labels(meta, "annotations"),
                                 spec))
    return out


def _number(pods: _Pods, port: Any) -> int | None:
    if isinstance(port, int):
        return port
    for c in pods.spec.get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == port and isinstance(p.get("containerPort"), int):
                return int(p["containerPort"])
    return SIDECAR_OWN_PORTS.get(str(port))


def _ports(value: Any) -> set[str]:
    return {p.strip() for p in str(value or "").split(",") if p.strip()}


def _captured(pods: _Pods, port: Any) -> bool:
    """Whether the pods' sidecar redirects inbound traffic to `port` (name or number) into itself."""
    opt_out = pods.labels.get(ISTIO_INJECT_POD_LABEL, pods.annotations.get(ISTIO_INJECT_POD_LABEL, ""))
    if str(opt_out).lower() == "false":
        return False
    number = _number(pods, port)
    if number is None:
        return True  # a port no container declares: the sidecar's default, capture
    if number in SIDECAR_OWN_NUMBERS or str(number) in _ports(pods.annotations.get(EXCLUDE_INBOUND)):
        return False
    if INCLUDE_INBOUND not in pods.annotations:
        return True  # Istio's default: every port
    # present: only the ports it lists; an empty list turns inbound capture off (istio/istio@1.28.3
    # manifests/charts/istio-control/istio-discovery/files/injection-template.yaml; Istio's annotation reference)
    include = _ports(pods.annotations.get(INCLUDE_INBOUND))
    return "*" in include or str(number) in include


def _service_ports(resources: Sequence[Any], pods: list[_Pods], namespace: str, selector: Mapping[str, Any],
                   port: Any) -> Iterator[bool]:
    """Per (Service, selected pods) pair the endpoint reaches: whether the port is captured."""
    for r in resources:
        if r.resource_type != kube.SERVICE or kube.namespace_of(r.props) != namespace or \
                not kube.selector_matches(selector, _labels(r.props, "metadata", "labels")):
            continue
        for sp in kube._get(r.props, "spec", "ports") or []:
            if sp.get("name") != port and not (isinstance(port, int) and sp.get("port") == port):
                continue
            target = sp.get("targetPort", sp.get("port"))
            chosen = _labels(r.props, "spec", "selector")
            selected = [p for p in pods if p.namespace == namespace and chosen and
                        all(p.labels.get(k) == v for k, v in chosen.items())]
            yield from ([_captured(p, target) for p in selected] or [True])


def mesh_scrapes(resources: Sequence[Any]) -> list[MeshScrape]:
    """Every monitor endpoint that reaches a port the sidecar captures in an injected namespace."""
    injected = injected_namespaces(resources)
    pods = _pods(resources)
    out = []
    for r in resources:
        group, kind = kube.kind_of(r.resource_type)
        if group != MONITORING_GROUP or kind not in ("ServiceMonitor", "PodMonitor"):
            continue
        spec = _labels(r.props, "spec")
        selector = _labels(spec, "selector")
        endpoints = spec.get("endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints") or []
        monitor = f"{kube.namespace_of(r.props)}/{kube.name_of(r.props)}"
        for ns in _targets(r.props, injected):
            for i, ep in enumerate(endpoints):
                port = ep.get("port", ep.get("targetPort"))
                if kind == "ServiceMonitor":
                    reached = list(_service_ports(resources, pods, ns, selector, port)) or [True]
                else:
                    selected = [p for p in pods if p.namespace == ns and kube.selector_matches(selector, p.labels)]
                    reached = [_captured(p, port) for p in selected] or \
                        [str(port) not in SIDECAR_OWN_PORTS and port not in SIDECAR_OWN_NUMBERS]
                if any(reached):
                    out.append(MeshScrape(kind, monitor, i, str(port), ns, ep, getattr(r, "urn", None)))
    return out


def _uses_mesh_tls(ep: Mapping[str, Any]) -> bool:
    tls = ep.get("tlsConfig")
    return ep.get("scheme") == "https" and isinstance(tls, Mapping) and all(tls.get(k) for k in TLS_FILES)


def plain_mesh_scrapes(resources: Sequence[Any]) -> list[tuple[str, str | None]]:
    out = []
    for s in mesh_scrapes(resources):
        if s.kind == "PodMonitor":
            fix = "a PodMonitor cannot present the certificate (its tlsConfig has no file fields): use a ServiceMonitor"
        elif _uses_mesh_tls(s.endpoint):
            continue
        else:
            fix = (f"set scheme https and tlsConfig {', '.join(TLS_FILES)} (the workload certificate Prometheus's "
                   "sidecar writes)")
        out.append((f"{s.kind} {s.monitor} endpoint {s.index} (port {s.port!r}) scrapes pods of the mesh-injected "
                    f"namespace {s.namespace!r} on a port their sidecar captures without the mesh's mTLS: under "
                    f"STRICT mTLS the scrape is refused and its series never exist; {fix}", s.urn))
    return out


POLICIES = [
    stack_policy(
        name="mesh-scrapes-use-mtls",
        description="Prometheus scrapes of ports the Istio sidecar captures, in injected namespaces, use the mesh's "
                    "mTLS (scheme https and the workload certificate's files).",
        severity=Severity.HIGH, enforcement=MANDATORY,
        remediation="Spread components.k8s.mesh.MESH_SCRAPE_TLS into the ServiceMonitor endpoint, or exclude the "
                    "port from inbound capture (traffic.sidecar.istio.io/excludeInboundPorts) on purpose.",
        check=lambda resources, cfg: plain_mesh_scrapes(resources),
    ),
]
