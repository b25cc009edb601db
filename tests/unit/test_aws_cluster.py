"""GpuCluster, Network and IRSA under the SDK mocks; `aifactory synth` of the AWS stacks and bad pool configs."""

import json
from pathlib import Path

import pulumi
import pytest
import yaml

from components.aws import iam
from components.aws.network import nat_zones, subnet_plan, subnet_tags
from infra import cli
from infra.program import program
from infra.synth import read_stack_config, run_program, stack_file

EKS = "aws:eks/cluster:Cluster"
LT = "aws:ec2/launchTemplate:LaunchTemplate"


BEFORE_PROD_BLOCK = "2026-11-22T00:00:00Z"  # prod's capacity block runs 2026-12-01T11:30Z to 2026-12-15T11:30Z


def synth(stack: str) -> list:
    """The stack's resources as `pulumi up` would create them before prod's capacity block starts."""
    return run_program(stack, read_stack_config(stack_file(stack)),
                       lambda cfg: program(cfg, now=BEFORE_PROD_BLOCK)).resources


@pytest.fixture(scope="module")
def prod() -> list:
    return synth("prod")


def of(resources: list, typ: str) -> list:
    return [r for r in resources if r.type == typ]


def test_prod_eks_endpoint_answers_its_deployer_only_encrypted_and_logs_everything(prod) -> None:
    """prod deploys from CI outside the VPC (apiAccess public-and-private): a private-only endpoint answers
    only inside the VPC (EKS user guide, cluster-endpoint), so the same program could not create its
    Kubernetes objects. The public endpoint answers the runners' egress CIDR only."""
    (eks,) = of(prod, EKS)
    (key,) = [k for k in of(prod, "aws:kms/key:Key") if k.name.endswith("-secrets")]
    assert eks.inputs["vpcConfig"]["endpointPrivateAccess"] is True
    assert eks.inputs["vpcConfig"]["endpointPublicAccess"] is True
    assert eks.inputs["vpcConfig"]["publicAccessCidrs"] == ["198.51.100.0/28"]
    assert eks.inputs["encryptionConfig"] == {"provider": {"keyArn": key.outputs["arn"]}, "resources": ["secrets"]}
    assert key.inputs["enableKeyRotation"] is True
    assert eks.inputs["enabledClusterLogTypes"] == ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    # prod lists its admins: EKS's own creator entry is off, or listing the deploying role would fail with 409
    assert eks.inputs["accessConfig"] == {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False}
    assert eks.inputs["version"] == "1.35"


