"""Observability backends: kube-prometheus-stack, the OpenTelemetry Collector gateway, Jaeger v2, Loki
and Grafana Alloy (node log collection), all in the observability namespace.

Prometheus selects every ServiceMonitor, PodMonitor, Probe, ScrapeConfig and PrometheusRule in the
cluster (the `*SelectorNilUsesHelmValues: false` settings), so what other components create needs no
release label. Grafana's sidecar loads dashboards from ConfigMaps labelled `grafana_dashboard=1` in
every namespace. Prometheus joins the mesh for its scrapes only: its sidecar intercepts no traffic and
writes the workload certificate that scrapes of meshed pods present (mesh.MESH_SCRAPE_TLS).

Every backend keeps its data across restarts: Prometheus and Alertmanager on PVCs, Jaeger on Badger on a
PVC, Loki in the kit's S3 bucket (AWS, `LokiBucket`) or on its volume (one binary), Alloy's positions on
the node. Volumes are sized from `observability.ingest` and the retentions (README, "Observability data").
Alertmanager routes by severity to the stack's receivers, reading credentials from mounted Secrets.

Observability takes its own `args` (ObservabilityArgs: retentions, expected ingest, pinned volumes, alert
receivers and routes, where the gateway and the tenants run), so a platform team can use it without the kit's
stack config; infra.component_args maps PlatformConfig to them.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NotRequired, Protocol, TypedDict

import pulumi
import pulumi_kubernetes as k8s

from components.aws.errors import Problems, check_shape
from components.aws.log_store import LOKI_INDEX_TABLE_PREFIX
from components.k8s import naming, security, versions
from components.k8s.autoscaler import IRSA_ANNOTATION
from components.k8s.defaults import DEFAULT_GATEWAY_NAMESPACE, DEFAULT_KUBERNETES_VERSION
from components.k8s.mesh import PROMETHEUS_CERTS_DIR
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.otel_config import (
    JAEGER_SERVICE,
    LOKI_GATEWAY_SERVICE,
    OTLP_HTTP_PORT,
    PROMETHEUS_EXPORTER_PORT,
    collector_config,
    service_host,
)
from components.k8s.storage import StorageTargetView, cache_storage_class_name
from components.k8s.values import (
    ALERT_RECEIVER_TYPES,
    ALERT_SEVERITIES,
    Alerting,
    AlertReceiver,
    Heartbeat,
    Ingest,
    InNamespace,
    NamespaceView,
    ObservabilitySettings,
    SecretRef,
    Tenant,
    VolumeSizes,
)
from components.vocabulary import dump_yaml

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
]

TYPE = "aifactory:k8s:Observability"  # the type token of the kit's existing stacks (part of every child's URN)
DASHBOARD_LABEL = naming.DASHBOARD_LABEL  # the Grafana sidecar's dashboard label (and value) and folder annotation
DASHBOARD_LABEL_VALUE = naming.DASHBOARD_LABEL_VALUE
DASHBOARD_FOLDER_ANNOTATION = naming.DASHBOARD_FOLDER_ANNOTATION
COLLECTOR_TELEMETRY_PORT = 8888  # the Collector's own metrics (otel_config: service.telemetry.metrics)
# istio-proxy's Envoy stats (istio_requests_total, istio_request_duration_milliseconds) on its container port
# `http-envoy-prom` 15090, plain HTTP and never redirected into the sidecar (Istio 1.28.3 injection-template.yaml:
# containerPort 15090 name http-envoy-prom; excluded from inbound capture with 15021)
SIDECAR_STATS_PORT_NAME = "http-envoy-prom"
SIDECAR_STATS_JOB = "envoy-stats"
KPS_RELEASE = "kube-prometheus-stack"
COLLECTOR_RELEASE = naming.OTEL_COLLECTOR_SERVICE  # fullnameOverride: the Service is named after it
COLLECTOR_CONFIGMAP = "otel-collector-config"
COLLECTOR_CONFIG_KEY = "relay"  # the chart mounts this key as /conf/relay.yaml
COLLECTOR_IMAGE = "otel/opentelemetry-collector-contrib"  # k8sattributes, spanmetrics, prometheus exporter
JAEGER_RELEASE = "jaeger"
JAEGER_QUERY_PORT = 16686
LOKI_RELEASE = "loki"
ALLOY_RELEASE = "alloy"
LOKI_SCHEMA_FROM = "2024-04-01"  # first day of the tsdb/v13 schema period (never change once deployed)
LOKI_SERVICE_ACCOUNT = "loki"  # the chart names its service account after fullnameOverride
JAEGER_STORAGE_PATH = "/badger"  # where the Jaeger pod mounts its volume
JAEGER_VOLUME_CLAIM = "jaeger-badger"
JAEGER_VOLUME = "badger"
# Alloy keeps its state (loki.source.file positions, WAL) under --storage.path; the chart's default is
# /tmp/alloy in the container (alloy chart 1.4.0 values.yaml `alloy.storagePath`), lost on every restart.
ALLOY_STORAGE_PATH = "/var/lib/alloy"
ALLOY_HOST_PATH = "/var/lib/aifactory/alloy"  # on the node: survives pod restarts and upgrades
ALLOY_STORAGE_VOLUME = "alloy-storage"
# kube-prometheus-stack mounts each of `alertmanagerSpec.secrets` at /etc/alertmanager/secrets/<name>/
# (values.yaml of the pinned chart, `alertmanager.alertmanagerSpec.secrets`).
ALERTMANAGER_SECRETS_DIR = "/etc/alertmanager/secrets"
# templateFiles land in /etc/alertmanager/config/, which the chart's default `templates` glob reads.
ALERT_TEMPLATE_FILE = "aifactory.tmpl"
ALERT_TEMPLATES_GLOB = "/etc/alertmanager/config/*.tmpl"
# Alertmanager re-sends a firing group only at a group_interval tick, so repeat_interval takes effect rounded up
# to a multiple of it (alertmanager docs, configuration, <route>): 1m keeps the heartbeat close to its interval.
WATCHDOG_GROUP_INTERVAL = "1m"
CONFIG_CHECKSUM_ANNOTATION = "checksum/aifactory-config"
CONFIG_HASH_LABEL = "aifactory.io/config-hash"

# Disk sizing (README, "Observability data"). Prometheus stores 1-2 bytes per sample on disk
# (prometheus.io/docs/prometheus/latest/storage, "Operational aspects"): size for the upper end.
PROMETHEUS_BYTES_PER_SAMPLE = 2.0
JAEGER_BYTES_PER_SPAN = 1024  # estimate: a span with the kit's attributes, after Badger's compression
LOKI_COMPRESSION_RATIO = 5.0  # estimate: raw log bytes per stored chunk byte
DISK_HEADROOM = 1.3  # WAL, head block, compaction and growth on top of the retained data
MIN_VOLUME_GIB = 10
ALERTMANAGER_VOLUME_GIB = 1  # silences and the notification log: kilobytes to a few megabytes
RETENTION_SIZE_FRACTION = 0.85  # Prometheus drops old blocks before its volume fills
GIB = 1024 ** 3
ISTIO_CERTS_VOLUME = "istio-certs"
ISTIO_OUTPUT_CERTS = "/etc/istio-output-certs"


class IngestArgs(TypedDict):
    """Expected ingest: the basis of every backend's disk size."""

    samples_per_second: NotRequired[int]
    """Prometheus samples per second. Default: 10000."""
    log_gib_per_day: NotRequired[float]
    """Raw log lines per day. Default: 5."""
    spans_per_second: NotRequired[int]
    """Spans reaching the Collector (after mesh sampling). Default: 500."""


