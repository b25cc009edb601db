"""The Kubernetes side: dashboards as Grafana-sidecar ConfigMaps and the rules as one PrometheusRule."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming
from components.k8s.naming import common_labels
from dashboards.config import ObservabilityConfig, config_problems
from dashboards.core import build, dashboard_json, prometheus_rules
from dashboards.rules import MODEL_SLOS, model_slo_problems, slo_histogram

__all__ = ["DASHBOARD_LABEL", "FOLDER_ANNOTATION", "FOLDER", "RULE_NAME", "configmap_name", "check_config",
           "Monitoring"]

# the label kube-prometheus-stack's Grafana sidecar watches (set in components.k8s.observability)
DASHBOARD_LABEL = {naming.DASHBOARD_LABEL: naming.DASHBOARD_LABEL_VALUE}
FOLDER_ANNOTATION = naming.DASHBOARD_FOLDER_ANNOTATION  # the sidecar's folderAnnotation
FOLDER = "aifactory"
RULE_NAME = "aifactory-rules"


def configmap_name(key: str) -> str:
    return f"aifactory-dashboard-{key}"


def _slo_problems(config: ObservabilityConfig) -> list[tuple[str, str]]:
    """Each model's latency SLO that is not a bucket edge of its engine's histogram (dashboards.rules)."""
    out = []
    for i, m in enumerate(config.models):
        slo = {key: getattr(m, field_) for _, _, attr, field_, key, _ in MODEL_SLOS if slo_histogram(m.engine, attr)}
        out += [(f"models[{i}].{key}", reason) for key, reason in model_slo_problems(m.engine, slo)]
    return out


def check_config(name: str, config: ObservabilityConfig) -> None:
    """Raise pulumi.InputPropertiesError naming every invalid value of `config`, each with its property path."""
    if problems := config_problems(config) + _slo_problems(config):
        raise pulumi.InputPropertiesError(
            f"Monitoring {name!r}: {len(problems)} invalid argument(s) in config",
            [{"property_path": f"config.{path}", "reason": reason} for path, reason in problems])


class Monitoring(pulumi.ComponentResource):
    """Every dashboard (one ConfigMap each) and the recording/alerting rules of one stack."""

    def __init__(self, name: str, *, config: ObservabilityConfig, provider: k8s.Provider,
                 depends_on: Sequence[pulumi.Resource] = (), opts: pulumi.ResourceOptions | None = None) -> None:
        check_config(name, config)
        super().__init__("aifactory:dashboards:Monitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(depends_on))
        labels = common_labels("aifactory-monitoring", "monitoring")
        boards = build(config)
        self.dashboards = [
            k8s.core.v1.ConfigMap(
                f"{name}-dashboard-{key}",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=configmap_name(key), namespace=config.namespace,
                                                    labels={**labels, **DASHBOARD_LABEL},
                                                    annotations={FOLDER_ANNOTATION: FOLDER}),
                data={f"{key}.json": dashboard_json(board)},
                opts=child,
            )
            for key, board in boards.items()
        ]
        self.rules = k8s.apiextensions.CustomResource(
            f"{name}-rules",
            api_version="monitoring.coreos.com/v1",
            kind="PrometheusRule",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=RULE_NAME, namespace=config.namespace, labels=labels),
            spec=prometheus_rules(config),
            opts=child,
        )
        self.register_outputs({"dashboards": [configmap_name(key) for key in boards], "rules": RULE_NAME})
