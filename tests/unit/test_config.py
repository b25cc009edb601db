"""PlatformConfig: shipped stacks load; every kind of bad input is reported with its key path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.config import ConfigError, PlatformConfig, parse
from infra.synth import read_stack_config
from tests.support.stacks import SHIPPED_STACKS, stack_raw

STACKS = SHIPPED_STACKS

BASE: dict[str, Any] = {
    "target": {"provider": "aws", "region": "us-east-1", "availabilityZones": ["us-east-1a", "us-east-1b"]},
    "cluster": {"apiAccess": "public-and-private", "publicAccessCidrs": ["203.0.113.0/24"]},
    "nodePools": {"gpu-a": {"instanceType": "p5.48xlarge", "fabric": "efa", "minSize": 1, "maxSize": 2}},
    "tenants": {"t1": {"gpuQuota": 16}},
    "models": {"m1": {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "tenant": "t1", "pool": "gpu-a",
                      "tensorParallel": 8}},
}


raw_of = stack_raw


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="t")
    return [str(p) for p in err.value.problems]


def with_(path: str, value: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """BASE with the dotted `path` set to `value` (value DELETE removes the key)."""
    raw = copy.deepcopy(base or BASE)
    node = raw
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return raw


DELETE = object()


def test_stacks_are_the_four_environments() -> None:
    assert STACKS == ["dev", "onprem", "prod", "staging"]


@pytest.mark.parametrize("stack", STACKS)
def test_shipped_stack_validates(stack: str) -> None:
    cfg = parse(raw_of(stack), stack=stack)
    assert isinstance(cfg, PlatformConfig)
    assert cfg.gpu_pools, "every stack has a GPU pool"
    assert cfg.models


def test_dev_defaults_are_documented_values() -> None:
    cfg = parse(raw_of("dev"), stack="dev")
    pool = cfg.node_pools["gpu-small"]
    assert (pool.instance_type, pool.fabric, pool.min_size, pool.desired_size, pool.max_size) == \
        ("g6e.xlarge", "none", 1, 1, 2)
    assert pool.availability_zones == ("us-east-1a", "us-east-1b")  # non-EFA pools span every zone
    assert pool.placement_group is False and pool.hugepages_mib == 0
    assert [(t.key, t.value, t.effect) for t in pool.taints] == [("nvidia.com/gpu", "true", "NoSchedule")]
    assert cfg.cluster is not None and cfg.cluster.name == "aifactory-dev"
    assert (cfg.cluster.api_access, cfg.cluster.public_access_cidrs) == ("public-and-private", ("203.0.113.0/24",))
    assert cfg.network is not None and cfg.network.nat_gateways == "single"
    chat = cfg.models["chat"]
    assert (chat.gpus_per_replica, chat.workload, chat.priority, chat.uri) == \
        (1, "chat", "interactive", "hf://Qwen/Qwen2.5-7B-Instruct")
    assert cfg.price_per_hour("g6e.xlarge") == 1.861


def test_efa_pool_defaults_to_one_zone_placement_group_and_hugepages() -> None:
    cfg = parse(BASE, stack="t")
    pool = cfg.node_pools["gpu-a"]
    assert pool.availability_zones == ("us-east-1a",)
    assert pool.placement_group is True
    assert pool.hugepages_mib == 5120


def test_prod_capacity_block_pool_has_no_placement_group_and_price_override() -> None:
    cfg = parse(raw_of("prod"), stack="prod")
    block = cfg.node_pools["h100-block"]
    assert block.capacity.type == "capacity-block" and block.capacity.reservation_id == "cr-0a1b2c3d4e5f60718"
    assert block.placement_group is False
    assert (block.min_size, block.desired_size, block.max_size) == (0, 0, 4)  # empty outside the block's window
    assert (block.capacity.start_time, block.capacity.end_time) == ("2026-12-01T11:30:00Z", "2026-12-15T11:30:00Z")
    assert cfg.price_per_hour("p5.48xlarge") == 31.46  # stack override beats the catalog
    assert cfg.price_per_hour("p5en.48xlarge") == 63.30
    deep = cfg.models["deep-research"]
    assert (deep.gpus_per_replica, deep.multi_node, deep.nodes_per_replica) == (16, True, 2)


def test_onprem_is_existing_cluster_with_infiniband() -> None:
    cfg = parse(raw_of("onprem"), stack="onprem")
    assert cfg.target.provider == "existing" and cfg.cluster is None and cfg.network is None
    assert [p.name for p in cfg.infiniband_pools] == ["h100-ib"]
    assert cfg.infiniband is not None and cfg.infiniband.hca_device_ids == ("101b", "1021")
    assert cfg.tenants["analytics"].namespace == "analytics-ai"
    assert cfg.models["classifier"].mig_profile == "1g.10gb"


# Each bad config: (id, raw, the exact problem line expected among those reported)
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("wrong type", with_("nodePools.gpu-a.minSize", "two"),
     "nodePools.gpu-a.minSize: expected an integer, got a string 'two'"),
    ("bool is not int", with_("nodePools.gpu-a.maxSize", True),
     "nodePools.gpu-a.maxSize: expected an integer, got a boolean true"),
    ("unknown top-level key", with_("nodepools", {}),
     "nodepools: unknown key (did you mean 'nodePools'?); allowed keys under 'aifactory:': target, "
     "kubernetesVersion, cluster, network, "
     "nodePools, infiniband, tenants, models, gateway, observability"),
    ("misspelt model key", with_("models.chat.tenent", "team-a"),
     "models.chat.tenent: unknown key (did you mean 'tenant'?); allowed keys: "),
    ("unknown key, nothing close", with_("models.chat.colour", "blue"),
     "models.chat.colour: unknown key; allowed keys: "),
    ("unknown pool key", with_("nodePools.gpu-a.instancetype", "p5.48xlarge"),
     "nodePools.gpu-a.instancetype: unknown key (did you mean 'instanceType'?); allowed keys: instanceType, "
     "minSize, maxSize, desiredSize, "
     "fabric, availabilityZones, capacity, placementGroup, rootVolumeGiB, hugepagesMiB, labels, taints, mig, "
     "nodes, nodeCheck"),
    ("unknown instance type", with_("nodePools.gpu-a.instanceType", "p9.mega"),
     "nodePools.gpu-a.instanceType: 'p9.mega' is not a known instance type; known: "),
    ("efa on a type without efa", with_("nodePools.gpu-a.instanceType", "g6e.xlarge"),
     "nodePools.gpu-a.fabric: 'efa' is not available on g6e.xlarge; EFA types: g5.12xlarge, g5.48xlarge, "
     "g6.12xlarge, g6.48xlarge, g6e.12xlarge, g6e.48xlarge, p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5.4xlarge, "
     "p5e.48xlarge, p5en.48xlarge, p6-b200.48xlarge"),
    ("efa across zones", with_("nodePools.gpu-a.availabilityZones", ["us-east-1a", "us-east-1b"]),
     "nodePools.gpu-a.availabilityZones: [\"us-east-1a\", \"us-east-1b\"]: an EFA pool must be in exactly one "
     "zone (EFA traffic does not cross zones)"),
    ("capacity block with placement group",
     with_("nodePools.gpu-a", {"instanceType": "p5.48xlarge", "fabric": "efa", "minSize": 2, "maxSize": 2,
                               "placementGroup": True,
                               "capacity": {"type": "capacity-block", "reservationId": "cr-0123456789abcdef0"}}),
     "nodePools.gpu-a.placementGroup: true conflicts with capacity type 'capacity-block': the reservation fixes "
     "placement itself; remove placementGroup"),
    ("capacity block sizes differ",
     with_("nodePools.gpu-a", {"instanceType": "p5.48xlarge", "fabric": "efa", "minSize": 1, "maxSize": 2,
                               "capacity": {"type": "capacity-block", "reservationId": "cr-0123456789abcdef0",
                                            "startTime": "2026-12-01T11:30:00Z",
                                            "endTime": "2026-12-02T11:30:00Z"}}),
     "nodePools.gpu-a.desiredSize: a capacity block runs nodes only inside its window: set minSize and "
     "desiredSize to 0 and maxSize to the reserved count (got 1, 2, 1)"),
    ("odcr sizes differ",
     with_("nodePools.gpu-a.capacity", {"type": "odcr", "reservationId": "cr-0123456789abcdef0"}),
     "nodePools.gpu-a.desiredSize: an ODCR reservation fixes the node count"),
    ("reservation id missing", with_("nodePools.gpu-a.capacity", {"type": "odcr"}),
     "nodePools.gpu-a.capacity.reservationId: is required for capacity type 'odcr'"),
    ("min greater than max", with_("nodePools.gpu-a.minSize", 3),
     "nodePools.gpu-a.minSize: 3 is greater than maxSize 2"),
    ("desired outside", with_("nodePools.gpu-a.desiredSize", 5),
     "nodePools.gpu-a.desiredSize: 5 is outside minSize..maxSize (1..2)"),
    ("negative size", with_("nodePools.gpu-a.minSize", -1),
     "nodePools.gpu-a.minSize: -1 is below the minimum 0"),
    ("missing target", with_("target", DELETE),
     "target: is required (provider: aws with region and availabilityZones, or provider: existing with kubeconfig)"),
    ("missing region", with_("target.region", DELETE), "target.region: is required"),
    ("zone of another region", with_("target.availabilityZones", ["us-east-1a", "eu-west-1b"]),
     "target.availabilityZones[1]: 'eu-west-1b' is not a zone of region 'us-east-1'"),
    ("missing model field", with_("models.m1.engine", DELETE), "models.m1.engine: is required"),
    ("bad engine", with_("models.m1.engine", "tgi"),
     "models.m1.engine: 'tgi' is not allowed; choose one of: vllm, triton"),
    ("model on unknown pool", with_("models.m1.pool", "nope"),
     "models.m1.pool: 'nope' is not a node pool; pools: gpu-a"),
    ("tp does not fit", with_("models.m1.tensorParallel", 12),
     "models.m1.tensorParallel: 12 GPUs span nodes of 8 GPUs (p5.48xlarge); a multi-node replica needs a "
     "multiple of 8"),
    ("triton across nodes",
     with_("models.m1", {"engine": "triton", "model": "o/m", "tenant": "t1", "pool": "gpu-a", "tensorParallel": 8,
                         "pipelineParallel": 2}, with_("tenants.t1.gpuQuota", 16)),
     "models.m1.engine: 'triton' cannot serve a replica of 16 GPUs across nodes of 8 (p5.48xlarge); use engine "
     "'vllm' or 'sglang' or fit the replica on one node"),
    ("speculative draft_model", with_("models.m1.speculative", {"method": "draft_model", "draftModel": "o/d"}),
     "models.m1.speculative.method: 'draft_model' is not supported by the V1 engine of the kit's pinned vLLM"),
    ("speculative with pipeline parallel",
     with_("models.m1", {"engine": "vllm", "model": "o/m", "toolCallParser": "none",
                         "tenant": "t1", "pool": "gpu-a", "tensorParallel": 8,
                         "pipelineParallel": 2, "speculative": {"draftModel": "o/eagle3-head"}},
           with_("tenants.t1.gpuQuota", 16)),
     "models.m1.speculative: vLLM's speculative decoding does not support pipeline parallelism (pipelineParallel "
     "is 2); remove it or use tensorParallel only"),
    ("ngram takes no draft model", with_("models.m1.speculative", {"method": "ngram", "draftModel": "o/d"}),
     "models.m1.speculative.draftModel: is not used by method 'ngram' (it drafts from the prompt); remove it"),
    ("quota too small", with_("tenants.t1.gpuQuota", 4),
     "tenants.t1.gpuQuota: 4 is less than the 8 GPUs its models can scale to (replicas.max x gpusPerReplica); "
     "raise it to at least 8"),
    ("public endpoint to the internet", with_("cluster", {"publicAccessCidrs": ["0.0.0.0/0"]}),
     "cluster.publicAccessCidrs[0]: '0.0.0.0/0' opens the API endpoint to the whole internet; list your own "
     "networks instead"),
    ("unsupported kubernetes version", with_("kubernetesVersion", "1.20"),
     "kubernetesVersion: '1.20' is not allowed; choose one of: 1.31, 1.32, 1.33, 1.34, 1.35, 1.36"),
    ("section is not a mapping", with_("nodePools", ["gpu-a"]),
     "nodePools: expected a mapping, got a list [\"gpu-a\"]"),
    ("infiniband on aws", with_("nodePools.gpu-a.fabric", "infiniband"),
     "nodePools.gpu-a.fabric: 'infiniband' needs provider 'existing'; AWS pools use 'efa'"),
    ("infiniband range too small", {**stack_raw("onprem"), "infiniband": {"ipRange": "192.168.100.0/28"}},
     "infiniband.ipRange: '192.168.100.0/28' has 16 addresses, too few for 4 InfiniBand nodes x 16 per node; "
     "use a /26 or larger"),
    ("s3 uri on an existing cluster",
     {**stack_raw("onprem"), "models": {**stack_raw("onprem")["models"],
                                        "classifier": {**stack_raw("onprem")["models"]["classifier"],
                                                       "uri": "s3://bucket/classifier"}}},
     "models.classifier.uri: 's3://bucket/classifier' needs provider aws (the model reads it with an IRSA role); "
     "use pvc:// or hf://"),
    ("tenant namespace reserved", with_("tenants.t1.namespace", "kube-system"),
     "tenants.t1.namespace: 'kube-system' is reserved for the platform"),
]


def test_a_malformed_quota_is_reported_once_not_read_as_zero() -> None:
    # Not also "0 is less than the 2 GPUs its models can scale to": the user wrote no 0.
    assert problems(with_("tenants.t1.gpuQuota", "two")) == [
        "tenants.t1.gpuQuota: expected an integer, got a string 'two'"]


@pytest.mark.parametrize("quota", [None, DELETE], ids=["null", "absent"])
def test_an_unset_gpu_quota_is_reported_as_unset_not_as_a_zero_the_user_never_wrote(quota: Any) -> None:
    """tenants.X.gpuQuota: null means unset (no GPUs), as absent does: the message says so, not "0 is less"."""
    assert problems(with_("tenants.t1.gpuQuota", quota)) == [
        "tenants.t1.gpuQuota: is unset (null or absent: no GPUs), but the 8 GPUs its models can scale to "
        "(replicas.max x gpusPerReplica); set it to at least 8"]


def test_a_bad_tenant_name_is_one_problem_not_also_a_model_whose_tenant_is_missing() -> None:
    """The entry `tenants.T1` is reported for its name; the model that names T1 is not also told "'T1' is not a
    tenant; tenants: (none)" (one problem per cause)."""
    raw = with_("tenants", {"T1": BASE["tenants"]["t1"]}, with_("models.m1.tenant", "T1"))
    assert problems(raw) == [
        "tenants.T1: name must be a DNS label (lowercase letters, digits and '-', at most 63 characters)"]


