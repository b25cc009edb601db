"""`aifactory preflight`: every rule with a violating and a compliant case, exact findings; the CLI's exit codes;
synth's preflight report; the stacks as synthesized before the issue #12 fixes are flagged for items 2-6.

Expected values come from the upstream rules each test names (Kubernetes admission, the Pod Security
Standards, Istio's injection template and chart defaults, pulumi-kubernetes' await code, EKS behaviour),
worked out by hand in the test, never from the code under test.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from components.k8s.settings import NodePool, Taint
from components.vocabulary import POOL_LABEL
from infra.cli import main
from infra.preflight import config_pools, run_rules
from infra.synth import load_stack, read_stack_config, run_program, stack_file, state_export, synth
from policies import preflight as pf
from policies.pack import by_name
from policies.preflight import sizes as pf_sizes
from policies.runner import run_policies
from tests.support.stacks import SHIPPED_STACKS, stack_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "preflight"
P = "urn:pulumi:t::aifactory::"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
NS = "kubernetes:core/v1:Namespace"
QUOTA = "kubernetes:core/v1:ResourceQuota"
LIMITS = "kubernetes:core/v1:LimitRange"
HELM = "kubernetes:helm.sh/v3:Release"
LWS = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
SCALED = "kubernetes:keda.sh/v1alpha1:ScaledObject"
HPA = "kubernetes:autoscaling/v2:HorizontalPodAutoscaler"
SC = "kubernetes:storage.k8s.io/v1:StorageClass"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
DS = "kubernetes:apps/v1:DaemonSet"
RESTRICTED_CTX = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
POD_CTX = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}


def entry(type_: str, name: str, inputs: dict[str, Any], *, parent: str | None = None,
          deps: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    e = {"urn": f"{P}{type_}::{name}", "type": type_, "custom": True, "inputs": inputs, "outputs": inputs,
         "dependencies": deps or [], **extra}
    if parent:
        e["parent"] = parent
    return e


def k8s(type_: str, name: str, namespace: str | None, spec: dict[str, Any] | None = None, *,
        meta: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    api, kind = type_.split(":")[1:]
    m = {"name": name, **({"namespace": namespace} if namespace else {}), **(meta or {})}
    body = {"apiVersion": api.removeprefix("core/"), "kind": kind, "metadata": m}
    if spec is not None:
        body["spec"] = spec
    return entry(type_, f"{namespace or '_'}-{name}", body, **kw)


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return k8s(NS, name, None, meta={"labels": labels})


def container(name: str = "app", *, cpu: str | None = "1", memory: str | None = "1Gi",
              extra: dict[str, str] | None = None, ctx: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None} | (extra or {})
    c: dict[str, Any] = {"name": name, "image": "registry.k8s.io/pause:3.10"}
    if req:
        c["resources"] = {"requests": dict(req), "limits": dict(req)}
    c["securityContext"] = ctx if ctx is not None else dict(RESTRICTED_CTX)
    return {**c, **kw}


def pod(*containers: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"securityContext": dict(POD_CTX), "containers": list(containers), **kw}


def deployment(name: str, ns: str, spec: dict[str, Any], *, replicas: int = 1, labels: dict[str, str] | None = None,
               annotations: dict[str, str] | None = None, strategy: dict[str, Any] | None = None,
               **kw: Any) -> dict[str, Any]:
    meta = {"annotations": annotations} if annotations else None
    return k8s(DEPLOYMENT, name, ns, {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                                      **({"strategy": strategy} if strategy is not None else {}),
                                      "template": {"metadata": {"labels": {"app": name, **(labels or {})}},
                                                   "spec": spec}}, meta=meta, **kw)


NO_SURGE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def quota(ns: str, hard: dict[str, str]) -> dict[str, Any]:
    return k8s(QUOTA, "q", ns, {"hard": hard})


def istiod(*, cni: bool = True, proxy: dict[str, Any] | None = None) -> dict[str, Any]:
    values: dict[str, Any] = {"pilot": {"cni": {"enabled": cni}}}
    if proxy is not None:
        values["global"] = {"proxy": {"resources": proxy}}
    return entry(HELM, "istiod", {"name": "istiod", "chart": "istiod", "namespace": "istio-system",
                                  "values": values})


def findings(rule: Any, *entries: dict[str, Any], **kw: Any) -> list[tuple[str, str]]:
    return [(f.resource, f.message) for f in rule(pf.from_entries(entries), **kw)]


# --------------------------------------------------------------------------------------------
# quota and LimitRange admission


def test_quota_counts_the_injected_sidecar_from_the_istiod_chart_defaults() -> None:
    """istio-discovery values.yaml: global.proxy.resources requests cpu 100m / memory 128Mi (no kit override here);
    63.95 CPU + 0.1 = 64.05 > 64 is rejected, 63.9 + 0.1 = 64 is admitted (quota is <=)."""
    ns = namespace("t", **{"istio-injection": "enabled"})
    q = quota("t", {"requests.cpu": "64"})
    over = deployment("big", "t", pod(container(cpu="63950m")), strategy=NO_SURGE)
    fits = deployment("fits", "t", pod(container(cpu="63900m")), strategy=NO_SURGE)
    assert findings(pf.quota_findings, ns, q, istiod(cni=True), over) == [
        ("Deployment/t/big", "ResourceQuota/t/q rejects every pod: one pod (istio-proxy sidecar included) needs more "
                             "than the whole namespace's quota: requests.cpu 64.05 > 64")]
    assert findings(pf.quota_findings, ns, q, istiod(cni=True), fits) == []


def test_quota_uses_the_kits_proxy_resources_and_pod_opt_out() -> None:
    ns = namespace("t", **{"istio-injection": "enabled"})
    q = quota("t", {"requests.memory": "1Gi"})
    proxy = {"requests": {"cpu": "10m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    app = deployment("a", "t", pod(container(memory="600Mi")), strategy=NO_SURGE)
    opted_out = deployment("b", "t", pod(container(memory="600Mi")), labels={"sidecar.istio.io/inject": "false"},
                           strategy=NO_SURGE)
    assert findings(pf.quota_findings, ns, q, istiod(proxy=proxy), app) == [
        ("Deployment/t/a", "ResourceQuota/t/q rejects every pod: one pod (istio-proxy sidecar included) needs more "
                           "than the whole namespace's quota: requests.memory 1.086Gi > 1Gi")]
    assert findings(pf.quota_findings, ns, q, istiod(proxy=proxy), opted_out) == []


def test_quota_total_at_the_largest_replica_count() -> None:
    """3 replicas x 20 CPU fit 64; an HPA (maxReplicas 4) or a KEDA ScaledObject (maxReplicaCount 5) raises it."""
    ns = namespace("t")
    q = quota("t", {"requests.cpu": "64"})
    d = deployment("m", "t", pod(container(cpu="20")), replicas=3, strategy=NO_SURGE)
    hpa = k8s(HPA, "m", "t", {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "m"},
                              "maxReplicas": 4})
    so = k8s(SCALED, "m", "t", {"scaleTargetRef": {"name": "m"}, "maxReplicaCount": 5})
    assert findings(pf.quota_findings, ns, q, d) == []
    assert findings(pf.quota_findings, ns, q, d, hpa) == [
        ("ResourceQuota/t/q", "at their largest replica counts (Deployment/t/m 4 x 20) the namespace's pods need "
                              "requests.cpu 80 > 64: pods beyond the quota are rejected and scale-out stops")]
    assert findings(pf.quota_findings, ns, q, d, so)[0][1].startswith(
        "at their largest replica counts (Deployment/t/m 5 x 20) the namespace's pods need requests.cpu 100 > 64")
    # the default strategy (maxSurge 25%, rounded up) adds a fourth pod during a rollout: 80 > 64
    surging = deployment("m", "t", pod(container(cpu="20")), replicas=3)
    assert findings(pf.quota_findings, ns, q, surging) == [
        ("Deployment/t/m", "a rolling update at 3 replicas (spec.replicas) adds 1 surge pod(s) (maxSurge), which "
                           "ResourceQuota/t/q refuses: requests.cpu 80 > 64; the rollout stalls until its progress "
                           "deadline")]


def test_quota_counts_leaderworkerset_workers_times_size() -> None:
    """LWS: each group is 1 leader + (size - 1) workers; 2 groups of size 4 = 2 leaders + 6 workers."""
    ns = namespace("t")
    q = quota("t", {"requests.nvidia.com/gpu": "56"})
    lws = k8s(LWS, "m", "t", {"replicas": 2, "leaderWorkerTemplate": {
        "size": 4, "leaderTemplate": {"spec": pod(container(extra={"nvidia.com/gpu": "8"}))},
        "workerTemplate": {"spec": pod(container(extra={"nvidia.com/gpu": "8"}))}}})
    assert findings(pf.quota_findings, ns, q, lws) == [
        ("ResourceQuota/t/q", "at their largest replica counts (LeaderWorkerSet/t/m "
                              "(spec.leaderWorkerTemplate.leaderTemplate) 2 x 8; LeaderWorkerSet/t/m "
                              "(spec.leaderWorkerTemplate.workerTemplate) 6 x 8) the namespace's pods need "
                              "requests.nvidia.com/gpu 64 > 56: pods beyond the quota are rejected and scale-out "
                              "stops")]
    assert findings(pf.quota_findings, ns, quota("t", {"requests.nvidia.com/gpu": "64"}), lws) == []


def test_quota_requires_limits_unless_a_limitrange_defaults_them() -> None:
    """A quota on limits.cpu rejects pods whose containers set no CPU limit ('must specify limits.cpu');
    LimitRanger fills `default` limits first."""
    ns = namespace("t")
    q = quota("t", {"limits.cpu": "8"})
    bare = deployment("m", "t", pod(container(cpu=None, memory=None)))
    lr = k8s(LIMITS, "d", "t", {"limits": [{"type": "Container", "default": {"cpu": "1", "memory": "1Gi"},
                                            "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}]})
    assert findings(pf.quota_findings, ns, q, bare) == [
        ("Deployment/t/m", "ResourceQuota/t/q rejects every pod ('must specify'): containers set no limits.cpu (app)")]
    assert findings(pf.quota_findings, ns, q, bare, lr) == []


def test_limit_range_max_rejects_a_larger_container() -> None:
    ns = namespace("t")
    lr = k8s(LIMITS, "d", "t", {"limits": [{"type": "Container", "max": {"cpu": "4"}}]})
    assert findings(pf.quota_findings, ns, lr, deployment("m", "t", pod(container(cpu="8")))) == [
        ("Deployment/t/m", "LimitRanger rejects every pod: container 'app': limit cpu 8 exceeds the LimitRange max 4")]
    assert findings(pf.quota_findings, ns, lr, deployment("m", "t", pod(container(cpu="4")))) == []


def test_quota_on_gpus_without_the_mig_slices_pods_request() -> None:
    ns = namespace("t")
    mig = deployment("m", "t", pod(container(extra={"nvidia.com/mig-1g.10gb": "1"})), replicas=3, strategy=NO_SURGE)
    assert findings(pf.quota_findings, ns, quota("t", {"requests.nvidia.com/gpu": "0"}), mig) == [
        ("Deployment/t/m", "ResourceQuota/t/q caps requests.nvidia.com/gpu but not requests.nvidia.com/mig-1g.10gb: "
                           "up to 3 pods x 1 slice(s) are admitted without any limit")]
    capped = k8s(QUOTA, "q", "t", {"hard": {"requests.nvidia.com/gpu": "0", "requests.nvidia.com/mig-1g.10gb": "3"}})
    assert findings(pf.quota_findings, ns, capped, mig) == []


# --------------------------------------------------------------------------------------------
# Pod Security admission


def test_istio_init_without_cni_breaks_restricted_and_baseline() -> None:
    """Injection template: without pilot.cni.enabled the init container is istio-init, adding NET_ADMIN and NET_RAW
    as UID 0 (baseline forbids adding either; restricted also non-root). With the CNI it is istio-validation."""
    restricted = namespace("t", **{"pod-security.kubernetes.io/enforce": "restricted", "istio-injection": "enabled"})
    app = deployment("m", "t", pod(container()))
    assert findings(pf.pod_security_findings, restricted, istiod(cni=False), app) == [
        ("Deployment/t/m", "PodSecurity 'restricted' (namespace t) rejects its pods after sidecar injection: "
                           "container 'istio-init' adds capabilities NET_ADMIN, NET_RAW; container 'istio-init' does "
                           "not run with runAsNonRoot: true; container 'istio-init' runs as UID 0")]
    baseline = namespace("t", **{"pod-security.kubernetes.io/enforce": "baseline", "istio-injection": "enabled"})
    assert findings(pf.pod_security_findings, baseline, istiod(cni=False), app) == [
        ("Deployment/t/m", "PodSecurity 'baseline' (namespace t) rejects its pods after sidecar injection: "
                           "container 'istio-init' adds capabilities NET_ADMIN, NET_RAW")]
    assert findings(pf.pod_security_findings, restricted, istiod(cni=True), app) == []


def test_restricted_controls_of_the_pod_itself() -> None:
    ns = namespace("t", **{"pod-security.kubernetes.io/enforce": "restricted"})
    loose = deployment("m", "t", {"containers": [container(ctx={"capabilities": {"add": ["CHOWN"]}})],
                                  "volumes": [{"name": "h", "hostPath": {"path": "/var"}}]})
    assert findings(pf.pod_security_findings, ns, loose) == [
        ("Deployment/t/m", "PodSecurity 'restricted' (namespace t) rejects its pods: volume 'h' is a hostPath; "
                           "container 'app' does not set allowPrivilegeEscalation: false; container 'app' does not "
                           "run with runAsNonRoot: true; container 'app' has no seccompProfile RuntimeDefault or "
                           "Localhost; container 'app' does not drop ALL capabilities; container 'app' adds "
                           "capabilities CHOWN")]
    privileged_ns = namespace("t", **{"pod-security.kubernetes.io/enforce": "privileged"})
    assert findings(pf.pod_security_findings, privileged_ns, loose) == []
    assert findings(pf.pod_security_findings, ns, deployment("m", "t", pod(container()))) == []


def test_baseline_forbids_host_namespaces_and_privileged() -> None:
    ns = namespace("t", **{"pod-security.kubernetes.io/enforce": "baseline"})
    host = deployment("m", "t", pod(container(ctx={"privileged": True}), hostNetwork=True))
    assert findings(pf.pod_security_findings, ns, host) == [
        ("Deployment/t/m", "PodSecurity 'baseline' (namespace t) rejects its pods: hostNetwork: true; "
                           "container 'app' is privileged")]


# --------------------------------------------------------------------------------------------
# storage


def eks_cluster(**vpc: Any) -> dict[str, Any]:
    return entry("aws:eks/cluster:Cluster", "eks", {"vpcConfig": vpc})


def test_claim_without_class_on_eks_without_a_default_class() -> None:
    """EKS 1.30+: no default StorageClass; a claim without storageClassName stays Pending."""
    claim = k8s(PVC, "data", "t", {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}})
    assert findings(pf.storage_findings, claim, eks=True, configured_class=None) == [
        ("PersistentVolumeClaim/t/data", "spec: the claim names no storageClassName and relies on a default class; "
                                         "EKS clusters created at 1.30 or later have no default StorageClass and the "
                                         "stack marks none: it stays Pending and whatever waits for it times out")]
    default = k8s(SC, "gp3", None, meta={"annotations": {"storageclass.kubernetes.io/is-default-class": "true"}})
    assert findings(pf.storage_findings, claim, default, eks=True, configured_class=None) == []


def test_claim_naming_a_class_that_does_not_exist() -> None:
    gp3 = k8s(SC, "aifactory-gp3", None)
    named = k8s(PVC, "data", "t", {"storageClassName": "fast"})
    assert findings(pf.storage_findings, named, gp3, eks=True, configured_class=None) == [
        ("PersistentVolumeClaim/t/data", "spec: StorageClass 'fast' does not exist in the stack or on EKS: "
                                         "the claim stays Pending")]
    for cls in ("aifactory-gp3", "gp2"):  # the stack's class; EKS's own gp2 (not default since 1.30)
        assert findings(pf.storage_findings, gp3, k8s(PVC, "data", "t", {"storageClassName": cls}), eks=True,
                        configured_class=None) == []


def test_a_classless_claim_binds_only_to_a_classless_volume_the_stack_creates() -> None:
    """storageClassName "" means no class (static provisioning): the claim waits for a PersistentVolume without a
    class; the kit's per-node model caches name theirs in spec.volumeName."""
    claim = k8s(PVC, "cache", "t", {"storageClassName": "", "volumeName": "pv-cache"})
    assert findings(pf.storage_findings, claim, eks=True, configured_class=None) == [
        ("PersistentVolumeClaim/t/cache", "spec: storageClassName \"\" binds only to a pre-created PersistentVolume "
                                          "without a class, and the stack creates none for it (volumeName "
                                          "'pv-cache'): the claim stays Pending")]
    pv = k8s("kubernetes:core/v1:PersistentVolume", "pv-cache", None, {"storageClassName": "",
                                                                        "hostPath": {"path": "/mnt/cache"}})
    assert findings(pf.storage_findings, claim, pv, eks=True, configured_class=None) == []


