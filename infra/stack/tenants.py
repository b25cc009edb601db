"""Tenants (`tenants`) and their quotas, derived from the models they run where not set."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from components.k8s.settings import (
    Model,
    NodePool,
    RateLimit,
    Tenant,
    TokenBudget,
)
from infra.stack.common import MIG_PROFILE_RE, _reserved_namespace
from infra.stack.reader import (
    _given,
    _Reader,
    _show,
)


def _tenant(r: _Reader, name: str, d: dict[str, Any]) -> Tenant:
    path = f"tenants.{name}"
    v = r.fields(Tenant, d, path)
    if "namespace" not in d:
        v["namespace"] = name
        if (why := _reserved_namespace(name)) is not None:
            # No namespace set: the tenant's name is its namespace, and must pass the same check.
            r.fail(path, f"the tenant's namespace defaults to its name, and {name!r} {why}; rename the tenant or "
                         f"set {path}.namespace to a namespace of its own")
    elif r.problems_at(f"{path}.namespace"):
        v["namespace"] = name
    elif (why := _reserved_namespace(v["namespace"])) is not None:
        r.fail(f"{path}.namespace", f"{_show(v['namespace'])} {why}")
        v["namespace"] = name
    rl_path = f"{path}.rateLimit"
    rl = v.pop("rate_limit")
    rld = d["rateLimit"] if isinstance(d.get("rateLimit"), dict) else {}
    burst = rl.burst if r.is_set(rld, rl_path, "burst") else max(rl.burst, rl.requests_per_second)
    rl = RateLimit(rl.requests_per_second, burst,
                   rl.batch_requests_per_second if r.is_set(rld, rl_path, "batchRequestsPerSecond")
                   else rl.requests_per_second,
                   rl.batch_burst if r.is_set(rld, rl_path, "batchBurst") else burst)
    v["token_budget"] = _token_budget(r, v["token_budget"], f"{path}.tokenBudget")
    return Tenant(name=name, **v, rate_limit=rl)


def _token_budget(r: _Reader, budget: TokenBudget | None, path: str) -> TokenBudget | None:
    """A budget limits at least one window; one read with a problem is left out (its problem is reported)."""
    if budget is None or r.problems_at(path):
        return None
    if not budget.limits():
        r.fail(path, "limits no window: set at least one of perMinute, perHour, perDay (weighted tokens per UTC "
                     "minute, hour, calendar day), or remove tokenBudget")
        return None
    return budget





_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P)?$")
_SCALE = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
          "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50}


def _quantity(value: str) -> float:
    """A Kubernetes quantity as a number (cores, or bytes); the value was checked against the pattern."""
    m = _QUANTITY.match(value)
    return float(m.group(1)) * _SCALE[m.group(2)] if m else 0.0


def _mig_slices(profile: str) -> int:
    """Compute slices (sevenths of a GPU) of a MIG profile: 1g.10gb is 1, 3g.40gb is 3."""
    return int(profile.split("g", 1)[0])


def _quota_profiles(pools: Mapping[str, NodePool], models: Mapping[str, Model]) -> list[str]:
    """MIG profiles the stack's nodes advertise as extended resources (a quota names each, or it is unlimited):
    what models request and the single-profile layouts (`all-1g.10gb` advertises nvidia.com/mig-1g.10gb)."""
    used = {m.mig_profile for m in models.values() if m.mig_profile}
    layouts = {p.mig.removeprefix("all-") for p in pools.values() if p.mig and MIG_PROFILE_RE.match(
        p.mig.removeprefix("all-"))}
    return sorted(used | layouts)


def _derive_quotas(r: _Reader, raw: Any, tenants: dict[str, Tenant], models: Mapping[str, Model],
                   pools: Mapping[str, NodePool]) -> dict[str, Tenant]:
    """Each tenant's CPU, memory and MIG quotas from what its GPU quota implies on its pools.

    A tenant's GPU (and MIG slice) quota admits pods whose CPU and memory are that many GPUs' share of
    a node (serving sizes model pods at 80% of that share, leaving room for the sidecar); a CPU or memory
    quota below it would reject pods the GPU quota admits (ResourceQuota admission rejects a pod whose
    requests or limits exceed what is left). The share is taken on the tenant's pool with the most CPU and
    memory per GPU. An explicit cpuQuota/memoryQuota may only raise it; migQuota defaults to what the
    tenant's models scale to, and every MIG profile of the stack is quota'd (0 for tenants that use none).
    """
    raw_tenants = raw if isinstance(raw, dict) else {}
    profiles = _quota_profiles(pools, models)
    out: dict[str, Tenant] = {}
    for name, t in tenants.items():
        body = raw_tenants.get(name)
        given: dict[str, Any] = body if isinstance(body, dict) else {}
        path = f"tenants.{name}"
        mine = [m for m in models.values() if m.tenant == name]
        need_mig = {p: sum(m.replicas.max for m in mine if m.mig_profile == p) for p in profiles}
        mig = {p: t.mig_quota[p] if p in t.mig_quota else need_mig[p] for p in sorted(set(profiles) | set(t.mig_quota))}
        for p, n in t.mig_quota.items():
            if n < need_mig.get(p, 0):
                r.fail(f"{path}.migQuota.{p}", f"{n} is less than the {need_mig[p]} slices its models can scale "
                                               f"to (replicas.max); raise it to at least {need_mig[p]}")
        gpu_pools = [pools[m.pool] for m in mine if m.pool in pools and pools[m.pool].gpu] or \
            [p for p in pools.values() if p.gpu]
        gpus = t.gpu_quota + sum(n * _mig_slices(p) for p, n in mig.items()) / 7
        cpu = math.ceil(gpus * max((p.instance.vcpus / p.instance.gpu_count for p in gpu_pools), default=0))
        mem = math.ceil(gpus * max((p.instance.memory_gib / p.instance.gpu_count for p in gpu_pools), default=0))
        cpu_q, mem_q = str(cpu), f"{mem}Gi"
        if _given(given, "cpuQuota"):
            if _quantity(t.cpu_quota) < cpu:
                r.fail(f"{path}.cpuQuota", f"{t.cpu_quota!r} is less than the {cpu} cores its GPU quota implies on "
                                           "its pools; pods the GPU quota admits would be rejected: raise it or "
                                           "remove it (default: derived)")
            cpu_q = t.cpu_quota
        if _given(given, "memoryQuota"):
            if _quantity(t.memory_quota) < mem * 2 ** 30:
                r.fail(f"{path}.memoryQuota", f"{t.memory_quota!r} is less than the {mem}Gi its GPU quota implies on "
                                              "its pools; pods the GPU quota admits would be rejected: raise it or "
                                              "remove it (default: derived)")
            mem_q = t.memory_quota
        out[name] = dataclasses.replace(t, cpu_quota=cpu_q, memory_quota=mem_q, mig_quota=mig)
    return out
