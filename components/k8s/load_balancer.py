"""AwsLoadBalancerController (AWS): the controller that makes the gateway's NLB, with the gateway's pods as targets.

The in-tree service controller can only register nodes as an NLB's targets, and a connection that entered through a
node ends when the node leaves (an upgrade, the cluster autoscaler removing it), however well the gateway pod behind
it drains. The AWS Load Balancer Controller (kubernetes-sigs/aws-load-balancer-controller) registers pod IPs (`ip`
targets) for a Service of its loadBalancerClass, deregisters a terminating pod and keeps its target draining for the
target group's deregistration delay; its pod webhook adds readiness gates, so a rolling update waits until the new
pod is a healthy target (docs/gateway.md says what the gateway sets).

It runs on the system pool (two replicas, at most one disrupted at a time) as its own service account with an IRSA
role: exactly the controller's documented policy (`controller_policy`). Its Service webhook, which would give every
new LoadBalancer Service of the cluster the controller's class, is off: the gateway names the class itself. Its pod
webhook fails closed for the pods it selects (the gateway's, by READINESS_GATE_INJECT), so no gateway pod starts
without its readiness gate.

Prometheus scrapes it through the chart's ServiceMonitor (`serviceMonitor.enabled`): the metrics Service on port
8080, plain HTTP (the system namespace has no sidecars, so the mesh's scrape TLS does not apply), job
telemetry.names.LBC.JOB. The release therefore waits for the Prometheus operator's CRD (the program passes
kube-prometheus-stack in `after`): the chart renders the ServiceMonitor whenever it is enabled. The rules that read it
are dashboards/load_balancer_alerts.py's: the controller down, its reconcile errors, and gateway pods whose readiness
gate stays false.

AwsLoadBalancerController takes its own `args` (the cluster's name, region and VPC) and the cluster
(components.identity.WorkloadIdentity: on EKS the GpuCluster); infra.component_args maps PlatformConfig. Like the
cluster autoscaler it is not in the component package: the IRSA role needs the GpuCluster object.
"""

# No `from __future__ import annotations`: TypedDict reads its keys from evaluated annotations.
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict, cast

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, security, versions
from components.k8s.autoscaler import IRSA_ANNOTATION, cluster_problems
from components.vocabulary import POOL_LABEL, READINESS_GATE_INJECT, SYSTEM_POOL
from telemetry.names import LBC

if TYPE_CHECKING:
    from components.identity import WorkloadIdentity

__all__ = ["TYPE", "AwsLoadBalancerControllerArgs", "check_controller_args", "RELEASE_NAME", "SERVICE_ACCOUNT",
           "REPLICAS", "CLUSTER_TAG", "controller_policy", "controller_actions",
           "controller_values", "AwsLoadBalancerController"]

TYPE = "aifactory:k8s:AwsLoadBalancerController"
RELEASE_NAME = LBC.RELEASE  # the ServiceMonitor's job is named after it
SERVICE_ACCOUNT = "aws-load-balancer-controller"
REPLICAS = 2  # one keeps reconciling (and answering the pod webhook) while the other is rescheduled
# The controller tags every load balancer, target group and security group it creates with the cluster's name under
# this key, and the policy lets it change or delete only what carries the tag.
CLUSTER_TAG = "elbv2.k8s.aws/cluster"

_ELB = "elasticloadbalancing"
_TAGGED_ELB = (f"arn:aws:{_ELB}:*:*:targetgroup/*/*", f"arn:aws:{_ELB}:*:*:loadbalancer/net/*/*",
               f"arn:aws:{_ELB}:*:*:loadbalancer/app/*/*")
_SECURITY_GROUPS = "arn:aws:ec2:*:*:security-group/*"


def _tag(request: bool | None = None, resource: bool | None = None) -> dict[str, Any]:
    """The policy's tag conditions: whether the request sets (True) or must not set (False) CLUSTER_TAG, and whether
    the resource must carry it (True)."""
    null = {}
    if request is not None:
        null[f"aws:RequestTag/{CLUSTER_TAG}"] = "false" if request else "true"
    if resource:
        null[f"aws:ResourceTag/{CLUSTER_TAG}"] = "false"
    return {"Null": null}