def test_private_api_access_with_a_deployer_in_the_vpc_has_no_public_endpoint() -> None:
    values = read_stack_config(stack_file("dev"))
    values["aifactory:cluster"] = json.dumps({"apiAccess": "private", "deployerInVpc": True})
    (eks,) = of(run_program("dev", values).resources, EKS)
    assert eks.inputs["vpcConfig"]["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in eks.inputs["vpcConfig"]


def test_staging_public_endpoint_only_with_its_allow_list() -> None:
    (eks,) = of(synth("staging"), EKS)
    assert eks.inputs["vpcConfig"]["endpointPublicAccess"] is True
    assert eks.inputs["vpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_with_listed_admins_the_creator_gets_no_second_entry_and_the_provider_waits_for_theirs(prod) -> None:
    """EKS creates an access entry for the creator when bootstrapClusterCreatorAdminPermissions is true; an
    AccessEntry for the same principal then fails with ResourceInUseException (EKS API CreateAccessEntry). So the
    bootstrap is on only when no admin is listed (dev), and the Kubernetes provider, which every Kubernetes
    object uses, waits for the listed admins' policy associations."""
    (dev_eks,) = of(synth("dev"), EKS)
    assert dev_eks.inputs["accessConfig"]["bootstrapClusterCreatorAdminPermissions"] is True
    assert of(synth("dev"), "aws:eks/accessEntry:AccessEntry") == []
    (provider,) = [r for r in prod if r.type == "pulumi:providers:kubernetes"]
    associations = of(prod, "aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    assert len(associations) == 2 and {a.urn for a in associations} <= set(provider.dependencies)


def test_prod_has_every_piece_of_the_cluster(prod) -> None:
    types = [r.type for r in prod]
    assert sorted(r.inputs["addonName"] for r in of(prod, "aws:eks/addon:Addon")) == \
        ["aws-ebs-csi-driver", "coredns", "kube-proxy", "vpc-cni"]
    assert sorted(r.inputs["principalArn"] for r in of(prod, "aws:eks/accessEntry:AccessEntry")) == \
        ["arn:aws:iam::123456789012:role/platform-admin", "arn:aws:iam::123456789012:role/sre-oncall"]
    assert {r.inputs["policyArn"] for r in of(prod, "aws:eks/accessPolicyAssociation:AccessPolicyAssociation")} == \
        {"arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"}
    assert types.count("aws:iam/openIdConnectProvider:OpenIdConnectProvider") == 1
    assert types.count("aws:ec2/natGateway:NatGateway") == 3  # one per AZ
    assert types.count("aws:eks/nodeGroup:NodeGroup") == 4  # system + h100-block + h200 + l40s
    assert types.count("aws:ec2/placementGroup:PlacementGroup") == 1  # h200 only: h100-block is a capacity block
    assert types.count("aws:ec2/securityGroup:SecurityGroup") == 2  # one EFA group per EFA pool
    (endpoint,) = of(prod, "aws:ec2/vpcEndpoint:VpcEndpoint")
    assert endpoint.inputs["serviceName"] == "com.amazonaws.us-east-1.s3"
    assert len(endpoint.inputs["routeTableIds"]) == 3
    (flow,) = of(prod, "aws:ec2/flowLog:FlowLog")
    assert flow.inputs["trafficType"] == "ALL"
    ebs = [r for r in of(prod, "aws:eks/addon:Addon") if r.inputs["addonName"] == "aws-ebs-csi-driver"][0]
    assert ebs.inputs["serviceAccountRoleArn"].startswith("arn:aws:iam::123456789012:role/aifactory-prod-ebs-csi")


def test_every_launch_template_requires_imdsv2_and_encrypts(prod) -> None:
    lts = of(prod, LT)
    assert len(lts) == 4
    for lt in lts:
        assert lt.inputs["metadataOptions"]["httpTokens"] == "required"
        # 1: pods (one network hop further than the node) cannot reach IMDS for the node role's credentials
        # (EKS best practices, "Restrict access to the instance profile assigned to the worker node").
        assert lt.inputs["metadataOptions"]["httpPutResponseHopLimit"] == 1
        assert all(b["ebs"]["encrypted"] == "true" for b in lt.inputs["blockDeviceMappings"])


def test_prod_capacity_block_pool(prod) -> None:
    (lt,) = [r for r in of(prod, LT) if r.name == "aifactory-prod-h100-block-lt"]
    assert lt.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"] == \
        {"capacityReservationId": "cr-0a1b2c3d4e5f60718"}
    assert "placement" not in lt.inputs and len(lt.inputs["networkInterfaces"]) == 32


def test_prod_capacity_block_pool_is_empty_outside_its_window_and_scheduled_inside(prod) -> None:
    """EKS user guide (capacity-blocks, capacity-blocks-mng): desired 0 before the block is active, scale
    to zero more than 30 minutes before it ends (the kit: 60, `drainMinutes`); the desired size is left to the
    schedule (ignore_changes)."""
    (ng,) = [r for r in of(prod, "aws:eks/nodeGroup:NodeGroup") if r.name == "aifactory-prod-h100-block-ng"]
    assert ng.inputs["scalingConfig"] == {"minSize": 0, "maxSize": 4, "desiredSize": 0}
    assert ng.inputs["capacityType"] == "CAPACITY_BLOCK"
    asg = ng.outputs["resources"][0]["autoscalingGroups"][0]["name"]
    actions = {r.name: r.inputs for r in of(prod, "aws:autoscaling/schedule:Schedule")}
    assert actions == {
        "aifactory-prod-h100-block-block-start": {
            "autoscalingGroupName": asg, "scheduledActionName": "aifactory-h100-block-block-start",
            "startTime": "2026-12-01T11:30:00Z", "desiredCapacity": 4, "minSize": -1, "maxSize": -1},
        "aifactory-prod-h100-block-block-end": {
            "autoscalingGroupName": asg, "scheduledActionName": "aifactory-h100-block-block-end",
            "startTime": "2026-12-15T10:30:00Z", "desiredCapacity": 0, "minSize": -1, "maxSize": -1},
    }


def test_dev_single_nat_and_no_efa() -> None:
    res = synth("dev")
    assert len(of(res, "aws:ec2/natGateway:NatGateway")) == 1
    assert of(res, "aws:ec2/securityGroup:SecurityGroup") == []
    assert all("networkInterfaces" not in lt.inputs for lt in of(res, LT))


def test_kubernetes_provider_uses_the_cluster_kubeconfig(prod) -> None:
    (provider,) = [r for r in prod if r.type == "pulumi:providers:kubernetes"]
    config = json.loads(provider.inputs["kubeconfig"])
    assert config["current-context"] == "aifactory-prod"
    # --region: without it the AWS CLI uses the deployer's default region, not the cluster's.
    assert config["users"][0]["user"]["exec"]["args"] == ["eks", "get-token", "--cluster-name", "aifactory-prod",
                                                          "--region", "us-east-1", "--output", "json"]
    assert config["clusters"][0]["cluster"]["server"].startswith("https://")


def test_subnet_plan_nat_zones_and_tags() -> None:
    assert subnet_plan("10.0.0.0/16", ["a", "b", "c"]) == {
        "a": ("10.0.0.0/19", "10.0.224.0/22"), "b": ("10.0.32.0/19", "10.0.228.0/22"),
        "c": ("10.0.64.0/19", "10.0.232.0/22")}
    assert nat_zones(["a", "b"], "single") == {"a": "a", "b": "a"}
    assert nat_zones(["a", "b"], "one-per-az") == {"a": "a", "b": "b"}
    assert subnet_tags("c1", public=True) == {"kubernetes.io/cluster/c1": "shared", "kubernetes.io/role/elb": "1"}
    assert subnet_tags("c1", public=False) == {"kubernetes.io/cluster/c1": "shared",
                                               "kubernetes.io/role/internal-elb": "1"}


def test_irsa_trust_policy_pins_subject_and_audience() -> None:
    doc = json.loads(iam.irsa_trust_policy("arn:aws:iam::1:oidc-provider/oidc.x/id/A", "oidc.x/id/A",
                                           "kube-system", "cluster-autoscaler"))
    assert doc["Statement"] == [{
        "Effect": "Allow", "Principal": {"Federated": "arn:aws:iam::1:oidc-provider/oidc.x/id/A"},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {"oidc.x/id/A:sub": "system:serviceaccount:kube-system:cluster-autoscaler",
                                       "oidc.x/id/A:aud": "sts.amazonaws.com"}}}]


def test_role_refuses_star_on_star() -> None:
    bad = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["ec2:Describe*"], "Resource": "*"},
        {"Effect": "Allow", "Action": "*", "Resource": ["*"]}]}
    assert iam.wildcard_statements(bad) == [1]
    with pytest.raises(pulumi.InputPropertiesError) as err:
        iam.role("r", assume_role_policy="{}", inline_policy=bad)
    assert [e["property_path"] for e in err.value.errors] == ["inlinePolicy.Statement[1]"]


