"""Tenants (stack key `tenants`): a tenant's namespace, quotas, the gateway's token buckets for its callers, its token
budget, and the tenants it shares its models with."""

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

__all__ = ["BUDGET_WINDOWS", "STORE_FAILURE_MODES", "TokenBudget", "RateLimit", "Tenant"]


# The windows of a token budget: stack key, and its length in seconds (a day is a UTC calendar day: windows start at
# multiples of their length since the epoch, which has no leap seconds in Unix time).
BUDGET_WINDOWS = {"perMinute": 60, "perHour": 3600, "perDay": 86400}
STORE_FAILURE_MODES = ("open", "closed")


@dataclass(frozen=True, slots=True)
class TokenBudget:
    """Tokens a tenant's callers (or one workload's, gateway.routing.<workload>.tokenBudget) may spend per calendar
    window, counted across every gateway replica (docs/gateway.md, "Token budgets"). A request reserves its worst
    case at admission and settles its real usage at its end."""

    per_minute: int | None = setting(None, ge=1, derived=True, doc="Weighted tokens per UTC minute (default: no "
                                                                   "limit per minute).")
    per_hour: int | None = setting(None, ge=1, derived=True, doc="Weighted tokens per UTC hour (default: no limit "
                                                                 "per hour).")
    per_day: int | None = setting(None, ge=1, derived=True, doc="Weighted tokens per UTC calendar day (default: no "
                                                                "limit per day); give at least one window.")
    output_weight: float = setting(1.0, ge=0, le=100, doc="What one output token counts for, in input tokens "
                                                          "(generating costs more GPU than reading).")
    default_max_tokens: int = setting(4096, ge=1, le=1_000_000, doc="Output tokens reserved for a request that "
                                                                    "sets no max_tokens; the gateway sets it as the "
                                                                    "request's max_tokens, so the reservation bounds "
                                                                    "what it may generate.")
    prompt_bytes_per_token: float = setting(1.0, ge=1, le=8, doc="Request body bytes counted as one prompt token "
                                                                 "when reserving (1: a byte-level BPE token holds "
                                                                 "at least one byte, so the reservation is never "
                                                                 "short; larger values reserve less).")
    on_store_failure: str = setting("open", choices=STORE_FAILURE_MODES,
                                    doc="When the budget store cannot answer in time: admit the request "
                                        "uncounted (open, alerted) or refuse it with 503 (closed).")

    def limits(self) -> dict[str, int]:
        """The windows this budget limits, by stack key, in BUDGET_WINDOWS order."""
        given = {"perMinute": self.per_minute, "perHour": self.per_hour, "perDay": self.per_day}
        return {w: n for w, n in given.items() if n is not None}


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
    token_budget: TokenBudget | None = setting(None, doc="Tokens the tenant's callers may spend per minute, hour "
                                                         "and UTC day, across every gateway replica (default: no "
                                                         "budget).")
    share_with: tuple[str, ...] = setting((), pattern=DNS_LABEL_PATTERN, doc="Tenants whose callers may call this "
                                                                             "tenant's models (default: none).")