def test_a_bad_pool_name_is_one_problem_not_also_a_model_whose_pool_is_missing() -> None:
    raw = with_("nodePools", {"GPU-A": BASE["nodePools"]["gpu-a"]}, with_("models.m1.pool", "GPU-A"))
    assert [p for p in problems(raw) if "GPU-A" in p] == [
        "nodePools.GPU-A: name must be a DNS label (lowercase letters, digits and '-', at most 63 characters)"]


@pytest.mark.parametrize(("raw", "expected"), [(raw, exp) for _, raw, exp in BAD], ids=[i for i, _, _ in BAD])
def test_bad_config_reports_key_path(raw: dict[str, Any], expected: str) -> None:
    found = problems(raw)
    assert any(p.startswith(expected) for p in found), found


def test_all_problems_are_reported_at_once() -> None:
    raw = with_("nodePools.gpu-a.minSize", "x", with_("models.m1.engine", "tgi", with_("kubernetesVersion", "9")))
    found = problems(raw)
    paths = [p.split(":")[0] for p in found]
    assert {"nodePools.gpu-a.minSize", "models.m1.engine", "kubernetesVersion"} <= set(paths)


def test_onprem_type_needs_a_price() -> None:
    raw = raw_of("onprem")
    del raw["observability"]["prices"]["dgx-h100"]
    assert "observability.prices.dgx-h100: is required: dgx-h100 (pool 'h100-ib') has no on-demand price; " \
           "give its amortised $/hour" in problems(raw)


