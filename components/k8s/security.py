"""Secure pod defaults for every workload the kit runs itself (cdk8s-plus style, overridable).

runAsNonRoot, a non-root UID, seccomp RuntimeDefault, no privilege escalation, every capability
dropped, a read-only root filesystem where the image allows it, no service-account token unless the
workload talks to the API server, and requests and limits always set.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_UID", "pod_security_context", "container_security_context", "resources"]

DEFAULT_UID = 65532  # the conventional "nonroot" UID of distroless images


def pod_security_context(*, uid: int = DEFAULT_UID, fs_group: int | None = None) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if fs_group is not None:
        ctx["fsGroup"] = fs_group
    return ctx


def container_security_context(*, read_only_root: bool = True, add_capabilities: tuple[str, ...] = ()
                               ) -> dict[str, Any]:
    caps: dict[str, Any] = {"drop": ["ALL"]}
    if add_capabilities:
        caps["add"] = list(add_capabilities)
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": read_only_root,
        "runAsNonRoot": True,
        "capabilities": caps,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def resources(cpu: str, memory: str, *, cpu_limit: str | None = None, memory_limit: str | None = None,
              extra: dict[str, str | int] | None = None) -> dict[str, Any]:
    """Requests and limits; `extra` (GPUs, EFA, hugepages, RDMA) goes into both, equal."""
    req: dict[str, Any] = {"cpu": cpu, "memory": memory}
    lim: dict[str, Any] = {"cpu": cpu_limit or cpu, "memory": memory_limit or memory}
    for k, v in (extra or {}).items():
        req[k] = str(v)
        lim[k] = str(v)
    return {"requests": req, "limits": lim}
