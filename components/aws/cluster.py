"""GpuCluster: the EKS control plane, its identity plumbing, add-ons and the system node group.

A private API endpoint, plus a public one only to a CIDR allow-list (`api_access`), secrets
envelope-encrypted with a KMS key of its own, every control-plane log type on, an OIDC provider for IRSA,
access entries for the admin roles, the four core add-ons (the VPC CNI with NetworkPolicy enforcement on), and a
kubeconfig plus a Kubernetes provider for the layers above. GPU pools are separate GpuNodePool components.
"""

import ipaddress
import json
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components import catalog
from components.aws import iam
from components.aws.addons import addon_versions, unpinned_warning
from components.aws.kms import log_group_key
from components.aws.nodes import AMI_TYPE_CPU, NodeGroupSpec, node_group
from components.validation import Problems, check_shape
from components.vocabulary import SYSTEM_POOL

__all__ = [
    "TYPE",
    "CONTROL_PLANE_LOG_TYPES",
    "ADDONS",
    "ADDON_CONFIGURATION",
    "ADMIN_POLICY_ARN",
    "DEFAULT_SYSTEM_INSTANCE_TYPE",
    "DEFAULT_CONTROL_PLANE_LOG_RETENTION_DAYS",
    "SUPPORT_TYPES",
    "DEFAULT_SUPPORT_TYPE",
    "API_ACCESS",
    "SystemPoolArgs",
    "GpuClusterArgs",
    "GpuCluster",
    "api_access",
    "vpc_config",
    "region_of",
    "kubeconfig",
    "system_pool_spec",
    "addon_configuration",
]

TYPE = "aifactory:index:GpuCluster"
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
# Installed in this order; coredns and the EBS CSI driver need nodes, so they wait for the system pool.
ADDONS = ("vpc-cni", "kube-proxy", "coredns", "aws-ebs-csi-driver")
ADDONS_NEEDING_NODES = frozenset({"coredns", "aws-ebs-csi-driver"})
ADDONS_NEEDING_NODES_ORDERED = tuple(a for a in ADDONS if a in ADDONS_NEEDING_NODES)
# Add-on configuration values (the add-on's own JSON schema). The VPC CNI enforces NetworkPolicy only with
# its network policy agent on; without it the tenant isolation policies are accepted and never applied.
ADDON_CONFIGURATION: dict[str, dict[str, str]] = {"vpc-cni": {"enableNetworkPolicy": "true"}}
# Add-ons that call AWS APIs, each through IRSA on its own service account: (role name suffix, namespace, service
# account, managed policy). The EBS CSI controller's, and the VPC CNI's `aws-node` (its policy is on no node role).
ADDON_IDENTITIES: dict[str, tuple[str, str, str, str]] = {
    "vpc-cni": ("vpc-cni", "kube-system", "aws-node", iam.CNI_POLICY),
    "aws-ebs-csi-driver": ("ebs-csi", "kube-system", "ebs-csi-controller-sa", iam.EBS_CSI_POLICY),
}
ADMIN_POLICY_ARN = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
DEFAULT_SYSTEM_INSTANCE_TYPE = "m7i.2xlarge"
DEFAULT_SYSTEM_ROOT_VOLUME_GIB = 100
DEFAULT_CONTROL_PLANE_LOG_RETENTION_DAYS = 90
# EKS upgrade policy (UpgradePolicyRequest supportType): STANDARD upgrades the cluster at the end of standard
# support; EXTENDED keeps it there and bills extended support. EKS's own default is EXTENDED for new clusters.
SUPPORT_TYPES = ("STANDARD", "EXTENDED")
DEFAULT_SUPPORT_TYPE = "STANDARD"
API_ACCESS = ("public-and-private", "private")


class SystemPoolArgs(TypedDict):
    """The CPU node group for cluster add-ons and the platform's own pods."""

    instance_type: NotRequired[str]
    """Default: m7i.2xlarge."""
    min_size: NotRequired[int]
    """Default: 2."""
    max_size: NotRequired[int]
    """Default: 6."""
    desired_size: NotRequired[int]
    """Default: 3."""


