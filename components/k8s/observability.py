"""Observability backends: kube-prometheus-stack, the OpenTelemetry Collector gateway, Jaeger v2, Loki
and Grafana Alloy (node log collection), all in the observability namespace.

Prometheus selects every ServiceMonitor, PodMonitor, Probe, ScrapeConfig and PrometheusRule in the
cluster (the `*SelectorNilUsesHelmValues: false` settings), so what other components create needs no
release label. Grafana's sidecar loads dashboards from ConfigMaps labelled `grafana_dashboard=1` in
every namespace. Prometheus joins the mesh for its scrapes only: its sidecar intercepts no traffic and
writes the workload certificate that scrapes of meshed pods present (mesh.MESH_SCRAPE_TLS).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, security, versions
from components.k8s.mesh import PROMETHEUS_CERTS_DIR
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.otel_config import (
    LOKI_GATEWAY_SERVICE,
    OTLP_HTTP_PORT,
    PROMETHEUS_EXPORTER_PORT,
    collector_config,
    service_host,
)
from components.k8s.storage import cache_storage_class_name
from infra.artifacts import dump_yaml
from infra.config import PlatformConfig

__all__ = [
    "DASHBOARD_LABEL",
    "DASHBOARD_LABEL_VALUE",
    "COLLECTOR_CONFIGMAP",
    "COLLECTOR_CONFIG_KEY",
    "COLLECTOR_IMAGE",
    "LOKI_SCHEMA_FROM",
    "prometheus_mesh_pod_settings",
    "kube_prometheus_stack_values",
    "collector_configmap",
    "collector_values",
    "collector_service_monitor",
    "jaeger_values",
    "loki_values",
    "alloy_config",
    "alloy_values",
    "Observability",
]

DASHBOARD_LABEL = "grafana_dashboard"
DASHBOARD_LABEL_VALUE = "1"
KPS_RELEASE = "kube-prometheus-stack"
COLLECTOR_RELEASE = naming.OTEL_COLLECTOR_SERVICE  # fullnameOverride: the Service is named after it
COLLECTOR_CONFIGMAP = "otel-collector-config"
COLLECTOR_CONFIG_KEY = "relay"  # the chart mounts this key as /conf/relay.yaml
COLLECTOR_IMAGE = "otel/opentelemetry-collector-contrib"  # k8sattributes, spanmetrics, prometheus exporter
JAEGER_RELEASE = "jaeger"
LOKI_RELEASE = "loki"
ALLOY_RELEASE = "alloy"
LOKI_SCHEMA_FROM = "2024-04-01"  # first day of the tsdb/v13 schema period (never change once deployed)
ISTIO_CERTS_VOLUME = "istio-certs"
ISTIO_OUTPUT_CERTS = "/etc/istio-output-certs"


def _res(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> dict[str, Any]:
    return security.resources(cpu, memory, cpu_limit=cpu_limit, memory_limit=memory_limit)


def prometheus_mesh_pod_settings() -> dict[str, Any]:
    """Prometheus pod settings (prometheusSpec keys) that give it a sidecar which intercepts nothing and
    writes its mesh certificate to a shared in-memory volume (Istio's documented pattern)."""
    return {
        "podMetadata": {
            "labels": {"sidecar.istio.io/inject": "true"},
            "annotations": {
                "traffic.sidecar.istio.io/includeInboundPorts": "",
                "traffic.sidecar.istio.io/includeOutboundIPRanges": "",
                "proxy.istio.io/config": json.dumps({"proxyMetadata": {"OUTPUT_CERTS": ISTIO_OUTPUT_CERTS}}),
                "sidecar.istio.io/userVolumeMount": json.dumps(
                    [{"name": ISTIO_CERTS_VOLUME, "mountPath": ISTIO_OUTPUT_CERTS}]),
            },
        },
        "volumes": [{"name": ISTIO_CERTS_VOLUME, "emptyDir": {"medium": "Memory"}}],
        "volumeMounts": [{"name": ISTIO_CERTS_VOLUME, "mountPath": PROMETHEUS_CERTS_DIR, "readOnly": True}],
    }


def _datasources(cfg: PlatformConfig) -> list[dict[str, Any]]:
    ns = cfg.observability.namespace
    return [
        {"name": "Loki", "type": "loki", "uid": "loki", "access": "proxy",
         "url": f"http://{service_host(LOKI_GATEWAY_SERVICE, ns)}"},
        {"name": "Jaeger", "type": "jaeger", "uid": "jaeger", "access": "proxy",
         "url": f"http://{service_host(f'{JAEGER_RELEASE}-query', ns)}:16686"},
    ]


KSM_LABELS_ALLOWLIST = [f"nodes=[{naming.LABEL_POOL}]", f"pods=[{naming.LABEL_MODEL},{naming.LABEL_TENANT}]"]

def kube_prometheus_stack_values(cfg: PlatformConfig) -> dict[str, Any]:
    selectors = {f"{kind}SelectorNilUsesHelmValues": False
                 for kind in ("rule", "serviceMonitor", "podMonitor", "probe", "scrapeConfig")}
    return {
        "fullnameOverride": "kps",
        "prometheus": {
            "serviceAccount": {"create": True, "name": naming.PROMETHEUS_SERVICE_ACCOUNT},
            "prometheusSpec": {
                **selectors,
                "retention": cfg.observability.retention,
                "resources": _res("1", "4Gi", "4", "16Gi"),
                "securityContext": security.pod_security_context(uid=1000, fs_group=2000),
                **prometheus_mesh_pod_settings(),
            },
        },
        "alertmanager": {"alertmanagerSpec": {
            "resources": _res("50m", "128Mi", "500m", "256Mi"),
            "securityContext": security.pod_security_context(uid=1000, fs_group=2000),
        }},
        "grafana": {
            "sidecar": {"dashboards": {"enabled": True, "label": DASHBOARD_LABEL, "labelValue": DASHBOARD_LABEL_VALUE,
                                       "searchNamespace": "ALL"}},
            "additionalDataSources": _datasources(cfg),
            "resources": _res("100m", "256Mi", "1", "1Gi"),
        },
        "prometheusOperator": {
            "resources": _res("100m", "128Mi", "500m", "512Mi"),
            "containerSecurityContext": security.container_security_context(),
        },
        # The cost and pool rules join GPU series to pools, models and tenants through these labels.
        "kube-state-metrics": {"resources": _res("50m", "128Mi", "500m", "512Mi"),
                               "metricLabelsAllowlist": KSM_LABELS_ALLOWLIST},
        "prometheus-node-exporter": {"resources": _res("50m", "64Mi", "250m", "128Mi")},
    }


def collector_configmap(cfg: PlatformConfig) -> dict[str, Any]:
    """The Collector's ConfigMap: the chart mounts key `relay` as /conf/relay.yaml."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": COLLECTOR_CONFIGMAP, "namespace": cfg.observability.namespace,
                         "labels": dict(naming.MANAGED_BY)},
            "data": {COLLECTOR_CONFIG_KEY: dump_yaml(collector_config(cfg))}}


def collector_values(cfg: PlatformConfig) -> dict[str, Any]:
    off = {"enabled": False}
    return {
        "mode": "deployment",
        "fullnameOverride": COLLECTOR_RELEASE,
        "replicaCount": 2,
        "image": {"repository": COLLECTOR_IMAGE},
        "configMap": {"create": False, "existingName": COLLECTOR_CONFIGMAP},
        "ports": {
            "jaeger-compact": off, "jaeger-thrift": off, "jaeger-grpc": off, "zipkin": off,
            "prometheus": {"enabled": True, "containerPort": PROMETHEUS_EXPORTER_PORT,
                           "servicePort": PROMETHEUS_EXPORTER_PORT, "protocol": "TCP"},
        },
        "clusterRole": {"create": True, "rules": [
            {"apiGroups": [""], "resources": ["pods", "namespaces", "nodes"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["replicasets", "deployments", "statefulsets"],
             "verbs": ["get", "list", "watch"]},
        ]},
        "resources": _res("500m", "1Gi", "2", "2Gi"),
        "podSecurityContext": security.pod_security_context(uid=10001),
        "securityContext": security.container_security_context(),
    }


def collector_service_monitor(cfg: PlatformConfig) -> dict[str, Any]:
    """Scrapes the Collector's prometheus exporter (spanmetrics and the kit's OTLP metrics)."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "otel-collector", "namespace": cfg.observability.namespace,
                         "labels": dict(naming.MANAGED_BY)},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "opentelemetry-collector",
                                                  "app.kubernetes.io/instance": COLLECTOR_RELEASE}},
                     "endpoints": [{"port": "prometheus", "interval": "15s"}]}}