# --- bad pool configs through the CLI: exit 2 with the key path --------------------------------

BAD_POOLS = [
    ({"instanceType": "g6e.xlarge", "fabric": "efa"}, "nodePools.bad.fabric"),
    ({"instanceType": "p5.48xlarge", "fabric": "efa", "availabilityZones": ["us-east-1a", "us-east-1b"]},
     "nodePools.bad.availabilityZones"),
    ({"instanceType": "p5.48xlarge", "fabric": "efa", "placementGroup": True, "minSize": 2, "maxSize": 2,
      "capacity": {"type": "capacity-block", "reservationId": "cr-0a1b2c3d4e5f60718"}},
     "nodePools.bad.placementGroup"),
    ({"instanceType": "g6e.xlarge", "minSize": 3, "maxSize": 2}, "nodePools.bad.minSize"),
    ({"instanceType": "g6e.xlarge", "minSize": 1, "maxSize": 2, "desiredSize": 4}, "nodePools.bad.desiredSize"),
    ({"instanceType": "p9.huge"}, "nodePools.bad.instanceType"),
]


@pytest.mark.parametrize(("pool", "path"), BAD_POOLS)
def test_bad_pool_config_exits_2_with_key_path(tmp_path: Path, capsys, pool: dict, path: str) -> None:
    doc = yaml.safe_load(stack_file("dev").read_text())
    doc["config"]["aifactory:nodePools"]["bad"] = pool
    (tmp_path / "Pulumi.bad.yaml").write_text(yaml.safe_dump(doc))
    code = cli.main(["synth", "bad", "--stacks-dir", str(tmp_path), "--out", str(tmp_path / "out"), "-q"])
    assert code == cli.EXIT_USAGE
    assert f"{path}:" in capsys.readouterr().err


