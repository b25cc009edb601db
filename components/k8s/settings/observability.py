"""Observability (stack key `observability`): where the backends run, retention, ingest and disk sizes, prices, the
workflow SLOs, and where alerts go."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from components.k8s.defaults import DEFAULT_MONITORING_NAMESPACE
from components.k8s.settings.base import DNS_LABEL_PATTERN, DURATION_PATTERN, NOT_A_DNS_LABEL, SecretRef, setting

__all__ = [
    "Tracing",
    "WorkflowSlo",
    "ALERT_SEVERITIES",
    "ALERT_RECEIVER_TYPES",
    "AlertReceiver",
    "Heartbeat",
    "AlertRoutes",
    "Alerting",
    "Ingest",
    "VolumeSizes",
    "ObservabilitySettings",
]


@dataclass(frozen=True)
class Tracing:
    """Where the OpenTelemetry Collector runs and the share of traces the engines and the gateway sample."""

    namespace: str
    trace_sample_ratio: float



@dataclass(frozen=True, slots=True)
class WorkflowSlo:
    latency_seconds: float = setting(30.0, ge=0.001, doc="A workflow is fast when it ends within this many seconds, "
                                                         "end to end.")
    latency_target: float = setting(0.99, ge=0.5, le=0.99999, doc="Share of workflows that must be fast (over 30 "
                                                                   "days; the rest is the latency error budget).")
    availability_target: float = setting(0.995, ge=0.5, le=0.99999, doc="Share of workflows that must succeed "
                                                                        "(over 30 days).")


ALERT_SEVERITIES = ("critical", "warning", "info")  # the severities the kit's (and the mixins') alerts carry
AlertReceiverType = Literal["slack", "pagerduty", "email", "webhook"]
ALERT_RECEIVER_TYPES: tuple[str, ...] = get_args(AlertReceiverType)


@dataclass(frozen=True, slots=True)
class AlertReceiver:
    """One Alertmanager receiver. Credentials are only ever a `secret` reference, never a config value:
    slack: the incoming-webhook URL; pagerduty: the Events v2 routing key; email: the SMTP password
    (optional); webhook: a bearer token (optional)."""

    name: str
    type: AlertReceiverType = setting(doc="The receiver's kind, which decides the "
                                                                          "other keys it takes.")
    secret: SecretRef | None = setting(None, doc="The Secret holding the credential: slack the incoming-webhook "
                                                 "URL, pagerduty the Events v2 routing key (both required); email "
                                                 "the SMTP password, webhook a bearer token (default: none).")
    channel: str | None = setting(None, doc="slack: the channel (required).")
    to: str | None = setting(None, pattern=r"^[^@\s]+@[^@\s]+$", invalid="is not an email address",
                             doc="email: the address alerts go to (required).")
    sender: str | None = setting(None, key="from", pattern=r"^[^@\s]+@[^@\s]+$", invalid="is not an email address",
                                 doc="email: the sender's address (required).")
    smarthost: str | None = setting(None, pattern=r"^[A-Za-z0-9.-]+:\d{1,5}$",
                                    invalid="is not host:port such as smtp.example.com:587",
                                    doc="email: the SMTP server, host:port (required).")
    username: str | None = setting(None, doc="email: the SMTP user (default: no SMTP authentication).")
    url: str | None = setting(None, pattern=r"^https?://[^\s]+$", invalid="is not an http(s):// URL",
                              doc="webhook: where alerts are posted, http(s):// (required).")


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The dead-man's switch: the always-firing Watchdog alert goes to `receiver` every `repeat_interval`, and
    the service behind it (a webhook heartbeat, PagerDuty/Opsgenie heartbeat) pages when the pings stop."""

    receiver: str = setting(doc="The receiver (one of alerting.receivers) the Watchdog alert pings.")
    repeat_interval: str = setting("5m", pattern=r"^[1-9][0-9]*(m|h)$", invalid="is not an interval of whole "
                                   "minutes or hours such as 5m or 1h", doc="How often the Watchdog alert is sent "
                                                                            "again (Alertmanager's "
                                                                            "repeat_interval); the heartbeat "
                                                                            "service pages when pings stop.")


@dataclass(frozen=True, slots=True)
class AlertRoutes:
    """The stack file's form of observability.alerting.routes (Alerting.routes): receivers per severity."""

    critical: tuple[str, ...] = setting((), doc="Receivers of critical alerts.")
    warning: tuple[str, ...] = setting((), doc="Receivers of warning alerts.")
    info: tuple[str, ...] = setting((), doc="Receivers of info alerts.")