def jaeger_values() -> dict[str, Any]:
    """Jaeger v2 all-in-one (OTLP in, query UI on 16686) with in-memory storage."""
    return {
        "fullnameOverride": JAEGER_RELEASE,
        "provisionDataStore": {"cassandra": False},
        "storage": {"type": "memory"},
        "allInOne": {"enabled": True, "resources": _res("250m", "1Gi", "1", "4Gi"),
                     "podSecurityContext": security.pod_security_context(uid=10001),
                     "securityContext": security.container_security_context()},
        "agent": {"enabled": False},
        "collector": {"enabled": False},
        "query": {"enabled": False},
    }


def _retention_hours(retention: str) -> str:
    hours = {"h": 1, "d": 24, "w": 24 * 7, "y": 24 * 365}[retention[-1]] * int(retention[:-1])
    return f"{hours}h"


def loki_values(cfg: PlatformConfig) -> dict[str, Any]:
    """Loki in the configured mode: one binary on its filesystem, or read/write/backend on object storage."""
    single = cfg.observability.loki_mode == "single-binary"
    store = "filesystem" if single else "s3"
    replicas = 0 if single else 3
    # Every claim names the stack's class (loki 6.53.0 and minio 5.4.0 leave storageClassName unset by
    # default: a cluster without a default class would leave them Pending; checked with `helm template`).
    persistence = {"persistence": {"storageClass": cache_storage_class_name(cfg)}}
    return {
        "fullnameOverride": LOKI_RELEASE,
        "deploymentMode": "SingleBinary" if single else "SimpleScalable",
        "loki": {
            "auth_enabled": False,
            "commonConfig": {"replication_factor": 1 if single else 3},
            "storage": {"type": store},
            "schemaConfig": {"configs": [{"from": LOKI_SCHEMA_FROM, "store": "tsdb", "object_store": store,
                                          "schema": "v13", "index": {"prefix": "loki_index_", "period": "24h"}}]},
            "limits_config": {"retention_period": _retention_hours(cfg.observability.retention),
                              "allow_structured_metadata": True},
            "compactor": {"retention_enabled": True, "delete_request_store": store},
        },
        "singleBinary": {"replicas": 1 if single else 0, "resources": _res("500m", "1Gi", "2", "4Gi"), **persistence},
        "read": {"replicas": replicas, "resources": _res("250m", "512Mi", "1", "2Gi")},
        "write": {"replicas": replicas, "resources": _res("250m", "1Gi", "1", "2Gi"), **persistence},
        "backend": {"replicas": replicas, "resources": _res("250m", "512Mi", "1", "2Gi"), **persistence},
        "minio": {"enabled": not single, **persistence},  # object storage for simple-scalable (in-cluster)
        "chunksCache": {"enabled": False},
        "resultsCache": {"enabled": False},
    }


