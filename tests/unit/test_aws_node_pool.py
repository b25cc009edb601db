"""GpuNodePool under the SDK mocks: EFA interface layout, placement, capacity, SG, labels, taints, validation."""

import email
import json
from collections.abc import Callable

import pulumi
import pytest

from components.aws import nodes
from components.aws.node_pool import GpuNodePool, GpuNodePoolArgs, pool_spec
from infra.synth import read_stack_config, run_program, stack_file

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "aws:eks/nodeGroup:NodeGroup"
SG = "aws:ec2/securityGroup:SecurityGroup"
PG = "aws:ec2/placementGroup:PlacementGroup"
ASG_TAG = "aws:autoscaling/tag:Tag"
CONTROL_SG = "sg-control"


def register(build: Callable[[], object]) -> list:
    values = read_stack_config(stack_file("dev"))
    return run_program("unit", values, lambda _cfg: build()).resources


def pool_args(instance_type: str, **extra) -> GpuNodePoolArgs:
    args: GpuNodePoolArgs = {"cluster_name": "c1", "vpc_id": "vpc-1", "cluster_security_group_id": CONTROL_SG,
                             "availability_zones": ["us-east-1a"], "subnet_ids": ["subnet-a"],
                             "instance_type": instance_type}
    args.update(extra)  # type: ignore[typeddict-item]
    return args


def one(resources: list, typ: str):
    found = [r for r in resources if r.type == typ]
    assert len(found) == 1, [r.urn for r in found]
    return found[0]


@pytest.mark.parametrize(("instance_type", "cards"), [("p5.48xlarge", 32), ("p4d.24xlarge", 4), ("p5en.48xlarge", 16)])
def test_efa_pool_has_one_interface_per_network_card(instance_type: str, cards: int) -> None:
    res = register(lambda: GpuNodePool("gpu", pool_args(instance_type, fabric="efa")))
    efa_sg = one(res, SG).id
    interfaces = one(res, LT).inputs["networkInterfaces"]
    assert len(interfaces) == cards
    assert interfaces[0] == {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "efa",
                             "securityGroups": [CONTROL_SG, efa_sg], "deleteOnTermination": "true"}
    assert interfaces[1:] == [{"networkCardIndex": card, "deviceIndex": 0, "interfaceType": "efa-only",
                               "securityGroups": [efa_sg], "deleteOnTermination": "true"}
                              for card in range(1, cards)]


def test_efa_pool_on_demand_gets_cluster_placement_group_and_hugepages() -> None:
    res = register(lambda: GpuNodePool("gpu", pool_args("p5.48xlarge", fabric="efa")))
    pg = one(res, PG)
    lt = one(res, LT)
    assert pg.inputs == {"strategy": "cluster"}
    assert lt.inputs["placement"] == {"groupName": pg.outputs["name"]}
    assert "instanceMarketOptions" not in lt.inputs and "capacityReservationSpecification" not in lt.inputs
    assert "sysctl -w vm.nr_hugepages=2560" in nodes.user_data(hugepages_mib=5120)


def test_efa_security_group_has_exactly_the_two_self_rules() -> None:
    res = register(lambda: GpuNodePool("gpu", pool_args("p5.48xlarge", fabric="efa")))
    rule = {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True,
            "description": "EFA: all traffic within the pool fabric"}
    sg = one(res, SG)
    assert sg.inputs["ingress"] == [rule]
    assert sg.inputs["egress"] == [rule]
    assert sg.inputs["vpcId"] == "vpc-1"


def test_g6e_pool_has_no_efa_interface_and_no_placement_group() -> None:
    zones = ["us-east-1a", "us-east-1b"]
    res = register(lambda: GpuNodePool("small", pool_args("g6e.12xlarge", availability_zones=zones,
                                                          subnet_ids=["subnet-a", "subnet-b"])))
    lt = one(res, LT)
    assert "networkInterfaces" not in lt.inputs and "placement" not in lt.inputs
    assert [r for r in res if r.type in (SG, PG)] == []
    assert one(res, NG).inputs["subnetIds"] == ["subnet-a", "subnet-b"]


BLOCK = {"type": "capacity-block", "reservation_id": "cr-0a1b2c3d4e5f60718", "start_time": "2026-12-01T11:30:00Z",
         "end_time": "2026-12-15T11:30:00Z"}
BEFORE_BLOCK = "2026-11-22T00:00:00Z"  # the schedule is computed against `now`: fixed, so the test holds on any day


