"""ClusterAutoscaler's own args: every invalid argument at once with its path, and the AWS stacks' mapping."""

import pulumi
import pytest

from components.k8s.autoscaler import autoscaler_values, check_autoscaler_args
from infra.component_args import cluster_autoscaler_args, pod_grace_seconds
from tests.support.stacks import stack_config


def test_every_invalid_argument_is_reported_at_once_with_its_path() -> None:
    with pytest.raises(pulumi.InputPropertiesError) as err:
        check_autoscaler_args("ca", {"cluster_name": "", "region": "Virginia"})
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("region", "'Virginia' is not an AWS region such as us-east-1"), ("clusterName", "must not be empty")]
    with pytest.raises(pulumi.InputPropertiesError) as err:
        check_autoscaler_args("ca", {"cluster_name": "ml", "regoin": "us-east-1"})  # type: ignore[typeddict-unknown-key]
    assert [e["property_path"] for e in err.value.errors] == ["regoin", "region"]


@pytest.mark.parametrize(("name", "cluster", "region", "grace"), [("staging", "aifactory-staging", "us-east-1", 600),
                                                                  ("prod", "aifactory-prod", "us-east-1", 1165)])
def test_aws_stacks_map_to_their_cluster_and_region(name: str, cluster: str, region: str, grace: int) -> None:
    """The autoscaler's eviction grace is the stack's longest pod grace, never below the autoscaler's own 600 s
    (staging's longest is the gateway's 325 s; the platform charts' pods keep 600)."""
    args = cluster_autoscaler_args(stack_config(name))
    check_autoscaler_args("ca", args)
    assert args == {"cluster_name": cluster, "region": region, "max_graceful_termination_seconds": grace}


def test_prods_pod_grace_periods_and_the_longest_is_the_autoscalers_eviction_grace() -> None:
    """Worked out by hand from prod's stack file: a model pod sleeps 10 + 5 s in its preStop, drains for its
    timeoutSeconds and has 30 s to exit (deep-research: 900 s; its workers wait out the leader's 945 s, then 30 s);
    the gateway's preStop is 180 + 60 + 5 + 900 + 10 s (the first 180 s: its NLB's deregistration window) and its
    grace 10 s more; the budget service sleeps 5 + 5 s, drains 900 s and settles in 10 s. The gateway's 1165 s is
    what a cluster-autoscaler scale-down must give an evicted pod
    (kubernetes/autoscaler@cluster-autoscaler-1.34.1 core/scaledown/actuation/drain.go evictPod caps the pod's own
    grace at --max-graceful-termination-sec, default 600)."""
    assert pod_grace_seconds(stack_config("prod")) == {
        "model assistant-fast": 75, "model assistant-steady": 75, "model assistant-batch": 645,
        "model assistant-tools": 105, "model deep-research (leader)": 945, "model deep-research (worker)": 975,
        "model embed-rerank": 55, "model finance-8b": 105, "model finance-8b-bf16": 105, "gateway": 1165,
        "budget service": 920}


def test_the_release_renders_the_flag_from_the_args() -> None:
    """The chart (cluster-autoscaler 9.52.1 templates/deployment.yaml) renders each extraArgs entry as
    --<key>=<value>: `helm template` of these values gives `--max-graceful-termination-sec=985` next to the others."""
    values = autoscaler_values(cluster_name="aifactory-prod", region="us-east-1", role_arn="arn:aws:iam::1:role/ca",
                               max_graceful_termination_seconds=985)
    assert values["extraArgs"] == {"balance-similar-node-groups": True, "expander": "least-waste",
                                   "skip-nodes-with-local-storage": False, "scale-down-unneeded-time": "10m",
                                   "max-graceful-termination-sec": 985}
    with pytest.raises(pulumi.InputPropertiesError) as err:
        check_autoscaler_args("ca", {"cluster_name": "ml", "region": "us-east-1",
                                     "max_graceful_termination_seconds": 0})
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("maxGracefulTerminationSeconds", "0 is not a number of seconds of at least 1 (the pods' longest "
                                          "terminationGracePeriodSeconds)")]
