"""The AWS Load Balancer Controller (components.k8s.load_balancer): its IAM policy, chart values and arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pulumi
import pytest

from components.aws.iam import wildcard_statements
from components.k8s.load_balancer import (
    RELEASE_NAME,
    check_controller_args,
    controller_actions,
    controller_policy,
    controller_values,
)
from infra.component_args import load_balancer_controller_args
from telemetry.names import LBC
from tests.support.stacks import stack_config

ACTIONS = Path(__file__).resolve().parents[1] / "fixtures" / "aws_load_balancer_controller" / "iam_actions.txt"


def test_the_policy_allows_exactly_the_actions_of_the_controllers_documented_policy() -> None:
    """The fixture lists the actions of kubernetes-sigs/aws-load-balancer-controller@v3.5.0:docs/install/
    iam_policy.json (16 statements, 80 distinct actions): none missing (the controller would fail on it), none more."""
    upstream = {line for line in ACTIONS.read_text().splitlines() if line and not line.startswith("#")}
    assert len(upstream) == 80
    assert controller_actions() == upstream
    policy = controller_policy()
    assert len(policy["Statement"]) == 16
    assert wildcard_statements(policy) == []
    # an inline role policy may hold 10,240 characters, whitespace not counted (IAM user guide, IAM and AWS STS
    # quotas): the kit's is well inside
    assert len("".join(json.dumps(policy).split())) == 5580


def test_writes_reach_only_what_the_controller_tagged_as_its_clusters() -> None:
    """The upstream policy's tag conditions (elbv2.k8s.aws/cluster), statement by statement."""
    by_sid = {s["Sid"]: s for s in controller_policy()["Statement"]}
    tagged = {"Null": {"aws:ResourceTag/elbv2.k8s.aws/cluster": "false"}}
    assert by_sid["OwnLoadBalancers"]["Condition"] == tagged
    assert "elasticloadbalancing:DeleteLoadBalancer" in by_sid["OwnLoadBalancers"]["Action"]
    assert by_sid["OwnSecurityGroups"] == {
        "Sid": "OwnSecurityGroups", "Effect": "Allow", "Resource": "*", "Condition": tagged,
        "Action": ["ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress", "ec2:DeleteSecurityGroup"]}
    assert by_sid["CreateLoadBalancers"]["Condition"] == {"Null": {"aws:RequestTag/elbv2.k8s.aws/cluster": "false"}}
    assert by_sid["TagNewSecurityGroup"] == {
        "Sid": "TagNewSecurityGroup", "Effect": "Allow", "Action": ["ec2:CreateTags"],
        "Resource": "arn:aws:ec2:*:*:security-group/*",
        "Condition": {"Null": {"aws:RequestTag/elbv2.k8s.aws/cluster": "false"},
                      "StringEquals": {"ec2:CreateAction": "CreateSecurityGroup"}}}
    assert by_sid["TagOwnLoadBalancers"]["Condition"] == {"Null": {
        "aws:RequestTag/elbv2.k8s.aws/cluster": "true", "aws:ResourceTag/elbv2.k8s.aws/cluster": "false"}}
    assert by_sid["TagOwnLoadBalancers"]["Resource"] == [
        "arn:aws:elasticloadbalancing:*:*:targetgroup/*/*", "arn:aws:elasticloadbalancing:*:*:loadbalancer/net/*/*",
        "arn:aws:elasticloadbalancing:*:*:loadbalancer/app/*/*"]
    assert by_sid["TagListeners"]["Resource"] == [
        "arn:aws:elasticloadbalancing:*:*:listener/net/*/*/*", "arn:aws:elasticloadbalancing:*:*:listener/app/*/*/*",
        "arn:aws:elasticloadbalancing:*:*:listener-rule/net/*/*/*",
        "arn:aws:elasticloadbalancing:*:*:listener-rule/app/*/*/*"]