def test_existing_cluster_claims_need_the_configured_class() -> None:
    eph = deployment("m", "t", pod(container(), volumes=[{"name": "cache", "ephemeral": {"volumeClaimTemplate": {
        "spec": {"accessModes": ["ReadWriteOnce"]}}}}]))
    assert findings(pf.storage_findings, eph, eks=False, configured_class=None) == [
        ("Deployment/t/m", "spec.template.volumes[cache].ephemeral: the claim names no storageClassName and relies on "
                           "a default class; the config names no storage class of this cluster "
                           "(target.storageClass): it stays Pending and whatever waits for it times out")]
    assert findings(pf.storage_findings, eph, eks=False, configured_class="local-nvme") == []


def test_chart_claims_from_release_values() -> None:
    """Loki 6.x: SimpleScalable write/backend claims and the MinIO subchart's, class null by default;
    kube-prometheus-stack claims only with a storageSpec volumeClaimTemplate."""
    loki = entry(HELM, "loki", {"name": "loki", "namespace": "mon", "chart": "loki", "values": {
        "deploymentMode": "SimpleScalable", "backend": {"persistence": {"storageClass": "aifactory-gp3"}},
        "minio": {"enabled": True}}})
    kps = entry(HELM, "kps", {"name": "kps", "namespace": "mon", "chart": "kube-prometheus-stack", "values": {
        "prometheus": {"prometheusSpec": {"storageSpec": {"volumeClaimTemplate": {"spec": {
            "storageClassName": "aifactory-gp3"}}}}}}})
    why = ("the claim names no storageClassName and relies on a default class; EKS clusters created at 1.30 or "
           "later have no default StorageClass and the stack marks none: it stays Pending and whatever waits for it "
           "times out")
    assert findings(pf.storage_findings, loki, kps, k8s(SC, "aifactory-gp3", None), eks=True,
                    configured_class=None) == [
        ("HelmRelease/mon/loki", f"values.write.persistence: {why}"),
        ("HelmRelease/mon/loki", f"values.minio.persistence: {why}")]
    single = entry(HELM, "loki", {"name": "loki", "namespace": "mon", "chart": "loki", "values": {
        "deploymentMode": "SingleBinary", "singleBinary": {"persistence": {"storageClass": "aifactory-gp3"}}}})
    assert findings(pf.storage_findings, single, k8s(SC, "aifactory-gp3", None), eks=True,
                    configured_class=None) == []