# --- hypothesis: garbage never escapes as anything but ConfigError -----------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
KEYS = ["target", "kubernetesVersion", "cluster", "network", "nodePools", "infiniband", "tenants", "models",
        "gateway", "observability", "bogus"]


def _leaf_paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _leaf_paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _leaf_paths(v, (*prefix, i))
    return out


def _parse_or_config_error(raw: Any) -> None:
    try:
        parse(raw, stack="h")
    except ConfigError as err:
        assert err.problems, "a ConfigError always names at least one problem"
        for p in err.problems:
            assert p.path and p.message


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6))
def test_garbage_top_level_never_tracebacks(raw: dict[str, Any]) -> None:
    _parse_or_config_error(raw)


PROD = raw_of("prod")
PROD_PATHS = _leaf_paths(PROD)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PROD_PATHS), json_values)
def test_garbage_anywhere_in_a_real_stack_never_tracebacks(path: tuple[Any, ...], value: Any) -> None:
    raw = copy.deepcopy(PROD)
    node: Any = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    _parse_or_config_error(raw)


def test_stack_file_values_travel_as_the_cli_passes_them(tmp_path: Path) -> None:
    f = tmp_path / "Pulumi.x.yaml"
    f.write_text(yaml.safe_dump({"config": {"aifactory:kubernetesVersion": "1.34", "aws:region": "us-east-1",
                                            "aifactory:nodePools": {"a": {"instanceType": "g6.xlarge"}}}}))
    values = read_stack_config(f)
    assert values["aifactory:kubernetesVersion"] == "1.34"  # scalars stay text
    assert json.loads(values["aifactory:nodePools"]) == {"a": {"instanceType": "g6.xlarge"}}  # objects as JSON
    assert values["aws:region"] == "us-east-1"



