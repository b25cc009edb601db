"""Mesh on its own args (no stack config): STRICT mTLS and the tenants' authorization policies, children named
from its name, every invalid argument at once with its path, and the stacks' mapping losing nothing."""

import pulumi
import pytest

from components.k8s import mesh
from components.k8s.mesh import Mesh, MeshArgs, mesh_spec
from infra.component_args import mesh_args
from tests.support.stacks import stack_config
from tests.unit.test_aws_node_pool import register

POLICY = "kubernetes:security.istio.io/v1:AuthorizationPolicy"


def args(**extra) -> MeshArgs:
    a: MeshArgs = {"tenants": {"chat": {}, "search": {"namespace": "search-prod"}},
                   "models": {"llama-8b": {"tenant": "chat", "callers": ["ranker"]},
                              "ranker": {"tenant": "search", "multi_node": True}}}
    a.update(extra)  # type: ignore[typeddict-item]
    return a


def test_mesh_from_its_own_args_allows_only_the_declared_callers() -> None:
    res = register(lambda: Mesh("istio", args(monitoring_namespace="observability")))
    policies = {r.name: r.inputs["spec"] for r in res if r.type == POLICY}
    assert sorted(policies) == [
        "istio-chat-allow-callers-llama-8b", "istio-chat-allow-gateway", "istio-chat-allow-monitoring",
        "istio-chat-allow-nothing", "istio-search-prod-allow-gateway", "istio-search-prod-allow-monitoring",
        "istio-search-prod-allow-nothing", "istio-search-prod-allow-peers-ranker"]
    assert policies["istio-chat-allow-callers-llama-8b"]["rules"] == [{
        "from": [{"source": {"principals": ["cluster.local/ns/search-prod/sa/ranker"]}}],
        "to": [{"operation": {"ports": ["8000"]}}]}]
    assert policies["istio-chat-allow-gateway"]["rules"][0]["from"] == [
        {"source": {"principals": ["cluster.local/ns/aifactory-gateway/sa/aifactory-gateway"]}}]
    assert policies["istio-chat-allow-monitoring"]["rules"][0]["from"] == [
        {"source": {"principals": ["cluster.local/ns/observability/sa/prometheus"]}}]
    peer = next(r for r in res if r.name == "istio-peer-authentication").inputs
    assert peer["spec"] == {"mtls": {"mode": "STRICT"}}
    tracing = next(r for r in res if r.name == "istio-tracing").inputs
    assert tracing["spec"]["tracing"][0]["randomSamplingPercentage"] == 1.0  # the documented default


def test_every_invalid_argument_is_reported_at_once_with_its_path() -> None:
    bad = args(trace_sampling_percent=150.0)
    bad["models"] = {"llama-8b": {"tenant": "chta", "callers": ["nobody"]}}
    with pytest.raises(pulumi.InputPropertiesError) as err:
        mesh_spec("istio", bad)
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("models.llama-8b.tenant", "'chta' is not a tenant; tenants: chat, search"),
        ("models.llama-8b.callers[0]", "'nobody' is not a model; models: llama-8b"),
        ("traceSamplingPercent", "150.0 is not between 0 and 100"),
    ]


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "onprem"])
def test_the_stacks_args_give_the_same_mesh_as_their_config(name: str) -> None:
    cfg = stack_config(name)
    spec = mesh_spec("mesh", mesh_args(cfg))
    assert mesh.authorization_policies(spec) == mesh.authorization_policies(cfg)
    assert mesh.istiod_values(spec) == mesh.istiod_values(cfg)
    assert mesh.tracing_telemetry(spec) == mesh.tracing_telemetry(cfg)
