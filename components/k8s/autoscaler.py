"""ClusterAutoscaler (AWS): scales every node group of the kit between its minSize and maxSize.

Auto-discovery finds the node groups' autoscaling groups by the kit's tag (`aifactory.io/autoscaled`, on every
group the autoscaler may size) and `k8s.io/cluster-autoscaler/<cluster>`: not by `.../enabled`, which EKS puts on
every managed group, capacity blocks included (components.vocabulary.AUTOSCALED_TAG); the autoscaler reads
each group's labels and taints from EKS (DescribeNodegroup), so GPU pools can scale from zero. It runs
as its own service account with an IRSA role whose write actions only reach this cluster's groups.

A scale-down evicts each pod of the node with a grace period of at most `--max-graceful-termination-sec` (the
autoscaler's default 600 s), however long the pod's own terminationGracePeriodSeconds, and the kubelet kills the pod
when it ends (kubernetes/autoscaler@cluster-autoscaler-1.34.1: cluster-autoscaler/core/scaledown/actuation/drain.go
evictPod; config/flags/flags.go; the FAQ.md entry on graceful termination in scale-down). So the kit passes the
longest grace period of the pods it renders (`max_graceful_termination_seconds`; infra.component_args), and
`aifactory preflight` names a pod whose grace the autoscaler's setting would cut (policies/preflight/drain.py).

ClusterAutoscaler takes its own `args` (ClusterAutoscalerArgs: the cluster's name and region) and the cluster
(components.identity.WorkloadIdentity: on EKS the GpuCluster, whose OIDC provider its IRSA role trusts);
infra.component_args maps PlatformConfig. It is not in the component package: the IRSA
role needs the GpuCluster object, which a package input cannot carry.
"""

# No `from __future__ import annotations`: TypedDict reads its keys from evaluated annotations.
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, security, versions
from components.validation import Problems, check_shape
from components.vocabulary import (
    AUTOSCALED_TAG,
    DEFAULT_MAX_GRACEFUL_TERMINATION_SECONDS,
    MAX_GRACEFUL_TERMINATION_FLAG,
)

if TYPE_CHECKING:
    from components.identity import WorkloadIdentity

__all__ = ["TYPE", "ClusterAutoscalerArgs", "cluster_problems", "check_autoscaler_args", "RELEASE_NAME",
           "SERVICE_ACCOUNT", "IRSA_ANNOTATION", "DEFAULT_MAX_GRACEFUL_TERMINATION_SECONDS",
           "MAX_GRACEFUL_TERMINATION_FLAG", "autoscaler_policy", "autoscaler_values", "ClusterAutoscaler"]

TYPE = "aifactory:k8s:ClusterAutoscaler"  # the type token of the kit's existing stacks (part of every child's URN)
RELEASE_NAME = "cluster-autoscaler"
SERVICE_ACCOUNT = "cluster-autoscaler"
IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"
DEFAULT_SCALE_DOWN_UNNEEDED = "10m"  # GPU nodes are expensive: give them back after 10 idle minutes
READ_ACTIONS = (
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations",
    "autoscaling:DescribeScalingActivities",
    "autoscaling:DescribeTags",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements",
    "eks:DescribeNodegroup",
)
WRITE_ACTIONS = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")


class ClusterAutoscalerArgs(TypedDict):
    """Arguments of a ClusterAutoscaler."""

    cluster_name: str
    """The EKS cluster whose node groups it scales (auto-discovery tag k8s.io/cluster-autoscaler/<name>)."""
    region: str
    """The cluster's AWS region."""
    max_graceful_termination_seconds: NotRequired[int]
    """The most grace a scale-down gives each evicted pod (`--max-graceful-termination-sec`): at least the longest
    terminationGracePeriodSeconds of the pods on the groups it scales, or their drain is cut. Default: 600 (the
    autoscaler's own); the kit passes its pods' longest grace."""


_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")  # us-east-1, ap-southeast-2, us-gov-west-1


def cluster_problems(component: str, name: str, args: Mapping[str, Any], args_type: type) -> Problems:
    """The checks of an EKS controller's args (the autoscaler's, the AWS Load Balancer Controller's): their shape
    (raised at once), then a region that looks like an AWS region and a cluster name; the caller adds its own
    problems and raises them."""
    check_shape(component, name, args, args_type)
    problems = Problems(component, name)
    if not _REGION.match(args["region"]):
        problems.add("region", f"{args['region']!r} is not an AWS region such as us-east-1")
    if not args["cluster_name"]:
        problems.add("clusterName", "must not be empty")
    return problems


