"""Observability's arguments (ObservabilityArgs and its parts), what the build functions read (BackendsView),
and their validation into a BackendsSpec with every default applied."""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, NotRequired, Protocol, TypedDict

from components.k8s.defaults import DEFAULT_GATEWAY_NAMESPACE, DEFAULT_KUBERNETES_VERSION
from components.k8s.settings import (
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
from components.k8s.storage import StorageTargetView
from components.validation import Problems, check_shape

__all__ = [
    "IngestArgs",
    "VolumeSizesArgs",
    "SecretRefArgs",
    "AlertReceiverArgs",
    "HeartbeatArgs",
    "AlertingArgs",
    "ObservabilityArgs",
    "BackendsView",
    "BackendsSpec",
    "LOKI_MODES",
    "observability_spec",
]


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
    """The cluster's Kubernetes minor version (the Pod Security labels' version). Default: 1.35."""
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
