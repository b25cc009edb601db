"""Mesh and tenancy: STRICT mTLS, allow-nothing authorization, quotas, limits and default-deny networking."""

from __future__ import annotations

from typing import Any

from components.k8s import mesh, tenancy
from infra.component_args import tenancy_args
from infra.config import PlatformConfig
from infra.writers.kubernetes import helm_releases, kubernetes_objects
from tests.unit.test_k8s_platform import platform_only, stack_cfg


def tenancy_of(cfg: PlatformConfig) -> tenancy.TenancySpec:
    """What the Tenancy component builds from the stack's tenants (its args, as infra maps them)."""
    return tenancy.tenancy_spec("tenancy", tenancy_args(cfg))

MANAGED = {"app.kubernetes.io/managed-by": "aifactory"}
GATEWAY = "cluster.local/ns/aifactory-gateway/sa/aifactory-gateway"
PROMETHEUS = "cluster.local/ns/monitoring/sa/prometheus"
SERVERS = {"matchLabels": {"app.kubernetes.io/component": "model-server"}}


def _allow(selector: dict[str, Any], principals: list[str], ports: list[str] | None) -> dict[str, Any]:
    rule: dict[str, Any] = {"from": [{"source": {"principals": principals}}]}
    if ports is not None:
        rule["to"] = [{"operation": {"ports": ports}}]
    return {"selector": selector, "action": "ALLOW", "rules": [rule]}


def test_peer_authentication_is_mesh_wide_strict() -> None:
    assert mesh.peer_authentication() == {
        "apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
        "metadata": {"name": "default", "namespace": "istio-system", "labels": MANAGED},
        "spec": {"mtls": {"mode": "STRICT"}}}


def test_staging_authorization_policies() -> None:
    got = [(p["metadata"]["namespace"], p["metadata"]["name"], p["spec"])
           for p in mesh.authorization_policies(stack_cfg("staging"))]
    assert got == [
        ("search", "allow-nothing", {}),
        ("search", "allow-gateway", _allow(SERVERS, [GATEWAY], ["8000"])),
        ("search", "allow-monitoring", _allow(SERVERS, [PROMETHEUS], ["8000", "8002"])),
        ("support", "allow-nothing", {}),
        ("support", "allow-gateway", _allow(SERVERS, [GATEWAY], ["8000"])),
        ("support", "allow-monitoring", _allow(SERVERS, [PROMETHEUS], ["8000", "8002"])),
        ("support", "allow-callers-llama-8b-trt", _allow({"matchLabels": {"aifactory.io/model": "llama-8b-trt"}},
                                                         ["cluster.local/ns/search/sa/llama-70b"], ["8000"])),
    ]


def test_prod_callers_across_tenants_and_multi_node_peers() -> None:
    by_name = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["spec"]
               for p in mesh.authorization_policies(stack_cfg("prod"))}
    assert by_name[("search", "allow-callers-embed-rerank")] == _allow(
        {"matchLabels": {"aifactory.io/model": "embed-rerank"}},
        ["cluster.local/ns/assistant/sa/assistant-batch", "cluster.local/ns/assistant/sa/assistant-fast",
         "cluster.local/ns/assistant/sa/assistant-steady"], ["8000"])
    assert by_name[("research", "allow-peers-deep-research")] == _allow(
        {"matchLabels": {"aifactory.io/model": "deep-research"}}, ["cluster.local/ns/research/sa/deep-research"],
        None)
    assert sorted(name for ns, name in by_name if ns == "finance") == [
        "allow-gateway", "allow-monitoring", "allow-nothing"]


def test_istiod_uses_cni_and_traces_to_the_collector() -> None:
    values = mesh.istiod_values(stack_cfg("dev"))
    assert values["pilot"]["cni"] == {"enabled": True}
    assert values["meshConfig"]["extensionProviders"] == [{"name": "otel", "opentelemetry": {
        "service": "otel-collector.monitoring.svc.cluster.local", "port": 4317}}]
    assert mesh.tracing_telemetry(stack_cfg("dev"))["spec"] == {"tracing": [{"providers": [{"name": "otel"}],
                                                                             "randomSamplingPercentage": 1.0}]}


def test_istio_releases_share_one_version() -> None:
    istio = {r["name"]: r["version"] for r in helm_releases(platform_only("dev").resources)
             if r["namespace"] == "istio-system"}
    assert istio == {"istio-base": "1.28.3", "istio-cni": "1.28.3", "istiod": "1.28.3"}


def test_tenant_namespace_labels_enforce_restricted_and_injection() -> None:
    cfg = stack_cfg("onprem")
    assert tenancy.tenant_namespace_labels(tenancy_of(cfg), cfg.tenants["analytics"]) == {
        **MANAGED,
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "v1.35",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
        "istio-injection": "enabled",
        "aifactory.io/tenant": "analytics",
    }