class GpuClusterArgs(TypedDict):
    """Arguments of a GpuCluster."""

    kubernetes_version: str
    """EKS Kubernetes version, e.g. 1.35 (components/aws/versions.py: when each leaves standard support)."""
    vpc_id: pulumi.Input[str]
    """The cluster's VPC."""
    subnet_ids: list[pulumi.Input[str]]
    """Private subnets (two or more zones) for control-plane interfaces and the system pool."""
    cluster_name: NotRequired[str]
    """EKS cluster name. Default: the component's name."""
    api_access: NotRequired[str]
    """Where the API endpoint answers: `public-and-private` (the public endpoint only to `public_access_cidrs`)
    or `private` (inside the VPC and connected networks only: the deployer must run there).
    Default: public-and-private with public_access_cidrs, else private."""
    public_access_cidrs: NotRequired[list[str]]
    """Networks allowed to reach the public API endpoint; required for public-and-private. Default: none."""
    aws_profile: NotRequired[str]
    """The AWS CLI profile the kubeconfig's `aws eks get-token` uses (set it to the provider's profile). Default:
    the CLI's ambient credentials."""
    admin_role_arns: NotRequired[list[str]]
    """IAM roles granted cluster admin through access entries; when given, the creator gets no entry of its own, so
    the role that deploys must be listed. Default: none (only the creator)."""
    system_pool: NotRequired[SystemPoolArgs]
    """Default: m7i.2xlarge, 2 to 6 nodes, 3 desired."""
    log_retention_days: NotRequired[int]
    """Retention of the control-plane log group. Default: 90."""
    deletion_protection: NotRequired[bool]
    """EKS deletion protection on the cluster, and Pulumi `protect` on the cluster and its secrets key: `pulumi
    destroy` stops before either. Default: false."""
    addon_versions: NotRequired[dict[str, str]]
    """Add-on name (vpc-cni, kube-proxy, coredns, aws-ebs-csi-driver) -> the version to run, pinned: no `pulumi up`
    moves it. Default: the kit's version for `kubernetes_version` (components.aws.addons.DEFAULT_ADDON_VERSIONS), else
    EKS's default version (DescribeAddonVersions), asked at every run, with a warning naming the key to pin."""
    support_type: NotRequired[str]
    """EKS upgrade policy: STANDARD (EKS upgrades the cluster at the end of standard support) or EXTENDED (it stays,
    billed for extended support). Default: STANDARD."""


def api_access(args: GpuClusterArgs) -> str:
    return args.get("api_access", "public-and-private" if args.get("public_access_cidrs") else "private")


def vpc_config(subnet_ids: list[pulumi.Input[str]], public_access_cidrs: list[str], *,
               access: str = "private") -> dict:
    """Private endpoint always; the public one for `public-and-private`, only to its allow-list."""
    public = access == "public-and-private"
    config: dict = {"subnet_ids": subnet_ids, "endpoint_private_access": True, "endpoint_public_access": public}
    if public:
        config["public_access_cidrs"] = list(public_access_cidrs)
    return config


def region_of(cluster_arn: str) -> str:
    """The region field of an ARN (arn:aws:eks:REGION:ACCOUNT:cluster/NAME)."""
    return cluster_arn.split(":")[3]


def kubeconfig(cluster_name: str, endpoint: str, ca_data: str, region: str, profile: str | None = None) -> str:
    """A kubeconfig (JSON) that authenticates with `aws eks get-token`: no long-lived secret in state.

    `--region` is explicit: without it the AWS CLI takes the deployer's default region (AWS_REGION or its
    profile), and a token for a cluster of another region is refused (or, with no default, none is made).
    `profile`: the AWS CLI profile the token is made with (AWS_PROFILE in the exec environment), the one the
    stack's AWS provider uses; default: the CLI's own (ambient credentials)."""
    user: dict[str, Any] = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": "aws",
        "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region, "--output", "json"],
        "interactiveMode": "Never",
    }
    if profile:
        user["env"] = [{"name": "AWS_PROFILE", "value": profile}]
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "users": [{"name": cluster_name, "user": {"exec": user}}],
    }, sort_keys=True)


def system_pool_spec(args: SystemPoolArgs) -> NodeGroupSpec:
    lo = args.get("min_size", 2)
    hi = args.get("max_size", max(lo, 6))
    return NodeGroupSpec(
        pool=SYSTEM_POOL,
        instance_type=args.get("instance_type", DEFAULT_SYSTEM_INSTANCE_TYPE),
        ami_type=AMI_TYPE_CPU,
        min_size=lo, max_size=hi, desired_size=args.get("desired_size", min(max(lo, 3), hi)),
        root_volume_gib=DEFAULT_SYSTEM_ROOT_VOLUME_GIB,
    )