def alloy_config(cfg: PlatformConfig) -> str:
    """Alloy (River) pipeline: tail this node's pod logs, label them, push them to Loki."""
    loki = f"http://{service_host(LOKI_GATEWAY_SERVICE, cfg.observability.namespace)}/loki/api/v1/push"
    relabels = [("__meta_kubernetes_namespace", "namespace"), ("__meta_kubernetes_pod_name", "pod"),
                ("__meta_kubernetes_pod_container_name", "container"),
                (f"__meta_kubernetes_pod_label_{naming.LABEL_TENANT.replace('.', '_').replace('/', '_')}", "tenant"),
                (f"__meta_kubernetes_pod_label_{naming.LABEL_MODEL.replace('.', '_').replace('/', '_')}", "model")]
    rules = "".join(f'  rule {{\n    source_labels = ["{src}"]\n    target_label  = "{dst}"\n  }}\n'
                    for src, dst in relabels)
    return (
        'discovery.kubernetes "pods" {\n  role = "pod"\n  selectors {\n    role  = "pod"\n'
        '    field = "spec.nodeName=" + sys.env("HOSTNAME")\n  }\n}\n\n'
        'discovery.relabel "pod_logs" {\n  targets = discovery.kubernetes.pods.targets\n' + rules +
        '  rule {\n    source_labels = ["__meta_kubernetes_pod_uid", "__meta_kubernetes_pod_container_name"]\n'
        '    separator     = "/"\n    replacement   = "/var/log/pods/*$1/*.log"\n'
        '    target_label  = "__path__"\n  }\n}\n\n'
        'local.file_match "pod_logs" {\n  path_targets = discovery.relabel.pod_logs.output\n}\n\n'
        'loki.source.file "pod_logs" {\n  targets    = local.file_match.pod_logs.targets\n'
        '  forward_to = [loki.process.pod_logs.receiver]\n}\n\n'
        'loki.process "pod_logs" {\n  stage.cri {}\n  forward_to = [loki.write.default.receiver]\n}\n\n'
        f'loki.write "default" {{\n  endpoint {{\n    url = "{loki}"\n  }}\n}}\n'
    )