# --------------------------------------------------------------------------------------------
# custom resources before their CRDs


def test_custom_resource_must_wait_for_the_release_installing_its_crd() -> None:
    keda = entry(HELM, "keda", {"name": "keda", "namespace": "s", "chart": "keda"})
    component = entry("aifactory:k8s:ModelDeployment", "model", {}, deps=[keda["urn"]])
    early = k8s(SCALED, "m", "t", {"scaleTargetRef": {"name": "m"}})
    late = k8s(SCALED, "m2", "t", {"scaleTargetRef": {"name": "m2"}}, parent=component["urn"])
    assert findings(pf.crd_order_findings, keda, component, early, late) == [
        ("ScaledObject/t/m", "created without waiting for HelmRelease/s/keda, which installs the keda.sh CRDs: the API "
                             "server may answer 'no matches for kind ScaledObject' and the create fails")]
    assert findings(pf.crd_order_findings, early) == [
        ("ScaledObject/t/m", "no Helm release of chart 'keda' in the stack installs the keda.sh CRDs: the API server "
                             "rejects ScaledObject unless they already exist")]


NIC = "kubernetes:mellanox.com/v1alpha1:NicClusterPolicy"
IPPOOL = "kubernetes:nv-ipam.nvidia.com/v1alpha1:IPPool"


