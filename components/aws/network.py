"""Network: the VPC the cluster's control-plane (ENA) fabric lives in.

Public subnets hold only load balancers and NAT gateways; nodes and the EKS control-plane interfaces
live in private subnets, one per zone. EFA pools pick the private subnet of their one zone and add
their own security group: the data-plane fabric is separate from this one by construction.
"""

import ipaddress
import json
from typing import NotRequired, TypedDict

import pulumi
import pulumi_aws as aws

from components.aws import iam
from components.aws.kms import log_group_key
from components.validation import Problems, check_shape

__all__ = [
    "TYPE",
    "DEFAULT_VPC_CIDR",
    "DEFAULT_NAT_GATEWAYS",
    "DEFAULT_FLOW_LOG_RETENTION_DAYS",
    "NAT_MODES",
    "NetworkArgs",
    "Network",
    "subnet_plan",
    "nat_zones",
    "subnet_tags",
    "flow_log_trust_policy",
]

TYPE = "aifactory:index:Network"
DEFAULT_VPC_CIDR = "10.0.0.0/16"
DEFAULT_NAT_GATEWAYS = "one-per-az"
DEFAULT_FLOW_LOG_RETENTION_DAYS = 30
NAT_MODES = ("one-per-az", "single")
MAX_ZONES = 6
ANYWHERE = "0.0.0.0/0"


class NetworkArgs(TypedDict):
    """Arguments of a Network."""

    availability_zones: list[str]
    """Zones to span (2 to 6): one public and one private subnet each."""
    cluster_name: str
    """The EKS cluster that will use the subnets (kubernetes.io/cluster/<name> tags)."""
    vpc_cidr: NotRequired[str]
    """Default: 10.0.0.0/16."""
    nat_gateways: NotRequired[str]
    """one-per-az or single. Default: one NAT gateway per zone."""
    flow_log_retention_days: NotRequired[int]
    """Retention of the VPC flow log group. Default: 30."""


def subnet_plan(vpc_cidr: str, zones: list[str]) -> dict[str, tuple[str, str]]:
    """zone -> (private CIDR, public CIDR).

    The VPC is cut in eighths: zone i's private subnet is eighth i (large: every pod takes a VPC IP,
    and EFA interfaces of type `efa` take one each); the last eighth is cut again in eighths for the
    public subnets, which hold only load balancers and NAT gateways.
    """
    vpc = ipaddress.IPv4Network(vpc_cidr)
    eighths = list(vpc.subnets(prefixlen_diff=3))
    public = list(eighths[-1].subnets(prefixlen_diff=3))
    return {zone: (str(eighths[i]), str(public[i])) for i, zone in enumerate(zones)}


def nat_zones(zones: list[str], mode: str) -> dict[str, str]:
    """zone -> the zone whose NAT gateway its private subnet routes through."""
    return {zone: zone if mode == "one-per-az" else zones[0] for zone in zones}


def subnet_tags(cluster_name: str, *, public: bool) -> dict[str, str]:
    """EKS load-balancer discovery tags: internet-facing ELBs in public subnets, internal ones in private."""
    role = "kubernetes.io/role/elb" if public else "kubernetes.io/role/internal-elb"
    return {f"kubernetes.io/cluster/{cluster_name}": "shared", role: "1"}


def _validate(name: str, args: NetworkArgs) -> None:
    check_shape("Network", name, args, NetworkArgs)  # typos, unknown keys, wrong types: before any read
    problems = Problems("Network", name)
    zones = args["availability_zones"]
    if not 2 <= len(zones) <= MAX_ZONES:
        problems.add("availabilityZones", f"{list(zones)} must list 2 to {MAX_ZONES} zones (EKS needs two)")
    if len(set(zones)) != len(zones):
        problems.add("availabilityZones", f"{list(zones)} lists a zone twice")
    cidr = args.get("vpc_cidr", DEFAULT_VPC_CIDR)
    try:
        if not 16 <= ipaddress.ip_network(cidr).prefixlen <= 20:
            problems.add("vpcCidr", f"{cidr!r} must be a /16 to /20 block")
    except ValueError:
        problems.add("vpcCidr", f"{cidr!r} is not a CIDR block such as 10.0.0.0/16")
    if (mode := args.get("nat_gateways", DEFAULT_NAT_GATEWAYS)) not in NAT_MODES:
        problems.add("natGateways", f"{mode!r} is not allowed; choose one of: {', '.join(NAT_MODES)}")
    problems.raise_any()


