"""ClusterAutoscaler's own args: every invalid argument at once with its path, and the AWS stacks' mapping."""

import pulumi
import pytest

from components.k8s.autoscaler import check_autoscaler_args
from infra.component_args import cluster_autoscaler_args
from tests.support.stacks import stack_config


def test_every_invalid_argument_is_reported_at_once_with_its_path() -> None:
    with pytest.raises(pulumi.InputPropertiesError) as err:
        check_autoscaler_args("ca", {"cluster_name": "", "region": "Virginia"})
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("region", "'Virginia' is not an AWS region such as us-east-1"), ("clusterName", "must not be empty")]
    with pytest.raises(pulumi.InputPropertiesError) as err:
        check_autoscaler_args("ca", {"cluster_name": "ml", "regoin": "us-east-1"})  # type: ignore[typeddict-unknown-key]
    assert [e["property_path"] for e in err.value.errors] == ["regoin", "region"]


@pytest.mark.parametrize(("name", "cluster", "region"), [("staging", "aifactory-staging", "us-east-1"),
                                                         ("prod", "aifactory-prod", "us-east-1")])
def test_aws_stacks_map_to_their_cluster_and_region(name: str, cluster: str, region: str) -> None:
    args = cluster_autoscaler_args(stack_config(name))
    check_autoscaler_args("ca", args)
    assert args == {"cluster_name": cluster, "region": region}