class VolumeSizesArgs(TypedDict):
    """Pinned disk sizes (GiB): once a backend's volume exists its size should stop following retention and ingest."""

    prometheus_gib: NotRequired[int]
    """Default: sized from ingest and retention."""
    loki_gib: NotRequired[int]
    """Default: sized from ingest and retention (filesystem mode)."""
    jaeger_gib: NotRequired[int]
    """Default: sized from span ingest and traceRetention."""


class SecretRefArgs(TypedDict):
    """A key of a Kubernetes Secret in the observability namespace (created outside the component)."""

    name: str
    """The Secret's name."""
    key: str
    """The key in it."""


class AlertReceiverArgs(TypedDict):
    """One Alertmanager receiver; credentials only ever as a Secret reference."""

    type: str
    """slack, pagerduty, email or webhook."""
    secret: NotRequired[SecretRefArgs]
    """slack: the webhook URL; pagerduty: the routing key; email: the SMTP password; webhook: a bearer token.
    Required for slack and pagerduty. Default: none."""
    channel: NotRequired[str]
    """slack: required. Default: none."""
    to: NotRequired[str]
    """email: required. Default: none."""
    sender: NotRequired[str]
    """email (from): required. Default: none."""
    smarthost: NotRequired[str]
    """email: required, host:port. Default: none."""
    username: NotRequired[str]
    """email: the SMTP user. Default: no SMTP authentication."""
    url: NotRequired[str]
    """webhook: required, http(s)://. Default: none."""


class HeartbeatArgs(TypedDict):
    """The dead-man's switch: the always-firing Watchdog alert to `receiver` every `repeat_interval`."""

    receiver: str
    """One of alerting.receivers."""
    repeat_interval: NotRequired[str]
    """Default: 5m."""


class AlertingArgs(TypedDict):
    """Where alerts go."""

    receivers: NotRequired[dict[str, AlertReceiverArgs]]
    """By name. Default: none."""
    routes: NotRequired[dict[str, list[str]]]
    """Per severity (critical, warning, info) the receivers that get it. Default: none (alerts stay in the UI)."""
    heartbeat: NotRequired[HeartbeatArgs]
    """Default: none (Watchdog goes to "null")."""


class ObservabilityArgs(TypedDict):
    """Arguments of an Observability."""

    namespace: NotRequired[str]
    """The observability namespace. Default: monitoring."""
    retention: NotRequired[str]
    """Prometheus retention (e.g. 15d). Default: 15d."""
    trace_retention: NotRequired[str]
    """Traces kept in Jaeger. Default: 7d."""
    loki_mode: NotRequired[str]
    """single-binary or simple-scalable. Default: single-binary."""
    trace_sample_ratio: NotRequired[float]
    """Share of traces the Collector keeps for Jaeger (span metrics see all). Default: 1.0."""
    control_plane_metrics: NotRequired[bool]
    """Scrape the controller manager, scheduler, etcd and kube-proxy. Default: false."""
    ingest: NotRequired[IngestArgs]
    """Default: 10000 samples/s, 5 GiB of logs a day, 500 spans/s."""
    volumes: NotRequired[VolumeSizesArgs]
    """Default: nothing pinned."""
    alerting: NotRequired[AlertingArgs]
    """Default: no receivers (alerts stay in the UI)."""
    tenant_namespaces: NotRequired[list[str]]
    """Namespaces whose Istio sidecars Prometheus scrapes (the gateway's too). Default: none."""
    gateway_namespace: NotRequired[str]
    """Default: aifactory-gateway."""
    kubernetes_version: NotRequired[str]
    """The cluster's Kubernetes minor version (the Pod Security labels' version). Default: 1.34."""
    aws_region: NotRequired[str]
    """The cluster is EKS in this region (volumes on the kit's gp3 class). Default: none (an existing cluster)."""
    storage_class: NotRequired[str]
    """The StorageClass of the backends' volumes; required off AWS. Default: the kit's gp3 class on AWS."""