# --- the system pool's name (issue 44, leftovers) ----------------------------------------------------------------

SYSTEM_RESERVED = ("nodePools.system: 'system' is reserved on AWS for the kit's own system node group "
                   "(cluster.systemPool): its nodes carry aifactory.io/pool=system, which the kit's own controllers "
                   "select (the AWS Load Balancer Controller's pods); rename the pool (and the models' `pool` that "
                   "name it), or size the system nodes with cluster.systemPool")


def test_an_aws_gpu_pool_named_system_is_refused() -> None:
    """Its nodes would carry the system pool's label: the kit's own controllers (the AWS Load Balancer Controller)
    would be scheduled on GPU nodes that KEDA and capacity blocks empty, and GpuNodePool's resources would be named
    after the system node group's. One problem: the model on it is not also told its pool is missing."""
    raw = with_("nodePools", {"system": BASE["nodePools"]["gpu-a"]}, with_("models.m1.pool", "system"))
    assert problems(raw) == [SYSTEM_RESERVED]


def test_an_aws_cpu_pool_named_system_is_refused_too() -> None:
    """Any user pool: a CPU pool of the stack's own would share the label as well."""
    assert problems(with_("nodePools.system", {"instanceType": "m7i.xlarge"})) == [SYSTEM_RESERVED]