def addon_configuration(addon: str) -> str | None:
    """The add-on's configurationValues as EKS takes them (JSON text), or None for its defaults."""
    values = ADDON_CONFIGURATION.get(addon)
    return json.dumps(values, sort_keys=True) if values is not None else None


def _validate(name: str, args: GpuClusterArgs) -> None:
    check_shape("GpuCluster", name, args, GpuClusterArgs)  # typos, unknown keys, wrong types: before any read
    problems = Problems("GpuCluster", name)
    access = api_access(args)
    if access not in API_ACCESS:
        problems.add("apiAccess", f"{access!r} is not allowed; choose one of: {', '.join(API_ACCESS)}")
    elif access == "public-and-private" and not args.get("public_access_cidrs"):
        problems.add("publicAccessCidrs", "is required for apiAccess 'public-and-private': list your networks")
    elif access == "private" and args.get("public_access_cidrs"):
        problems.add("publicAccessCidrs", "only applies to apiAccess 'public-and-private'")
    if len(args["subnet_ids"]) < 2:
        problems.add("subnetIds", "EKS needs subnets in at least two zones")
    for i, cidr in enumerate(args.get("public_access_cidrs") or []):
        try:
            if ipaddress.ip_network(cidr).prefixlen == 0:
                problems.add(f"publicAccessCidrs[{i}]", f"{cidr!r} opens the API endpoint to the whole internet; "
                                                        "list your own networks instead")
        except ValueError:
            problems.add(f"publicAccessCidrs[{i}]", f"{cidr!r} is not a CIDR block")
    for addon in args.get("addon_versions") or {}:
        if addon not in ADDONS:
            problems.add(f"addonVersions.{addon}",
                         f"is not an add-on of the cluster; choose one of: {', '.join(ADDONS)}")
    if (support := args.get("support_type", DEFAULT_SUPPORT_TYPE)) not in SUPPORT_TYPES:
        problems.add("supportType", f"{support!r} is not allowed; choose one of: {', '.join(SUPPORT_TYPES)}")
    sp = args.get("system_pool") or {}
    itype = sp.get("instance_type", DEFAULT_SYSTEM_INSTANCE_TYPE)
    inst = catalog.CATALOG.get(itype)
    if inst is None or inst.has_gpu or inst.onprem:
        problems.add("systemPool.instanceType", f"{itype!r} is not an AWS CPU instance type of the catalog")
    spec = system_pool_spec(sp)
    if spec.min_size > spec.max_size:
        problems.add("systemPool.minSize", f"{spec.min_size} is greater than maxSize {spec.max_size}")
    elif not spec.min_size <= spec.desired_size <= spec.max_size:
        problems.add("systemPool.desiredSize", f"{spec.desired_size} is outside minSize..maxSize "
                                               f"({spec.min_size}..{spec.max_size})")
    problems.raise_any()


def bootstrap_creator(admin_role_arns: list[str]) -> bool:
    """Whether EKS makes the cluster's creator an admin (`bootstrapClusterCreatorAdminPermissions`). Only without
    listed admins: EKS creates that access entry itself, so listing the creator's role as well fails its
    AccessEntry with ResourceInUseException (409) minutes into the first `pulumi up`; with admins listed, exactly
    they administer the cluster, and the role that runs `pulumi up` must be one of them."""
    return not admin_role_arns