class BackendsView(Protocol):
    """What the build functions read: Observability's BackendsSpec (from its args), or the kit's PlatformConfig."""

    @property
    def observability(self) -> ObservabilitySettings: ...

    @property
    def tenants(self) -> Mapping[str, NamespaceView]: ...

    @property
    def gateway(self) -> NamespaceView: ...

    @property
    def kubernetes_version(self) -> str: ...

    @property
    def is_aws(self) -> bool: ...

    @property
    def target(self) -> StorageTargetView: ...


@dataclass(frozen=True)
class _Target:
    storage_class: str | None


@dataclass(frozen=True)
class BackendsSpec:
    """ObservabilityArgs with every default applied (a BackendsView)."""

    observability: ObservabilitySettings
    tenants: Mapping[str, Tenant]
    gateway: InNamespace
    target: _Target
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    is_aws: bool = False


_DURATION = re.compile(r"^[1-9][0-9]*(h|d|w|y)$")  # Prometheus-style retention: 15d, 36h, 2w
LOKI_MODES = ("single-binary", "simple-scalable")


def _some(cls: type, given: Mapping[str, Any]) -> Any:
    """A values dataclass from the keys `given` sets; the others keep their documented defaults."""
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in given.items() if k in known})


def _receiver(name: str, r: AlertReceiverArgs) -> AlertReceiver:
    secret = r.get("secret")
    rest: dict[str, Any] = {k: v for k, v in r.items() if k not in ("type", "secret")}
    return AlertReceiver(name=name, type=r["type"],  # type: ignore[arg-type]
                         secret=SecretRef(secret["name"], secret["key"]) if secret is not None else None, **rest)


def _alerting_problems(problems: Problems, alerting: AlertingArgs) -> None:
    receivers = alerting.get("receivers") or {}
    required = {"slack": ("secret", "channel"), "pagerduty": ("secret",), "email": ("to", "sender", "smarthost"),
                "webhook": ("url",)}
    for key, r in receivers.items():
        path = f"alerting.receivers.{key}"
        if r["type"] not in ALERT_RECEIVER_TYPES:
            problems.add(f"{path}.type", f"{r['type']!r} is not allowed; choose one of: "
                                         f"{', '.join(ALERT_RECEIVER_TYPES)}")
            continue
        for needed in required[r["type"]]:
            if needed not in r:
                problems.add(f"{path}.{needed}", f"is required for type {r['type']!r}")
    for severity, names in (alerting.get("routes") or {}).items():
        if severity not in ALERT_SEVERITIES:
            problems.add(f"alerting.routes.{severity}", f"{severity!r} is not a severity; choose one of: "
                                                        f"{', '.join(ALERT_SEVERITIES)}")
        for i, n in enumerate(names):
            if n not in receivers:
                problems.add(f"alerting.routes.{severity}[{i}]", f"{n!r} is not a receiver; receivers: "
                                                                 f"{', '.join(receivers) or 'none'}")
    heartbeat = alerting.get("heartbeat")
    if heartbeat is not None and heartbeat["receiver"] not in receivers:
        problems.add("alerting.heartbeat.receiver", f"{heartbeat['receiver']!r} is not a receiver; receivers: "
                                                    f"{', '.join(receivers) or 'none'}")


def observability_spec(name: str, args: ObservabilityArgs) -> BackendsSpec:
    """Validate `args` and resolve every default; raises pulumi.InputPropertiesError with property paths."""
    check_shape("Observability", name, args, ObservabilityArgs)  # typos, unknown keys, wrong types
    problems = Problems("Observability", name)
    for key, camel in (("retention", "retention"), ("trace_retention", "traceRetention")):
        if key in args and not _DURATION.match(args[key]):  # type: ignore[literal-required]
            problems.add(camel, f"{args[key]!r} is not a duration such as 15d, 36h or 2w")  # type: ignore[literal-required]
    if args.get("loki_mode", LOKI_MODES[0]) not in LOKI_MODES:
        problems.add("lokiMode", f"{args['loki_mode']!r} is not allowed; choose one of: {', '.join(LOKI_MODES)}")
    if not 0 < args.get("trace_sample_ratio", 1.0) <= 1:
        problems.add("traceSampleRatio", f"{args['trace_sample_ratio']} is not in (0, 1]")
    _alerting_problems(problems, args.get("alerting") or {})
    if "aws_region" not in args and "storage_class" not in args:
        problems.add("storageClass", "is required off AWS (no awsRegion): the class the backends' volumes use")
    problems.raise_any()
    alerting = args.get("alerting") or {}
    heartbeat = alerting.get("heartbeat")
    settings = _some(ObservabilitySettings, {
        **{k: v for k, v in args.items() if k not in ("ingest", "volumes", "alerting")},
        "ingest": _some(Ingest, args.get("ingest") or {}),
        "volumes": _some(VolumeSizes, args.get("volumes") or {}),
        "alerting": Alerting(
            receivers={k: _receiver(k, r) for k, r in (alerting.get("receivers") or {}).items()},
            routes={s: tuple(names) for s, names in (alerting.get("routes") or {}).items()},
            heartbeat=_some(Heartbeat, heartbeat) if heartbeat is not None else None)})
    return BackendsSpec(
        observability=settings,
        tenants={ns: Tenant(name=ns, namespace=ns) for ns in args.get("tenant_namespaces") or ()},
        gateway=InNamespace(args.get("gateway_namespace", DEFAULT_GATEWAY_NAMESPACE)),
        target=_Target(args.get("storage_class")),
        kubernetes_version=args.get("kubernetes_version", DEFAULT_KUBERNETES_VERSION),
        is_aws="aws_region" in args)


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