@pytest.mark.parametrize(("capacity", "sizes", "market", "eks_type"), [
    (BLOCK, (0, 4, 0), {"instanceMarketOptions": {"marketType": "capacity-block"}, "instanceType": "p5.48xlarge"},
     "CAPACITY_BLOCK"),
    ({"type": "odcr", "reservation_id": "cr-0a1b2c3d4e5f60718"}, (4, 4, 4), {}, "ON_DEMAND"),
])
def test_reserved_pool_names_the_reservation_and_has_no_placement_group(capacity, sizes, market, eks_type) -> None:
    """A capacity block's launch template carries MarketType capacity-block, the reservation and the InstanceType
    (EKS user guide ml/capacity-blocks-mng: "If ... any of the other above required launch template values are
    missing, then the create request will be rejected"); its node group then names no type (EKS API
    CreateNodegroup instanceTypes: a type in the launch template and any instanceTypes fail the deployment)."""
    lo, hi, want = sizes
    args = pool_args("p5.48xlarge", fabric="efa", min_size=lo, max_size=hi, desired_size=want, capacity=capacity,
                     now=BEFORE_BLOCK)
    res = register(lambda: GpuNodePool("block", args))
    lt, ng = one(res, LT), one(res, NG)
    assert {k: lt.inputs[k] for k in ("instanceMarketOptions", "instanceType") if k in lt.inputs} == market
    assert ("instanceTypes" in ng.inputs) == ("instanceType" not in market)
    assert lt.inputs["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0a1b2c3d4e5f60718"}}
    assert "placement" not in lt.inputs and [r for r in res if r.type == PG] == []
    assert ng.inputs["capacityType"] == eks_type
    assert ng.inputs["scalingConfig"] == {"minSize": lo, "maxSize": hi, "desiredSize": want}


def test_launch_template_requires_imdsv2_and_encrypts_the_root_volume() -> None:
    res = register(lambda: GpuNodePool("gpu", pool_args("p5.48xlarge", fabric="efa", root_volume_gib=1000)))
    lt = one(res, LT)
    assert lt.inputs["metadataOptions"] == {"httpEndpoint": "enabled", "httpTokens": "required",
                                            "httpPutResponseHopLimit": 1, "instanceMetadataTags": "disabled"}
    assert lt.inputs["blockDeviceMappings"] == [{"deviceName": "/dev/xvda", "ebs": {
        "volumeSize": 1000, "volumeType": "gp3", "encrypted": "true", "deleteOnTermination": "true"}}]


def test_gpu_pool_taint_labels_and_autoscaler_tags() -> None:
    res = register(lambda: GpuNodePool("c1-h100", pool_args("p5.48xlarge", fabric="efa", pool_name="h100",
                                                            labels={"workload-class": "llm"})))
    ng = one(res, NG)
    assert ng.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
    assert ng.inputs["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    labels = {"workload-class": "llm", "aifactory.io/pool": "h100", "aifactory.io/instance-type": "p5.48xlarge",
              "aifactory.io/fabric": "efa", "aifactory.io/gpu-product": "NVIDIA-H100-80GB-HBM3"}
    assert ng.inputs["labels"] == labels
    ca = "k8s.io/cluster-autoscaler"
    assert ng.inputs["tags"] == {
        f"{ca}/enabled": "true", f"{ca}/c1": "owned", "aifactory.io/autoscaled": "true",
        **{f"{ca}/node-template/label/{k}": v for k, v in labels.items()},
        f"{ca}/node-template/taint/nvidia.com/gpu": "true:NoSchedule",
        f"{ca}/node-template/resources/nvidia.com/gpu": "8",
        f"{ca}/node-template/resources/vpc.amazonaws.com/efa": "32",
        f"{ca}/node-template/resources/hugepages-2Mi": "5120Mi",
    }


def asg_tags(resources: list) -> dict[str, tuple[str, str, bool, str, str]]:
    """Resource name -> (tag key, value, propagateAtLaunch, ASG name, parent URN) of every ASG tag."""
    return {r.name: (r.inputs["tag"]["key"], r.inputs["tag"]["value"], r.inputs["tag"]["propagateAtLaunch"],
                     r.inputs["autoscalingGroupName"], r.parent)
            for r in resources if r.type == ASG_TAG}