class GpuCluster(pulumi.ComponentResource):
    """An EKS cluster for GPU node pools: private endpoint, KMS secrets, logging, IRSA, add-ons, system pool."""

    cluster_name: pulumi.Output[str]
    """The EKS cluster's name."""
    kubeconfig: pulumi.Output[str]
    """Kubeconfig (JSON) using `aws eks get-token`."""
    oidc_provider_arn: pulumi.Output[str]
    """The IAM OIDC provider for IRSA roles."""
    oidc_issuer: pulumi.Output[str]
    """The OIDC issuer host/path, without https:// (the prefix of IRSA trust conditions)."""
    node_security_group_id: pulumi.Output[str]
    """The cluster security group EKS attaches to control-plane interfaces and nodes."""

    def __init__(self, name: str, args: GpuClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        _validate(name, args)
        cluster_name = args.get("cluster_name", name)
        child = pulumi.ResourceOptions(parent=self)
        admin_roles = list(args.get("admin_role_arns") or [])

        role = iam.role(f"{name}-cluster", assume_role_policy=iam.service_trust_policy("eks.amazonaws.com"),
                        managed_policy_arns=iam.CLUSTER_POLICIES, opts=child)
        protect = bool(args.get("deletion_protection", False))
        # with deletion protection, `pulumi destroy` (and a replacement) stops before the cluster and its key
        kept = pulumi.ResourceOptions(parent=self, protect=protect)
        key = aws.kms.Key(f"{name}-secrets", description=f"EKS secrets envelope encryption for {cluster_name}",
                          enable_key_rotation=True, deletion_window_in_days=30, opts=kept)
        log_group = f"/aws/eks/{cluster_name}/cluster"  # the name EKS writes its control-plane logs to
        log_key = log_group_key(f"{name}-control-plane-logs", log_group=log_group, opts=child,
                                description=f"CloudWatch Logs encryption of EKS control-plane logs of {cluster_name}")
        logs = aws.cloudwatch.LogGroup(
            f"{name}-control-plane", name=log_group, kms_key_id=log_key.arn,
            retention_in_days=args.get("log_retention_days", DEFAULT_CONTROL_PLANE_LOG_RETENTION_DAYS), opts=child)
        self.eks = aws.eks.Cluster(  # type: ignore[call-overload]  # nested inputs as plain dicts
            f"{name}-eks",
            name=cluster_name,
            version=args["kubernetes_version"],
            role_arn=iam.arn_with_policies(role),
            vpc_config=vpc_config(args["subnet_ids"], list(args.get("public_access_cidrs") or []),
                                  access=api_access(args)),
            access_config={"authentication_mode": "API",
                           "bootstrap_cluster_creator_admin_permissions": bootstrap_creator(admin_roles)},
            encryption_config={"provider": {"key_arn": key.arn}, "resources": ["secrets"]},
            enabled_cluster_log_types=list(CONTROL_PLANE_LOG_TYPES),
            deletion_protection=protect,
            upgrade_policy={"support_type": args.get("support_type", DEFAULT_SUPPORT_TYPE)},
            # the bootstrap setting exists only at creation (changing it replaces the cluster): a cluster created
            # before the kit turned it off for listed admins keeps its creator entry
            opts=pulumi.ResourceOptions(parent=self, depends_on=[logs, role], protect=protect,
                                        ignore_changes=["accessConfig.bootstrapClusterCreatorAdminPermissions"]),
        )
        self.cluster_name = self.eks.name
        issuer_url = self.eks.identities.apply(lambda ids: ids[0].oidcs[0].issuer)
        oidc = aws.iam.OpenIdConnectProvider(f"{name}-oidc", url=issuer_url, client_id_lists=[iam.STS_AUDIENCE],
                                             opts=child)
        self.oidc_provider_arn = oidc.arn
        self.oidc_issuer = issuer_url.apply(lambda url: url.removeprefix("https://"))
        self.node_security_group_id = self.eks.vpc_config.cluster_security_group_id
        admin_access = self._admins(name, admin_roles)

        # Not outputs of the component package (no class annotation): the program orders the platform after them.
        self.system_node_group: aws.eks.NodeGroup = node_group(
            f"{name}-{SYSTEM_POOL}", system_pool_spec(args.get("system_pool") or {}),
            cluster_name=self.eks.name, kubernetes_version=args["kubernetes_version"],
            node_role_arn=iam.arn_with_policies(iam.node_role(f"{name}-{SYSTEM_POOL}-node", opts=child)),
            subnet_ids=args["subnet_ids"], network_interfaces=None, placement_group=None, opts=child)[1]
        self.addons: dict[str, aws.eks.Addon] = self._addons(name, self.system_node_group, args["kubernetes_version"],
                                                             dict(args.get("addon_versions") or {}))

        self.kubeconfig = pulumi.Output.all(self.eks.name, self.eks.endpoint, self.eks.certificate_authority.data,
                                            self.eks.arn).apply(
            lambda a: kubeconfig(a[0], a[1], a[2], region_of(a[3]), args.get("aws_profile")))
        # with listed admins, the deployer reaches the API only once its own entry and policy exist
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, enable_server_side_apply=True,
                                     opts=pulumi.ResourceOptions(parent=self, depends_on=admin_access))
        self.register_outputs({
            "clusterName": self.cluster_name,
            "kubeconfig": self.kubeconfig,
            "oidcProviderArn": self.oidc_provider_arn,
            "oidcIssuer": self.oidc_issuer,
            "nodeSecurityGroupId": self.node_security_group_id,
        })

    def service_account_role(self, name: str, *, namespace: str, service_account: str,
                             inline_policy: Mapping[str, Any], opts: pulumi.ResourceOptions) -> pulumi.Output[str]:
        """An IRSA role for one service account of this cluster (components.identity.WorkloadIdentity): its ARN, with
        the role's policies as dependencies too (iam.arn_with_policies)."""
        return iam.arn_with_policies(iam.irsa_role(name, cluster=self, namespace=namespace,
                                                   service_account=service_account, inline_policy=inline_policy,
                                                   opts=opts))

    def _admins(self, name: str, role_arns: list[str]) -> list[pulumi.Resource]:
        out: list[pulumi.Resource] = []
        for arn in role_arns:
            role_name = arn.rsplit("/", 1)[-1]
            entry = aws.eks.AccessEntry(f"{name}-admin-{role_name}", cluster_name=self.eks.name, principal_arn=arn,
                                        type="STANDARD", opts=pulumi.ResourceOptions(parent=self))
            out.append(aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{role_name}", cluster_name=self.eks.name, principal_arn=entry.principal_arn,
                policy_arn=ADMIN_POLICY_ARN, access_scope={"type": "cluster"},
                opts=pulumi.ResourceOptions(parent=self)))
        return out

    @property
    def platform_prerequisites(self) -> list[pulumi.Resource]:
        """What the platform's pods need for as long as they run: system nodes, pod networking (vpc-cni, kube-proxy),
        cluster DNS and volume provisioning. Releases that depend on these are created after them and, by `pulumi
        destroy`, deleted before them: without vpc-cni, pods started by a Helm uninstall hook get no IP, and without
        the EBS CSI driver a deleted claim leaks its volume."""
        return [self.system_node_group, *(self.addons[a] for a in ADDONS)]

    def _addons(self, name: str, system: aws.eks.NodeGroup, kubernetes_version: str,
                pinned: dict[str, str]) -> dict[str, aws.eks.Addon]:
        """The add-ons at a version chosen for the cluster's Kubernetes version: without a version an add-on keeps
        the one of the day it was created, and raising `kubernetesVersion` would leave vpc-cni, coredns, kube-proxy
        and EBS CSI behind (EKS supports each version only with some Kubernetes versions). `pinned` versions are used
        as given, then the kit's defaults per Kubernetes version (components.aws.addons), so an upgrade happens when
        the Kubernetes version moves, not whenever AWS publishes a build. An add-on with neither runs EKS's default
        version (DescribeAddonVersions' defaultVersion, not `mostRecent`), which EKS moves within a Kubernetes
        version (a new eksbuild, applied by OVERWRITE at the next unrelated `pulumi up`): the cluster warns, naming
        the key that pins it."""
        roles = {addon: iam.irsa_role(f"{name}-{suffix}", cluster=self, namespace=namespace,
                                      service_account=account, managed_policy_arns=(policy,),
                                      opts=pulumi.ResourceOptions(parent=self))
                 for addon, (suffix, namespace, account, policy) in ADDON_IDENTITIES.items()}
        decided = addon_versions(ADDONS, kubernetes_version=kubernetes_version, pinned=pinned)
        if decided.unresolved:
            pulumi.log.warn(unpinned_warning(decided.unresolved, kubernetes_version=kubernetes_version), resource=self)
        return {addon: aws.eks.Addon(
                f"{name}-{addon}",
                cluster_name=self.eks.name,
                addon_name=addon,
                addon_version=decided.versions.get(addon) or aws.eks.get_addon_version_output(
                    addon_name=addon, kubernetes_version=kubernetes_version,
                    opts=pulumi.InvokeOutputOptions(parent=self)).version,
                configuration_values=addon_configuration(addon),
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                service_account_role_arn=iam.arn_with_policies(roles[addon]) if addon in roles else None,
                opts=pulumi.ResourceOptions(parent=self,
                                            depends_on=[system] if addon in ADDONS_NEEDING_NODES else None),
            ) for addon in ADDONS}