def test_an_existing_cluster_may_name_a_pool_system() -> None:
    """On an existing cluster the kit adds no system node group and targets no node by the pool label: the name is
    the administrators' to give."""
    raw = stack_raw("onprem")
    raw["nodePools"]["system"] = raw["nodePools"].pop("a100-mig")
    raw["models"]["classifier"]["pool"] = "system"
    assert parse(raw, stack="onprem").models["classifier"].pool == "system"

# --- issue 19: reserved namespaces by every path, capacity -------------------------------------------------


def _tenant_named(name: str) -> dict[str, Any]:
    raw = with_("tenants", {name: {"gpuQuota": 16}})
    raw["models"]["m1"]["tenant"] = name
    return raw


RESERVED = ("is reserved for the platform (kube-*, aifactory-gateway, aifactory-system, default, gpu-operator, "
            "istio-system, monitoring, nvidia-network-operator)")


@pytest.mark.parametrize("name", ["kube-system", "default", "istio-system", "kube-anything", "monitoring",
                                  "aifactory-gateway", "aifactory-system", "gpu-operator"])
def test_a_tenant_named_after_a_platform_namespace_is_rejected(name: str) -> None:
    assert problems(_tenant_named(name)) == [
        f"tenants.{name}: the tenant's namespace defaults to its name, and {name!r} {RESERVED}; rename the tenant "
        f"or set tenants.{name}.namespace to a namespace of its own"]
    ok = _tenant_named(name)
    ok["tenants"][name]["namespace"] = "team-a"
    assert parse(ok, stack="t").tenants[name].namespace == "team-a"


@pytest.mark.parametrize("ns", ["kube-system", "default", "kube-public", "istio-system"])
def test_an_explicit_platform_namespace_is_rejected(ns: str) -> None:
    assert problems(with_("tenants.t1.namespace", ns)) == [f"tenants.t1.namespace: {ns!r} {RESERVED}"]


@pytest.mark.parametrize(("section", "ns"), [("gateway", "kube-system"), ("observability", "default"),
                                             ("gateway", "istio-system"), ("observability", "gpu-operator")])
def test_gateway_and_observability_stay_out_of_other_platform_namespaces(section: str, ns: str) -> None:
    assert problems(with_(f"{section}.namespace", ns)) == [
        f"{section}.namespace: {ns!r} is reserved for Kubernetes or another platform component (kube-*, default, "
        "aifactory-system, gpu-operator, istio-system, nvidia-network-operator)"]


def test_a_tenant_namespace_equal_to_the_gateways_names_the_tenant() -> None:
    raw = with_("tenants.t1.namespace", "edge")
    raw["gateway"] = {"namespace": "edge"}
    assert problems(raw) == ["tenants.t1: namespace 'edge' is gateway.namespace; a tenant needs a namespace of its own"]


def test_a_multi_node_replica_larger_than_the_pool_is_rejected() -> None:
    """vLLM tensorParallel 16 on p5.48xlarge (8 GPUs, catalog) with maxSize 1: the LeaderWorkerSet needs 2 nodes."""
    raw = with_("nodePools.gpu-a.maxSize", 1, with_("models.m1.tensorParallel", 16))
    assert problems(raw) == [
        "models.m1.tensorParallel: one replica of 16 GPUs (tensorParallel x pipelineParallel) needs 2 nodes of 8 "
        "GPUs (p5.48xlarge), but nodePools.gpu-a.maxSize is 1"]


