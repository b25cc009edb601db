"""GpuStack on its own args (no stack config): operator values, MIG node labels, children named from its name,
every invalid argument at once with its path, and the stacks' mapping losing nothing."""

import pulumi
import pytest

from components.k8s import gpu_stack
from components.k8s.gpu_stack import GpuStack, GpuStackArgs, gpu_stack_spec
from infra.component_args import gpu_stack_args
from tests.support.stacks import stack_config
from tests.unit.test_aws_node_pool import register

RELEASE = "kubernetes:helm.sh/v3:Release"


def args(**extra) -> GpuStackArgs:
    a: GpuStackArgs = {"pools": {
        "a100": {"mig": "all-1g.10gb", "nodes": ["gpu-1", "gpu-2"]},
        "h100": {"taints": [{"key": "team", "effect": "NoExecute", "value": "ml"}]}}}
    a.update(extra)  # type: ignore[typeddict-item]
    return a


def test_gpu_stack_from_its_own_args_installs_drivers_and_labels_mig_nodes() -> None:
    res = register(lambda: GpuStack("gpus", args(kubernetes_version="1.33")))
    names = sorted(r.name for r in res if r.name.startswith("gpus-"))
    assert names == ["gpus-mig-gpu-1", "gpus-mig-gpu-2", "gpus-ns", "gpus-operator"]
    patch = next(r for r in res if r.name == "gpus-mig-gpu-1").inputs["metadata"]
    assert patch == {"name": "gpu-1", "labels": {"aifactory.io/pool": "a100", "nvidia.com/mig.config": "all-1g.10gb"}}
    values = next(r for r in res if r.type == RELEASE).inputs["values"]
    assert values["driver"]["enabled"] is True and values["toolkit"]["enabled"] is True  # default: no host drivers
    assert values["mig"] == {"strategy": "mixed"} and values["migManager"] == {"enabled": True}
    assert values["daemonsets"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "team", "operator": "Exists", "effect": "NoExecute"}]


def test_hosts_with_drivers_and_rdma() -> None:
    values = gpu_stack.gpu_operator_values(gpu_stack_spec("gpus", {
        "pools": {"h100": {}}, "hosts_have_drivers": True, "rdma": True, "hosts_have_ofed": True}))
    assert values["driver"] == {"enabled": False, "rdma": {"enabled": True, "useHostMofed": True}}
    assert values["mig"] == {"strategy": "single"}


def test_every_invalid_argument_is_reported_at_once_with_its_path() -> None:
    bad = args(hosts_have_ofed=True)
    bad["pools"]["h100"] = {"taints": [{"key": "team", "effect": "Evict"}], "nodes": ["gpu-3"]}
    bad["pools"]["a100"]["mig"] = "All 1g"
    with pytest.raises(pulumi.InputPropertiesError) as err:
        gpu_stack_spec("gpus", bad)
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("pools.a100.mig", "'All 1g' is not a MIG layout name such as all-1g.10gb"),
        ("pools.h100.taints[0].effect", "'Evict' is not allowed; choose one of: NoSchedule, PreferNoSchedule, "
                                        "NoExecute"),
        ("pools.h100.nodes", "labels nodes with a MIG layout: set mig, or remove nodes"),
        ("hostsHaveOfed", "only applies with rdma: true"),
    ]


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "onprem"])
def test_the_stacks_args_give_the_same_operator_values_as_their_config(name: str) -> None:
    cfg = stack_config(name)
    spec = gpu_stack_spec("gpu", gpu_stack_args(cfg))
    assert gpu_stack.gpu_operator_values(spec) == gpu_stack.gpu_operator_values(cfg)
    labelled = [(p.name, n) for p in spec.gpu_pools for n in p.nodes]
    assert labelled == [(p.name, n) for p in cfg.gpu_pools if p.mig and not cfg.is_aws for n in p.nodes]