def check_autoscaler_args(name: str, args: ClusterAutoscalerArgs) -> None:
    """Raise pulumi.InputPropertiesError with property paths for bad `args`."""
    problems = cluster_problems("ClusterAutoscaler", name, args, ClusterAutoscalerArgs)
    grace = args.get("max_graceful_termination_seconds", DEFAULT_MAX_GRACEFUL_TERMINATION_SECONDS)
    if grace < 1:
        problems.add("maxGracefulTerminationSeconds", f"{grace} is not a number of seconds of at least 1 (the pods' "
                                                      "longest terminationGracePeriodSeconds)")
    problems.raise_any()


def autoscaler_policy(cluster_name: str) -> dict[str, Any]:
    """The IAM policy: describe anything, change only this cluster's autoscaling groups that the kit marked
    autoscaled (never a capacity block's)."""
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "Describe", "Effect": "Allow", "Action": list(READ_ACTIONS), "Resource": "*"},
        {"Sid": "ScaleOwnGroups", "Effect": "Allow", "Action": list(WRITE_ACTIONS), "Resource": "*",
         "Condition": {"StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned",
                                        f"aws:ResourceTag/{AUTOSCALED_TAG}": "true"}}},
    ]}


def autoscaler_values(*, cluster_name: str, region: str, role_arn: str,
                      max_graceful_termination_seconds: int = DEFAULT_MAX_GRACEFUL_TERMINATION_SECONDS
                      ) -> dict[str, Any]:
    return {
        "fullnameOverride": RELEASE_NAME,
        "cloudProvider": "aws",
        "awsRegion": region,
        # the chart joins these into --node-group-auto-discovery=asg:tag=... (cluster-autoscaler chart 9.52.1
        # templates/deployment.yaml); a group must carry every one
        "autoDiscovery": {"clusterName": cluster_name,
                          "tags": [AUTOSCALED_TAG, f"k8s.io/cluster-autoscaler/{cluster_name}"]},
        "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT,
                                    "annotations": {IRSA_ANNOTATION: role_arn}}},
        "extraArgs": {
            "balance-similar-node-groups": True,
            "expander": "least-waste",
            "skip-nodes-with-local-storage": False,
            "scale-down-unneeded-time": DEFAULT_SCALE_DOWN_UNNEEDED,
            # the chart renders each as --<key>=<value> (templates/deployment.yaml)
            MAX_GRACEFUL_TERMINATION_FLAG: max_graceful_termination_seconds,
        },
        "priorityClassName": "system-cluster-critical",
        "resources": security.resources("100m", "300Mi", cpu_limit="500m", memory_limit="600Mi"),
        "securityContext": security.pod_security_context(),
        "containerSecurityContext": security.container_security_context(),
    }


class ClusterAutoscaler(pulumi.ComponentResource):
    """The cluster-autoscaler release and its IRSA role. `opts` must carry the Kubernetes and AWS providers."""
    pulumi_type = TYPE  # the type token (part of every child's URN); the component package hosts a subclass
    # with `aifactory:index:<name>`, the token its schema names (components/__main__.py)

    def __init__(self, name: str, args: ClusterAutoscalerArgs, opts: pulumi.ResourceOptions | None = None, *,
                 cluster: "WorkloadIdentity", system_namespace: k8s.core.v1.Namespace) -> None:
        super().__init__(self.pulumi_type, name, None, opts)
        check_autoscaler_args(name, args)
        cluster_name, region = args["cluster_name"], args["region"]
        grace = args.get("max_graceful_termination_seconds", DEFAULT_MAX_GRACEFUL_TERMINATION_SECONDS)
        # the ARN with its inline policy as a dependency: the autoscaler starts only once it may act (IAM first)
        role_arn = cluster.service_account_role(f"{name}-irsa", namespace=naming.SYSTEM_NAMESPACE,
                                                service_account=SERVICE_ACCOUNT,
                                                inline_policy=autoscaler_policy(cluster_name),
                                                opts=pulumi.ResourceOptions(parent=self))
        values = role_arn.apply(
            lambda arn: autoscaler_values(cluster_name=cluster_name, region=region, role_arn=arn,
                                          max_graceful_termination_seconds=grace))
        versions.release(f"{name}-release", versions.CLUSTER_AUTOSCALER, release_name=RELEASE_NAME,
                         namespace=naming.SYSTEM_NAMESPACE, values=values,
                         opts=pulumi.ResourceOptions(parent=self, depends_on=[system_namespace,
                                                                                 cast(pulumi.Resource, cluster)]))
        self.register_outputs({"roleArn": role_arn})