def _with_egress(subnet_id: pulumi.Output[str], association: aws.ec2.RouteTableAssociation) -> pulumi.Output[str]:
    """The subnet's id as an input that also records its route-table association (and through it the route table
    and NAT gateway) as dependencies: a dependency on the subnet alone lets `pulumi destroy` cut node egress in its
    first wave, while the cluster's nodes still drain (the pattern of iam.arn_with_policies)."""
    return pulumi.Output.all(subnet_id, association.id).apply(lambda values: str(values[0]))


def flow_log_trust_policy(account_id: str, region: str, partition: str = "aws") -> str:
    """The flow-log role's trust policy: the flow-logs service may assume it only for flow logs of this account and
    region (`aws:SourceAccount`, `aws:SourceArn`), so no other account's flow log can borrow the role to write into
    this account's log groups (the confused-deputy guard of the VPC user guide, "IAM role for publishing flow logs
    to CloudWatch Logs")."""
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "vpc-flow-logs.amazonaws.com"}, "Action": "sts:AssumeRole",
        "Condition": {"StringEquals": {"aws:SourceAccount": account_id},
                      "ArnLike": {"aws:SourceArn": f"arn:{partition}:ec2:{region}:{account_id}:vpc-flow-log/*"}},
    }]}, sort_keys=True)


def _flow_log_policy(log_group_arn: str) -> dict:
    return {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow",
        "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
        "Resource": [log_group_arn, f"{log_group_arn}:*"],
    }]}