def test_an_ip_pool_waits_for_an_awaited_nic_cluster_policy() -> None:
    """The network-operator chart ships no nv-ipam CRD: the operator applies it when it reconciles a
    NicClusterPolicy's nvIpam state (network-operator 26.1.1 manifests/state-nv-ipam-cni/005-*.yaml), and
    pulumi-kubernetes awaits no custom resource unless it carries pulumi.com/waitFor."""
    operator = entry(HELM, "network-operator", {"name": "network-operator", "namespace": "net",
                                                "chart": "network-operator"})
    awaited = k8s(NIC, "nic-cluster-policy", None, {"nvIpam": {}}, deps=[operator["urn"]],
                  meta={"annotations": {"pulumi.com/waitFor": "jsonpath={.status.state}=ready"}})
    plain = k8s(NIC, "nic-cluster-policy", None, {"nvIpam": {}}, deps=[operator["urn"]])
    assert findings(pf.crd_order_findings, operator, awaited,
                    k8s(IPPOOL, "pool", "net", {"subnet": "10.0.0.0/16"}, deps=[awaited["urn"]])) == []
    assert findings(pf.crd_order_findings, operator, plain,
                    k8s(IPPOOL, "pool", "net", {"subnet": "10.0.0.0/16"}, deps=[plain["urn"]])) == [
        ("IPPool/net/pool",
         "created after NicClusterPolicy/nic-cluster-policy, which is not awaited: the operator applies the "
         "nv-ipam.nvidia.com CRDs only once it reconciles it, and the create may fail with 'no matches for kind "
         "IPPool'")]
    assert findings(pf.crd_order_findings, operator, awaited,
                    k8s(IPPOOL, "pool", "net", {"subnet": "10.0.0.0/16"})) == [
        ("IPPool/net/pool", "the nv-ipam.nvidia.com CRDs are applied by the operator when it reconciles a "
                            "NicClusterPolicy, and IPPool is not created after one: the create fails with 'no "
                            "matches for kind IPPool'")]


def test_oci_chart_reference_counts_as_its_chart() -> None:
    lws_release = entry(HELM, "lws", {"name": "lws", "namespace": "s", "chart": "oci://registry.k8s.io/lws/charts/lws"})
    lws = k8s(LWS, "m", "t", {"leaderWorkerTemplate": {"size": 1}}, deps=[lws_release["urn"]])
    assert findings(pf.crd_order_findings, lws_release, lws) == []


# --------------------------------------------------------------------------------------------
# awaits


