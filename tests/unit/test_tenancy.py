"""Tenancy on its own args (no stack config): children named from the component's name, exact quotas and
policies, and every invalid argument reported at once with its property path."""

import pulumi
import pytest

from components.k8s.tenancy import Tenancy, TenancyArgs, tenancy_spec
from tests.unit.test_aws_node_pool import register

NS = "kubernetes:core/v1:Namespace"
QUOTA = "kubernetes:core/v1:ResourceQuota"
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def args(**extra) -> TenancyArgs:
    a: TenancyArgs = {
        "tenants": {"chat": {"cpu_quota": "48", "memory_quota": "512Gi", "gpu_quota": 4},
                    "batch": {"namespace": "batch-jobs", "cpu_quota": "8", "memory_quota": "64Gi",
                              "mig_quota": {"1g.10gb": 7}}},
        "models": {"llama": {"tenant": "chat", "downloads_weights": True},
                   "summarizer": {"tenant": "batch", "callers": ["llama"]}},
    }
    a.update(extra)  # type: ignore[typeddict-item]
    return a


def test_tenancy_from_its_own_args_names_children_from_its_name() -> None:
    res = register(lambda: Tenancy("teams", args(kubernetes_version="1.33")))
    names = sorted(r.name for r in res if r.type in (NS, QUOTA))
    assert names == ["teams-batch", "teams-batch-resourcequota-tenant-quota", "teams-chat",
                     "teams-chat-resourcequota-tenant-quota"]
    ns = {r.name: r.inputs["metadata"] for r in res if r.type == NS}
    assert ns["teams-batch"]["name"] == "batch-jobs"
    assert ns["teams-chat"]["labels"]["pod-security.kubernetes.io/enforce-version"] == "v1.33"
    quotas = {r.name: r.inputs["spec"]["hard"] for r in res if r.type == QUOTA}
    assert quotas["teams-batch-resourcequota-tenant-quota"] == {
        "requests.nvidia.com/gpu": "0", "requests.nvidia.com/mig-1g.10gb": "7", "requests.cpu": "8",
        "limits.cpu": "8", "requests.memory": "64Gi", "limits.memory": "64Gi"}
    policies = {r.name: r.inputs["spec"] for r in res if r.type == NETPOL}
    # the documented defaults: gateway in aifactory-gateway, Prometheus and the Collector in monitoring
    assert policies["teams-chat-networkpolicy-allow-gateway"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "aifactory-gateway"}}}]
    assert policies["teams-chat-networkpolicy-allow-monitoring"]["egress"][0]["to"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert "teams-chat-networkpolicy-allow-model-downloads" in policies
    assert "teams-batch-networkpolicy-allow-model-downloads" not in policies
    assert policies["teams-batch-networkpolicy-allow-callers-summarizer"]["ingress"][0]["from"] == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "chat"}},
        "podSelector": {"matchLabels": {"aifactory.io/model": "llama"}}}]


def test_every_invalid_argument_is_reported_at_once_with_its_path() -> None:
    bad = args(gateway_namespace="Gateway")
    bad["tenants"]["chat"] = {"namespace": "chat_ns", "gpu_quota": -1, "cpu_quota": "lots", "memory_quota": "1Gi"}
    bad["models"] = {"llama": {"tenant": "chta", "callers": ["nobody"]}}
    with pytest.raises(pulumi.InputPropertiesError) as err:
        tenancy_spec("teams", bad)
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("tenants.chat.namespace", "'chat_ns' is not a DNS label (lowercase letters, digits and '-', at most 63)"),
        ("tenants.chat.gpuQuota", "-1 is negative"),
        ("tenants.chat.cpuQuota", "'lots' is not a Kubernetes quantity such as 96, 1500m or 1024Gi"),
        ("models.llama.tenant", "'chta' is not a tenant; tenants: chat, batch"),
        ("models.llama.callers[0]", "'nobody' is not a model; models: llama"),
        ("gatewayNamespace", "'Gateway' is not a DNS label (lowercase letters, digits and '-', at most 63)"),
    ]


def test_a_misspelt_argument_is_named_before_anything_reads_it() -> None:
    bad = args()
    bad["tenants"]["chat"]["gpu_quotas"] = 4  # type: ignore[typeddict-unknown-key]
    with pytest.raises(pulumi.InputPropertiesError) as err:
        tenancy_spec("teams", bad)
    assert [e["property_path"] for e in err.value.errors] == ["tenants.chat.gpuQuotas"]
    assert "did you mean 'gpu_quota'?" in err.value.errors[0]["reason"]
