"""Tenants (stack key `tenants`): a tenant's namespace, quotas, the gateway's token buckets for its callers, and the
tenants it shares its models with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from components.k8s.settings.base import (
    DNS_LABEL_PATTERN,
    MIG_PROFILE_PATTERN,
    NOT_A_DNS_LABEL,
    NOT_A_MIG_PROFILE,
    QUANTITY_PATTERN,
    setting,
)

__all__ = ["RateLimit", "Tenant"]


@dataclass(frozen=True, slots=True)
class RateLimit:
    """The gateway's token buckets for one tenant's callers; batch traffic (x-priority: batch) has a bucket of its
    own, so it cannot drain the interactive one."""

    requests_per_second: int = setting(50, ge=1, doc="Interactive requests per second the tenant's callers may "
                                                     "send (the bucket's refill).")
    burst: int = setting(100, ge=1, derived=True, doc="Interactive requests above the rate the bucket lets through "
                                                      "at once (default: 100, or requestsPerSecond when larger).")
    batch_requests_per_second: int = setting(50, ge=1, derived=True, doc="Batch requests per second (default: "
                                                                         "requestsPerSecond).")
    batch_burst: int = setting(100, ge=1, derived=True, doc="The batch bucket's burst (default: burst).")


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    namespace: str = setting("", pattern=DNS_LABEL_PATTERN, invalid=NOT_A_DNS_LABEL, derived=True,
                             doc="The tenant's namespace (default: the tenant's name); not one of Kubernetes' or "
                                 "the platform's own.")
    gpu_quota: int = setting(0, ge=0, doc="GPUs the tenant's namespace may request (its ResourceQuota); must cover "
                                          "what its models scale to.")
    cpu_quota: str = setting("0", pattern=QUANTITY_PATTERN, invalid="is not a Kubernetes quantity", derived=True,
                             doc="CPU the namespace may request, a Kubernetes quantity (default: what gpuQuota and "
                                 "migQuota imply on the tenant's pools, their nodes' share).")
    memory_quota: str = setting("0Gi", pattern=QUANTITY_PATTERN, invalid="is not a Kubernetes quantity",
                                derived=True, doc="Memory the namespace may request, a Kubernetes quantity "
                                                  "(default: as cpuQuota).")
    mig_quota: Mapping[str, int] = setting(default_factory=dict, ge=0, pattern=MIG_PROFILE_PATTERN, derived=True,
                                           invalid=NOT_A_MIG_PROFILE, item="a slice count",
                                           doc="MIG slices the namespace may request, by profile (1g.10gb: 2) "
                                               "(default: per profile, what the tenant's models scale to; every MIG "
                                               "profile of the stack has a quota, 0 for a tenant that uses none).")
    rate_limit: RateLimit = setting(default_factory=RateLimit, doc="The gateway's token buckets for the tenant's "
                                                                   "callers.")
    share_with: tuple[str, ...] = setting((), pattern=DNS_LABEL_PATTERN, doc="Tenants whose callers may call this "
                                                                             "tenant's models (default: none).")
