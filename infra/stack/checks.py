"""Checks that span sections: variants and their routing, fidelity gates, callers, quotas, AWS name lengths."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.k8s.defaults import DEFAULT_TRY_IDLE_SECONDS, TRY_IDLE_TTFT_FACTOR, TRY_IDLE_TTFT_WARN
from components.k8s.settings import (
    Fidelity,
    GatewayAuth,
    GatewaySettings,
    Model,
    NodePool,
    Tenant,
)
from infra.stack.reader import (
    _given,
    _Reader,
)


def _variant_checks(r: _Reader, models: Mapping[str, Model],
                    routing: Mapping[str, str]) -> None:
    """Variants of one workload: at least two, interactive, one tenant, no plain interactive model beside them,
    a cost that can be derived; gateway.routing names only workloads with variants."""
    groups: dict[str, list[Model]] = {}
    for m in sorted(models.values(), key=lambda m: m.name):
        if m.variant is not None:
            groups.setdefault(m.workload, []).append(m)
            path = f"models.{m.name}"
            if m.priority != "interactive":
                r.fail(f"{path}.priority", f"{m.priority!r}: variants serve interactive requests; a workload's batch "
                                           "requests (x-priority: batch) go to its one batch model, without variant")
            if r.problems_at(f"{path}.variant"):
                pass
            elif m.variant.cost_per_request is None and m.variant.requests_per_second is None:
                r.fail(f"{path}.variant.requestsPerSecond", "is required to derive the cost per request (pool GPU "
                                                            "price x GPUs per replica / throughput); or give "
                                                            "costPerRequest")
            elif m.variant.cost_per_request is None and m.mig_profile is not None:
                r.fail(f"{path}.variant.costPerRequest", f"is required: a MIG slice ({m.mig_profile}) has no price "
                                                         "per GPU to derive it from")
    for workload, vs in groups.items():
        first = vs[0]
        if len(vs) < 2:
            r.fail(f"models.{first.name}.variant", f"workload {workload!r} has no other variant; declare another model "
                                                   f"with workload {workload!r} and variant, or remove variant")
        for m in vs[1:]:
            if m.tenant != first.tenant:
                r.fail(f"models.{m.name}.tenant", f"{m.tenant!r} differs from {first.tenant!r} (models.{first.name}): "
                                                  f"variants of workload {workload!r} share one tenant")
        for m in sorted(models.values(), key=lambda m: m.name):
            if m.workload == workload and m.variant is None and m.priority == "interactive":
                r.fail(f"models.{m.name}.variant", f"is required: workload {workload!r} has variants "
                                                   f"({', '.join(v.name for v in vs)}); its interactive models are "
                                                   "all variants")
    for workload in routing:
        if workload not in groups:
            r.fail(f"gateway.routing.{workload}", f"{workload!r} is not a workload with variants; workloads with "
                                                  f"variants: {', '.join(sorted(groups)) or '(none)'}")


def _budget_checks(r: _Reader, models: Mapping[str, Model], tenants: Mapping[str, Tenant],
                   gateway: GatewaySettings) -> None:
    """gateway.routing.<workload>.tokenBudget names a workload some model serves; with any budget, the budget
    service's image is given."""
    workloads = sorted({m.workload for m in models.values()})
    for workload in gateway.token_budgets:
        if workload not in workloads:
            r.fail(f"gateway.routing.{workload}.tokenBudget", f"{workload!r} is not a workload of any model; "
                                                              f"workloads: {', '.join(workloads) or '(none)'}")
    declared = [f"tenants.{n}.tokenBudget" for n, t in sorted(tenants.items()) if t.token_budget] + \
        [f"gateway.routing.{w}.tokenBudget" for w in sorted(gateway.token_budgets)]
    if declared and not gateway.budget_service.image and not r.problems_at("gateway.budgetService.image"):
        r.fail("gateway.budgetService.image", f"is required: {', '.join(declared)} need the token budget service; "
                                              "build its image from components/k8s/gateway/budgets/Dockerfile and "
                                              "give its reference here")