def probe(failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": "/ready", "port": 8000}, "periodSeconds": 10, "failureThreshold": failures}


def test_deployment_await_shorter_than_its_startup_budget() -> None:
    """pulumi-kubernetes await/deployment.go: DefaultDeploymentTimeoutMins = 10 (600 s). Startup probe 10 s x 180 =
    1800 s, plus the 300 s image-pull allowance = 2100 s."""
    slow = deployment("m", "t", pod(container(startupProbe=probe(180))))
    assert findings(pf.await_findings, slow) == [
        ("Deployment/t/m", "pulumi-kubernetes waits 600 s (pulumi-kubernetes' default) for the Deployment to become "
                           "ready, but its pods may take 2100 s (startup probe 1800 s + 300 s image pull): `pulumi up` "
                           "fails a rollout that would succeed; set pulumi.com/timeoutSeconds to at least 2100")]
    annotated = deployment("m", "t", pod(container(startupProbe=probe(180))),
                           annotations={"pulumi.com/timeoutSeconds": "2100"})
    skipped = deployment("m", "t", pod(container(startupProbe=probe(180))),
                         annotations={"pulumi.com/skipAwait": "true"})
    quick = deployment("m", "t", pod(container(startupProbe=probe(30))))  # 300 + 300 = 600: just fits the default
    assert findings(pf.await_findings, annotated, skipped, quick) == []
    custom = deployment("m", "t", pod(container(startupProbe=probe(180))), customTimeouts={"create": 2100.0})
    assert findings(pf.await_findings, custom) == []


def test_probe_defaults_apply_when_unset() -> None:
    """core/v1 Probe defaults: periodSeconds 10, failureThreshold 3: 30 s + 300 s pull fits 600 s."""
    short = deployment("m", "t", pod(container(startupProbe={"httpGet": {"path": "/", "port": 80}})),
                       annotations={"pulumi.com/timeoutSeconds": "329"})
    assert [m for _, m in findings(pf.await_findings, short)] == [
        "pulumi-kubernetes waits 329 s (annotation pulumi.com/timeoutSeconds) for the Deployment to become ready, but "
        "its pods may take 330 s (startup probe 30 s + 300 s image pull): `pulumi up` fails a rollout that would "
        "succeed; set pulumi.com/timeoutSeconds to at least 330"]


def eks_parts() -> list[dict[str, Any]]:
    cluster = eks_cluster(endpointPublicAccess=True, publicAccessCidrs=["203.0.113.0/24"])
    ng = entry("aws:eks/nodeGroup:NodeGroup", "system-ng", {"instanceTypes": ["m7i.2xlarge"], "labels": {}})
    dns = entry("aws:eks/addon:Addon", "coredns", {"addonName": "coredns"}, deps=[ng["urn"]])
    ebs = entry("aws:eks/addon:Addon", "ebs", {"addonName": "aws-ebs-csi-driver"}, deps=[ng["urn"]])
    return [cluster, ng, dns, ebs]


def test_helm_release_started_before_nodes_and_addons() -> None:
    cluster, ng, dns, ebs = eks_parts()
    ns = k8s(NS, "mon", None)
    early = entry(HELM, "jaeger", {"name": "jaeger", "namespace": "mon", "chart": "jaeger"}, deps=[ns["urn"]])
    loki = entry(HELM, "loki", {"name": "loki", "namespace": "mon", "chart": "loki", "timeout": 600,
                                "values": {"deploymentMode": "SingleBinary"}}, deps=[dns["urn"]])
    base = entry(HELM, "istio-base", {"name": "istio-base", "namespace": "istio-system", "chart": "base"})
    assert findings(pf.release_order_findings, cluster, ng, dns, ebs, ns, early, loki, base) == [
        ("HelmRelease/mon/jaeger", "Helm waits 300 s for the release's resources, but it is not created after a node "
                                   "group, the coredns add-on: it starts while they are still being created and "
                                   "times out"),
        ("HelmRelease/mon/loki", "Helm waits 600 s for the release's resources, but it is not created after the "
                                 "aws-ebs-csi-driver add-on: it starts while they are still being created and "
                                 "times out")]
    ordered = entry(HELM, "loki", {"name": "loki", "namespace": "mon", "chart": "loki",
                                   "values": {"deploymentMode": "SingleBinary"}}, deps=[dns["urn"], ebs["urn"]])
    assert findings(pf.release_order_findings, cluster, ng, dns, ebs, ordered) == []


# --------------------------------------------------------------------------------------------
# API endpoint reachability


def test_private_endpoint_needs_an_in_vpc_deployer() -> None:
    private = eks_cluster(endpointPublicAccess=False, endpointPrivateAccess=True)
    assert findings(pf.endpoint_findings, private, deployer_in_vpc=False) == [
        ("eks", "the API endpoint is private only (endpointPublicAccess false) and the config does not declare an "
                "in-VPC deployer: every Kubernetes resource of the stack fails to connect from outside the VPC")]
    assert findings(pf.endpoint_findings, private, deployer_in_vpc=True) == []


def test_public_endpoint_without_an_allow_list() -> None:
    """EKS: publicAccessCidrs defaults to 0.0.0.0/0; endpointPublicAccess defaults to true."""
    assert findings(pf.endpoint_findings, eks_cluster(), deployer_in_vpc=False) == [
        ("eks", "the API endpoint is public without publicAccessCidrs: EKS opens it to 0.0.0.0/0")]
    allowed = eks_cluster(endpointPublicAccess=True, publicAccessCidrs=["203.0.113.0/24"])
    assert findings(pf.endpoint_findings, allowed, deployer_in_vpc=False) == []


# --------------------------------------------------------------------------------------------
# scheduling


def gpu_pool(name: str = "h100", **over: Any) -> NodePool:
    return NodePool(name=name, instance_type=over.pop("instance_type", "p5.48xlarge"),
                    taints=(Taint("nvidia.com/gpu", "NoSchedule", "true"),), **over)


def pools(*node_pools: NodePool) -> list[pf.Pool]:
    cfg = stack_config("onprem")
    return config_pools(type(cfg)(**{**{f: getattr(cfg, f) for f in cfg.__dataclass_fields__},
                                     "node_pools": {p.name: p for p in node_pools}}))


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_taint_without_toleration_and_selector_without_pool() -> None:
    untolerating = deployment("m", "t", pod(container(), nodeSelector={POOL_LABEL: "h100"}))
    nowhere = deployment("n", "t", pod(container(), nodeSelector={POOL_LABEL: "a100"}, tolerations=[GPU_TOLERATION]))
    good = deployment("g", "t", pod(container(), nodeSelector={POOL_LABEL: "h100"}, tolerations=[GPU_TOLERATION]))
    assert findings(pf.schedule_findings, untolerating, nowhere, good, pools=pools(gpu_pool())) == [
        ("Deployment/t/m", "no node pool can run it, its pods stay Pending (h100: taints "
                           "nvidia.com/gpu=true:NoSchedule are not tolerated)"),
        ("Deployment/t/n", "no node pool can run it, its pods stay Pending (h100: nodeSelector "
                           "{'aifactory.io/pool': 'a100'} does not match its labels)")]


def test_requests_above_allocatable_after_the_system_reserve() -> None:
    """p5.48xlarge, 192 vCPUs: EKS AMI kube-reserved CPU = 0.06 + 0.01 + 2 x 0.005 + 188 x 0.0025 = 0.55 cores,
    so 191.45 allocatable; 8 GPUs."""
    on_pool = {"nodeSelector": {POOL_LABEL: "h100"}, "tolerations": [GPU_TOLERATION]}
    too_big = deployment("m", "t", pod(container(cpu="191460m", extra={"nvidia.com/gpu": "8"}), **on_pool))
    nine = deployment("n", "t", pod(container(cpu="8", extra={"nvidia.com/gpu": "9"}), **on_pool))
    fits = deployment("f", "t", pod(container(cpu="191450m", extra={"nvidia.com/gpu": "8"}), **on_pool))
    assert findings(pf.schedule_findings, too_big, nine, fits, pools=pools(gpu_pool())) == [
        ("Deployment/t/m", "no node pool can run it, its pods stay Pending (h100: requests cpu 191.5 > allocatable "
                           "191.4 (p5.48xlarge))"),
        ("Deployment/t/n", "no node pool can run it, its pods stay Pending (h100: requests nvidia.com/gpu 9 > "
                           "allocatable 8 (p5.48xlarge))")]


def test_mig_slices_exist_only_where_nodes_carry_the_mig_config_label() -> None:
    """The GPU operator's MIG manager partitions nodes labelled nvidia.com/mig.config=<layout>; all-1g.10gb on an
    8 x A100-80GB node gives 8 x 7 = 56 nvidia.com/mig-1g.10gb (mixed strategy)."""
    spec = pod(container(extra={"nvidia.com/mig-1g.10gb": "1"}), nodeSelector={POOL_LABEL: "a100"},
               tolerations=[GPU_TOLERATION])
    unlabelled = gpu_pool("a100", instance_type="dgx-a100", mig="all-1g.10gb")
    labelled = gpu_pool("a100", instance_type="dgx-a100", mig="all-1g.10gb",
                        labels={"nvidia.com/mig.config": "all-1g.10gb"})
    assert findings(pf.schedule_findings, deployment("m", "t", spec), pools=pools(unlabelled)) == [
        ("Deployment/t/m", "no node pool can run it, its pods stay Pending (a100: requests nvidia.com/mig-1g.10gb 1 > "
                           "allocatable 0 (dgx-a100))")]
    assert findings(pf.schedule_findings, deployment("m", "t", spec), pools=pools(labelled)) == []
    assert pools(labelled)[0].allocatable["nvidia.com/mig-1g.10gb"] == 56


def test_mig_layout_counts_where_the_stacks_node_patches_label_the_pools_nodes() -> None:
    """On an existing cluster the kit labels a MIG pool's listed nodes with a NodePatch (server-side apply of
    aifactory.io/pool and nvidia.com/mig.config); those labels count like configured ones, so onprem's a100-mig
    pool offers its slices."""
    spec = pod(container(extra={"nvidia.com/mig-1g.10gb": "1"}), nodeSelector={POOL_LABEL: "a100"},
               tolerations=[GPU_TOLERATION])
    cfg = stack_config("onprem")
    only_a100 = type(cfg)(**{**{f: getattr(cfg, f) for f in cfg.__dataclass_fields__},
                             "node_pools": {"a100": gpu_pool("a100", instance_type="dgx-a100", mig="all-1g.10gb")}})
    patch = k8s("kubernetes:core/v1:NodePatch", "dgx-a100-01", None,
                meta={"labels": {POOL_LABEL: "a100", "nvidia.com/mig.config": "all-1g.10gb"}})
    model = deployment("m", "t", spec)
    unpatched = pf.from_entries([model])
    assert [f.message for f in pf.schedule_findings(unpatched, config_pools(only_a100, unpatched))] == [
        "no node pool can run it, its pods stay Pending (a100: requests nvidia.com/mig-1g.10gb 1 > allocatable 0 "
        "(dgx-a100))"]
    patched = pf.from_entries([patch, model])
    assert pf.schedule_findings(patched, config_pools(only_a100, patched)) == []


def test_daemonset_whose_selector_matches_no_pool_and_eks_node_group_taints() -> None:
    ng = entry("aws:eks/nodeGroup:NodeGroup", "gpu-ng", {"instanceTypes": ["p5.48xlarge"],
                                                        "labels": {POOL_LABEL: "h100"},
                                                        "taints": [{"key": "nvidia.com/gpu", "value": "true",
                                                                    "effect": "NO_SCHEDULE"}]})
    ds = k8s(DS, "agent", "s", {"template": {"spec": pod(container(), nodeSelector={"feature": "x"},
                                                         tolerations=[{"operator": "Exists"}])}})
    ok = k8s(DS, "agent2", "s", {"template": {"spec": pod(container(), tolerations=[{"operator": "Exists"}])}})
    resources = pf.from_entries([ng, ds, ok])
    assert [(f.resource, f.message) for f in pf.schedule_findings(resources, pf.node_group_pools(resources))] == [
        ("DaemonSet/s/agent", "no node pool can run it, the DaemonSet runs no pod (gpu-ng: nodeSelector "
                              "{'feature': 'x'} does not match its labels)")]


def test_an_eks_load_balancer_with_node_targets_or_a_short_deregistration_delay_is_found() -> None:
    """Only the AWS Load Balancer Controller registers pods: it takes a Service of its class, or without a class one
    whose aws-load-balancer-type is `external` with a target type, or `nlb-ip`; its target type is `instance` unless
    set (kubernetes-sigs/aws-load-balancer-controller@v3.5.0 pkg/service/service_utils.go IsServiceSupported;
    docs/guide/service/nlb.md, annotations.md). A target group's deregistration delay is 300 s unless set, and must
    cover the grace of the pods the Service selects. Before, the rule read the in-tree controller's
    target-node-labels and passed a node-targeted NLB whose nodes were the system pool's."""
    system = entry("aws:eks/nodeGroup:NodeGroup", "system-ng", {"instanceTypes": ["m7i.2xlarge"],
                                                               "labels": {POOL_LABEL: "system"}})
    cls, target = "service.k8s.aws/nlb", "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"
    lb_type = "service.beta.kubernetes.io/aws-load-balancer-type"
    attrs = "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes"

    def lb(name: str, spec: dict[str, Any] | None = None, **ann: str) -> dict[str, Any]:
        return k8s("kubernetes:core/v1:Service", name, "gw", {"type": "LoadBalancer", "selector": {"app": "gw"},
                                                              **(spec or {})}, meta={"annotations": ann})

    delay = {attrs: "deregistration_delay.timeout_seconds=1200,"
                    "deregistration_delay.connection_termination.enabled=false"}
    services = [lb("pods", {"loadBalancerClass": cls}, **{target: "ip"}, **delay),
                lb("legacy-pods", **{lb_type: "nlb-ip"}, **delay),
                lb("external-pods", **{lb_type: "external", target: "ip"}, **delay),
                lb("in-tree", **{lb_type: "nlb"}),
                lb("class-instance", {"loadBalancerClass": cls}),
                lb("other-class", {"loadBalancerClass": "example.com/lb"}, **{target: "ip"}),
                lb("default-delay", {"loadBalancerClass": cls}, **{target: "ip"}),
                lb("short-delay", {"loadBalancerClass": cls}, **{target: "ip", attrs:
                                                                 "deregistration_delay.timeout_seconds=60"}),
                k8s("kubernetes:core/v1:Service", "internal", "gw", {"type": "ClusterIP"})]
    gw = deployment("gw", "gw", pod(container(), terminationGracePeriodSeconds=1165))
    resources = pf.from_entries([system, gw, *services])
    nodes = ("its NLB is {}: a connection through a node that an upgrade replaces or the autoscaler removes ends, "
             "though its pod is healthy")
    fix = (f"Set spec.loadBalancerClass: {cls} and {target}: ip (the AWS Load Balancer Controller, with the pods as "
           "targets).")
    short = ("its target group's deregistration_delay.timeout_seconds is {} s, shorter than the 1165 s grace of "
             "Deployment/gw/gw's pods: the NLB drops their connections while they still serve them")
    fix_delay = f"Set deregistration_delay.timeout_seconds=1165 in {attrs}."
    assert [(f.rule, f.resource, f.message, f.fix) for f in
            pf.lb_target_findings(resources, pf.node_group_pools(resources))] == [
        ("nlb-targets-stable-nodes", "Service/gw/in-tree", nodes.format("the in-tree controller's, with node targets"),
         fix),
        ("nlb-targets-stable-nodes", "Service/gw/class-instance",
         nodes.format("the AWS Load Balancer Controller's with node (instance) targets"), fix),
        ("nlb-targets-stable-nodes", "Service/gw/other-class",
         nodes.format("class example.com/lb's, not the AWS Load Balancer Controller's"), fix),
        ("nlb-targets-stable-nodes", "Service/gw/default-delay", short.format(300), fix_delay),
        ("nlb-targets-stable-nodes", "Service/gw/short-delay", short.format(60), fix_delay)]
    assert pf.lb_target_findings(resources, []) == []  # not EKS: the site's load balancer


# --------------------------------------------------------------------------------------------
# the same rules as mandatory policies of the pack


def test_state_only_rules_are_mandatory_policies() -> None:
    ns = namespace("t")
    q = quota("t", {"requests.cpu": "4"})
    big = deployment("m", "t", pod(container(cpu="8", startupProbe=probe(180))))
    violations = run_policies([ns, q, big], policies=[by_name()[n] for n in (
        "await-covers-startup", "quota-admits-pods", "pod-security-admits-pods", "crds-before-custom-resources")])
    assert [(v.policy, v.resource_name, v.enforcement) for v in violations] == [
        ("await-covers-startup", "t-m", "mandatory"), ("quota-admits-pods", "t-m", "mandatory")]
    assert violations[1].message == ("Deployment/t/m: ResourceQuota/t/q rejects every pod: one pod needs more than "
                                     "the whole namespace's quota: requests.cpu 8 > 4")
    timed = deployment("m", "t", pod(container(cpu="1", startupProbe=probe(180))), customTimeouts={"create": 2100})
    assert run_policies([ns, q, timed], policies=[by_name()["await-covers-startup"]]) == []
    # the pack does not require the CRD's release to be in the stack (a cluster may have it); ordering it does check
    scaled = k8s(SCALED, "m", "t", {"scaleTargetRef": {"name": "m"}})
    keda = entry(HELM, "keda", {"name": "keda", "namespace": "s", "chart": "keda"})
    crd_policy = [by_name()["crds-before-custom-resources"]]
    assert run_policies([scaled], policies=crd_policy) == []
    assert [v.resource_name for v in run_policies([keda, scaled], policies=crd_policy)] == ["t-m"]


# --------------------------------------------------------------------------------------------
# the stacks before the issue #12 fixes (frozen state and config), the shipped stacks, the CLI, synth


def fixture_findings(stack: str) -> list[tuple[str, str, str]]:
    resources = pf.from_entries(json.loads((FIXTURES / f"{stack}-before-fixes.state.json").read_text())
                                ["deployment"]["resources"])
    cfg = load_stack(stack, FIXTURES)
    # before the fixes an existing cluster's stack named no storage class (the key did not exist)
    cfg = dataclasses.replace(cfg, target=dataclasses.replace(cfg.target, storage_class=None))
    return [(f.rule, f.resource, f.message) for f in run_rules(resources, cfg)]


def test_staging_before_the_fixes_is_flagged_for_items_2_to_5() -> None:
    found = fixture_findings("staging")
    rules_by_resource = {(rule, resource) for rule, resource, _ in found}
    # 2: a 70B pod (76 CPU / 819Gi, 80% of a p5) does not fit the default tenant quota (64 CPU / 512Gi)
    assert ("quota-admission", "Deployment/search/llama-70b") in rules_by_resource
    assert ("quota-admission", "ResourceQuota/support/tenant-quota") in rules_by_resource
    # 3: Loki's claim has no class and EKS 1.30+ has no default class
    assert ("storage-class", "HelmRelease/monitoring/loki") in rules_by_resource
    # 4: platform releases start before the node groups and add-ons
    assert {r for rule, r in rules_by_resource if rule == "release-bring-up-order"} == {
        "HelmRelease/aifactory-system/aws-efa-k8s-device-plugin", "HelmRelease/aifactory-system/keda",
        "HelmRelease/gpu-operator/gpu-operator", "HelmRelease/istio-system/istio-cni",
        "HelmRelease/istio-system/istiod", "HelmRelease/monitoring/alloy", "HelmRelease/monitoring/jaeger",
        "HelmRelease/monitoring/kube-prometheus-stack", "HelmRelease/monitoring/loki",
        "HelmRelease/monitoring/otel-collector"}
    # 5: model Deployments awaited 600 s with a 1800 s startup probe
    assert {r for rule, r in rules_by_resource if rule == "await-timeout"} == {
        "Deployment/search/llama-70b", "Deployment/support/llama-8b-trt"}


def test_onprem_before_the_fixes_is_flagged_for_items_2_3_5_and_6() -> None:
    found = fixture_findings("onprem")
    messages = {(rule, resource): m for rule, resource, m in found}
    # 2: MIG slices are not quota'd (analytics: gpuQuota 0, 7 classifier replicas)
    assert messages[("quota-admission", "Deployment/analytics-ai/classifier")] == (
        "ResourceQuota/analytics-ai/tenant-quota caps requests.nvidia.com/gpu but not "
        "requests.nvidia.com/mig-1g.10gb: up to 7 pods x 1 slice(s) are admitted without any limit")
    # 3: model caches without a class on an existing cluster whose class the config does not name
    assert ("storage-class", "Deployment/ml-platform/llama-70b") in messages
    # 5: awaits
    assert ("await-timeout", "Deployment/ml-platform/llama-70b") in messages
    # the IPPool was created beside the NicClusterPolicy whose reconciliation applies its CRD
    assert ("crd-before-custom-resource", "IPPool/nvidia-network-operator/aifactory-rdma") in messages
    # 6: nothing labels the a100-mig nodes with nvidia.com/mig.config, so no slice is ever advertised
    assert messages[("schedulable", "Deployment/analytics-ai/classifier")] == (
        "no node pool can run it, its pods stay Pending (a100-mig: requests nvidia.com/mig-1g.10gb 1 > allocatable 0 "
        "(dgx-a100))")


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_shipped_stacks_are_clean(stack: str) -> None:
    """Every shipped stack passes preflight (the same stacks before the issue #12 fixes are flagged: the
    frozen-state tests above)."""
    result = run_program(stack, read_stack_config(stack_file(stack)))
    resources = pf.from_entries(state_export(result)["deployment"]["resources"])
    assert [(f.rule, f.resource, f.message) for f in run_rules(resources, result.config)] == []
    # an AWS stack's gateway NLB is the AWS Load Balancer Controller's, with pod targets (nlb-targets-stable-nodes
    # passed above), and the gateway waits for the controller (its pod webhook, its Service finalizer)
    gw = next(r for r in resources if r.kind == "Service" and r.name == "aifactory-gateway")
    assert pf.lb_targets.target_type(gw.props) == ("ip" if result.config.is_aws else None)
    entries = state_export(result)["deployment"]["resources"]
    [component] = [e for e in entries if e["type"] == "aifactory:k8s:Gateway"]
    controller = [d for d in component["dependencies"] if d.endswith("Release::aws-load-balancer-controller-release")]
    assert len(controller) == (1 if result.config.is_aws else 0)
    # its pods after its Service (their readiness gates need the Service's target group binding)
    [envoy] = [e for e in entries if e["urn"].endswith("Deployment::gateway-deployment")]
    assert any(d.endswith("Service::gateway-service") for d in envoy["dependencies"]) == result.config.is_aws
    gate = pf.resources.namespace_labels(resources)["aifactory-gateway"].get("elbv2.k8s.aws/pod-readiness-gate-inject")
    assert gate == ("enabled" if result.config.is_aws else None)


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = {"version": 3, "deployment": {"resources": [
        {"urn": f"{P}pulumi:pulumi:Stack::s", "type": "pulumi:pulumi:Stack"},
        namespace("t", **{"pod-security.kubernetes.io/enforce": "restricted"}),
        deployment("m", "t", pod(container()))]}}
    state = tmp_path / "state.json"
    state.write_text(json.dumps(clean))
    assert main(["preflight", "onprem", "--state", str(state)]) == 0
    assert capsys.readouterr().out == (
        "preflight onprem: 14 rules over 2 resources: 0 finding(s)\n"
        "\nrollouts (what a rolling update does to each model)\n"
        "  classifier: rolling: one replica at a time: 1 of its at least 2 replicas keep serving while one is "
        "replaced\n"
        "  llama-405b: outage: one replica at its minimum: a rollout takes it down until the new pod is ready (at "
        "most 3300 s); nothing else serves its requests meanwhile (replicas.min: 2 keeps one serving)\n"
        "  llama-70b: outage: one replica at its minimum: a rollout takes it down until the new pod is ready (at "
        "most 2400 s); nothing else serves its requests meanwhile (replicas.min: 2 keeps one serving)\n")

    assert main(["preflight", "onprem", "--stacks-dir", str(FIXTURES), "--json",
                 "--state", str(FIXTURES / "onprem-before-fixes.state.json")]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["schedulable"] == 1 and doc["findings"][0]["rule"] == "quota-admission"

    state.write_text("{not json")
    assert main(["preflight", "onprem", "--state", str(state)]) == 2
    assert capsys.readouterr().err.startswith(f"aifactory: preflight: {state}: stack export is not valid JSON")
    assert main(["preflight", "nope"]) == 2
    assert "Pulumi.nope.yaml: no such stack file" in capsys.readouterr().err
    bad = tmp_path / "stacks"
    bad.mkdir()
    (bad / "Pulumi.x.yaml").write_text("config:\n  aifactory:target: {provider: gcp}\n")
    assert main(["preflight", "x", "--stacks-dir", str(bad)]) == 2
    assert "target.provider: 'gcp' is not allowed" in capsys.readouterr().err


def test_synth_writes_the_preflight_report(tmp_path: Path) -> None:
    summary = synth("dev", tmp_path / "dev", progress=None)
    doc = json.loads((tmp_path / "dev" / "preflight-report.json").read_text())
    assert doc["findings"] == []
    assert [f.as_dict() for f in summary.preflight] == doc["findings"]
    assert doc["rules"] == list(pf.RULES) and doc["stack"] == "dev"


def test_mig_slices_a_node_advertises_are_what_the_mig_manager_makes_of_its_gpus() -> None:
    # gpu-operator v25.10.1 mig-parted default config: all-1g.10gb is 7 per 80 GB GPU and 4 per 40 GB A100;
    # all-1g.20gb is 4, all-2g.20gb 3, all-3g.40gb 2 per 80 GB GPU (8 GPUs a node here)
    assert pf.allocatable("p4d.24xlarge", mig="all-1g.10gb")["nvidia.com/mig-1g.10gb"] == 32
    assert pf.allocatable("p5.48xlarge", mig="all-1g.10gb")["nvidia.com/mig-1g.10gb"] == 56
    assert pf.allocatable("p5.48xlarge", mig="all-1g.20gb")["nvidia.com/mig-1g.20gb"] == 32
    assert pf.allocatable("p5.48xlarge", mig="all-2g.20gb")["nvidia.com/mig-2g.20gb"] == 24
    assert pf.allocatable("dgx-a100", mig="all-3g.40gb")["nvidia.com/mig-3g.40gb"] == 16
    assert "nvidia.com/gpu" not in pf.allocatable("p5.48xlarge", mig="all-1g.10gb")


def test_a_configmap_or_secret_over_1_mib_of_data_is_refused_as_the_api_server_would() -> None:
    """ValidateConfigMap/ValidateSecret (kubernetes/kubernetes@v1.34.1 pkg/apis/core/validation/validation.go) sum
    the values of data and binaryData (decoded) against core.MaxSecretSize, 1 MiB; the manifest's own size and keys
    do not count."""
    cm, secret = "kubernetes:core/v1:ConfigMap", "kubernetes:core/v1:Secret"
    mib = pf_sizes.MAX_DATA_BYTES
    at_limit = k8s(cm, "envoy", "gw")
    at_limit["inputs"] = {**at_limit["inputs"], "data": {"a.yaml": "x" * (mib - 10), "b": "y" * 10}}
    over = k8s(cm, "big", "gw")
    over["inputs"] = {**over["inputs"], "data": {"envoy.yaml": "x" * mib}, "binaryData": {"b": "AA=="}}  # 1 byte
    # a Secret's data is base64: 1 MiB decoded is about 1.33 MiB encoded, and fits
    encoded = k8s(secret, "s", "gw")
    encoded["inputs"] = {**encoded["inputs"], "data": {"k": base64.b64encode(b"z" * mib).decode()}}
    plain = k8s(secret, "p", "gw")
    plain["inputs"] = {**plain["inputs"], "stringData": {"k": "z" * (mib + 1)}}
    policy = [by_name()["objects-fit-the-api-server"]]
    violations = run_policies([at_limit, over, encoded, plain], policies=policy)
    assert [(v.resource_name, v.enforcement) for v in violations] == [("gw-big", "mandatory"), ("gw-p", "mandatory")]
    assert violations[0].message == (
        f"its data is {mib + 1} bytes; the API server refuses a ConfigMap over {mib} bytes (1 MiB), so `pulumi up` "
        "fails on it. For the gateway's envoy.yaml: split the models across stacks")
    assert pf_sizes.data_bytes(secret, encoded["inputs"]) == mib
