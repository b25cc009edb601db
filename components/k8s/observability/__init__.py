"""Observability backends: kube-prometheus-stack, the OpenTelemetry Collector gateway, Jaeger v2, Loki
and Grafana Alloy (node log collection), all in the observability namespace.

Prometheus selects every ServiceMonitor, PodMonitor, Probe, ScrapeConfig and PrometheusRule in the
cluster (the `*SelectorNilUsesHelmValues: false` settings), so what other components create needs no
release label. Grafana's sidecar loads dashboards from ConfigMaps labelled `grafana_dashboard=1` in
every namespace. Prometheus joins the mesh for its scrapes only: its sidecar intercepts no traffic and
writes the workload certificate that scrapes of meshed pods present (mesh.MESH_SCRAPE_TLS).

Every backend keeps its data across restarts: Prometheus and Alertmanager on PVCs, Jaeger on Badger on a
PVC, Loki in the kit's S3 bucket (AWS, `LokiBucket`) or on its volume (one binary), Alloy's positions on
the node. Volumes are sized from `observability.ingest` and the retentions (docs/observability.md,
"Observability data").
Alertmanager routes by severity to the stack's receivers, reading credentials from mounted Secrets.

Observability takes its own `args` (ObservabilityArgs: retentions, expected ingest, pinned volumes, alert
receivers and routes, where the gateway and the tenants run), so a platform team can use it without the kit's
stack config; infra.component_args maps PlatformConfig to them.

Modules, one backend or concern each: `spec` (ObservabilityArgs, BackendsView and their validation), `sizing`
(volume sizes from ingest and retention), `common` (resources, config checksums, the ServiceMonitor shape),
`prometheus` (kube-prometheus-stack and the sidecars' PodMonitor), `alerting` (Alertmanager), `collector` (the
OpenTelemetry Collector), `jaeger`, `loki`, `alloy`, and `component` (the Observability component). This package
re-exports their public names.
"""

from components.k8s.observability.alerting import (
    ALERT_TEMPLATE_FILE,
    ALERTMANAGER_SECRETS_DIR,
    alert_templates,
    alertmanager_config,
    alertmanager_secret_reads,
    watchdog_route,
)
from components.k8s.observability.alloy import ALLOY_HOST_PATH, ALLOY_STORAGE_PATH, alloy_config, alloy_values
from components.k8s.observability.collector import (
    COLLECTOR_CONFIG_KEY,
    COLLECTOR_CONFIGMAP,
    COLLECTOR_IMAGE,
    collector_configmap,
    collector_service_monitor,
    collector_values,
)
from components.k8s.observability.common import config_checksum
from components.k8s.observability.component import TYPE, Observability
from components.k8s.observability.jaeger import (
    JAEGER_QUERY_PORT,
    JAEGER_STORAGE_PATH,
    jaeger_config,
    jaeger_service_monitor,
    jaeger_values,
    jaeger_volume_claim,
)
from components.k8s.observability.loki import LOKI_SCHEMA_FROM, LOKI_SERVICE_ACCOUNT, LokiBucket, loki_values
from components.k8s.observability.prometheus import (
    DASHBOARD_FOLDER_ANNOTATION,
    DASHBOARD_LABEL,
    DASHBOARD_LABEL_VALUE,
    control_plane_values,
    kube_prometheus_stack_values,
    prometheus_mesh_pod_settings,
    sidecar_pod_monitor,
)
from components.k8s.observability.sizing import (
    jaeger_volume_gib,
    loki_volume_gib,
    prometheus_volume_gib,
    retention_days,
)
from components.k8s.observability.spec import (
    AlertingArgs,
    AlertReceiverArgs,
    BackendsSpec,
    BackendsView,
    HeartbeatArgs,
    IngestArgs,
    ObservabilityArgs,
    SecretRefArgs,
    VolumeSizesArgs,
    observability_spec,
)

__all__ = [
    "TYPE",
    "IngestArgs",
    "VolumeSizesArgs",
    "SecretRefArgs",
    "AlertReceiverArgs",
    "HeartbeatArgs",
    "AlertingArgs",
    "ObservabilityArgs",
    "BackendsView",
    "BackendsSpec",
    "observability_spec",
    "DASHBOARD_LABEL",
    "DASHBOARD_LABEL_VALUE",
    "COLLECTOR_CONFIGMAP",
    "COLLECTOR_CONFIG_KEY",
    "COLLECTOR_IMAGE",
    "LOKI_SCHEMA_FROM",
    "LOKI_SERVICE_ACCOUNT",
    "JAEGER_STORAGE_PATH",
    "ALLOY_STORAGE_PATH",
    "ALLOY_HOST_PATH",
    "ALERTMANAGER_SECRETS_DIR",
    "ALERT_TEMPLATE_FILE",
    "LokiBucket",
    "retention_days",
    "prometheus_volume_gib",
    "jaeger_volume_gib",
    "loki_volume_gib",
    "alertmanager_config",
    "watchdog_route",
    "alertmanager_secret_reads",
    "alert_templates",
    "control_plane_values",
    "jaeger_config",
    "jaeger_volume_claim",
    "config_checksum",
    "prometheus_mesh_pod_settings",
    "kube_prometheus_stack_values",
    "collector_configmap",
    "collector_values",
    "collector_service_monitor",
    "jaeger_service_monitor",
    "sidecar_pod_monitor",
    "DASHBOARD_FOLDER_ANNOTATION",
    "jaeger_values",
    "loki_values",
    "alloy_config",
    "alloy_values",
    "Observability",
    "JAEGER_QUERY_PORT",
]