def _datasources(cfg: BackendsView) -> list[dict[str, Any]]:
    ns = cfg.observability.namespace
    return [
        {"name": "Loki", "type": "loki", "uid": "loki", "access": "proxy",
         "url": f"http://{service_host(LOKI_GATEWAY_SERVICE, ns)}"},
        {"name": "Jaeger", "type": "jaeger", "uid": "jaeger", "access": "proxy",
         "url": f"http://{service_host(JAEGER_SERVICE, ns)}:{JAEGER_QUERY_PORT}"},
    ]


@dataclass(frozen=True, slots=True)
class LokiBucket:
    """The S3 bucket Loki stores in (AWS) and the IRSA role its service account assumes."""

    bucket: str
    region: str
    role_arn: str


def retention_days(retention: str) -> float:
    """Days in a retention such as `15d`, `720h`, `2w`, `1y`."""
    return {"h": 1 / 24, "d": 1, "w": 7, "y": 365}[retention[-1]] * int(retention[:-1])


def _volume_gib(bytes_retained: float) -> int:
    return max(MIN_VOLUME_GIB, math.ceil(bytes_retained * DISK_HEADROOM / GIB))


def prometheus_volume_gib(cfg: BackendsView) -> int:
    """`observability.volumes.prometheusGiB` when pinned, else samples/s x seconds retained x bytes/sample,
    plus headroom (the Prometheus docs' sizing formula)."""
    obs = cfg.observability
    if obs.volumes.prometheus_gib is not None:
        return obs.volumes.prometheus_gib
    return _volume_gib(obs.ingest.samples_per_second * 86_400 * retention_days(obs.retention)
                       * PROMETHEUS_BYTES_PER_SAMPLE)


def jaeger_volume_gib(cfg: BackendsView) -> int:
    """`observability.volumes.jaegerGiB` when pinned, else spans kept (after the Collector's sampling) x
    bytes/span x the trace retention, plus headroom."""
    obs = cfg.observability
    if obs.volumes.jaeger_gib is not None:
        return obs.volumes.jaeger_gib
    return _volume_gib(obs.ingest.spans_per_second * obs.trace_sample_ratio * 86_400
                       * retention_days(obs.trace_retention) * JAEGER_BYTES_PER_SPAN)


def loki_volume_gib(cfg: BackendsView) -> int:
    """Filesystem mode: `observability.volumes.lokiGiB` when pinned, else compressed log bytes for the whole
    retention, plus headroom."""
    obs = cfg.observability
    if obs.volumes.loki_gib is not None:
        return obs.volumes.loki_gib
    return _volume_gib(obs.ingest.log_gib_per_day * GIB / LOKI_COMPRESSION_RATIO * retention_days(obs.retention))


def _claim(size_gib: int, cfg: BackendsView) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{size_gib}Gi"}}}
    if (sc := cache_storage_class_name(cfg)) is not None:
        spec["storageClassName"] = sc
    return spec


