"""Gateway on its own args (no stack config): the Envoy config it renders, children named from its name, every
invalid argument at once with its property path, and the stacks' mapping losing nothing."""

import pulumi
import pytest
import yaml

from components.k8s.gateway import Gateway, GatewayArgs, gateway_spec
from components.k8s.gateway.envoy import config as ec
from infra.component_args import gateway_args
from infra.fidelity import default_stacks_dir, load_verdicts, routable
from tests.support.stacks import stack_config
from tests.unit.test_aws_node_pool import register

CONFIG_MAP = "kubernetes:core/v1:ConfigMap"


def args(**extra) -> GatewayArgs:
    a: GatewayArgs = {"models": {"llama-8b": {"tenant": "chat", "engine": "vllm", "timeout_seconds": 90}},
                      "tenants": {"chat": {"namespace": "chat-models"}},
                      "auth": {"issuers": [{"issuer": "https://sso.example.com",
                                            "jwks_uri": "https://sso.example.com/keys"}]}}
    a.update(extra)  # type: ignore[typeddict-item]
    return a


def test_gateway_from_its_own_args_routes_the_model_to_its_service() -> None:
    res = register(lambda: Gateway("edge", args(namespace="edge-gw", service_type="ClusterIP")))
    cm = next(r for r in res if r.type == CONFIG_MAP)
    assert cm.name == "edge-configmap"
    assert cm.inputs["metadata"]["namespace"] == "edge-gw"
    envoy = yaml.safe_load(cm.inputs["data"]["envoy.yaml"])
    # its replicas: the addresses of its headless Service (components.k8s.gateway.envoy.replicas)
    [cluster] = [c for c in envoy["static_resources"]["clusters"] if c["name"] == "llama-8b"]
    assert cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] == {
        "socket_address": {"address": "llama-8b.chat-models.svc.cluster.local.", "port_value": 8000}}
    vhost = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"][
        "route_config"]["virtual_hosts"][0]
    route = next(r for r in vhost["routes"] if r["name"] == "llama-8b")
    assert route["route"]["cluster"] == "llama-8b"
    assert route["route"]["timeout"] == "90s"
    svc = next(r for r in res if r.type == "kubernetes:core/v1:Service" and r.name == "edge-service")
    assert svc.inputs["spec"]["type"] == "ClusterIP"
    assert "annotations" not in svc.inputs["metadata"]  # not on AWS unless awsInternalLoadBalancer


def test_a_multi_node_model_is_reached_through_its_leaderworkerset_leaders_and_its_gpus_stay_unknown() -> None:
    """multi_node changes nothing the gateway reaches: the model's Service selects the LWS groups' leaders
    (components.k8s.serving.objects.service), and the model states no GPU count it was not given."""
    a = args()
    a["models"]["llama-8b"] |= {"multi_node": True, "max_replicas": 2}
    spec = gateway_spec("edge", a)
    model = spec.models["llama-8b"]
    assert (model.multi_node, model.spans_nodes, model.gpus_per_replica) == (True, True, 1)
    [cluster] = [c for c in yaml.safe_load(ec.render(spec))["static_resources"]["clusters"] if c["name"] == "llama-8b"]
    assert cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"][
        "address"] == "llama-8b.chat-models.svc.cluster.local."


def test_every_invalid_argument_is_reported_at_once_with_its_path() -> None:
    bad = args(service_type="Ingress", min_replicas=3, max_replicas=2, routing={"llama": {"policy": "random"}},
               # one issuer, replacing the valid one
               auth={"issuers": [{"issuer": "https://sso", "jwks_uri": "http://sso/keys", "tenants": ["ops"]}]})
    bad["models"]["llama-8b"] = {"tenant": "chta", "engine": "tgi", "timeout_seconds": 0}
    with pytest.raises(pulumi.InputPropertiesError) as err:
        gateway_spec("edge", bad)
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("models.llama-8b.tenant", "'chta' is not a tenant; tenants: chat"),
        ("models.llama-8b.engine", "'tgi' is not allowed; choose one of: vllm, triton, sglang"),
        ("models.llama-8b.timeoutSeconds", "0 must be more than 0"),
        ("serviceType", "'Ingress' is not allowed; choose one of: LoadBalancer, NodePort, ClusterIP"),
        ("minReplicas", "3 must be at least 1 and at most maxReplicas (2)"),
        ("routing.llama", "'llama' is not a workload with variants; with variants: none"),
        ("routing.llama.policy", "'random' is not allowed; choose one of: cost-within-deadline, fastest, cheapest"),
        ("auth.issuers[0].jwksUri", "'http://sso/keys' must be an https:// URL"),
        ("auth.issuers[0].tenants[0]", "'ops' is not a tenant; tenants: chat"),
    ]


def test_a_misspelt_argument_is_named_before_anything_reads_it() -> None:
    with pytest.raises(pulumi.InputPropertiesError) as err:
        gateway_spec("edge", args(min_replica=1))
    assert [e["property_path"] for e in err.value.errors] == ["minReplica"]
    assert "did you mean 'min_replicas'?" in err.value.errors[0]["reason"]


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "onprem"])
def test_the_stacks_args_render_the_same_envoy_config_as_their_config(name: str) -> None:
    """infra maps each shipped stack to GatewayArgs without losing a setting the gateway reads: what the component
    renders from its args is what the stack config itself renders (synth stays byte-identical)."""
    cfg = routable(stack_config(name), load_verdicts(stack_config(name), default_stacks_dir()))
    assert ec.render(gateway_spec("gateway", gateway_args(cfg))) == ec.render(cfg)