# The statements of the controller's documented policy (kubernetes-sigs/aws-load-balancer-controller@v3.5.0:
# docs/install/iam_policy.json), in its order: (Sid, actions, resources, condition). Read-only calls on any resource;
# writes to what the controller made (the cluster tag), except the calls that cannot be scoped by tag upstream either
# (listeners and rules, registering targets, security group ingress on the nodes' groups).
_STATEMENTS: tuple[tuple[str, tuple[str, ...], str | tuple[str, ...], dict[str, Any] | None], ...] = (
    ("ServiceLinkedRole", ("iam:CreateServiceLinkedRole",), "*",
     {"StringEquals": {"iam:AWSServiceName": f"{_ELB}.amazonaws.com"}}),
    ("Describe", tuple(f"ec2:{a}" for a in (
        "DescribeAccountAttributes", "DescribeAddresses", "DescribeAvailabilityZones", "DescribeInternetGateways",
        "DescribeVpcs", "DescribeVpcPeeringConnections", "DescribeSubnets", "DescribeSecurityGroups",
        "DescribeInstances", "DescribeNetworkInterfaces", "DescribeTags", "GetCoipPoolUsage", "DescribeCoipPools",
        "GetSecurityGroupsForVpc", "DescribeIpamPools", "DescribeRouteTables")) + tuple(f"{_ELB}:{a}" for a in (
        "DescribeLoadBalancers", "DescribeLoadBalancerAttributes", "DescribeListeners",
        "DescribeListenerCertificates", "DescribeSSLPolicies", "DescribeRules", "DescribeTargetGroups",
        "DescribeTargetGroupAttributes", "DescribeTargetHealth", "DescribeTags", "DescribeTrustStores",
        "DescribeListenerAttributes", "DescribeCapacityReservation")), "*", None),
    ("Integrations", ("cognito-idp:DescribeUserPoolClient", "acm:ListCertificates", "acm:DescribeCertificate",
                      "iam:ListServerCertificates", "iam:GetServerCertificate", "waf-regional:GetWebACL",
                      "waf-regional:GetWebACLForResource", "waf-regional:AssociateWebACL",
                      "waf-regional:DisassociateWebACL", "wafv2:GetWebACL", "wafv2:GetWebACLForResource",
                      "wafv2:AssociateWebACL", "wafv2:DisassociateWebACL", "shield:GetSubscriptionState",
                      "shield:DescribeProtection", "shield:CreateProtection", "shield:DeleteProtection"), "*", None),
    ("NodeIngress", ("ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress"), "*", None),
    ("CreateSecurityGroup", ("ec2:CreateSecurityGroup",), "*", None),
    ("TagNewSecurityGroup", ("ec2:CreateTags",), _SECURITY_GROUPS,
     {**_tag(request=True), "StringEquals": {"ec2:CreateAction": "CreateSecurityGroup"}}),
    ("TagOwnSecurityGroups", ("ec2:CreateTags", "ec2:DeleteTags"), _SECURITY_GROUPS,
     _tag(request=False, resource=True)),
    ("OwnSecurityGroups", ("ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress",
                           "ec2:DeleteSecurityGroup"), "*", _tag(resource=True)),
    ("CreateLoadBalancers", (f"{_ELB}:CreateLoadBalancer", f"{_ELB}:CreateTargetGroup"), "*", _tag(request=True)),
    ("Listeners", (f"{_ELB}:CreateListener", f"{_ELB}:DeleteListener", f"{_ELB}:CreateRule",
                   f"{_ELB}:DeleteRule"), "*", None),
    ("TagOwnLoadBalancers", (f"{_ELB}:AddTags", f"{_ELB}:RemoveTags"), _TAGGED_ELB,
     _tag(request=False, resource=True)),
    ("TagListeners", (f"{_ELB}:AddTags", f"{_ELB}:RemoveTags"), tuple(
        f"arn:aws:{_ELB}:*:*:{kind}/{lb}/*/*/*" for kind in ("listener", "listener-rule") for lb in ("net", "app")),
     None),
    ("OwnLoadBalancers", tuple(f"{_ELB}:{a}" for a in (
        "ModifyLoadBalancerAttributes", "SetIpAddressType", "SetSecurityGroups", "SetSubnets", "DeleteLoadBalancer",
        "ModifyTargetGroup", "ModifyTargetGroupAttributes", "DeleteTargetGroup", "ModifyListenerAttributes",
        "ModifyCapacityReservation", "ModifyIpPools")), "*", _tag(resource=True)),
    ("TagNewLoadBalancers", (f"{_ELB}:AddTags",), _TAGGED_ELB,
     {**_tag(request=True), "StringEquals": {f"{_ELB}:CreateAction": ["CreateTargetGroup", "CreateLoadBalancer"]}}),
    ("Targets", (f"{_ELB}:RegisterTargets", f"{_ELB}:DeregisterTargets"), f"arn:aws:{_ELB}:*:*:targetgroup/*/*",
     None),
    ("ListenerSettings", tuple(f"{_ELB}:{a}" for a in (
        "SetWebAcl", "ModifyListener", "AddListenerCertificates", "RemoveListenerCertificates", "ModifyRule",
        "SetRulePriorities")), "*", None),
)


