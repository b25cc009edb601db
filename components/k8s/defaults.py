"""Defaults and fixed sizes the Kubernetes components share with the stack config (infra.config).

A light module on purpose (like components/aws/defaults.py): config validation imports it without pulling in
pulumi_kubernetes. Each component module re-exports the defaults of its own args.
"""

__all__ = ["IPAM_BLOCK_SIZE", "DEFAULT_KUBERNETES_VERSION", "DEFAULT_GATEWAY_NAMESPACE", "DEFAULT_MONITORING_NAMESPACE"]

IPAM_BLOCK_SIZE = 16  # RDMA-network addresses each InfiniBand node takes from infiniband.ipRange (nv-ipam block)
DEFAULT_KUBERNETES_VERSION = "1.34"  # the cluster's minor version (Pod Security labels, chart choices)
DEFAULT_GATEWAY_NAMESPACE = "aifactory-gateway"  # where the Envoy gateway runs
DEFAULT_MONITORING_NAMESPACE = "monitoring"  # where Prometheus and the OpenTelemetry Collector run