def control_plane_values(cfg: BackendsView) -> dict[str, Any]:
    """Scrape the control plane only where the target exposes it. EKS runs controller manager, scheduler
    and etcd out of reach, and its kube-proxy add-on binds metrics to 127.0.0.1:10249 (kube-proxy's
    default; aws/containers-roadmap#657: the add-on reverts edits), so every target would be down and
    KubeControllerManagerDown/KubeSchedulerDown/KubeProxyDown fire forever."""
    on = cfg.observability.control_plane_metrics
    return {k: {"enabled": on} for k in ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")}


def _secret_file(receiver: AlertReceiver) -> str:
    assert receiver.secret is not None
    return f"{ALERTMANAGER_SECRETS_DIR}/{receiver.secret.name}/{receiver.secret.key}"


TITLE = '{{ template "aifactory.title" . }}'
TEXT = '{{ template "aifactory.text" . }}'


def _receiver_config(receiver: AlertReceiver) -> dict[str, Any]:
    """One Alertmanager receiver; credentials are `*_file` paths into the mounted Secret, never values."""
    out: dict[str, Any] = {"name": receiver.name}
    if receiver.type == "slack":
        out["slack_configs"] = [{"api_url_file": _secret_file(receiver), "channel": receiver.channel,
                                 "send_resolved": True, "title": TITLE, "text": TEXT}]
    elif receiver.type == "pagerduty":
        out["pagerduty_configs"] = [{"routing_key_file": _secret_file(receiver), "send_resolved": True,
                                     "description": TITLE, "details": {"alerts": TEXT},
                                     "links": [{"href": '{{ (index .Alerts 0).Annotations.runbook_url }}',
                                                "text": "Runbook"}]}]
    elif receiver.type == "email":
        email: dict[str, Any] = {"to": receiver.to, "from": receiver.sender, "smarthost": receiver.smarthost,
                                 "send_resolved": True, "headers": {"Subject": TITLE}, "text": TEXT}
        if receiver.username is not None:
            email["auth_username"] = receiver.username
        if receiver.secret is not None:
            email["auth_password_file"] = _secret_file(receiver)
        out["email_configs"] = [email]
    else:  # webhook: the JSON payload carries every label and annotation (runbook_url included)
        hook: dict[str, Any] = {"url": receiver.url, "send_resolved": True}
        if receiver.secret is not None:
            hook["http_config"] = {"authorization": {"type": "Bearer", "credentials_file": _secret_file(receiver)}}
        out["webhook_configs"] = [hook]
    return out


def watchdog_route(cfg: BackendsView) -> dict[str, Any]:
    """The always-firing Watchdog alert (kube-prometheus-stack's general rules): to the heartbeat receiver, sent
    at once and again every `heartbeat.repeatInterval`, so the heartbeat service pages when the pings stop (the
    alerting pipeline is down). Without a heartbeat it goes to "null"."""
    heartbeat = cfg.observability.alerting.heartbeat
    route: dict[str, Any] = {"receiver": "null", "matchers": ['alertname = "Watchdog"']}
    if heartbeat is not None:
        route.update(receiver=heartbeat.receiver, group_wait="0s", group_interval=WATCHDOG_GROUP_INTERVAL,
                     repeat_interval=heartbeat.repeat_interval)
    return route


def alertmanager_config(cfg: BackendsView) -> dict[str, Any]:
    """The whole Alertmanager configuration: severity routes to the configured receivers (each severity's
    receivers all get it), Watchdog to the heartbeat receiver (or "null"), unrouted severities to "null", and
    the chart's inhibition rules."""
    alerting = cfg.observability.alerting
    routes: list[dict[str, Any]] = [watchdog_route(cfg)]
    for severity, names in alerting.routes.items():
        for i, name in enumerate(names):
            route: dict[str, Any] = {"receiver": name, "matchers": [f'severity = "{severity}"']}
            if i < len(names) - 1:
                route["continue"] = True
            routes.append(route)
    return {
        "global": {"resolve_timeout": "5m"},
        "inhibit_rules": [
            {"source_matchers": ['severity = "critical"'], "target_matchers": ['severity =~ "warning|info"'],
             "equal": ["namespace", "alertname"]},
            {"source_matchers": ['severity = "warning"'], "target_matchers": ['severity = "info"'],
             "equal": ["namespace", "alertname"]},
            # kube-prometheus-stack's InfoInhibitor silences info alerts of a namespace while it fires.
            {"source_matchers": ['alertname = "InfoInhibitor"'], "target_matchers": ['severity = "info"'],
             "equal": ["namespace"]},
            {"target_matchers": ['alertname = "InfoInhibitor"']},
        ],
        "route": {"receiver": "null", "group_by": ["namespace", "alertname"], "group_wait": "30s",
                  "group_interval": "5m", "repeat_interval": "4h", "routes": routes},
        "receivers": [{"name": "null"}, *(_receiver_config(r) for r in alerting.receivers.values())],
        "templates": [ALERT_TEMPLATES_GLOB],
    }


def alert_templates() -> dict[str, str]:
    """Notification templates: every alert's summary, description and runbook_url."""
    return {ALERT_TEMPLATE_FILE: (
        '{{ define "aifactory.title" }}[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }}'
        ' ({{ .CommonLabels.severity }}){{ end }}\n'
        '{{ define "aifactory.text" }}{{ range .Alerts }}{{ .Annotations.summary }}\n'
        '{{ .Annotations.description }}\nRunbook: {{ .Annotations.runbook_url }}\n{{ end }}{{ end }}\n')}


def _alertmanager_secrets(cfg: BackendsView) -> list[str]:
    return sorted({r.secret.name for r in cfg.observability.alerting.receivers.values() if r.secret is not None})


def alertmanager_secret_reads(name: str, cfg: BackendsView, *,
                              opts: pulumi.ResourceOptions) -> list[k8s.core.v1.Secret]:
    """Reads every Secret a receiver names (`name`-receiver-secret-<Secret>), so `pulumi preview` and `up` stop
    with the Secret's name when one is missing, before the release that needs it: the chart mounts each of
    `alertmanagerSpec.secrets` as a volume, and a pod whose Secret volume is missing stays ContainerCreating
    (FailedMount) while the release itself succeeds. The read keeps the Secret's data in the stack's state, as
    a Pulumi secret (encrypted)."""
    ns = cfg.observability.namespace
    return [k8s.core.v1.Secret.get(f"{name}-receiver-secret-{secret}", f"{ns}/{secret}", opts=opts)
            for secret in _alertmanager_secrets(cfg)]


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
                "storageSpec": {"volumeClaimTemplate": {"spec": _claim(prometheus_volume_gib(cfg), cfg)}},
                "resources": _res("1", "4Gi", "4", "16Gi"),
                "securityContext": security.pod_security_context(uid=1000, fs_group=2000),
                **prometheus_mesh_pod_settings(),
            },
        },
        "alertmanager": {
            "config": alertmanager_config(cfg),
            "templateFiles": alert_templates(),
            "alertmanagerSpec": {
                "resources": _res("50m", "128Mi", "500m", "256Mi"),
                "securityContext": security.pod_security_context(uid=1000, fs_group=2000),
                "storage": {"volumeClaimTemplate": {"spec": _claim(ALERTMANAGER_VOLUME_GIB, cfg)}},
                "secrets": _alertmanager_secrets(cfg),
            },
        },
        "grafana": {
            "sidecar": {"dashboards": {"enabled": True, "label": DASHBOARD_LABEL, "labelValue": DASHBOARD_LABEL_VALUE,
                                       "searchNamespace": "ALL", "folderAnnotation": DASHBOARD_FOLDER_ANNOTATION,
                                       "provider": {"foldersFromFilesStructure": True}}},
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
        **control_plane_values(cfg),
    }


