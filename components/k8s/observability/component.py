"""The Observability component: the namespace, the releases in order, and the monitors of the pipeline."""

# No `from __future__ import annotations`: TypedDict reads NotRequired (and the package analyzer the types) from
# evaluated annotations.
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import naming, versions
from components.k8s.namespaces import create_namespace, namespace_labels
from components.k8s.observability.alerting import alertmanager_secret_reads
from components.k8s.observability.alloy import ALLOY_RELEASE, alloy_values
from components.k8s.observability.collector import (
    COLLECTOR_RELEASE,
    collector_configmap,
    collector_service_monitor,
    collector_values,
)
from components.k8s.observability.jaeger import (
    JAEGER_RELEASE,
    jaeger_service_monitor,
    jaeger_values,
    jaeger_volume_claim,
)
from components.k8s.observability.loki import LOKI_RELEASE, LokiBucket, loki_values
from components.k8s.observability.prometheus import KPS_RELEASE, kube_prometheus_stack_values, sidecar_pod_monitor
from components.k8s.observability.spec import ObservabilityArgs, observability_spec
from components.k8s.otel_config import (
    OTLP_HTTP_PORT,
    service_host,
)

__all__ = [
    "TYPE",
    "Observability",
]

TYPE = "aifactory:k8s:Observability"  # the type token of the kit's existing stacks (part of every child's URN)


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