def test_efa_pool_asg_carries_the_node_template_for_scale_from_zero() -> None:
    res = register(lambda: GpuNodePool("c1-h100", pool_args("p5.48xlarge", fabric="efa", pool_name="h100")))
    ng = one(res, NG)
    asg = ng.outputs["resources"][0]["autoscalingGroups"][0]["name"]
    assert asg.startswith("eks-c1-h100-ng-")
    pool = one(res, "aifactory:index:GpuNodePool").urn
    template = "k8s.io/cluster-autoscaler/node-template"
    expected = {
        "label/aifactory.io/pool": "h100", "label/aifactory.io/instance-type": "p5.48xlarge",
        "label/aifactory.io/fabric": "efa", "label/aifactory.io/gpu-product": "NVIDIA-H100-80GB-HBM3",
        "taint/nvidia.com/gpu": "true:NoSchedule", "resources/nvidia.com/gpu": "8",
        "resources/vpc.amazonaws.com/efa": "32", "resources/hugepages-2Mi": "5120Mi",
    }
    assert asg_tags(res) == {**{f"c1-h100-asg-{what}": (f"{template}/{what}", value, False, asg, pool)
                                for what, value in expected.items()},
                             # the kit's autoscaler discovers groups by this tag (EKS tags every group with the
                             # upstream pair, capacity blocks included)
                             "c1-h100-asg-autoscaled": ("aifactory.io/autoscaled", "true", False, asg, pool)}


def test_cpu_pool_asg_carries_labels_only_and_custom_hugepages_count() -> None:
    res = register(lambda: GpuNodePool("cpu", pool_args("m7i.2xlarge", hugepages_mib=1024)))
    template = "k8s.io/cluster-autoscaler/node-template"
    assert {key: value for key, value, *_ in asg_tags(res).values()} == {
        "aifactory.io/autoscaled": "true", f"{template}/label/aifactory.io/pool": "cpu",
        f"{template}/label/aifactory.io/instance-type": "m7i.2xlarge",
        f"{template}/label/aifactory.io/fabric": "none", f"{template}/resources/hugepages-2Mi": "1024Mi",
    }


def test_node_role_has_only_the_three_node_policies() -> None:
    """The VPC CNI's policy is on its own IRSA role (issue 45), not on the nodes'."""
    res = register(lambda: GpuNodePool("gpu", pool_args("g6e.xlarge")))
    role = one(res, "aws:iam/role:Role")
    assert json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    attachment = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
    attached = sorted(r.inputs["policyArn"] for r in res if r.type == attachment)
    assert attached == sorted(f"arn:aws:iam::aws:policy/{p}" for p in (
        "AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonSSMManagedInstanceCore"))
    assert [r for r in res if r.type == "aws:iam/rolePolicy:RolePolicy"] == []


def test_user_data_is_mime_multipart_nodeconfig_plus_hugepages_script() -> None:
    msg = email.message_from_string(nodes.user_data(hugepages_mib=5120))
    parts = msg.get_payload()
    assert msg.get_content_type() == "multipart/mixed"
    assert [p.get_content_type() for p in parts] == ["application/node.eks.aws", "text/x-shellscript"]
    node_config = json.loads(parts[0].get_payload().removeprefix("---\n"))
    assert node_config == {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": {"kubelet": {
        "config": {"shutdownGracePeriod": "90s", "shutdownGracePeriodCriticalPods": "30s",
                   "serializeImagePulls": False}}}}
    assert "vm.nr_hugepages = 2560" in parts[1].get_payload()
    plain = email.message_from_string(nodes.user_data(hugepages_mib=0))
    assert [p.get_content_type() for p in plain.get_payload()] == ["application/node.eks.aws"]