def collector_configmap(cfg: BackendsView) -> dict[str, Any]:
    """The Collector's ConfigMap: the chart mounts key `relay` as /conf/relay.yaml."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": COLLECTOR_CONFIGMAP, "namespace": cfg.observability.namespace,
                         "labels": dict(naming.MANAGED_BY)},
            "data": {COLLECTOR_CONFIG_KEY: dump_yaml(collector_config(cfg))}}


def config_checksum(data: dict[str, str]) -> str:
    """sha256 of a ConfigMap's data (keys sorted): what the pod template carries so that a config change
    rolls the pods. The chart's own `checksum/config` hashes its templates, a constant when the kit
    brings the ConfigMap (`configMap.create: false`; opentelemetry-collector chart `_helpers.tpl`)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


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
        "resources": _res("500m", "1Gi", "2", "2Gi"),
        "podSecurityContext": security.pod_security_context(uid=10001),
        "securityContext": security.container_security_context(),
    }


def _service_monitor(cfg: BackendsView, name: str, match_labels: dict[str, str],
                     endpoints: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": name, "namespace": cfg.observability.namespace, "labels": dict(naming.MANAGED_BY)},
            "spec": {"selector": {"matchLabels": match_labels}, "endpoints": endpoints}}


def collector_service_monitor(cfg: BackendsView) -> dict[str, Any]:
    """Scrapes the Collector's prometheus exporter (spanmetrics and the kit's OTLP metrics) and its own
    telemetry (what it received, sent, refused and dropped)."""
    return _service_monitor(cfg, "otel-collector", {"app.kubernetes.io/name": "opentelemetry-collector",
                                                    "app.kubernetes.io/instance": COLLECTOR_RELEASE},
                            [{"port": "prometheus", "interval": "15s"}, {"port": "metrics", "interval": "30s"}])


def jaeger_service_monitor(cfg: BackendsView) -> dict[str, Any]:
    """Scrapes Jaeger's own telemetry (otelcol_* on 8888, jaeger_config's telemetry reader): spans it received,
    refused, and failed to write to storage. The chart makes no ServiceMonitor; its one Service names the port
    `internal-metrics` and carries the chart's selector labels plus component all-in-one (jaeger chart 4.11.1
    templates/jaeger/jaeger-service.yaml, _helpers.tpl jaeger.selectorLabels: the name is the chart's)."""
    return _service_monitor(cfg, JAEGER_RELEASE, {"app.kubernetes.io/name": "jaeger",
                                                  "app.kubernetes.io/instance": JAEGER_RELEASE,
                                                  "app.kubernetes.io/component": "all-in-one"},
                            [{"port": "internal-metrics", "interval": "30s"}])


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


def _hours(retention: str) -> str:
    return f"{round(retention_days(retention) * 24)}h"


def jaeger_config(cfg: BackendsView) -> dict[str, Any]:
    """Jaeger v2's configuration (the chart's `userconfig`, passed as `--config`): OTLP in on every
    interface, Badger on the pod's volume with the configured trace retention as its TTL.

    Receivers name their endpoints: an OTLP receiver without one binds to localhost on the collector core
    Jaeger v2 is built on, so nothing outside the pod could reach it (the jaeger 4.0.0 chart's image,
    2.0.0-rc2, shipped exactly that; later images set JAEGER_LISTEN_HOST=0.0.0.0, jaeger cmd/jaeger/Dockerfile).
    """
    store = "badger_main"
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
            "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["batch"],
                                     "exporters": ["jaeger_storage_exporter"]}},
            "telemetry": {"resource": {"service.name": "jaeger"},
                          "metrics": {"level": "detailed", "readers": [
                              {"pull": {"exporter": {"prometheus": {"host": "0.0.0.0", "port": 8888}}}}]}},
        },
        "extensions": {
            # The chart probes GET /status on 13133 (jaeger chart 4.11.1 templates/jaeger/jaeger-deploy.yaml).
            "healthcheckv2": {"use_v2": True, "http": {"endpoint": "0.0.0.0:13133"}},
            "jaeger_query": {"storage": {"traces": store},
                             "http": {"endpoint": f"0.0.0.0:{JAEGER_QUERY_PORT}"},
                             "grpc": {"endpoint": "0.0.0.0:16685"}},
            "jaeger_storage": {"backends": {store: {"badger": {
                "directories": {"keys": f"{JAEGER_STORAGE_PATH}/keys", "values": f"{JAEGER_STORAGE_PATH}/values"},
                "ephemeral": False,
                "ttl": {"spans": _hours(cfg.observability.trace_retention)},
            }}}},
        },
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"0.0.0.0:{naming.OTEL_GRPC_PORT}"},
                                             "http": {"endpoint": f"0.0.0.0:{OTLP_HTTP_PORT}"}}}},
        "processors": {"batch": {}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": store}},
    }