def test_only_the_vpc_cni_addon_is_configured_and_it_enforces_network_policy(prod) -> None:
    config = {r.inputs["addonName"]: r.inputs.get("configurationValues") for r in of(prod, "aws:eks/addon:Addon")}
    assert config == {"vpc-cni": '{"enableNetworkPolicy": "true"}', "kube-proxy": None, "coredns": None,
                      "aws-ebs-csi-driver": None}


def test_every_node_group_asg_carries_the_node_template_of_its_node_group(prod) -> None:
    on_asg: dict[str, dict[str, str]] = {}
    for tag in of(prod, "aws:autoscaling/tag:Tag"):
        assert tag.inputs["tag"]["propagateAtLaunch"] is False
        on_asg.setdefault(tag.inputs["autoscalingGroupName"], {})[tag.inputs["tag"]["key"]] = tag.inputs["tag"]["value"]
    template = "k8s.io/cluster-autoscaler/node-template/"
    expected = {ng.outputs["resources"][0]["autoscalingGroups"][0]["name"]:
                {k: v for k, v in ng.inputs["tags"].items() if k.startswith(template) or k == "aifactory.io/autoscaled"}
                for ng in of(prod, "aws:eks/nodeGroup:NodeGroup") if ng.inputs["capacityType"] != "CAPACITY_BLOCK"}
    assert on_asg == expected and len(expected) == 3  # the capacity block's size is its schedule's
    h200 = next(tags for asg, tags in on_asg.items() if asg.startswith("eks-aifactory-prod-h200-ng-"))
    resources = f"{template}resources/"
    assert {k.removeprefix(resources): v for k, v in h200.items() if k.startswith(resources)} == \
        {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "16", "hugepages-2Mi": "5120Mi"}


def test_what_uses_a_role_records_its_policy_attachments_so_destroy_detaches_them_last(prod) -> None:
    """`pulumi destroy` deletes in reverse recorded-dependency order, and a dependency on a role does not cover its
    attachments (children of a custom resource): without these, the policies go first while EKS still needs them
    to delete its security groups, interfaces, load balancers and volumes (pulumi-aws eks.Cluster docs)."""
    by_urn = {r.urn: r for r in prod}
    attachments = [r for r in prod if r.type == "aws:iam/rolePolicyAttachment:RolePolicyAttachment"]

    def policies_of(role_arn_user) -> set[str]:
        return {a.inputs["policyArn"].rsplit("/", 1)[-1] for a in attachments
                if a.urn in role_arn_user.dependencies and by_urn[a.parent].urn in role_arn_user.dependencies}

    (eks,) = of(prod, EKS)
    assert policies_of(eks) == {"AmazonEKSClusterPolicy"}
    for ng in of(prod, "aws:eks/nodeGroup:NodeGroup"):
        assert policies_of(ng) == {"AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly",
                                   "AmazonSSMManagedInstanceCore"}, ng.name  # the CNI's policy: IRSA (issue 45)
    addons = {a.inputs["addonName"]: a for a in of(prod, "aws:eks/addon:Addon")}
    assert policies_of(addons["aws-ebs-csi-driver"]) == {"AmazonEBSCSIDriverPolicy"}
    assert policies_of(addons["vpc-cni"]) == {"AmazonEKS_CNI_Policy"}


def test_the_stacks_aws_profile_and_account_guards_reach_the_kits_provider_and_kubeconfig() -> None:
    """`aws:*` stack settings configure only the default provider (Pulumi docs, "Default provider configuration");
    the kit's explicit provider would deploy with the ambient credentials into whatever account they reach."""
    from infra.synth import read_stack_config, run_program, stack_file

    values = {**read_stack_config(stack_file("dev")), "aws:profile": "ml-prod",
              "aws:allowedAccountIds": json.dumps(["123456789012"])}
    res = run_program("dev", values).resources
    (provider,) = [r for r in res if r.type == "pulumi:providers:aws" and r.name == "aws"]
    assert (provider.inputs["profile"], json.loads(provider.inputs["allowedAccountIds"])) == (
        "ml-prod", ["123456789012"])
    (cluster,) = [r for r in res if r.type == "aifactory:index:GpuCluster"]
    user = json.loads(cluster.outputs["kubeconfig"])["users"][0]["user"]["exec"]
    assert user["env"] == [{"name": "AWS_PROFILE", "value": "ml-prod"}]
    plain = [r for r in run_program("dev", read_stack_config(stack_file("dev"))).resources
             if r.type == "pulumi:providers:aws" and r.name == "aws"][0]
    assert "profile" not in plain.inputs and "allowedAccountIds" not in plain.inputs