@pytest.mark.parametrize(("extra", "paths"), [
    ({"instance_type": "g6e.xlarge", "fabric": "efa"}, ["fabric"]),
    ({"fabric": "efa", "availability_zones": ["us-east-1a", "us-east-1b"], "subnet_ids": ["s-a", "s-b"]},
     ["availabilityZones"]),
    ({"fabric": "efa", "placement_group": True, "min_size": 0, "max_size": 2, "capacity": BLOCK},
     ["placementGroup"]),
    ({"min_size": 3, "max_size": 2}, ["minSize"]),
    ({"min_size": 1, "max_size": 2, "desired_size": 5}, ["desiredSize"]),
    ({"instance_type": "p9.huge"}, ["instanceType"]),
    ({"capacity": {"type": "odcr"}}, ["capacity.reservationId"]),
    ({"capacity": BLOCK, "min_size": 1, "max_size": 2}, ["desiredSize"]),
    ({"capacity": {"type": "capacity-block", "reservation_id": "cr-0a1b2c3d4e5f60718"}, "min_size": 0,
      "max_size": 2}, ["capacity.startTime", "capacity.endTime"]),
    ({"taints": [{"key": "a", "effect": "Never"}], "subnet_ids": []}, ["subnetIds", "taints[0].effect"]),
    # EKS: scale a capacity-block node group to zero more than 30 minutes before the block ends
    ({"capacity": {**BLOCK, "drain_minutes": 30}, "min_size": 0, "max_size": 2}, ["capacity.drainMinutes"]),
    ({"capacity": {"type": "on-demand", "drain_minutes": 60}}, ["capacity.drainMinutes"]),
    ({"capacity": BLOCK, "min_size": 0, "max_size": 2, "now": "tomorrow"}, ["now"]),
])
def test_bad_arguments_raise_input_properties_error_with_paths(extra, paths) -> None:
    args = pool_args(extra.pop("instance_type", "p5.48xlarge"), **extra)
    with pytest.raises(pulumi.InputPropertiesError) as err:
        pool_spec("bad", args)
    assert [e["property_path"] for e in err.value.errors] == paths
    assert "GpuNodePool 'bad'" in str(err.value)


ALLOWED = ", ".join(sorted(GpuNodePoolArgs.__annotations__))  # the declared argument names (the API)


def _shape_errors(args: dict) -> list[tuple[str, str]]:
    with pytest.raises(pulumi.InputPropertiesError) as err:
        pool_spec("gpu", args)  # type: ignore[arg-type]
    return [(e["property_path"], e["reason"]) for e in err.value.errors]


def test_a_misspelt_key_names_the_property_and_the_likely_one() -> None:
    args = pool_args("p5.48xlarge")
    args["instance_typ"] = args.pop("instance_type")  # type: ignore[typeddict-unknown-key]
    assert _shape_errors(dict(args)) == [
        ("instanceTyp", f"unknown property 'instance_typ'; did you mean 'instance_type'? allowed: {ALLOWED}"),
        ("instanceType", "is required ('instance_type')")]


@pytest.mark.parametrize(("extra", "expected"), [
    ({"min_size": "two"}, [("minSize", "expected an integer, got a string 'two'")]),
    ({"fabrik": "efa"}, [("fabrik", f"unknown property 'fabrik'; did you mean 'fabric'? allowed: {ALLOWED}")]),
    ({"availability_zones": "us-east-1a"},
     [("availabilityZones", "expected a list of strings, got a string 'us-east-1a'")]),
    ({"placement_group": "yes", "capacity": {"type": "odcr", "reservation": "cr-1"}},
     [("placementGroup", "expected a boolean, got a string 'yes'"),
      ("capacity.reservation", "unknown property 'reservation'; did you mean 'reservation_id'? allowed: "
                                "drain_minutes, end_time, reservation_id, start_time, type")]),
    ({"taints": [{"key": "a", "effect": 1}]}, [("taints[0].effect", "expected a string, got an integer 1")]),
    ({"vpc_id": 12}, [("vpcId", "expected a string or an Output, got an integer 12")]),
])
def test_wrong_types_and_unknown_keys_raise_input_properties_error(extra: dict, expected: list) -> None:
    assert _shape_errors(dict(pool_args("p5.48xlarge", **extra))) == expected


def test_string_zone_is_not_split_into_letters_through_the_component() -> None:
    def build() -> None:
        GpuNodePool("gpu", pool_args("p5.48xlarge", availability_zones="us-east-1a"))  # type: ignore[arg-type]

    with pytest.raises(pulumi.InputPropertiesError, match=r"availabilityZones: expected a list of strings"):
        register(build)


@pytest.mark.parametrize(("name", "extra", "reason"), [
    ("gpu", {"pool_name": "system"}, "'system' is"),
    ("system", {}, "'system' (by default the component's name) is"),
])
def test_a_pool_labelled_like_the_clusters_system_node_group_is_refused(name: str, extra: dict, reason: str) -> None:
    """GpuCluster's own node group carries aifactory.io/pool=system (components.vocabulary.SYSTEM_POOL), the label the
    kit's own controllers select (the AWS Load Balancer Controller's pods); a GPU pool with that label would take them
    onto nodes that scale to zero."""
    with pytest.raises(pulumi.InputPropertiesError) as err:
        pool_spec(name, pool_args("p5.48xlarge", **extra))
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [(
        "poolName", f"{reason} the aifactory.io/pool value of GpuCluster's own system node group, which the kit's "
                    "own controllers select (the AWS Load Balancer Controller's pods); set another poolName")]