def controller_policy() -> dict[str, Any]:
    """The controller's IAM policy: the statements of its documented policy (_STATEMENTS), no more."""
    out = []
    for sid, actions, resources, condition in _STATEMENTS:
        st: dict[str, Any] = {"Sid": sid, "Effect": "Allow", "Action": list(actions),
                              "Resource": resources if isinstance(resources, str) else list(resources)}
        if condition is not None:
            st["Condition"] = condition
        out.append(st)
    return {"Version": "2012-10-17", "Statement": out}


def controller_actions() -> frozenset[str]:
    """Every action the policy allows."""
    return frozenset(a for _, actions, _, _ in _STATEMENTS for a in actions)


class AwsLoadBalancerControllerArgs(TypedDict):
    """Arguments of an AwsLoadBalancerController."""

    cluster_name: str
    """The EKS cluster (the controller's --cluster-name: the tag value on what it creates)."""
    region: str
    """The cluster's AWS region (passed: pods cannot read instance metadata, whose hop limit is 1)."""
    vpc_id: pulumi.Input[str]
    """The cluster's VPC (passed for the same reason)."""


def check_controller_args(name: str, args: AwsLoadBalancerControllerArgs) -> None:
    """Raise pulumi.InputPropertiesError with property paths for bad `args`."""
    cluster_problems("AwsLoadBalancerController", name, args, AwsLoadBalancerControllerArgs).raise_any()


def controller_values(*, cluster_name: str, region: str, vpc_id: str, role_arn: str) -> dict[str, Any]:
    """The chart's values (eks-charts aws-load-balancer-controller 3.5.0 values.yaml)."""
    return {
        "clusterName": cluster_name,
        "region": region,
        "vpcId": vpc_id,
        "replicaCount": REPLICAS,
        # rendered only with more than one replica (templates/pdb.yaml)
        "podDisruptionBudget": {"maxUnavailable": 1},
        "nodeSelector": {POOL_LABEL: SYSTEM_POOL},
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT, "annotations": {IRSA_ANNOTATION: role_arn}},
        # the gateway's Service names the class itself; the webhook would give it to every new LoadBalancer Service
        "enableServiceMutatorWebhook": False,
        # readiness gates for the selected pods only, and never skipped: a pod the webhook cannot reach waits
        # (the controller's documentation recommends Fail with an object selector: docs/deploy/pod_readiness_gate.md)
        "podMutatorWebhookConfig": {"failurePolicy": "Fail"},
        "objectSelector": {"matchLabels": {READINESS_GATE_INJECT: "enabled"}},
        # its metrics Service and ServiceMonitor (templates/service.yaml, servicemonitor.yaml: port metrics-server,
        # scraped every minute, the chart's interval); Prometheus selects every ServiceMonitor of the cluster
        "serviceMonitor": {"enabled": True},
        "resources": security.resources("100m", "256Mi", cpu_limit="500m", memory_limit="512Mi"),
        "podSecurityContext": security.pod_security_context(),
        "securityContext": security.container_security_context(),
    }


class AwsLoadBalancerController(pulumi.ComponentResource):
    """The controller's release and its IRSA role. `opts` must carry the Kubernetes and AWS providers."""
    pulumi_type = TYPE

    release: k8s.helm.v3.Release
    """What a Service of the controller's class waits for (its webhooks and finalizer need the controller)."""

    def __init__(self, name: str, args: AwsLoadBalancerControllerArgs, opts: pulumi.ResourceOptions | None = None, *,
                 cluster: "WorkloadIdentity", system_namespace: k8s.core.v1.Namespace,
                 after: Sequence[pulumi.Resource] = ()) -> None:
        """`after`: what the release waits for besides its namespace and the cluster, as the platform's releases do
        (on EKS: the system nodes, the add-ons, node egress), and the Prometheus operator's release (the chart's
        ServiceMonitor needs its CRD). `pulumi destroy` removes it before them, and after the
        gateway's Service: deleting that NLB is the controller's work, through the NAT to the AWS APIs."""
        super().__init__(self.pulumi_type, name, None, opts)
        check_controller_args(name, args)
        cluster_name, region = args["cluster_name"], args["region"]
        role_arn = cluster.service_account_role(f"{name}-irsa", namespace=naming.SYSTEM_NAMESPACE,
                                                service_account=SERVICE_ACCOUNT, inline_policy=controller_policy(),
                                                opts=pulumi.ResourceOptions(parent=self))
        values = pulumi.Output.all(role_arn, args["vpc_id"]).apply(
            lambda a: controller_values(cluster_name=cluster_name, region=region, vpc_id=a[1], role_arn=a[0]))
        self.release = versions.release(
            f"{name}-release", versions.AWS_LOAD_BALANCER_CONTROLLER, release_name=RELEASE_NAME,
            namespace=naming.SYSTEM_NAMESPACE, values=values,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[system_namespace, cast(pulumi.Resource, cluster),
                                                                 *after]))
        self.register_outputs({"roleArn": role_arn})