def alloy_values(cfg: PlatformConfig) -> dict[str, Any]:
    return {
        "fullnameOverride": ALLOY_RELEASE,
        "controller": {"type": "daemonset", "tolerations": [{"operator": "Exists"}]},  # every node's logs
        "alloy": {
            "configMap": {"create": True, "content": alloy_config(cfg)},
            "mounts": {"varlog": True},
            "resources": _res("100m", "128Mi", "500m", "512Mi"),
        },
    }


class Observability(pulumi.ComponentResource):
    """Metrics, traces and logs backends plus the Collector in the observability namespace."""

    namespace: k8s.core.v1.Namespace
    prometheus_stack: k8s.helm.v3.Release

    def __init__(self, name: str, *, cfg: PlatformConfig, after: Sequence[pulumi.Resource] = (),
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aifactory:k8s:Observability", name, None, opts)
        ns_name = cfg.observability.namespace
        # Node exporter and Alloy read host paths: the namespace cannot enforce more than privileged.
        self.namespace = create_namespace(
            f"{name}-ns", ns_name,
            labels=namespace_labels(pod_security="privileged", kubernetes_version=cfg.kubernetes_version),
            opts=pulumi.ResourceOptions(parent=self))
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *after])  # after: nodes, DNS, storage

        def chart(suffix: str, chart_: versions.HelmChart, release_name: str, values: dict[str, Any],
                  opts: pulumi.ResourceOptions = in_ns) -> k8s.helm.v3.Release:
            return versions.release(f"{name}-{suffix}", chart_, release_name=release_name, namespace=ns_name,
                                    values=values, opts=opts)

        self.prometheus_stack = chart("kube-prometheus-stack", versions.KUBE_PROMETHEUS_STACK, KPS_RELEASE,
                                      kube_prometheus_stack_values(cfg))
        chart("jaeger", versions.JAEGER, JAEGER_RELEASE, jaeger_values())
        chart("loki", versions.LOKI, LOKI_RELEASE, loki_values(cfg))
        chart("alloy", versions.ALLOY, ALLOY_RELEASE, alloy_values(cfg))
        cm = collector_configmap(cfg)
        config = k8s.core.v1.ConfigMap(f"{name}-collector-config", metadata=cm["metadata"], data=cm["data"],
                                       opts=in_ns)
        chart("collector", versions.OTEL_COLLECTOR, COLLECTOR_RELEASE, collector_values(cfg),
              pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, config, *after]))
        sm = collector_service_monitor(cfg)
        k8s.apiextensions.CustomResource(
            f"{name}-collector-monitor", api_version=sm["apiVersion"], kind=sm["kind"], metadata=sm["metadata"],
            spec=sm["spec"], opts=pulumi.ResourceOptions(parent=self, depends_on=[self.prometheus_stack]))
        collector = service_host(COLLECTOR_RELEASE, ns_name)
        self.register_outputs({"namespace": ns_name, "collectorOtlpGrpc": f"{collector}:{naming.OTEL_GRPC_PORT}",
                               "collectorOtlpHttp": f"{collector}:{OTLP_HTTP_PORT}"})