def test_addons_run_ekss_default_version_for_the_clusters_kubernetes_version(monkeypatch) -> None:
    """Without addon_version an add-on keeps the version of the day it was created: raising kubernetesVersion would
    leave it behind. The kit asks EKS (DescribeAddonVersions, the default for that Kubernetes version), not the most
    recent build, so versions move with kubernetesVersion only."""
    from infra.mocks import PlatformMocks
    from infra.synth import read_stack_config, run_program, stack_file

    asked: list[dict] = []
    real_call = PlatformMocks.call

    def call(self, args):  # type: ignore[no-untyped-def]
        if args.token == "aws:eks/getAddonVersion:getAddonVersion":
            asked.append(dict(args.args))
            return {"version": f"v-{args.args['addonName']}-{args.args['kubernetesVersion']}", "id": "x"}
        return real_call(self, args)

    monkeypatch.setattr(PlatformMocks, "call", call)
    k8s_version = "1.36"  # supported, and in no row of the kit's table; prod's pins taken out
    values = read_stack_config(stack_file("prod"))
    cluster = {k: v for k, v in json.loads(values["aifactory:cluster"]).items() if k != "addonVersions"}
    res = run_program("prod", {**values, "aifactory:kubernetesVersion": k8s_version,
                               "aifactory:cluster": json.dumps(cluster)}).resources
    assert sorted((a["addonName"], a["kubernetesVersion"], a.get("mostRecent")) for a in asked) == [
        (name, k8s_version, None) for name in ("aws-ebs-csi-driver", "coredns", "kube-proxy", "vpc-cni")]
    assert {r.inputs["addonName"]: r.inputs["addonVersion"] for r in of(res, "aws:eks/addon:Addon")} == {
        name: f"v-{name}-{k8s_version}" for name in ("aws-ebs-csi-driver", "coredns", "kube-proxy", "vpc-cni")}


def test_pinned_addon_versions_are_used_as_given_and_never_asked_for(monkeypatch) -> None:
    """EKS moves an add-on's default version within a Kubernetes version (a new eksbuild), and OVERWRITE applies it
    at the next unrelated `pulumi up`. `cluster.addonVersions` pins it: that add-on's version is not resolved."""
    from infra.mocks import PlatformMocks

    asked: list[str] = []
    real_call = PlatformMocks.call

    def call(self, args):  # type: ignore[no-untyped-def]
        if args.token == "aws:eks/getAddonVersion:getAddonVersion":
            asked.append(args.args["addonName"])
        return real_call(self, args)

    monkeypatch.setattr(PlatformMocks, "call", call)
    values = read_stack_config(stack_file("dev"))
    cluster = {**json.loads(values["aifactory:cluster"]),
               "addonVersions": {"vpc-cni": "v1.20.4-eksbuild.2", "coredns": "v1.12.3-eksbuild.1"}}
    res = run_program("dev", {**values, "aifactory:cluster": json.dumps(cluster)}).resources
    versions = {r.inputs["addonName"]: r.inputs["addonVersion"] for r in of(res, "aws:eks/addon:Addon")}
    assert (versions["vpc-cni"], versions["coredns"]) == ("v1.20.4-eksbuild.2", "v1.12.3-eksbuild.1")
    assert sorted(asked) == ["aws-ebs-csi-driver"]  # kube-proxy: the kit's default for 1.35


@pytest.mark.parametrize(("pins", "problem"), [
    ({"cni": "v1.20.4-eksbuild.2"}, "cluster.addonVersions.cni: unknown key; allowed keys: vpc-cni, kube-proxy, "
                                    "coredns, aws-ebs-csi-driver"),
    ({"vpc-cni": "1.20.4"}, "cluster.addonVersions.vpc-cni: '1.20.4' is not an EKS add-on version such as "
                            "v1.20.4-eksbuild.2 (aws eks describe-addon-versions)"),
])
def test_a_bad_addon_pin_names_the_key(pins: dict, problem: str) -> None:
    from infra.config import ConfigError
    from tests.support.stacks import stack_config, stack_raw

    with pytest.raises(ConfigError) as err:
        stack_config("dev", cluster={**stack_raw("dev")["cluster"], "addonVersions": pins})
    assert [f"{p.path}: {p.message}" for p in err.value.problems] == [problem]


