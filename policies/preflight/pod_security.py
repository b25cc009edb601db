"""Rule pod-security-admission: every pod, with what sidecar injection adds, meets its namespace's enforce
level (kubernetes.io/docs/concepts/security/pod-security-standards, `latest`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies import kube
from policies.preflight.pods import mesh_of, pod_templates, sidecar_injected
from policies.preflight.resources import Finding, Res, namespace_labels

__all__ = [
    "PSA_ENFORCE",
    "PSS_LEVELS",
    "BASELINE_CAPABILITIES",
    "RESTRICTED_VOLUMES",
    "SAFE_SYSCTLS",
    "pss_violations",
    "pod_security_findings",
]


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
    namespaces = namespace_labels(resources)
    out = []
    for t in pod_templates(resources):
        labels = namespaces.get(t.namespace, {})
        level = str(labels.get(PSA_ENFORCE, "privileged"))
        spec = dict(t.spec)
        injected = mesh is not None and sidecar_injected(labels, t.meta)
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