def test_quota_and_limit_range() -> None:
    cfg = stack_cfg("prod")
    quota = tenancy.resource_quota(cfg.tenants["assistant"])
    assert quota["metadata"] == {"name": "tenant-quota", "namespace": "assistant",
                                 "labels": {**MANAGED, "aifactory.io/tenant": "assistant"}}
    # 80 GPUs on h100-block/h200 (p5 and p5en: 192 vCPUs, 2048 GiB for 8 GPUs) imply 1920 cores, 20480Gi.
    assert quota["spec"] == {"hard": {"requests.nvidia.com/gpu": "80", "requests.cpu": "1920",
                                      "limits.cpu": "1920", "requests.memory": "20480Gi", "limits.memory": "20480Gi"}}
    assert tenancy.limit_range(cfg.tenants["assistant"])["spec"] == {"limits": [{
        "type": "Container", "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
        "default": {"cpu": "1", "memory": "1Gi"}}]}


def _ns(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def test_network_policies_of_a_caller_tenant() -> None:
    cfg = stack_cfg("staging")
    policies = {p["metadata"]["name"]: p["spec"]
                for p in tenancy.network_policies(tenancy_of(cfg), cfg.tenants["search"])}
    assert list(policies) == ["default-deny", "allow-dns", "allow-istiod", "allow-gateway", "allow-monitoring",
                              "allow-calls-llama-70b", "allow-model-downloads"]
    assert policies["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [],
                                        "egress": []}
    assert policies["allow-dns"] == {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{
        "to": [{**_ns("kube-system"), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]}
    assert policies["allow-istiod"] == {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{
        "to": [{**_ns("istio-system"), "podSelector": {"matchLabels": {"app": "istiod"}}}],
        "ports": [{"protocol": "TCP", "port": 15012}]}]}
    assert policies["allow-gateway"] == {"podSelector": SERVERS, "policyTypes": ["Ingress"], "ingress": [{
        "from": [_ns("aifactory-gateway")], "ports": [{"protocol": "TCP", "port": 8000}]}]}
    assert policies["allow-monitoring"] == {
        "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [_ns("monitoring")], "ports": [{"protocol": "TCP", "port": p}
                                                            for p in (8000, 8002, 15020, 15090)]}],
        "egress": [{"to": [_ns("monitoring")], "ports": [{"protocol": "TCP", "port": 4317},
                                                         {"protocol": "TCP", "port": 4318}]}]}
    assert policies["allow-calls-llama-70b"] == {
        "podSelector": {"matchLabels": {"aifactory.io/model": "llama-70b"}}, "policyTypes": ["Egress"],
        "egress": [{"to": [{**_ns("support"), "podSelector": {"matchLabels": {"aifactory.io/model": "llama-8b-trt"}}}],
                    "ports": [{"protocol": "TCP", "port": 8000}]}]}
    assert policies["allow-model-downloads"] == {"podSelector": SERVERS, "policyTypes": ["Egress"], "egress": [{
        "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                                            "100.64.0.0/10", "169.254.0.0/16"]}}],
        "ports": [{"protocol": "TCP", "port": 443}]}]}


def test_network_policies_of_a_callee_and_of_multi_node_models() -> None:
    cfg = stack_cfg("onprem")
    policies = {p["metadata"]["name"]: p["spec"] for p in tenancy.network_policies(tenancy_of(cfg),
                                                                                  cfg.tenants["ml-platform"])}
    peers = [{"podSelector": {"matchLabels": {"aifactory.io/model": "llama-405b"}}}]
    assert policies["allow-peers-llama-405b"] == {
        "podSelector": {"matchLabels": {"aifactory.io/model": "llama-405b"}}, "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": peers}], "egress": [{"to": peers}]}
    assert "allow-model-downloads" not in policies  # weights come from a PVC (pvc://)
    staging = stack_cfg("staging")
    support = {p["metadata"]["name"]: p["spec"] for p in tenancy.network_policies(tenancy_of(staging),
                                                                                 staging.tenants["support"])}
    assert support["allow-callers-llama-8b-trt"]["ingress"] == [{
        "from": [{**_ns("search"), "podSelector": {"matchLabels": {"aifactory.io/model": "llama-70b"}}}],
        "ports": [{"protocol": "TCP", "port": 8000}]}]


def test_every_tenant_object_lands_in_its_namespace() -> None:
    objs = kubernetes_objects(platform_only("onprem").resources)
    tenant_ns = {"ml-platform", "analytics-ai"}
    per_ns = {ns: sorted((o["kind"], o["metadata"]["name"]) for o in objs if o["metadata"].get("namespace") == ns)
              for ns in tenant_ns}
    assert per_ns["analytics-ai"] == [
        ("AuthorizationPolicy", "allow-gateway"), ("AuthorizationPolicy", "allow-monitoring"),
        ("AuthorizationPolicy", "allow-nothing"), ("LimitRange", "tenant-defaults"),
        ("NetworkPolicy", "allow-dns"), ("NetworkPolicy", "allow-gateway"), ("NetworkPolicy", "allow-istiod"),
        ("NetworkPolicy", "allow-monitoring"), ("NetworkPolicy", "default-deny"), ("ResourceQuota", "tenant-quota")]
