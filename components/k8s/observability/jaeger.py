"""Jaeger v2 (all-in-one, Badger on a PVC): its configuration, volume claim, chart values and ServiceMonitor."""

from typing import Any

from components.k8s import naming, security
from components.k8s.observability.common import CONFIG_HASH_LABEL, config_checksum, container_resources, service_monitor
from components.k8s.observability.sizing import jaeger_volume_gib, retention_hours, volume_claim_spec
from components.k8s.observability.spec import BackendsView
from components.k8s.otel_config import (
    OTLP_HTTP_PORT,
)
from components.vocabulary import dump_yaml

__all__ = [
    "JAEGER_RELEASE",
    "JAEGER_QUERY_PORT",
    "JAEGER_STORAGE_PATH",
    "JAEGER_VOLUME_CLAIM",
    "JAEGER_VOLUME",
    "jaeger_service_monitor",
    "jaeger_config",
    "jaeger_volume_claim",
    "jaeger_values",
]

JAEGER_RELEASE = "jaeger"
JAEGER_QUERY_PORT = 16686
JAEGER_STORAGE_PATH = "/badger"  # where the Jaeger pod mounts its volume
JAEGER_VOLUME_CLAIM = "jaeger-badger"
JAEGER_VOLUME = "badger"


def jaeger_service_monitor(cfg: BackendsView) -> dict[str, Any]:
    """Scrapes Jaeger's own telemetry (otelcol_* on 8888, jaeger_config's telemetry reader): spans it received,
    refused, and failed to write to storage. The chart makes no ServiceMonitor; its one Service names the port
    `internal-metrics` and carries the chart's selector labels plus component all-in-one (jaeger chart 4.11.1
    templates/jaeger/jaeger-service.yaml, _helpers.tpl jaeger.selectorLabels: the name is the chart's)."""
    return service_monitor(cfg, JAEGER_RELEASE, {"app.kubernetes.io/name": "jaeger",
                                                  "app.kubernetes.io/instance": JAEGER_RELEASE,
                                                  "app.kubernetes.io/component": "all-in-one"},
                            [{"port": "internal-metrics", "interval": "30s"}])


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
                "ttl": {"spans": retention_hours(cfg.observability.trace_retention)},
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
            "spec": volume_claim_spec(jaeger_volume_gib(cfg), cfg)}


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
            "resources": container_resources("250m", "1Gi", "1", "4Gi"),
            "podSecurityContext": security.pod_security_context(uid=10001, fs_group=10001),
            "securityContext": security.container_security_context(),
            "extraVolumes": [{"name": JAEGER_VOLUME, "persistentVolumeClaim": {"claimName": JAEGER_VOLUME_CLAIM}}],
            "extraVolumeMounts": [{"name": JAEGER_VOLUME, "mountPath": JAEGER_STORAGE_PATH}],
        },
    }