def _fidelity_checks(r: _Reader, models: Mapping[str, Model], fidelity: Mapping[str, Fidelity]) -> None:
    """A gate's baseline is one of its workload's variants (the workload itself is checked with gateway.routing)."""
    for workload, gate in fidelity.items():
        variants = sorted(m.name for m in models.values() if m.workload == workload and m.variant is not None)
        if variants and gate.baseline not in variants:
            r.fail(f"gateway.routing.{workload}.fidelity.baseline",
                   f"{gate.baseline!r} is not a variant of workload {workload!r}; its variants: {', '.join(variants)}")
        if gate.job is not None and workload in variants:
            r.fail(f"gateway.routing.{workload}.fidelity.job",
                   f"cannot reach variant {workload!r} through the gateway: a model named like its workload has no "
                   "route of its own (the name routes to the workload); rename the model, or evaluate it with "
                   "`aifactory eval --url-for`")


# Pulumi autonames a resource `<name>-<7 random characters>` and refuses (at preview) a name whose result is longer
# than the provider's limit (pulumi-aws resources.go: IAM roles AutoName("name", 64, "-"); S3 buckets 63). The kit's
# longest autonamed names: "<cluster>-logs-bucket" (bucket), "<cluster>-<pool>-node" (node role),
# "model-<model>-s3" (an s3:// model's IRSA role).
AUTONAME_SUFFIX = 8
IAM_ROLE_NAME_MAX = 64
S3_BUCKET_NAME_MAX = 63


def _aws_name_lengths(r: _Reader, cluster: str, pools: Mapping[str, NodePool], models: Mapping[str, Model]) -> None:
    room = S3_BUCKET_NAME_MAX - AUTONAME_SUFFIX - len("-logs-bucket")
    if len(cluster) > room:
        r.fail("cluster.name", f"{cluster!r} is {len(cluster)} characters; at most {room} fit the names AWS allows "
                               f"for what the kit derives from it (the Loki bucket '{cluster}-logs-bucket-xxxxxxx' "
                               f"would pass S3's {S3_BUCKET_NAME_MAX})")
        return
    for p in pools.values():
        role = f"{cluster}-{p.name}-node"
        if len(role) + AUTONAME_SUFFIX > IAM_ROLE_NAME_MAX:
            r.fail(f"nodePools.{p.name}", f"pool name {p.name!r} is too long with cluster {cluster!r}: the node "
                                          f"role '{role}-xxxxxxx' would pass IAM's {IAM_ROLE_NAME_MAX} characters; "
                                          f"keep cluster name + pool name within "
                                          f"{IAM_ROLE_NAME_MAX - AUTONAME_SUFFIX - len('--node')} characters")
    for m in models.values():
        role = f"model-{m.name}-s3"
        if m.uri.startswith("s3://") and len(role) + AUTONAME_SUFFIX > IAM_ROLE_NAME_MAX:
            r.fail(f"models.{m.name}", f"an s3:// model's name is at most "
                                       f"{IAM_ROLE_NAME_MAX - AUTONAME_SUFFIX - len('model--s3')} characters: its "
                                       f"IRSA role '{role}-xxxxxxx' would pass IAM's {IAM_ROLE_NAME_MAX}")


def _issuer_tenants(r: _Reader, auth: GatewayAuth, tenants: Mapping[str, Tenant]) -> None:
    """An issuer's `tenants` name tenants of the stack, at least one."""
    for i, issuer in enumerate(auth.issuers):
        path = f"gateway.auth.issuers[{i}].tenants"
        if issuer.tenants is None or r.problems_at(path):
            continue
        if not issuer.tenants:
            r.fail(path, "is empty: its tokens could call nothing; list the tenants it may name, or leave tenants "
                         "out (any tenant)")
        for j, t in enumerate(issuer.tenants):
            if t not in tenants:
                r.fail(f"{path}[{j}]", f"{t!r} is not a tenant; tenants: {', '.join(sorted(tenants)) or '(none)'}")


