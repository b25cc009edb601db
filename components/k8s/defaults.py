"""Defaults and fixed sizes the Kubernetes components share with the stack config (infra.config).

A light module on purpose (like components/aws/defaults.py): config validation imports it without pulling in
pulumi_kubernetes. Each component module re-exports the defaults of its own args.
"""

__all__ = ["IPAM_BLOCK_SIZE"]

IPAM_BLOCK_SIZE = 16  # RDMA-network addresses each InfiniBand node takes from infiniband.ipRange (nv-ipam block)