class Network(pulumi.ComponentResource):
    """A VPC over the given zones: public and private subnets, NAT, flow logs and an S3 gateway endpoint."""

    vpc_id: pulumi.Output[str]
    """The VPC."""
    private_subnet_ids: pulumi.Output[list[str]]
    """Private subnets, in the order of availability_zones."""
    public_subnet_ids: pulumi.Output[list[str]]
    """Public subnets, in the order of availability_zones."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        _validate(name, args)
        zones = list(args["availability_zones"])
        cluster = args["cluster_name"]
        plan = subnet_plan(args.get("vpc_cidr", DEFAULT_VPC_CIDR), zones)
        child = pulumi.ResourceOptions(parent=self)

        vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=args.get("vpc_cidr", DEFAULT_VPC_CIDR),
                          enable_dns_hostnames=True, enable_dns_support=True, tags={"Name": name}, opts=child)
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags={"Name": name}, opts=child)
        public_rt = aws.ec2.RouteTable(f"{name}-public", vpc_id=vpc.id,
                                       routes=[{"cidr_block": ANYWHERE, "gateway_id": igw.id}],
                                       tags={"Name": f"{name}-public"}, opts=child)
        public, private = {}, {}
        for zone in zones:
            private_cidr, public_cidr = plan[zone]
            public[zone] = aws.ec2.Subnet(
                f"{name}-public-{zone}", vpc_id=vpc.id, availability_zone=zone, cidr_block=public_cidr,
                map_public_ip_on_launch=False, tags={"Name": f"{name}-public-{zone}",
                                                     **subnet_tags(cluster, public=True)}, opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-public-{zone}", subnet_id=public[zone].id,
                                          route_table_id=public_rt.id, opts=child)
            private[zone] = aws.ec2.Subnet(
                f"{name}-private-{zone}", vpc_id=vpc.id, availability_zone=zone, cidr_block=private_cidr,
                tags={"Name": f"{name}-private-{zone}", **subnet_tags(cluster, public=False)}, opts=child)

        via = nat_zones(zones, args.get("nat_gateways", DEFAULT_NAT_GATEWAYS))
        nats = {}
        for zone in sorted(set(via.values()), key=zones.index):
            eip = aws.ec2.Eip(f"{name}-nat-{zone}", domain="vpc", tags={"Name": f"{name}-nat-{zone}"}, opts=child)
            nats[zone] = aws.ec2.NatGateway(f"{name}-nat-{zone}", allocation_id=eip.id, subnet_id=public[zone].id,
                                            tags={"Name": f"{name}-nat-{zone}"},
                                            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]))
        private_rts, associations = [], {}
        for zone in zones:
            rt = aws.ec2.RouteTable(f"{name}-private-{zone}", vpc_id=vpc.id,
                                    routes=[{"cidr_block": ANYWHERE, "nat_gateway_id": nats[via[zone]].id}],
                                    tags={"Name": f"{name}-private-{zone}"}, opts=child)
            associations[zone] = aws.ec2.RouteTableAssociation(f"{name}-private-{zone}", subnet_id=private[zone].id,
                                                               route_table_id=rt.id, opts=child)
            private_rts.append(rt)

        self._flow_logs(name, vpc, args.get("flow_log_retention_days", DEFAULT_FLOW_LOG_RETENTION_DAYS), child)
        region = aws.get_region_output(opts=pulumi.InvokeOutputOptions(parent=self)).region
        aws.ec2.VpcEndpoint(f"{name}-s3", vpc_id=vpc.id, vpc_endpoint_type="Gateway",
                            service_name=region.apply(lambda r: f"com.amazonaws.{r}.s3"),
                            route_table_ids=[rt.id for rt in private_rts], tags={"Name": f"{name}-s3"}, opts=child)

        self.vpc = vpc
        # What a private subnet needs to reach AWS APIs, registries and the internet: its route table (to its zone's
        # NAT gateway) and the association. Whatever runs in the subnet depends on these, so `pulumi destroy`
        # removes node egress only after the cluster, its nodes and the releases on them are gone.
        self.private_egress: list[pulumi.Resource] = [*nats.values(), *private_rts, *associations.values()]
        self.private_subnet_ids_by_zone = {zone: _with_egress(private[zone].id, associations[zone])
                                           for zone in zones}
        self.vpc_id = vpc.id
        self.private_subnet_ids = pulumi.Output.all(*[private[z].id for z in zones])
        self.public_subnet_ids = pulumi.Output.all(*[public[z].id for z in zones])
        self.register_outputs({"vpcId": self.vpc_id, "privateSubnetIds": self.private_subnet_ids,
                               "publicSubnetIds": self.public_subnet_ids})

    @staticmethod
    def _flow_logs(name: str, vpc: aws.ec2.Vpc, retention_days: int, opts: pulumi.ResourceOptions) -> None:
        # pulumi auto-names the group `<name>-flow-logs-<7 hex>`: the key serves those names only
        key = log_group_key(f"{name}-flow-logs", log_group=f"{name}-flow-logs-*", opts=opts,
                            description=f"CloudWatch Logs encryption of the VPC flow logs of {name}")
        group = aws.cloudwatch.LogGroup(f"{name}-flow-logs", retention_in_days=retention_days, kms_key_id=key.arn,
                                        opts=opts)
        invoke = pulumi.InvokeOutputOptions(parent=opts.parent)
        trust = pulumi.Output.all(aws.get_caller_identity_output(opts=invoke).account_id,
                                  aws.get_region_output(opts=invoke).region,
                                  aws.get_partition_output(opts=invoke).partition).apply(
            lambda a: flow_log_trust_policy(a[0], a[1], a[2]))
        role = iam.role(f"{name}-flow-logs", assume_role_policy=trust, opts=opts)
        aws.iam.RolePolicy(f"{name}-flow-logs", role=role.id,
                           policy=group.arn.apply(lambda arn: json.dumps(_flow_log_policy(arn), sort_keys=True)),
                           opts=pulumi.ResourceOptions(parent=role))
        aws.ec2.FlowLog(f"{name}-flow-logs", vpc_id=vpc.id, traffic_type="ALL", log_destination_type="cloud-watch-logs",
                        log_destination=group.arn, iam_role_arn=role.arn, max_aggregation_interval=60, opts=opts)
