"""kube-prometheus-stack: Prometheus (in the mesh for its scrapes), Alertmanager, Grafana with the kit's
datasources and dashboard sidecar, kube-state-metrics, node exporter; and the PodMonitor of the mesh's sidecars."""

import json
import math
from typing import Any

from components.k8s import naming, security
from components.k8s.mesh import PROMETHEUS_CERTS_DIR
from components.k8s.observability.alerting import alert_templates, alertmanager_config, alertmanager_secrets
from components.k8s.observability.common import container_resources
from components.k8s.observability.jaeger import JAEGER_QUERY_PORT
from components.k8s.observability.sizing import (
    ALERTMANAGER_VOLUME_GIB,
    RETENTION_SIZE_FRACTION,
    prometheus_volume_gib,
    volume_claim_spec,
)
from components.k8s.observability.spec import BackendsView
from components.k8s.otel_config import (
    JAEGER_SERVICE,
    LOKI_GATEWAY_SERVICE,
    service_host,
)

__all__ = [
    "DASHBOARD_LABEL",
    "DASHBOARD_LABEL_VALUE",
    "DASHBOARD_FOLDER_ANNOTATION",
    "SIDECAR_STATS_PORT_NAME",
    "SIDECAR_STATS_JOB",
    "KPS_RELEASE",
    "LOKI_DATASOURCE_UID",
    "JAEGER_DATASOURCE_UID",
    "TRACE_ID_MATCHER",
    "GRAFANA_LITERAL_DOLLAR",
    "TRACE_TO_LOGS_SHIFT",
    "trace_log_query",
    "ISTIO_CERTS_VOLUME",
    "ISTIO_OUTPUT_CERTS",
    "prometheus_mesh_pod_settings",
    "control_plane_values",
    "KSM_LABELS_ALLOWLIST",
    "kube_prometheus_stack_values",
    "sidecar_pod_monitor",
]

DASHBOARD_LABEL = naming.DASHBOARD_LABEL  # the Grafana sidecar's dashboard label (and value) and folder annotation
DASHBOARD_LABEL_VALUE = naming.DASHBOARD_LABEL_VALUE
DASHBOARD_FOLDER_ANNOTATION = naming.DASHBOARD_FOLDER_ANNOTATION
# istio-proxy's Envoy stats (istio_requests_total, istio_request_duration_milliseconds) on its container port
# `http-envoy-prom` 15090, plain HTTP and never redirected into the sidecar (Istio 1.28.3 injection-template.yaml:
# containerPort 15090 name http-envoy-prom; excluded from inbound capture with 15021)
SIDECAR_STATS_PORT_NAME = "http-envoy-prom"
SIDECAR_STATS_JOB = "envoy-stats"
KPS_RELEASE = "kube-prometheus-stack"
ISTIO_CERTS_VOLUME = "istio-certs"
ISTIO_OUTPUT_CERTS = "/etc/istio-output-certs"


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


LOKI_DATASOURCE_UID = "loki"
JAEGER_DATASOURCE_UID = "jaeger"
# The gateway's access log line (components/k8s/gateway/envoy/observability.py: Envoy's json_format, one compact JSON
# object
# per request, which Alloy ships to Loki as the line) carries the request's trace id as `"trace_id":"<32 hex>"`
# (%TRACE_ID% of the OpenTelemetry tracer); an untraced request logs no hex id, and no link.
TRACE_ID_MATCHER = r'"trace_id":"([0-9a-f]{32})"'
# Grafana expands environment variables in every string of a provisioned datasource's jsonData (os.ExpandEnv), `$$`
# standing for a literal `$` (grafana/grafana pkg/services/provisioning/values/values.go interpolateValue): a
# `${__value.raw}` written as is would reach Grafana as an empty string.
GRAFANA_LITERAL_DOLLAR = "$$"
# How far around a span its trace's gateway log line is looked for: the line is written when the response ends, after
# every span of the request, and a long generation's span may start minutes earlier.
TRACE_TO_LOGS_SHIFT = ("-1m", "1m")


def trace_log_query(gateway_namespace: str) -> str:
    """The LogQL of Jaeger's trace-to-logs link, as provisioned: the gateway's access log lines that carry the trace
    id (`${__trace.traceId}`, Grafana's variable for a span's trace id in a tracesToLogsV2 custom query)."""
    return f'{{namespace="{gateway_namespace}"}} |= "{GRAFANA_LITERAL_DOLLAR}{{__trace.traceId}}"'


def _datasources(cfg: BackendsView) -> list[dict[str, Any]]:
    """Loki and Jaeger, linked both ways: a gateway log line's trace id opens the trace in Jaeger (a Loki derived
    field whose internal link queries the Jaeger datasource with the matched id), and a span opens its trace's gateway
    log lines in Loki (the Jaeger datasource's tracesToLogsV2)."""
    ns = cfg.observability.namespace
    return [
        {"name": "Loki", "type": "loki", "uid": LOKI_DATASOURCE_UID, "access": "proxy",
         "url": f"http://{service_host(LOKI_GATEWAY_SERVICE, ns)}",
         "jsonData": {"derivedFields": [{
             "name": "TraceID", "matcherType": "regex", "matcherRegex": TRACE_ID_MATCHER,
             "datasourceUid": JAEGER_DATASOURCE_UID, "url": f"{GRAFANA_LITERAL_DOLLAR}{{__value.raw}}",
             "urlDisplayLabel": "Trace"}]}},
        {"name": "Jaeger", "type": "jaeger", "uid": JAEGER_DATASOURCE_UID, "access": "proxy",
         "url": f"http://{service_host(JAEGER_SERVICE, ns)}:{JAEGER_QUERY_PORT}",
         "jsonData": {"tracesToLogsV2": {
             "datasourceUid": LOKI_DATASOURCE_UID, "customQuery": True, "query": trace_log_query(cfg.gateway.namespace),
             "spanStartTimeShift": TRACE_TO_LOGS_SHIFT[0], "spanEndTimeShift": TRACE_TO_LOGS_SHIFT[1]}}},
    ]


