"""Fabric on its own args (no stack config): the EFA plugin's types and tolerations, the InfiniBand operator and
RDMA networks, children named from its name, every invalid argument at once with its path, and the stacks'
mapping losing nothing."""

import pulumi
import pytest

from components.k8s import fabric
from components.k8s.fabric import Fabric, FabricArgs, fabric_spec
from infra.component_args import fabric_args
from tests.support.stacks import stack_config
from tests.unit.test_aws_node_pool import register

RELEASE = "kubernetes:helm.sh/v3:Release"


def test_efa_pools_from_their_own_args() -> None:
    args: FabricArgs = {"efa_pools": {"h100": {"instance_type": "p5.48xlarge"},
                                      "h200": {"instance_type": "p5en.48xlarge",
                                               "taints": [{"key": "team", "effect": "NoSchedule", "value": "ml"}]}}}
    res = register(lambda: Fabric("data", args))
    assert sorted(r.name for r in res if r.name.startswith("data-")) == ["data-efa"]
    values = next(r for r in res if r.type == RELEASE).inputs["values"]
    assert values["supportedInstanceLabels"] == {"keys": ["node.kubernetes.io/instance-type"],
                                                 "values": ["p5.48xlarge", "p5en.48xlarge"]}
    assert values["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                     {"key": "team", "operator": "Exists", "effect": "NoSchedule"}]


def test_infiniband_from_its_own_args() -> None:
    spec = fabric_spec("data", {"infiniband": {"pools": ["dgx"], "network": "sriov", "interfaces": ["ib0", "ib1"],
                                               "ip_range": "10.20.0.0/20"}})
    # nv-ipam hands each node a block of 16 addresses of the range, on the listed pools' nodes only
    assert fabric.ip_pool(spec)["spec"] == {
        "subnet": "10.20.0.0/20", "perNodeBlockSize": 16, "nodeSelector": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "aifactory.io/pool", "operator": "In", "values": ["dgx"]}]}]}}
    # SR-IOV: one node policy (virtual functions) and one IB network per rail
    assert [(o["kind"], o["metadata"]["name"]) for o in fabric.rdma_network_objects(spec)] == [
        ("SriovNetworkNodePolicy", "aifactory-rdma-ib0"), ("SriovIBNetwork", "aifactory-rdma-ib0"),
        ("SriovNetworkNodePolicy", "aifactory-rdma-ib1"), ("SriovIBNetwork", "aifactory-rdma-ib1")]


def test_every_invalid_argument_is_reported_at_once_with_its_path() -> None:
    bad: FabricArgs = {"efa_pools": {"l4": {"instance_type": "g6.xlarge",
                                            "taints": [{"key": "team", "effect": "Evict"}]}},
                       "infiniband": {"pools": [], "network": "roce", "ip_range": "10.20.0.0/33"}}
    with pytest.raises(pulumi.InputPropertiesError) as err:
        fabric_spec("data", bad)
    assert [e["property_path"] for e in err.value.errors] == [
        "efaPools.l4.instanceType", "efaPools.l4.taints[0].effect", "infiniband.network", "infiniband.ipRange",
        "infiniband.pools"]
    reasons = {e["property_path"]: e["reason"] for e in err.value.errors}
    assert reasons["infiniband.network"] == "'roce' is not allowed; choose one of: ipoib, sriov"
    assert reasons["infiniband.pools"] == "must list at least one pool"


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "onprem"])
def test_the_stacks_args_give_the_same_fabric_as_their_config(name: str) -> None:
    cfg = stack_config(name)
    spec = fabric_spec("fabric", fabric_args(cfg))
    assert fabric.efa_instance_types(spec) == fabric.efa_instance_types(cfg)
    if cfg.efa_pools:
        assert fabric.efa_plugin_values(spec) == fabric.efa_plugin_values(cfg)
    assert spec.infiniband == (cfg.infiniband if cfg.infiniband_pools else None)
    if spec.infiniband is not None:
        assert fabric.ip_pool(spec) == fabric.ip_pool(cfg)
        assert fabric.rdma_network_objects(spec) == fabric.rdma_network_objects(cfg)