def test_more_replicas_than_the_pool_holds_are_rejected() -> None:
    raw = with_("nodePools.gpu-a.maxSize", 1, with_("models.m1.replicas", {"min": 1, "max": 3}))
    raw["tenants"]["t1"]["gpuQuota"] = 24
    assert problems(raw) == [
        "models.m1.replicas.max: 3 replicas need 3 nodes of p5.48xlarge (3 replicas of 8 GPU(s), 1 per 8-GPU node), "
        "but nodePools.gpu-a.maxSize is 1; lower replicas.max or raise maxSize to 3 (this assumes the model has the "
        "pool to itself)"]
    multi = with_("nodePools.gpu-a.maxSize", 3, with_("models.m1", {**BASE["models"]["m1"], "pipelineParallel": 2,
                                                                    "replicas": {"max": 2}}))
    multi["tenants"]["t1"]["gpuQuota"] = 32
    assert problems(multi) == [
        "models.m1.replicas.max: 2 replicas need 4 nodes of p5.48xlarge (2 x 2 nodes per replica), but "
        "nodePools.gpu-a.maxSize is 3; lower replicas.max or raise maxSize to 4 (this assumes the model has the pool "
        "to itself)"]
    multi["nodePools"]["gpu-a"]["maxSize"] = 4
    assert parse(multi, stack="t").models["m1"].nodes_per_replica == 2


@pytest.mark.parametrize("tp", [3, 5, 6, 7, 12])
def test_tensor_parallel_must_be_a_power_of_two(tp: int) -> None:
    found = problems(with_("models.m1.tensorParallel", tp))
    assert found[0] == (f"models.m1.tensorParallel: {tp} is not a power of two: the engine splits the model's "
                        "attention heads evenly across tensorParallel GPUs (vLLM requires heads % tensorParallel == "
                        "0); use 1, 2, 4, 8 or 16")


def test_fabricless_multi_node_error_names_the_key_the_user_wrote() -> None:
    raw = with_("nodePools.gpu-a", {"instanceType": "p5.48xlarge", "minSize": 2, "maxSize": 2},
                with_("models.m1.tensorParallel", 16))
    assert "models.m1.tensorParallel: 16 GPUs need 2 nodes, but pool 'gpu-a' has no data-plane fabric (efa or " \
           "infiniband)" in problems(raw)


def test_runbook_url_base_comes_from_stack_config() -> None:
    from dashboards.core import prometheus_rules
    from infra.monitoring import from_platform

    raw = with_("observability", {"runbookUrl": "https://wiki.example.com/ml/runbooks"})
    doc = prometheus_rules(from_platform(parse(raw, stack="t")))
    urls = {r["annotations"]["runbook_url"] for g in doc["groups"] for r in g["rules"] if "alert" in r}
    assert urls and all(u.startswith("https://wiki.example.com/ml/runbooks#") for u in urls), urls
    assert problems(with_("observability", {"runbookUrl": "wiki/runbooks#x"})) == [
        "observability.runbookUrl: 'wiki/runbooks#x' is not an http(s) URL without a #fragment (alerts append "
        "#<alert>)"]


# --- workload variants and deadline-aware routing (#15)

_VARIANT = {"engine": "vllm", "toolCallParser": "none", "tenant": "t1", "pool": "gpu-a", "workload": "chat"}
VARIANTS: dict[str, Any] = {
    **BASE,
    "tenants": {"t1": {"gpuQuota": 16}, "t2": {"gpuQuota": 8}},
    "observability": {"prices": {"p5.48xlarge": 72.0}},  # 9 $/GPU-hour
    "models": {
        "chat-int4": {**_VARIANT, "model": "org/chat-awq", "quantization": "awq", "tensorParallel": 1,
                      "slo": {"e2eSeconds": 4}, "variant": {"requestsPerSecond": 2}},
        "chat-fp8": {**_VARIANT, "model": "org/chat", "tensorParallel": 2, "slo": {"e2eSeconds": 1},
                     "variant": {"costPerRequest": 0.004}},
    },
}


def test_variant_cost_is_gpu_price_times_gpus_over_throughput_or_explicit() -> None:
    cfg = parse(VARIANTS, stack="t")
    int4, fp8 = cfg.models["chat-int4"], cfg.models["chat-fp8"]
    # 72 $/h / 8 GPUs = 9 $/GPU-hour; 1 GPU; 2 requests/s = 7200 requests/h -> 9 / 7200 $ per request
    assert cfg.cost_per_request(int4) == pytest.approx(0.00125)
    assert cfg.cost_per_request(fp8) == 0.004
    assert [m.name for m in cfg.variants_of("chat")] == ["chat-int4", "chat-fp8"]
    assert cfg.routing_policy("chat") == "cost-within-deadline"
    assert cfg.variants_of("m1") == []


