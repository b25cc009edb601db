"""The OpenTelemetry Collector gateway: its ConfigMap (components.k8s.otel_config), chart values and
ServiceMonitor."""

from typing import Any

from components.k8s import naming, security
from components.k8s.observability.common import (
    CONFIG_CHECKSUM_ANNOTATION,
    config_checksum,
    container_resources,
    service_monitor,
)
from components.k8s.observability.spec import BackendsView
from components.k8s.otel_config import (
    PROMETHEUS_EXPORTER_PORT,
    collector_config,
)
from components.vocabulary import dump_yaml

__all__ = [
    "COLLECTOR_TELEMETRY_PORT",
    "COLLECTOR_RELEASE",
    "COLLECTOR_CONFIGMAP",
    "COLLECTOR_CONFIG_KEY",
    "COLLECTOR_IMAGE",
    "collector_configmap",
    "collector_values",
    "collector_service_monitor",
]

COLLECTOR_TELEMETRY_PORT = 8888  # the Collector's own metrics (otel_config: service.telemetry.metrics)
COLLECTOR_RELEASE = naming.OTEL_COLLECTOR_SERVICE  # fullnameOverride: the Service is named after it
COLLECTOR_CONFIGMAP = "otel-collector-config"
COLLECTOR_CONFIG_KEY = "relay"  # the chart mounts this key as /conf/relay.yaml
COLLECTOR_IMAGE = "otel/opentelemetry-collector-contrib"  # k8sattributes, spanmetrics, prometheus exporter


def collector_configmap(cfg: BackendsView) -> dict[str, Any]:
    """The Collector's ConfigMap: the chart mounts key `relay` as /conf/relay.yaml."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": COLLECTOR_CONFIGMAP, "namespace": cfg.observability.namespace,
                         "labels": dict(naming.MANAGED_BY)},
            "data": {COLLECTOR_CONFIG_KEY: dump_yaml(collector_config(cfg))}}


def collector_values(cfg: BackendsView) -> dict[str, Any]:
    off = {"enabled": False}
    return {
        "mode": "deployment",
        "fullnameOverride": COLLECTOR_RELEASE,
        "replicaCount": 2,
        "podAnnotations": {CONFIG_CHECKSUM_ANNOTATION: config_checksum(collector_configmap(cfg)["data"])},
        "image": {"repository": COLLECTOR_IMAGE},
        "configMap": {"create": False, "existingName": COLLECTOR_CONFIGMAP},
        "ports": {
            "jaeger-compact": off, "jaeger-thrift": off, "jaeger-grpc": off, "zipkin": off,
            "prometheus": {"enabled": True, "containerPort": PROMETHEUS_EXPORTER_PORT,
                           "servicePort": PROMETHEUS_EXPORTER_PORT, "protocol": "TCP"},
            # the Collector's own metrics (otelcol_exporter_sent_spans_total, queue sizes, refused data): the
            # chart leaves this port off the Service (opentelemetry-collector 0.143.0 values.yaml ports.metrics)
            "metrics": {"enabled": True, "containerPort": COLLECTOR_TELEMETRY_PORT,
                        "servicePort": COLLECTOR_TELEMETRY_PORT, "protocol": "TCP"},
        },
        "clusterRole": {"create": True, "rules": [
            {"apiGroups": [""], "resources": ["pods", "namespaces", "nodes"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["replicasets", "deployments", "statefulsets"],
             "verbs": ["get", "list", "watch"]},
        ]},
        "resources": container_resources("500m", "1Gi", "2", "2Gi"),
        "podSecurityContext": security.pod_security_context(uid=10001),
        "securityContext": security.container_security_context(),
    }


def collector_service_monitor(cfg: BackendsView) -> dict[str, Any]:
    """Scrapes the Collector's prometheus exporter (spanmetrics and the kit's OTLP metrics) and its own
    telemetry (what it received, sent, refused and dropped)."""
    return service_monitor(cfg, "otel-collector", {"app.kubernetes.io/name": "opentelemetry-collector",
                                                    "app.kubernetes.io/instance": COLLECTOR_RELEASE},
                            [{"port": "prometheus", "interval": "15s"}, {"port": "metrics", "interval": "30s"}])