def control_plane_values(cfg: BackendsView) -> dict[str, Any]:
    """Scrape the control plane only where the target exposes it. EKS runs controller manager, scheduler
    and etcd out of reach, and its kube-proxy add-on binds metrics to 127.0.0.1:10249 (kube-proxy's
    default; aws/containers-roadmap#657: the add-on reverts edits), so every target would be down and
    KubeControllerManagerDown/KubeSchedulerDown/KubeProxyDown fire forever."""
    on = cfg.observability.control_plane_metrics
    return {k: {"enabled": on} for k in ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")}


KSM_LABELS_ALLOWLIST = [f"nodes=[{naming.LABEL_POOL}]", f"pods=[{naming.LABEL_MODEL},{naming.LABEL_TENANT}]"]

def kube_prometheus_stack_values(cfg: BackendsView) -> dict[str, Any]:
    selectors = {f"{kind}SelectorNilUsesHelmValues": False
                 for kind in ("rule", "serviceMonitor", "podMonitor", "probe", "scrapeConfig")}
    return {
        "fullnameOverride": "kps",
        "prometheus": {
            "serviceAccount": {"create": True, "name": naming.PROMETHEUS_SERVICE_ACCOUNT},
            "prometheusSpec": {
                **selectors,
                "retention": cfg.observability.retention,
                "retentionSize": f"{math.floor(prometheus_volume_gib(cfg) * RETENTION_SIZE_FRACTION)}GB",
                "storageSpec": {"volumeClaimTemplate": {"spec": volume_claim_spec(prometheus_volume_gib(cfg), cfg)}},
                "resources": container_resources("1", "4Gi", "4", "16Gi"),
                "securityContext": security.pod_security_context(uid=1000, fs_group=2000),
                **prometheus_mesh_pod_settings(),
            },
        },
        "alertmanager": {
            "config": alertmanager_config(cfg),
            "templateFiles": alert_templates(),
            "alertmanagerSpec": {
                "resources": container_resources("50m", "128Mi", "500m", "256Mi"),
                "securityContext": security.pod_security_context(uid=1000, fs_group=2000),
                "storage": {"volumeClaimTemplate": {"spec": volume_claim_spec(ALERTMANAGER_VOLUME_GIB, cfg)}},
                "secrets": alertmanager_secrets(cfg),
            },
        },
        "grafana": {
            "sidecar": {"dashboards": {"enabled": True, "label": DASHBOARD_LABEL, "labelValue": DASHBOARD_LABEL_VALUE,
                                       "searchNamespace": "ALL", "folderAnnotation": DASHBOARD_FOLDER_ANNOTATION,
                                       "provider": {"foldersFromFilesStructure": True}}},
            "additionalDataSources": _datasources(cfg),
            "resources": container_resources("100m", "256Mi", "1", "1Gi"),
        },
        "prometheusOperator": {
            "resources": container_resources("100m", "128Mi", "500m", "512Mi"),
            "containerSecurityContext": security.container_security_context(),
        },
        # The cost and pool rules join GPU series to pools, models and tenants through these labels.
        "kube-state-metrics": {"resources": container_resources("50m", "128Mi", "500m", "512Mi"),
                               "metricLabelsAllowlist": KSM_LABELS_ALLOWLIST},
        "prometheus-node-exporter": {"resources": container_resources("50m", "64Mi", "250m", "128Mi")},
        **control_plane_values(cfg),
    }


def sidecar_pod_monitor(cfg: BackendsView) -> dict[str, Any]:
    """Scrapes every sidecar of the meshed namespaces (the tenants' and the gateway's) for Istio's standard
    metrics, which the Mesh dashboard and the workload:istio_* rules read. Plain HTTP: port 15090 is outside the
    mesh's capture, so STRICT mTLS does not apply to it (and a PodMonitor could not present the mesh
    certificate anyway: mesh.MESH_SCRAPE_TLS). The tenants' NetworkPolicies admit Prometheus on it."""
    namespaces = sorted({t.namespace for t in cfg.tenants.values()} | {cfg.gateway.namespace})
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": {"name": "istio-sidecars", "namespace": cfg.observability.namespace,
                         "labels": dict(naming.MANAGED_BY)},
            "spec": {"namespaceSelector": {"matchNames": namespaces},
                     # the label Istio's injector puts on every pod it gives a sidecar
                     "selector": {"matchExpressions": [{"key": "security.istio.io/tlsMode", "operator": "Exists"}]},
                     "podMetricsEndpoints": [{
                         "port": SIDECAR_STATS_PORT_NAME, "path": "/stats/prometheus", "interval": "15s",
                         "relabelings": [{"targetLabel": "job", "replacement": SIDECAR_STATS_JOB}]}]}}
