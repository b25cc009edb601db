"""The fidelity gate in the cluster: a ConfigMap `aifactory-fidelity` in the gateway namespace recording, per gated
workload, each variant's verdict (infra/fidelity.py) at the time the gateway's config was built.

It makes the gate visible to whoever reads the state (the policy pack's `fidelity-gate` policy compares it with the
variants the gateway's Envoy config routes) and to operators (`kubectl -n <gateway ns> get cm aifactory-fidelity`).

With `gateway.routing.<workload>.fidelity.job`, the evaluation also runs in the cluster as a Job `eval-<workload>`
in the gateway namespace: `aifactory eval` through the gateway's Service (the token from a Secret), scores pushed
to the OpenTelemetry Collector over OTLP/HTTP (its metrics pipeline exports them to Prometheus). Its pod template
carries the digest of what it evaluates (the variants' fingerprints, the suite), so a changed variant replaces the
Job and runs it again at the next deploy; `pulumi.com/skipAwait` keeps a long evaluation from holding the deploy.
The pod: its own ServiceAccount without a token, Pod Security restricted, no Istio sidecar (a Job whose sidecar
never exits never completes; the gateway authorises clients itself), and a NetworkPolicy that lets it reach only
the gateway's listener and the Collector's OTLP/HTTP port (DNS: the namespace's allow-dns policy).

The gate is the kit's own (its Job runs `aifactory eval <stack>`), so it is not in the component package; its
build functions read a FidelityView, which the kit's PlatformConfig satisfies, and nothing of infra/.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, security
from components.k8s.gateway import NAMESPACE_NAME_LABEL, service_url
from components.k8s.otel_config import OTLP_HTTP_PORT
from components.k8s.serving import register_object
from components.k8s.settings import Fidelity, NamespaceView
from components.k8s.verdicts import Verdict

__all__ = ["FidelityView", "Verdict", "GATE_CONFIG_MAP", "GATE_KEY", "EVAL_APP", "TOKEN_MOUNT", "gate_document",
           "gate_config_map", "job_name", "eval_service_account", "eval_network_policy", "eval_job", "FidelityGate"]

GATE_CONFIG_MAP = naming.FIDELITY_CONFIG_MAP
GATE_KEY = naming.FIDELITY_KEY
EVAL_APP = "fidelity-eval"  # app.kubernetes.io/name of the evaluation Jobs' pods, and their ServiceAccount
TOKEN_MOUNT = "/var/run/secrets/aifactory-eval"
EVALUATES_ANNOTATION = "aifactory.io/evaluates"  # digest of the variants' fingerprints and the suite
COLLECTOR_APP = "opentelemetry-collector"  # the Collector chart's pods (components/k8s/observability.py selects it)


class _GatewayView(Protocol):
    @property
    def namespace(self) -> str: ...

    @property
    def fidelity(self) -> Mapping[str, Fidelity]: ...  # the gated workloads


class FidelityView(Protocol):
    """What the gate reads of the stack: its name (the Job runs `aifactory eval <stack>`), the gateway's namespace and
    gates, the observability namespace (the Collector)."""

    @property
    def stack(self) -> str: ...

    @property
    def gateway(self) -> _GatewayView: ...

    @property
    def observability(self) -> NamespaceView: ...


def gate_document(cfg: FidelityView, verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """{workload: {suite, baseline, maxDrop, variants: {variant: {status, message}}}}, sorted."""
    out: dict[str, Any] = {}
    for workload, gate in sorted(cfg.gateway.fidelity.items()):
        out[workload] = {"suite": gate.suite, "baseline": gate.baseline, "maxDrop": gate.max_drop,
                         "variants": {v.variant: {"status": v.status, "message": v.message}
                                      for v in sorted(verdicts, key=lambda v: v.variant) if v.workload == workload}}
    return out


def gate_config_map(cfg: FidelityView, verdicts: Sequence[Verdict]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": GATE_CONFIG_MAP, "namespace": cfg.gateway.namespace,
                         "labels": {"app.kubernetes.io/name": GATE_CONFIG_MAP,
                                    "app.kubernetes.io/part-of": "aifactory"}},
            "data": {GATE_KEY: json.dumps(gate_document(cfg, verdicts), indent=2, sort_keys=True) + "\n"}}


def _meta(cfg: FidelityView, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": cfg.gateway.namespace,
            "labels": {"app.kubernetes.io/name": EVAL_APP, "app.kubernetes.io/part-of": "aifactory"}}


def job_name(workload: str) -> str:
    """`eval-<workload>`: a Job's name goes into its pods' `job-name` label, 63 characters at most."""
    name = f"eval-{workload}"
    if len(name) <= 63:
        return name
    return f"{name[:54].rstrip('-')}-{hashlib.sha256(workload.encode()).hexdigest()[:8]}"


def eval_service_account(cfg: FidelityView) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(cfg, EVAL_APP),
            "automountServiceAccountToken": False}


def eval_network_policy(cfg: FidelityView) -> dict[str, Any]:
    """Egress to the gateway's listener and the Collector's OTLP/HTTP port only; no ingress."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(cfg, EVAL_APP),
            "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": EVAL_APP}},
                     "policyTypes": ["Ingress", "Egress"], "ingress": [],
                     "egress": [
                         {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": naming.GATEWAY_APP}}}],
                          "ports": [{"protocol": "TCP", "port": naming.ENVOY_LISTENER_PORT}]},
                         {"to": [{"namespaceSelector": {"matchLabels": {
                             NAMESPACE_NAME_LABEL: cfg.observability.namespace}},
                                  "podSelector": {"matchLabels": {"app.kubernetes.io/name": COLLECTOR_APP}}}],
                          "ports": [{"protocol": "TCP", "port": OTLP_HTTP_PORT}]}]}}


