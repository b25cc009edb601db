"""The typed values the Kubernetes components' build functions read: their args with every default applied.

A component converts its `args` (a TypedDict) into these; infra.config builds the same values from the stack
file and re-exports them. A light module on purpose: no Pulumi, nothing of infra/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["RateLimit", "Tenant"]


@dataclass(frozen=True, slots=True)
class RateLimit:
    requests_per_second: int = 50  # default: 50
    burst: int = 100  # default: 100
    # batch traffic (x-priority: batch) of the calling tenant has a bucket of its own, so it cannot drain
    # the interactive one
    batch_requests_per_second: int = 50  # default: requestsPerSecond
    batch_burst: int = 100  # default: burst


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    namespace: str  # default: the tenant's name
    gpu_quota: int = 0  # default: 0 (raised to what the tenant's models can scale to is an error, not a guess)
    cpu_quota: str = "0"  # default: what gpuQuota and migQuota imply on the tenant's pools (their nodes' share)
    memory_quota: str = "0Gi"  # default: as cpuQuota
    mig_quota: Mapping[str, int] = field(default_factory=dict)  # default: per profile, what the models scale to
    rate_limit: RateLimit = field(default_factory=RateLimit)
    share_with: tuple[str, ...] = ()  # default: none; tenants whose callers may call this tenant's models