@dataclass(frozen=True, slots=True)
class Alerting:
    """Where alerts go: receivers by name, and per severity the receivers that get it."""

    receivers: Mapping[str, AlertReceiver] = setting(default_factory=dict, pattern=DNS_LABEL_PATTERN,
                                                     doc="Alertmanager receivers by name (default: none).")
    routes: Mapping[str, tuple[str, ...]] = setting(default_factory=dict, form=AlertRoutes,
                                                    doc="Per severity, the receivers that get its alerts (default: "
                                                        "none: alerts stay in the UI).")
    heartbeat: Heartbeat | None = setting(None, doc="The dead-man's switch (default: none: the Watchdog alert goes "
                                                    "nowhere).")


@dataclass(frozen=True, slots=True)
class Ingest:
    """Expected ingest, the basis of every backend's disk size (see docs/observability.md, "Observability data")."""

    samples_per_second: int = setting(10_000, ge=1, doc="Prometheus samples per second the cluster ingests.")
    log_gib_per_day: float = setting(5.0, ge=0.01, doc="Raw log lines per day, GiB.")
    spans_per_second: int = setting(500, ge=1, doc="Spans per second reaching the Collector (after mesh sampling).")


@dataclass(frozen=True, slots=True)
class VolumeSizes:
    """Pinned disk sizes (GiB) of the observability backends. A StatefulSet's volume claim template cannot
    change, so once a backend's volume exists its size should stop following retention and ingest: pin it here.
    Changing a pinned size needs a volume resize (docs/observability.md, "Observability data")."""

    prometheus_gib: int | None = setting(None, ge=1, doc="Prometheus's volume, GiB (default: sized from ingest and "
                                                         "retention).")
    loki_gib: int | None = setting(None, ge=1, doc="Loki's volume in single-binary mode, GiB (default: sized from "
                                                   "ingest and retention).")
    jaeger_gib: int | None = setting(None, ge=1, doc="Jaeger's volume, GiB (default: sized from span ingest and "
                                                     "traceRetention).")


@dataclass(frozen=True, slots=True)
class ObservabilitySettings:
    namespace: str = setting(DEFAULT_MONITORING_NAMESPACE, pattern=DNS_LABEL_PATTERN, invalid=NOT_A_DNS_LABEL,
                             doc="The namespace of Prometheus, Grafana, Loki, Jaeger and the Collector.")
    retention: str = setting("15d", pattern=DURATION_PATTERN, invalid="is not a retention such as 15d or 720h",
                             doc="How long Prometheus keeps metrics (and Loki logs).")
    loki_mode: Literal["single-binary", "simple-scalable"] = setting(
        "single-binary", doc="Loki's deployment mode; simple-scalable needs object storage (provider aws).")
    trace_sample_ratio: float = setting(1.0, ge=0, le=1, doc="Share of traces the Collector keeps.")
    idle_gpu_utilization_percent: float = setting(10.0, ge=0, le=100, doc="GPUs under this utilisation count as "
                                                                          "idle, percent.")
    prices: Mapping[str, float] = setting(default_factory=dict, ge=0, item="a price in $/hour",
                                          doc="$/hour of one node by instance type (default: the catalog's on-demand "
                                              "price; required for a type without one).")
    default_workflow_slo: WorkflowSlo = setting(default_factory=WorkflowSlo, key="slo",
                                                doc="The SLO of every agent workflow not named in workflows.")
    workflows: Mapping[str, WorkflowSlo] = setting(default_factory=dict, pattern=DNS_LABEL_PATTERN,
                                                   doc="SLOs of named workflows; what one does not set is slo's "
                                                       "(default: none named).")
    trace_retention: str = setting("7d", pattern=DURATION_PATTERN, invalid="is not a retention such as 7d or 168h",
                                   doc="How long Jaeger keeps traces.")
    mesh_trace_sampling_percent: float = setting(1.0, ge=0, le=100, doc="Share of requests that start a trace at "
                                                                        "the mesh, percent.")
    control_plane_metrics: bool = setting(False, doc="Scrape the control plane (opt-in: EKS exposes none, kubeadm "
                                                     "binds them to 127.0.0.1).")
    ingest: Ingest = setting(default_factory=Ingest, doc="Expected ingest, the basis of the backends' disk sizes.")
    alerting: Alerting = setting(default_factory=Alerting, doc="Where alerts go.")
    runbook_url: str | None = setting(None, pattern=r"^https?://[^\s#]+$",
                                      invalid="is not an http(s) URL without a #fragment (alerts append #<alert>)",
                                      doc="Alerts link to <runbookUrl>#<alert name in lowercase> (default: "
                                          "dashboards.config.DEFAULT_RUNBOOK_URL).")
    volumes: VolumeSizes = setting(default_factory=VolumeSizes, doc="Pinned disk sizes of the backends (default: "
                                                                    "nothing pinned).")
