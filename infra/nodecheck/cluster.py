"""Where the GPU operator's DCGM exporter of one node listens, found through the cluster with kubectl.

The GPU operator deploys dcgm-exporter as a DaemonSet of pods labelled `app=nvidia-dcgm-exporter` in the
operator's namespace, listening on container port 9400 (named `metrics`) on the POD network, behind a
ClusterIP Service `nvidia-dcgm-exporter`; it sets hostNetwork only when DCGM runs on the host and is
reached through localhost. So `curl 127.0.0.1:9400` on the node finds nothing on a healthy node.
(NVIDIA/gpu-operator v25.10.1, the version components/k8s/versions.py pins:
assets/state-dcgm-exporter/0800_daemonset.yaml, 0400_service.yaml, controllers/object_controls.go
`TransformDCGMExporter`.) node-check therefore asks the cluster for the exporter pod scheduled on the
node (kubectl on the machine running node-check, with the stack's kubeconfig) and fetches
`http://POD_IP:PORT/metrics` from the node itself, which reaches its own pods as the kubelet's probes do.
`nodePools.P.nodeCheck.dcgmExporterUrl` replaces the lookup (an exporter outside the operator).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from infra.nodecheck.probe import CannotRun, ClusterAccess

__all__ = [
    "DCGM_EXPORTER_LABEL",
    "DCGM_EXPORTER_PORT_NAME",
    "DEFAULT_DCGM_EXPORTER_PORT",
    "DEFAULT_KUBECTL_TIMEOUT_S",
    "ExporterPod",
    "Kubectl",
    "exporter_pods",
    "exporter_on_node",
    "node_of_url",
]

DCGM_EXPORTER_LABEL = "app=nvidia-dcgm-exporter"  # the operator's DaemonSet pod label
DCGM_EXPORTER_PORT_NAME = "metrics"  # the exporter container's port name
DEFAULT_DCGM_EXPORTER_PORT = 9400  # the exporter's port when the pod names none
DEFAULT_KUBECTL_TIMEOUT_S = 20  # one kubectl call, --request-timeout included


@dataclass(frozen=True, slots=True)
class Kubectl:
    """kubectl on the machine running node-check; `argv` is the program (tests replay recordings)."""

    kubeconfig: str | None = None  # default: kubectl's own ($KUBECONFIG, ~/.kube/config)
    context: str | None = None  # default: the kubeconfig's current-context
    argv: tuple[str, ...] = ("kubectl",)

    def json(self, args: Sequence[str]) -> Any:
        """`kubectl ARGS -o json` parsed; CannotRun with kubectl's own words when it fails."""
        flags = [f"--request-timeout={DEFAULT_KUBECTL_TIMEOUT_S}s"]
        flags += [f"--kubeconfig={self.kubeconfig}"] if self.kubeconfig else []
        flags += [f"--context={self.context}"] if self.context else []
        command = [*self.argv, *flags, *args, "-o", "json"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=DEFAULT_KUBECTL_TIMEOUT_S + 5,
                                  check=False)
        except FileNotFoundError:
            raise CannotRun(f"{self.argv[0]} not found on this machine: it finds the exporter pod on the node; "
                            "install kubectl or set nodePools.P.nodeCheck.dcgmExporterUrl") from None
        except subprocess.TimeoutExpired:
            limit = DEFAULT_KUBECTL_TIMEOUT_S + 5
            raise CannotRun(f"kubectl {' '.join(args)} did not answer within {limit} s") from None
        if done.returncode != 0:
            first = next((line.strip() for line in done.stderr.splitlines() if line.strip()), "")
            raise CannotRun(f"kubectl {' '.join(args)} failed (exit {done.returncode}): {first}")
        try:
            return json.loads(done.stdout)
        except json.JSONDecodeError:
            raise CannotRun(f"kubectl {' '.join(args)} printed no JSON") from None


@dataclass(frozen=True, slots=True)
class ExporterPod:
    name: str
    node: str
    host_ip: str
    pod_ip: str
    phase: str
    ready: bool
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.pod_ip}]" if ":" in self.pod_ip else self.pod_ip
        return f"http://{host}:{self.port}/metrics"


def _port(pod: dict[str, Any]) -> int:
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports", []):
            if port.get("name") == DCGM_EXPORTER_PORT_NAME:
                return int(port["containerPort"])
    return DEFAULT_DCGM_EXPORTER_PORT


def exporter_pods(doc: dict[str, Any]) -> list[ExporterPod]:
    """The exporter pods of a `kubectl get pods -o json` List."""
    pods = []
    for pod in doc.get("items", []):
        status = pod.get("status", {})
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))
        pods.append(ExporterPod(pod.get("metadata", {}).get("name", ""), pod.get("spec", {}).get("nodeName", ""),
                                status.get("hostIP", ""), status.get("podIP", ""), status.get("phase", ""), ready,
                                _port(pod)))
    return pods


def _same_host(a: str, b: str) -> bool:
    """Node names compare case-insensitively; a short name equals its FQDN (ip-10-1-2-3 ~ ip-10-1-2-3.ec2.internal)."""
    a, b = a.lower().rstrip("."), b.lower().rstrip(".")
    return bool(a) and (a == b or a.split(".")[0] == b.split(".")[0] and ("." not in a or "." not in b))


def exporter_on_node(pods: Sequence[ExporterPod], *, names: Sequence[str], addresses: Sequence[str],
                     namespace: str) -> ExporterPod:
    """The exporter pod on the node known by `names` (kernel hostname, pod's node) or `addresses` (host IPs)."""
    mine = [p for p in pods if any(_same_host(p.node, n) for n in names) or (p.host_ip and p.host_ip in addresses)]
    known = ", ".join(sorted(p.node for p in pods)) or "none"
    who = " / ".join([*names, *addresses])
    if not mine:
        raise CannotRun(f"no dcgm-exporter pod ({DCGM_EXPORTER_LABEL} in namespace {namespace}) on node {who}; "
                        f"pods run on: {known}")
    pod = mine[0]
    if pod.phase != "Running" or not pod.ready or not pod.pod_ip:
        raise CannotRun(f"dcgm-exporter pod {pod.name} on {pod.node} is {pod.phase or 'unknown'}"
                        f"{'' if pod.ready else ', not Ready'}")
    return pod


def node_of_url(url: str, kubectl: ClusterAccess) -> tuple[list[str], list[str]]:
    """What the host URL itself says about the node: (names, addresses).

    ssh://user@10.1.77.12 names the node's address; kubectl://POD?namespace=NS names a pod whose
    spec.nodeName is the node (asked through the cluster).
    """
    parts = urlsplit(url)
    if parts.scheme == "kubectl" and parts.hostname:
        namespace = parse_qs(parts.query).get("namespace", ["default"])[0]
        pod = kubectl.json(["get", "pod", parts.netloc.rsplit("@", 1)[-1], "-n", namespace])
        node = pod.get("spec", {}).get("nodeName", "")
        return ([node] if node else []), []
    host = parts.hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return ([host] if host and host != "localhost" else []), []
    return [], [host]