def test_chart_values() -> None:
    """eks-charts aws-load-balancer-controller 3.5.0 (values.yaml; templates/pdb.yaml renders the PDB only with more
    than one replica; templates/webhook.yaml: mpod.elbv2.k8s.aws takes podMutatorWebhookConfig.failurePolicy and
    objectSelector, mservice.elbv2.k8s.aws exists only with enableServiceMutatorWebhook). `helm template` of these
    values renders two replicas on the system pool, the PDB, the pod webhook failing closed for pods labelled
    elbv2.k8s.aws/pod-readiness-gate-inject=enabled, and no Service webhook."""
    values = controller_values(cluster_name="aifactory-prod", region="us-east-1", vpc_id="vpc-1",
                               role_arn="arn:aws:iam::1:role/lbc")
    assert {k: v for k, v in values.items() if k not in ("resources", "podSecurityContext", "securityContext")} == {
        "clusterName": "aifactory-prod", "region": "us-east-1", "vpcId": "vpc-1",
        "replicaCount": 2, "podDisruptionBudget": {"maxUnavailable": 1},
        "nodeSelector": {"aifactory.io/pool": "system"},
        "serviceAccount": {"create": True, "name": "aws-load-balancer-controller",
                           "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/lbc"}},
        "enableServiceMutatorWebhook": False,
        "podMutatorWebhookConfig": {"failurePolicy": "Fail"},
        "objectSelector": {"matchLabels": {"elbv2.k8s.aws/pod-readiness-gate-inject": "enabled"}},
        "serviceMonitor": {"enabled": True}}
    assert values["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"},
                                   "limits": {"cpu": "500m", "memory": "512Mi"}}
    assert values["securityContext"]["readOnlyRootFilesystem"] is True


def test_prometheus_scrapes_the_controller_as_the_job_its_alerts_read() -> None:
    """`helm template` of eks-charts aws-load-balancer-controller 3.5.0 with these values (release
    aws-load-balancer-controller, namespace aifactory-system, the monitoring.coreos.com/v1 API present) renders the
    metrics Service aws-load-balancer-controller (port metrics-server 8080 -> the container's metrics-server port,
    8080: the controller's default --metrics-bind-addr, kubernetes-sigs/aws-load-balancer-controller@v3.5.0
    pkg/config/runtime_config.go) and a ServiceMonitor selecting it, plain HTTP every minute, with `jobLabel:
    app.kubernetes.io/instance`: the job is the release's name (templates/service.yaml, servicemonitor.yaml; the
    webhook's Service is labelled prometheus.io/service-monitor=false and left out). The kit's Prometheus selects
    every ServiceMonitor (components.k8s.observability); aifactory-system has no sidecar injection, so the plain
    scrape reaches the pod (tests/unit/test_dependencies.py::test_the_load_balancer_controller_is_scraped_plain_
    after_the_prometheus_operator)."""
    values = controller_values(cluster_name="aifactory-prod", region="us-east-1", vpc_id="vpc-1",
                               role_arn="arn:aws:iam::1:role/lbc")
    assert values["serviceMonitor"] == {"enabled": True}
    assert "metricsBindAddr" not in values and "fullnameOverride" not in values and "nameOverride" not in values
    assert RELEASE_NAME == LBC.JOB == "aws-load-balancer-controller"


def test_aws_stacks_map_to_their_cluster_region_and_vpc() -> None:
    args = load_balancer_controller_args(stack_config("prod"), "vpc-1")
    check_controller_args("lbc", args)
    assert args == {"cluster_name": "aifactory-prod", "region": "us-east-1", "vpc_id": "vpc-1"}


def test_every_invalid_argument_is_reported_at_once_with_its_path() -> None:
    with pytest.raises(pulumi.InputPropertiesError) as err:
        check_controller_args("lbc", {"cluster_name": "", "region": "Virginia", "vpc_id": "vpc-1"})
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("region", "'Virginia' is not an AWS region such as us-east-1"), ("clusterName", "must not be empty")]