def jaeger_volume_claim(cfg: BackendsView) -> dict[str, Any]:
    """The Badger volume. Not awaited: on a WaitForFirstConsumer class it binds when Jaeger's pod starts."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": JAEGER_VOLUME_CLAIM, "namespace": cfg.observability.namespace,
                         "labels": dict(naming.MANAGED_BY), "annotations": {"pulumi.com/skipAwait": "true"}},
            "spec": _claim(jaeger_volume_gib(cfg), cfg)}


def jaeger_values(cfg: BackendsView) -> dict[str, Any]:
    """Jaeger v2 (one all-in-one pod: OTLP in, query UI on 16686) on Badger. The chart (4.x after 4.0)
    names the component `jaeger` and serves OTLP and the UI from one Service named after fullnameOverride."""
    return {
        "fullnameOverride": JAEGER_RELEASE,
        "userconfig": jaeger_config(cfg),
        "jaeger": {
            "replicas": 1,  # Badger is a single-writer store on a ReadWriteOnce volume
            # The chart gives the pod no checksum of its config and renders no pod annotations, only
            # `podLabels` (templates/jaeger/jaeger-deploy.yaml): a label (63 characters at most) rolls it.
            "podLabels": {CONFIG_HASH_LABEL: config_checksum({"userconfig": dump_yaml(jaeger_config(cfg))})[:16]},
            "resources": _res("250m", "1Gi", "1", "4Gi"),
            "podSecurityContext": security.pod_security_context(uid=10001, fs_group=10001),
            "securityContext": security.container_security_context(),
            "extraVolumes": [{"name": JAEGER_VOLUME, "persistentVolumeClaim": {"claimName": JAEGER_VOLUME_CLAIM}}],
            "extraVolumeMounts": [{"name": JAEGER_VOLUME, "mountPath": JAEGER_STORAGE_PATH}],
        },
    }


def loki_values(cfg: BackendsView, bucket: LokiBucket | None = None) -> dict[str, Any]:
    """Loki in the configured mode. On AWS (`bucket` given) chunks and index live in the kit's S3 bucket,
    reached through the service account's IRSA role (no keys: the SDK's web-identity credentials). On an
    existing cluster Loki runs as one binary on its own volume: a single node, no replication."""
    obs = cfg.observability
    single = obs.loki_mode == "single-binary"
    store = "filesystem" if bucket is None else "s3"
    replicas = 0 if single else 3
    sc = cache_storage_class_name(cfg)

    def persistence(size_gib: int) -> dict[str, Any]:
        # Keep the claims when the StatefulSet is deleted or scaled: the chart (loki 6.53.0 values.yaml,
        # `singleBinary|write|backend.persistence.enableStatefulSetAutoDeletePVC: true`, `whenDeleted/whenScaled:
        # Delete`) renders persistentVolumeClaimRetentionPolicy Delete, which on one binary in filesystem mode
        # deletes the only copy of the logs. Retain is the Kubernetes default with the policy unset.
        # With it false the chart renders no policy at all (whenDeleted/whenScaled are read only when it is true,
        # and write/backend hard-code Delete then: templates/write/statefulset-write.yaml).
        return {"persistence": {"size": f"{size_gib}Gi", **({"storageClass": sc} if sc is not None else {}),
                                "enableStatefulSetAutoDeletePVC": False}}

    storage: dict[str, Any] = {"type": store}
    service_account: dict[str, Any] = {"create": True, "name": LOKI_SERVICE_ACCOUNT}
    if bucket is not None:
        storage.update(bucketNames={"chunks": bucket.bucket, "ruler": bucket.bucket, "admin": bucket.bucket},
                       s3={"region": bucket.region})
        service_account["annotations"] = {IRSA_ANNOTATION: bucket.role_arn}
    # The write path's WAL (and, in filesystem mode, the chunks) need a volume: sized from ingest there.
    wal = MIN_VOLUME_GIB if bucket is not None else loki_volume_gib(cfg)
    return {
        "fullnameOverride": LOKI_RELEASE,
        "deploymentMode": "SingleBinary" if single else "SimpleScalable",
        "serviceAccount": service_account,
        "loki": {
            "auth_enabled": False,
            "commonConfig": {"replication_factor": 1 if single else 3},
            "storage": storage,
            "schemaConfig": {"configs": [{"from": LOKI_SCHEMA_FROM, "store": "tsdb", "object_store": store,
                                          "schema": "v13",
                                          "index": {"prefix": LOKI_INDEX_TABLE_PREFIX, "period": "24h"}}]},
            "limits_config": {"retention_period": _hours(obs.retention), "allow_structured_metadata": True},
            "compactor": {"retention_enabled": True, "delete_request_store": store},
        },
        "singleBinary": {"replicas": 1 if single else 0, "resources": _res("500m", "1Gi", "2", "4Gi"),
                         **persistence(wal)},
        "read": {"replicas": replicas, "resources": _res("250m", "512Mi", "1", "2Gi")},
        "write": {"replicas": replicas, "resources": _res("250m", "1Gi", "1", "2Gi"), **persistence(wal)},
        "backend": {"replicas": replicas, "resources": _res("250m", "512Mi", "1", "2Gi"),
                    **persistence(MIN_VOLUME_GIB)},
        "minio": {"enabled": False},  # never the chart's demo store (default credentials, one replica)
        # Loki's own metrics (loki_distributor_bytes_received_total: what README's ingest calibration reads).
        # The chart renders the ServiceMonitor only if the CRD exists at install time (templates/monitoring/
        # servicemonitor.yaml: .Capabilities.APIVersions.Has), so the release waits for kube-prometheus-stack.
        # No MetricsInstance: that is the deprecated Grafana Agent Operator's CRD.
        "monitoring": {"serviceMonitor": {"enabled": True, "metricsInstance": {"enabled": False}}},
        "chunksCache": {"enabled": False},
        "resultsCache": {"enabled": False},
    }


def alloy_config(cfg: BackendsView) -> str:
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


def alloy_values(cfg: BackendsView) -> dict[str, Any]:
    return {
        "fullnameOverride": ALLOY_RELEASE,
        "controller": {"type": "daemonset", "tolerations": [{"operator": "Exists"}],  # every node's logs
                       "volumes": {"extra": [{"name": ALLOY_STORAGE_VOLUME, "hostPath": {
                           "path": ALLOY_HOST_PATH, "type": "DirectoryOrCreate"}}]}},
        "alloy": {
            "configMap": {"create": True, "content": alloy_config(cfg)},
            # Positions (how far each file was read) survive restarts on the node itself.
            "storagePath": ALLOY_STORAGE_PATH,
            "mounts": {"varlog": True, "extra": [{"name": ALLOY_STORAGE_VOLUME, "mountPath": ALLOY_STORAGE_PATH}]},
            "resources": _res("100m", "128Mi", "500m", "512Mi"),
        },
        # Alloy's own metrics (loki_write_dropped_entries_total: lines it gave up on). The chart renders the
        # ServiceMonitor whenever this is on, CRD or not (alloy chart 1.4.0 templates/servicemonitor.yaml; default
        # false in values.yaml), so the release waits for kube-prometheus-stack.
        "serviceMonitor": {"enabled": True},
    }


class Observability(pulumi.ComponentResource):
    """Metrics, traces and logs backends plus the Collector in the observability namespace."""
    pulumi_type = TYPE  # the type token (part of every child's URN); the component package hosts a subclass
    # with `aifactory:index:<name>`, the token its schema names (components/__main__.py)

    collector_otlp_grpc: pulumi.Output[str]
    """The Collector's OTLP/gRPC endpoint (host:port) for the cluster's workloads."""
    collector_otlp_http: pulumi.Output[str]
    """The Collector's OTLP/HTTP endpoint (host:port)."""

    def __init__(self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None, *,
                 loki_bucket: pulumi.Output["LokiBucket"] | None = None, after: Sequence[pulumi.Resource] = (),
                 mesh: Sequence[pulumi.Resource] = ()) -> None:
        """`loki_bucket`: the S3 bucket and IRSA role Loki uses (AWS); without it Loki keeps logs on its volume.
        `after`: what the releases wait for (system nodes, DNS, the storage class their claims name).
        `mesh`: what Prometheus waits for (default: nothing): istiod, whose injector gives its pod the sidecar
        that writes the mesh certificate its https scrapes present; a pod created first has none until restarted."""
        super().__init__(self.pulumi_type, name, None, opts)
        cfg = observability_spec(name, args)
        ns_name = cfg.observability.namespace
        # Node exporter and Alloy read host paths: the namespace cannot enforce more than privileged.
        self.namespace: k8s.core.v1.Namespace = create_namespace(
            f"{name}-ns", ns_name,
            labels=namespace_labels(pod_security="privileged", kubernetes_version=cfg.kubernetes_version),
            opts=pulumi.ResourceOptions(parent=self))
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *after])  # after: nodes, DNS, storage

        def chart(suffix: str, chart_: versions.HelmChart, release_name: str, values: pulumi.Input[dict[str, Any]],
                  opts: pulumi.ResourceOptions = in_ns) -> k8s.helm.v3.Release:
            return versions.release(f"{name}-{suffix}", chart_, release_name=release_name, namespace=ns_name,
                                    values=values, opts=opts)

        receiver_secrets = alertmanager_secret_reads(
            name, cfg, opts=pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *after]))
        self.prometheus_stack: k8s.helm.v3.Release = chart(
            "kube-prometheus-stack", versions.KUBE_PROMETHEUS_STACK, KPS_RELEASE, kube_prometheus_stack_values(cfg),
            pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *after, *mesh, *receiver_secrets]))
        pvc = jaeger_volume_claim(cfg)
        claim = k8s.core.v1.PersistentVolumeClaim(f"{name}-jaeger-storage", metadata=pvc["metadata"],
                                                  spec=pvc["spec"], opts=in_ns)
        chart("jaeger", versions.JAEGER, JAEGER_RELEASE, jaeger_values(cfg),
              pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, claim, *after]))
        chart("loki", versions.LOKI, LOKI_RELEASE,
              loki_values(cfg) if loki_bucket is None else loki_bucket.apply(lambda b: loki_values(cfg, b)),
              pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *after, self.prometheus_stack]))
        chart("alloy", versions.ALLOY, ALLOY_RELEASE, alloy_values(cfg),
              pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *after, self.prometheus_stack]))
        cm = collector_configmap(cfg)
        config = k8s.core.v1.ConfigMap(f"{name}-collector-config", metadata=cm["metadata"], data=cm["data"],
                                       opts=in_ns)
        chart("collector", versions.OTEL_COLLECTOR, COLLECTOR_RELEASE, collector_values(cfg),
              pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, config, *after]))
        sm = collector_service_monitor(cfg)
        k8s.apiextensions.CustomResource(
            f"{name}-collector-monitor", api_version=sm["apiVersion"], kind=sm["kind"], metadata=sm["metadata"],
            spec=sm["spec"], opts=pulumi.ResourceOptions(parent=self, depends_on=[self.prometheus_stack]))
        jm = jaeger_service_monitor(cfg)
        k8s.apiextensions.CustomResource(
            f"{name}-jaeger-monitor", api_version=jm["apiVersion"], kind=jm["kind"], metadata=jm["metadata"],
            spec=jm["spec"], opts=pulumi.ResourceOptions(parent=self, depends_on=[self.prometheus_stack]))
        pm = sidecar_pod_monitor(cfg)
        k8s.apiextensions.CustomResource(
            f"{name}-sidecar-monitor", api_version=pm["apiVersion"], kind=pm["kind"], metadata=pm["metadata"],
            spec=pm["spec"], opts=pulumi.ResourceOptions(parent=self, depends_on=[self.prometheus_stack]))
        collector = service_host(COLLECTOR_RELEASE, ns_name)
        self.collector_otlp_grpc = pulumi.Output.from_input(f"{collector}:{naming.OTEL_GRPC_PORT}")
        self.collector_otlp_http = pulumi.Output.from_input(f"{collector}:{OTLP_HTTP_PORT}")
        self.register_outputs({"namespace": ns_name, "collectorOtlpGrpc": f"{collector}:{naming.OTEL_GRPC_PORT}",
                               "collectorOtlpHttp": f"{collector}:{OTLP_HTTP_PORT}"})
