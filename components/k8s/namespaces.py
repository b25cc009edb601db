"""Namespaces the platform creates: Pod Security level, sidecar injection and ownership labels.

Every namespace the kit owns is created by the kit (never by Helm's --create-namespace) so that its
Pod Security Admission level is explicit: `restricted` for tenants, `privileged` only where node
agents (drivers, device plugins, log collectors, node exporters) need host access.
"""

from __future__ import annotations

from typing import Literal

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming

__all__ = ["PodSecurityLevel", "PSA_LABEL_PREFIX", "ISTIO_INJECTION_LABEL", "namespace_labels", "create_namespace"]

PodSecurityLevel = Literal["restricted", "baseline", "privileged"]
PSA_LABEL_PREFIX = "pod-security.kubernetes.io"
ISTIO_INJECTION_LABEL = "istio-injection"


def namespace_labels(*, pod_security: PodSecurityLevel, kubernetes_version: str, injection: bool = False,
                     extra: dict[str, str] | None = None) -> dict[str, str]:
    """Labels of a kit-owned namespace. Audit and warn are always `restricted`, so a privileged
    namespace still reports what would not pass the strictest level."""
    labels = {
        **naming.MANAGED_BY,
        f"{PSA_LABEL_PREFIX}/enforce": pod_security,
        f"{PSA_LABEL_PREFIX}/enforce-version": f"v{kubernetes_version}",
        f"{PSA_LABEL_PREFIX}/audit": "restricted",
        f"{PSA_LABEL_PREFIX}/warn": "restricted",
    }
    if injection:
        labels[ISTIO_INJECTION_LABEL] = "enabled"
    return {**labels, **(extra or {})}


def create_namespace(resource_name: str, namespace: str, *, labels: dict[str, str],
                     opts: pulumi.ResourceOptions) -> k8s.core.v1.Namespace:
    return k8s.core.v1.Namespace(resource_name, metadata={"name": namespace, "labels": labels}, opts=opts)