def test_routing_policy_is_per_workload() -> None:
    cfg = parse(with_("gateway.routing", {"chat": {"policy": "fastest"}}, VARIANTS), stack="t")
    assert cfg.routing_policy("chat") == "fastest"


def test_a_batch_model_beside_variants_keeps_x_priority() -> None:
    raw = with_("models.chat-batch", {**_VARIANT, "model": "org/chat", "priority": "batch", "tensorParallel": 1},
                VARIANTS)
    cfg = parse(raw, stack="t")
    assert cfg.models["chat-batch"].variant is None and len(cfg.variants_of("chat")) == 2


@pytest.mark.parametrize(("path", "value", "expected"), [
    ("models.chat-int4.tenant", "t2",
     "models.chat-int4.tenant: 't2' differs from 't1' (models.chat-fp8)"),
    ("models.chat-int4.variant", {},
     "models.chat-int4.variant.requestsPerSecond: is required to derive the cost per request"),
    ("models.chat-int4.variant", {"requestsPerSecond": 2, "costPerRequest": 0.1},
     "models.chat-int4.variant.costPerRequest: contradicts requestsPerSecond"),
    ("models.chat-int4.variant", {"requestsPerSecond": 0},
     "models.chat-int4.variant.requestsPerSecond: 0.0 is below the minimum"),
    ("models.chat-int4.variant", {"speed": 1}, "models.chat-int4.variant.speed: unknown key"),
    ("models.chat-fp8.priority", "batch", "models.chat-fp8.priority: 'batch': variants serve interactive requests"),
    ("models.chat-fp8.variant", DELETE, "models.chat-int4.variant: workload 'chat' has no other variant"),
    ("models.chat-plain", {**_VARIANT, "model": "org/chat", "tensorParallel": 1},
     "models.chat-plain.variant: is required: workload 'chat' has variants (chat-fp8, chat-int4)"),
    ("gateway.routing", {"chat": {"policy": "random"}},
     "gateway.routing.chat.policy: 'random' is not allowed; choose one of: cost-within-deadline, fastest, cheapest"),
    ("gateway.routing", {"m9": {"policy": "fastest"}},
     "gateway.routing.m9: 'm9' is not a workload with variants; workloads with variants: chat"),
])
def test_variant_contradictions_name_the_key_path(path: str, value: Any, expected: str) -> None:
    found = problems(with_(path, value, VARIANTS))
    assert any(p.startswith(expected) for p in found), found


def test_a_mig_variant_needs_an_explicit_cost() -> None:
    raw = with_("nodePools.mig", {"instanceType": "p5.48xlarge", "mig": {"profile": "all-1g.10gb"}}, VARIANTS)
    raw = with_("models.chat-int4.pool", "mig", raw)
    raw = with_("models.chat-int4.migProfile", "1g.10gb", raw)
    found = problems(raw)
    assert any(p.startswith("models.chat-int4.variant.costPerRequest: is required: a MIG slice") for p in found), found


# --- names AWS must accept ------------------------------------------------------------------------------

IAM_ROLE_MAX, S3_BUCKET_MAX, AUTONAME = 64, 63, 8  # pulumi-aws resources.go AutoName limits; "-" + 7 random


def test_names_that_would_pass_aws_limits_are_refused_with_their_key() -> None:
    long_cluster = with_("cluster.name", "c" * 44)
    assert [p for p in problems(long_cluster) if p.startswith("cluster.name")] == [
        f"cluster.name: '{'c' * 44}' is 44 characters; at most 43 fit the names AWS allows for what the kit derives "
        f"from it (the Loki bucket '{'c' * 44}-logs-bucket-xxxxxxx' would pass S3's 63)"]
    pool = "p" * 40  # aifactory-t (11) + 40 = 51 > 64 - 8 - len("--node")
    raw = with_(f"nodePools.{pool}", {"instanceType": "g6e.xlarge", "minSize": 1, "maxSize": 1})
    assert [p for p in problems(raw) if p.startswith(f"nodePools.{pool}:")] == [
        f"nodePools.{pool}: pool name '{pool}' is too long with cluster 'aifactory-t': the node role "
        f"'aifactory-t-{pool}-node-xxxxxxx' would pass IAM's 64 characters; keep cluster name + pool name within 50 "
        "characters"]
    model = "m" * 48
    raw = with_(f"models.{model}", {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "uri": "s3://bucket/weights",
                                    "tenant": "t1", "pool": "gpu-a", "tensorParallel": 8})
    assert [p for p in problems(raw) if p.startswith(f"models.{model}:")] == [
        f"models.{model}: an s3:// model's name is at most 47 characters: its IRSA role 'model-{model}-s3-xxxxxxx' "
        "would pass IAM's 64"]