def test_addons_take_the_pin_then_the_kits_default_for_the_kubernetes_version_and_leave_the_rest_to_eks() -> None:
    """The defaults are the Amazon EKS user guide's latest add-on versions per Kubernetes version (vpc-cni and coredns
    at awsdocs/amazon-eks-user-guide@057948d, kube-proxy at @0cc5a76, latest/ug/networking/managing-*.adoc); the
    guide has no such table for the EBS CSI driver, so it stays EKS's choice."""
    from components.aws.addons import addon_versions
    from components.aws.cluster import ADDONS

    decided = addon_versions(ADDONS, kubernetes_version="1.33", pinned={"coredns": "v1.12.4-eksbuild.1"})
    assert decided.versions == {"vpc-cni": "v1.20.1-eksbuild.3", "coredns": "v1.12.4-eksbuild.1"}
    assert decided.unresolved == ("kube-proxy", "aws-ebs-csi-driver")
    assert addon_versions(ADDONS, kubernetes_version="1.31", pinned={}).versions == {
        "vpc-cni": "v1.20.1-eksbuild.3", "kube-proxy": "v1.31.3-eksbuild.2", "coredns": "v1.11.4-eksbuild.22"}
    assert addon_versions(ADDONS, kubernetes_version="1.36", pinned={}) == ({}, ADDONS)


def test_the_default_add_on_table_holds_supported_kubernetes_versions_and_eks_add_on_versions() -> None:
    """Every row is a Kubernetes version the stack accepts, every add-on one the cluster installs with its source
    cited, and every version has the form EKS lists (v1.20.4-eksbuild.2; cluster.addonVersions accepts no other)."""
    import re

    from components.aws.addons import ADDON_VERSION_SOURCES, DEFAULT_ADDON_VERSIONS
    from components.aws.cluster import ADDONS
    from infra.stack.common import SUPPORTED_KUBERNETES_VERSIONS

    assert set(DEFAULT_ADDON_VERSIONS) <= set(SUPPORTED_KUBERNETES_VERSIONS)
    rows = [(k, a, v) for k, row in DEFAULT_ADDON_VERSIONS.items() for a, v in row.items()]
    assert [(k, a) for k, a, _ in rows if a not in ADDONS or a not in ADDON_VERSION_SOURCES] == []
    assert [v for _, _, v in rows if not re.fullmatch(r"v[0-9]+\.[0-9]+\.[0-9]+-eksbuild\.[0-9]+", v)] == []


def test_a_known_kubernetes_version_never_asks_eks_for_its_add_ons_and_the_rest_warn_with_the_key(monkeypatch) -> None:
    """With kubernetesVersion 1.33 vpc-cni and coredns run the kit's defaults (no DescribeAddonVersions: an unrelated
    `pulumi up` cannot move them); kube-proxy and the EBS CSI driver are still asked, and the cluster warns for
    once, naming the cluster.addonVersions keys that would pin them."""
    from infra.mocks import PlatformMocks

    asked: list[str] = []
    warned: list[str] = []
    real_call = PlatformMocks.call

    def call(self, args):  # type: ignore[no-untyped-def]
        if args.token == "aws:eks/getAddonVersion:getAddonVersion":
            asked.append(args.args["addonName"])
        return real_call(self, args)

    monkeypatch.setattr(PlatformMocks, "call", call)
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: warned.append(msg))
    values = {**read_stack_config(stack_file("dev")), "aifactory:kubernetesVersion": "1.33"}
    values["aifactory:cluster"] = json.dumps({k: v for k, v in json.loads(values["aifactory:cluster"]).items()
                                              if k != "addonVersions"})  # dev pins every add-on
    res = run_program("dev", values).resources
    versions = {r.inputs["addonName"]: r.inputs["addonVersion"] for r in of(res, "aws:eks/addon:Addon")}
    assert (versions["vpc-cni"], versions["coredns"]) == ("v1.20.1-eksbuild.3", "v1.12.3-eksbuild.1")
    assert sorted(asked) == ["aws-ebs-csi-driver", "kube-proxy"]
    assert [w for w in warned if w.startswith("cluster.addonVersions")] == [
        "cluster.addonVersions: the kit has no default version of kube-proxy, aws-ebs-csi-driver for Kubernetes 1.33, "
        "so EKS's default is asked at every run and a new eksbuild is applied at the next `pulumi up`; pin "
        "cluster.addonVersions.kube-proxy, cluster.addonVersions.aws-ebs-csi-driver (aws eks describe-addon-versions "
        "--kubernetes-version 1.33 --addon-name <add-on>)"]