def eval_job(cfg: FidelityView, workload: str, gate: Fidelity, *, evaluates: str) -> dict[str, Any]:
    """The Job that runs `aifactory eval` for `workload` (gate.job must be set)."""
    job = gate.job
    assert job is not None
    gateway = service_url(cfg.gateway.namespace)  # a name the gateway Service's routes match, sidecar or not
    collector = f"http://{naming.OTEL_COLLECTOR_SERVICE}.{cfg.observability.namespace}.svc:{OTLP_HTTP_PORT}"
    command = ["aifactory", "eval", cfg.stack, "--workload", workload, "--url", gateway,
               "--token-file", f"{TOKEN_MOUNT}/{job.token_secret.key}", "--no-record", "--otlp-endpoint", collector]
    pod = {
        "metadata": {"labels": {"app.kubernetes.io/name": EVAL_APP, "aifactory.io/workload": workload,
                                "sidecar.istio.io/inject": "false"},
                     "annotations": {EVALUATES_ANNOTATION: evaluates}},
        "spec": {
            "serviceAccountName": EVAL_APP, "automountServiceAccountToken": False, "restartPolicy": "Never",
            "securityContext": security.pod_security_context(),
            "containers": [{
                "name": "eval", "image": job.image, "command": command,
                "env": [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HOME", "value": "/tmp/hf"}],
                "securityContext": security.container_security_context(),
                "resources": security.resources("500m", "1Gi", cpu_limit="2", memory_limit="2Gi"),
                "volumeMounts": [{"name": "token", "mountPath": TOKEN_MOUNT, "readOnly": True},
                                 {"name": "tmp", "mountPath": "/tmp"}]}],
            "volumes": [{"name": "token", "secret": {"secretName": job.token_secret.name,
                                                     "items": [{"key": job.token_secret.key,
                                                                "path": job.token_secret.key}]}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {**_meta(cfg, job_name(workload)), "annotations": {"pulumi.com/skipAwait": "true"}},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": job.timeout_seconds, "template": pod}}


class FidelityGate(pulumi.ComponentResource):
    """The gate's ConfigMap and, for workloads that ask for one, the evaluation Job (after the gateway)."""

    def __init__(self, name: str, *, cfg: FidelityView, verdicts: Sequence[Verdict],
                 evaluates: Mapping[str, str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:FidelityGate", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        register_object(f"{name}-configmap", gate_config_map(cfg, verdicts), child)
        jobs = {w: g for w, g in sorted(cfg.gateway.fidelity.items()) if g.job is not None}
        if jobs:
            register_object(f"{name}-serviceaccount", eval_service_account(cfg), child)
            netpol = eval_network_policy(cfg)
            k8s.networking.v1.NetworkPolicy(f"{name}-networkpolicy", metadata=netpol["metadata"], spec=netpol["spec"],
                                            opts=child)
            for w, g in jobs.items():
                job = eval_job(cfg, w, g, evaluates=evaluates[w])
                k8s.batch.v1.Job(f"{name}-job-{w}", metadata=job["metadata"], spec=job["spec"], opts=child)
        self.register_outputs({"configMap": GATE_CONFIG_MAP, "jobs": [job_name(w) for w in jobs]})
