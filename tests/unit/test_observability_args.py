"""Observability on its own args (no stack config): backends, alert routing and volumes, children named from its
name, every invalid argument at once with its path, and the stacks' mapping losing nothing."""

import pulumi
import pytest

from components.k8s import observability as obs
from components.k8s.observability import Observability, ObservabilityArgs, observability_spec
from infra.component_args import observability_args
from tests.support.stacks import stack_config
from tests.unit.test_aws_node_pool import register

RELEASE = "kubernetes:helm.sh/v3:Release"


def args(**extra) -> ObservabilityArgs:
    a: ObservabilityArgs = {
        "storage_class": "fast-ssd", "retention": "30d", "tenant_namespaces": ["chat"],
        "alerting": {"receivers": {"oncall": {"type": "pagerduty",
                                              "secret": {"name": "pagerduty", "key": "routing-key"}}},
                     "routes": {"critical": ["oncall"]}}}
    a.update(extra)  # type: ignore[typeddict-item]
    return a


def test_observability_from_its_own_args_on_an_existing_cluster() -> None:
    res = register(lambda: Observability("o11y", args()))
    releases = {r.name: r.inputs for r in res if r.type == RELEASE}
    assert sorted(releases) == ["o11y-alloy", "o11y-collector", "o11y-jaeger", "o11y-kube-prometheus-stack",
                                "o11y-loki"]
    assert {r["namespace"] for r in releases.values()} == {"monitoring"}  # the documented default
    kps = releases["o11y-kube-prometheus-stack"]["values"]
    spec = kps["prometheus"]["prometheusSpec"]
    assert spec["retention"] == "30d"
    assert spec["storageSpec"]["volumeClaimTemplate"]["spec"]["storageClassName"] == "fast-ssd"
    routes = kps["alertmanager"]["config"]["route"]["routes"]
    assert {"receiver": "oncall", "matchers": ['severity = "critical"']} in routes
    assert kps["alertmanager"]["alertmanagerSpec"]["secrets"] == ["pagerduty"]
    monitor = next(r for r in res if r.name == "o11y-sidecar-monitor").inputs
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["aifactory-gateway", "chat"]}


def test_every_invalid_argument_is_reported_at_once_with_its_path() -> None:
    bad = args(retention="2 weeks", loki_mode="distributed", trace_sample_ratio=0.0)
    bad["alerting"] = {"receivers": {"chat": {"type": "slack"}, "sms": {"type": "twilio"}},
                       "routes": {"urgent": ["chat"], "critical": ["nobody"]}, "heartbeat": {"receiver": "dms"}}
    del bad["storage_class"]
    with pytest.raises(pulumi.InputPropertiesError) as err:
        observability_spec("o11y", bad)
    assert [(e["property_path"], e["reason"]) for e in err.value.errors] == [
        ("retention", "'2 weeks' is not a duration such as 15d, 36h or 2w"),
        ("lokiMode", "'distributed' is not allowed; choose one of: single-binary, simple-scalable"),
        ("traceSampleRatio", "0.0 is not in (0, 1]"),
        ("alerting.receivers.chat.secret", "is required for type 'slack'"),
        ("alerting.receivers.chat.channel", "is required for type 'slack'"),
        ("alerting.receivers.sms.type", "'twilio' is not allowed; choose one of: slack, pagerduty, email, webhook"),
        ("alerting.routes.urgent", "'urgent' is not a severity; choose one of: critical, warning, info"),
        ("alerting.routes.critical[0]", "'nobody' is not a receiver; receivers: chat, sms"),
        ("alerting.heartbeat.receiver", "'dms' is not a receiver; receivers: chat, sms"),
        ("storageClass", "is required off AWS (no awsRegion): the class the backends' volumes use"),
    ]


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "onprem"])
def test_the_stacks_args_give_the_same_backends_as_their_config(name: str) -> None:
    cfg = stack_config(name)
    spec = observability_spec("observability", observability_args(cfg))
    for build in (obs.kube_prometheus_stack_values, obs.collector_configmap, obs.collector_values, obs.jaeger_values,
                  obs.jaeger_volume_claim, obs.loki_values, obs.alloy_values, obs.collector_service_monitor,
                  obs.sidecar_pod_monitor):
        assert build(spec) == build(cfg), build.__name__