def _cross_model_checks(r: _Reader, models: Mapping[str, Model], tenants: Mapping[str, Tenant], raw_tenants: Any
                        ) -> None:
    """Callers, one model per workload and priority, shareWith, and each tenant's GPU quota (`raw_tenants`: the
    stack file's `tenants`, to tell a quota of 0 from one left unset)."""
    by_workload: dict[tuple[str, str], list[Model]] = {}
    for m in models.values():
        if m.variant is None:  # variants: _variant_checks
            by_workload.setdefault((m.workload, m.priority), []).append(m)
        for i, caller in enumerate(m.callers):
            if caller not in models:
                r.fail(f"models.{m.name}.callers[{i}]",
                       f"{caller!r} is not a model; models: {', '.join(sorted(models))}")
    for (workload, priority), ms in by_workload.items():
        if len(ms) > 1:
            names = ", ".join(sorted(x.name for x in ms))
            r.fail(f"models.{ms[1].name}.workload", f"{workload!r} already has a {priority} model ({names}); "
                                                   "a workload has at most one interactive and one batch model")
    for t in tenants.values():
        for i, other in enumerate(t.share_with):
            if other not in tenants or other == t.name:
                r.fail(f"tenants.{t.name}.shareWith[{i}]",
                       f"{other!r} is not another tenant; other tenants: "
                       f"{', '.join(sorted(set(tenants) - {t.name})) or '(none)'}")
        need = sum(m.replicas.max * (m.gpus_per_replica if m.mig_profile is None else 0)
                   for m in models.values() if m.tenant == t.name)
        body = raw_tenants.get(t.name) if isinstance(raw_tenants, dict) else None
        if need > t.gpu_quota and not r.problems_at(f"tenants.{t.name}.gpuQuota"):  # a malformed quota is not 0
            given = _given(body if isinstance(body, dict) else None, "gpuQuota")
            r.fail(f"tenants.{t.name}.gpuQuota",
                   (f"{t.gpu_quota} is less than" if given else "is unset (null or absent: no GPUs), but")
                   + f" the {need} GPUs its models can scale to (replicas.max x gpusPerReplica); "
                   + ("raise it" if given else "set it") + f" to at least {need}")


def capacity_block_only_workloads(models: Mapping[str, Model], pools: Mapping[str, NodePool]) -> list[str]:
    """A warning for each workload whose interactive requests only models on capacity-block pools serve: a block's
    pool has nodes only inside its window (minSize and desiredSize 0, scheduled scale-up at its start), and the
    gateway sends no request elsewhere, so outside the window every interactive request gets Envoy's 503 (no healthy
    upstream). Valid (the block may be bought for exactly that window), so a warning, not a problem."""
    out = []
    workloads = sorted({m.workload for m in models.values() if m.priority == "interactive"})
    for workload in workloads:
        serving = sorted((m for m in models.values() if m.workload == workload and m.priority == "interactive"),
                         key=lambda m: m.name)
        blocks = [pools[m.pool] for m in serving if pools[m.pool].capacity.type == "capacity-block"]
        if len(blocks) == len(serving):
            windows = ", ".join(f"{m.name} on {p.name} ({p.capacity.start_time} to {p.capacity.end_time})"
                                for m, p in zip(serving, blocks, strict=True))
            out.append(f"models: workload {workload!r} is served interactively only from capacity blocks ({windows}): "
                       "outside a block's window its pool has no nodes and the gateway answers every interactive "
                       f"request to {workload!r} with 503; give the workload an interactive model on another pool "
                       "(as a variant), or have its clients send x-priority: batch outside the window")
    return out


def try_idle_warnings(models: Mapping[str, Model]) -> list[str]:
    """A warning for each generating model whose try idle timeout is at most TRY_IDLE_TTFT_WARN x its TTFT SLO: a
    streamed try is silent until its first token, so the slow first tokens the p95 SLO allows (long prefills, a deep
    queue) hit the timeout, are reset and re-run from scratch on another replica, and a stream may end 504. Valid
    (a model may prefer a fast retry), so a warning, not a problem."""
    out = []
    for m in sorted(models.values(), key=lambda m: m.name):
        limit = TRY_IDLE_TTFT_WARN * m.slo.ttft_seconds
        if m.task == "generate" and m.try_idle_timeout_seconds <= limit:
            out.append(f"models.{m.name}.tryIdleTimeoutSeconds: {m.try_idle_timeout_seconds:g} s is at most "
                       f"{TRY_IDLE_TTFT_WARN:g} x models.{m.name}.slo.ttftSeconds ({m.slo.ttft_seconds:g} s): a "
                       f"streamed try whose first token comes later is reset and re-run on another replica; set it "
                       f"above {limit:g} s (unset: max({DEFAULT_TRY_IDLE_SECONDS:g}, "
                       f"{TRY_IDLE_TTFT_FACTOR:g} x ttftSeconds), at most timeoutSeconds)")
    return out