def test_names_at_the_limits_fit_every_autonamed_role_and_bucket_of_the_stack() -> None:
    """The other side: synthesize a stack at every limit and check each autonamed IAM role and S3 bucket against
    AWS's maximum (IAM role names 64, bucket names 63), with Pulumi's 8-character autoname suffix."""
    from infra.program import program
    from infra.synth import run_program

    cluster, pool, model = "c" * 43, "p" * 7, "m" * 47  # 43 + 7 = 50
    raw = with_("cluster.name", cluster, with_(f"nodePools.{pool}", {"instanceType": "g6e.xlarge", "minSize": 1,
                                                                     "maxSize": 1}))
    raw = with_(f"models.{model}", {"engine": "vllm", "model": "org/model", "toolCallParser": "none", "uri": "s3://bucket/weights",
                                    "tenant": "t1", "pool": pool}, raw)
    raw["observability"] = {"retention": "7d"}
    values = {f"aifactory:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    result = run_program("t", values, program)
    roles = [r.name for r in result.resources if r.type == "aws:iam/role:Role" and not r.inputs.get("name")]
    buckets = [r.name for r in result.resources if r.type == "aws:s3/bucket:Bucket" and not r.inputs.get("bucket")]
    assert f"{cluster}-{pool}-node" in roles and f"model-{model}-s3" in roles and buckets
    assert [n for n in roles if len(n) + AUTONAME > IAM_ROLE_MAX] == []
    assert [n for n in buckets if len(n) + AUTONAME > S3_BUCKET_MAX] == []


def test_a_reserved_pool_is_in_exactly_its_reservations_zone() -> None:
    # ODCRs and capacity blocks are zonal (EKS user guide, "Capacity Blocks for ML": the node group gets only the
    # subnet of the reservation's zone); a non-EFA pool defaults to every target zone
    raw = with_("nodePools.odcr", {"instanceType": "g6e.xlarge", "minSize": 2, "maxSize": 2, "desiredSize": 2,
                                   "capacity": {"type": "odcr", "reservationId": "cr-0123456789abcdef0"}})
    assert [p for p in problems(raw) if p.startswith("nodePools.odcr")] == [
        'nodePools.odcr.availabilityZones: ["us-east-1a", "us-east-1b"]: a odcr reservation is in one zone; list '
        "exactly that zone"]
    raw["nodePools"]["odcr"]["availabilityZones"] = ["us-east-1b"]
    parse(raw, stack="t")


def test_a_mig_layout_must_fit_the_pools_gpu() -> None:
    """gpu-operator v25.10.1's MIG manager config (assets/state-mig-manager/0400_configmap.yaml) has all-1g.20gb,
    all-2g.20gb, ... only for 80 GB A100/H100 parts and all-1g.10gb for 40 GB A100s too; an H200's profiles are
    other sizes. A layout without an entry for the GPU is never applied: the MIG manager fails and no slice is
    advertised."""
    def pool(itype: str, mig: str) -> dict[str, Any]:
        return with_("nodePools.gpu-a", {"instanceType": itype, "mig": mig, "minSize": 1, "maxSize": 1})

    assert [p for p in problems(pool("p4d.24xlarge", "all-1g.20gb")) if p.startswith("nodePools.gpu-a.mig")] == [
        "nodePools.gpu-a.mig: 'all-1g.20gb' does not fit p4d.24xlarge's NVIDIA A100-SXM4-40GB (40 GB): the GPU "
        "operator's MIG manager would fail to apply it; layouts for it: all-1g.10gb, all-balanced"]
    assert [p for p in problems(pool("p5en.48xlarge", "all-1g.10gb")) if p.startswith("nodePools.gpu-a.mig")] == [
        "nodePools.gpu-a.mig: 'all-1g.10gb' does not fit p5en.48xlarge's NVIDIA H200 (141 GB): the GPU operator's MIG "
        "manager would fail to apply it; layouts for it: all-balanced"]
    for ok in (pool("p4d.24xlarge", "all-1g.10gb"), pool("p5.48xlarge", "all-3g.40gb")):
        assert not [p for p in (problems(ok) if _invalid(ok) else []) if ".mig" in p]


def _invalid(raw: dict[str, Any]) -> bool:
    try:
        parse(raw, stack="t")
    except ConfigError:
        return True
    return False
