"""synth time of a generated large AWS stack vs the same number of bare SDK resources under the same mocks."""

from __future__ import annotations

import json
import time
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.synth import run_program

POOLS, MODELS, TENANTS = 40, 150, 20
TARGET_RATIO = 1.3  # our cost per resource at most 1.3x a bare SDK resource's with the same payload
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
# (instance type, fabric, capacity): a mix of EFA types on demand and on blocks, and g-family pools.
POOL_KINDS = [
    ("p5.48xlarge", "efa", "on-demand"),
    ("p5.48xlarge", "efa", "capacity-block"),
    ("p5en.48xlarge", "efa", "on-demand"),
    ("p4d.24xlarge", "efa", "odcr"),
    ("g6e.12xlarge", "none", "on-demand"),
    ("g6.xlarge", "none", "on-demand"),
]


def _pool(i: int) -> dict[str, Any]:
    itype, fabric, capacity = POOL_KINDS[i % len(POOL_KINDS)]
    pool: dict[str, Any] = {"instanceType": itype, "fabric": fabric, "minSize": 2, "maxSize": 2 if capacity !=
                            "on-demand" else 8}
    if fabric == "efa":
        pool["availabilityZones"] = [ZONES[i % len(ZONES)]]
    if capacity != "on-demand":
        pool["capacity"] = {"type": capacity, "reservationId": f"cr-{i:017x}"}
    if capacity == "capacity-block":  # empty outside the block's window, scaled by scheduled actions
        pool["capacity"] |= {"startTime": "2026-12-01T11:30:00Z", "endTime": "2026-12-15T11:30:00Z"}
        pool["minSize"] = 0
    return pool


def large_stack_values() -> dict[str, str]:
    """`aifactory:*` config values (as the CLI passes them) for POOLS pools, MODELS models, TENANTS tenants."""
    raw: dict[str, Any] = {
        "target": {"provider": "aws", "region": "us-east-1", "availabilityZones": ZONES},
        "cluster": {"name": "aifactory-large", "apiAccess": "public-and-private",
                    "publicAccessCidrs": ["203.0.113.0/24"],
                    "adminRoleArns": ["arn:aws:iam::123456789012:role/platform-admin"]},
        "nodePools": {f"pool-{i:02d}": _pool(i) for i in range(POOLS)},
        "tenants": {f"tenant-{t:02d}": {"gpuQuota": 100_000} for t in range(TENANTS)},
        "models": {f"model-{m:03d}": {"engine": "vllm", "model": f"org/model-{m:03d}", "toolCallParser": "none",
                                      "tenant": f"tenant-{m % TENANTS:02d}",
                                      "pool": f"pool-{m % POOLS:02d}", "replicas": {"min": 1, "max": 2}}
                   for m in range(MODELS)},
    }
    return {f"aifactory:{k}": json.dumps(v) for k, v in raw.items()}


class Bare(pulumi.CustomResource):
    """The cheapest resource the SDK can register: no inputs, no typed args."""

    def __init__(self, name: str) -> None:
        super().__init__("bench:index:Bare", name, {})


def replay_bare(resources: list[Any], *, dependencies: bool = False) -> None:
    """Register every recorded resource again straight through the SDK: same type token, same inputs, no
    component wrappers, typed args or Outputs; each on its recorded provider. What the SDK costs for this exact
    payload. With `dependencies`, each also depends on the replayed resources its recorded `dependencies` name
    (state.json's, already expanded from components to their resources), so the SDK's own work per dependency (it
    checks every new edge for a cycle: pulumi/runtime/resource_cycle_breaker.py) is in the baseline too."""
    replayed: dict[str, pulumi.Resource] = {}
    for r in resources:  # export order: a resource's provider and dependencies come before it
        # On its recorded provider, as the program registered it: without one, every resource would be
        # attributed to a default provider after the run (infra/synth.py _default_providers, a package metadata
        # read per resource), which is the harness's work, not the SDK's.
        provider = replayed.get(r.provider.rsplit("::", 1)[0]) if r.provider else None
        opts = pulumi.ResourceOptions(
            provider=provider if isinstance(provider, pulumi.ProviderResource) else None,
            depends_on=[replayed[u] for u in r.dependencies if u in replayed] if dependencies else None)
        if r.type.startswith("pulumi:providers:"):
            replayed[r.urn] = pulumi.ProviderResource(r.type.split(":")[-1], f"bare-{r.name}", dict(r.inputs),
                                                      opts=opts)
        elif r.custom:
            replayed[r.urn] = pulumi.CustomResource(r.type, f"bare-{r.name}", dict(r.inputs), opts=opts)
        else:
            replayed[r.urn] = pulumi.ComponentResource(r.type, f"bare-{r.name}", opts=opts)


_CPU: dict[str, float] = {}  # CPU seconds of the process (every thread) per timed program, by label


def _timed(program, label: str = "") -> tuple[float, int]:
    run_program("large", large_stack_values(), program)  # warm: imports and first-call caches are not per-resource
    started, cpu = time.perf_counter(), time.process_time()
    result = run_program("large", large_stack_values(), program)
    _CPU[label] = time.process_time() - cpu
    return time.perf_counter() - started, len(result.resources)


def run() -> list[tuple[str, str]]:
    ours_s, ours_n = _timed(None, "ours")
    recorded = run_program("large", large_stack_values()).resources
    edges = sum(len(r.dependencies) for r in recorded)
    same_s, same_n = _timed(lambda _cfg: replay_bare(recorded), "same")
    deps_s, deps_n = _timed(lambda _cfg: replay_bare(recorded, dependencies=True))
    bare_s, bare_n = _timed(lambda _cfg: [Bare(f"bare-{i}") for i in range(ours_n - 1)])  # +1 default provider
    # A typed provider resource with no nested inputs: what the SDK itself costs for a pulumi-aws type.
    typed_s, typed_n = _timed(lambda _cfg: [aws.ec2.SecurityGroup(f"typed-{i}", vpc_id="vpc-1")
                                            for i in range(ours_n - 1)])
    ours_per, bare_per, typed_per, same_per = ours_s / ours_n, bare_s / bare_n, typed_s / typed_n, same_s / same_n
    deps_per = deps_s / deps_n
    return [
        ("large stack", f"{POOLS} pools, {MODELS} models, {TENANTS} tenants"),
        ("synth (ours)", f"{ours_s:6.2f} s  {ours_n:5d} resources  {ours_n / ours_s:7.0f} resources/s"),
        ("empty bare SDK", f"{bare_s:6.2f} s  {bare_n:5d} resources  {bare_n / bare_s:7.0f} resources/s"),
        ("typed pulumi-aws", f"{typed_s:6.2f} s  {typed_n:5d} resources  {typed_n / typed_s:7.0f} resources/s"),
        ("cost per resource", f"ours {ours_per * 1e3:.2f} ms, bare {bare_per * 1e3:.2f} ms, "
                              f"typed {typed_per * 1e3:.2f} ms"),
        ("dependencies", f"{edges} recorded ({edges / ours_n:.1f} per resource)"),
        ("bare SDK, same payload", f"{same_s:6.2f} s  {same_n:5d} resources  {same_n / same_s:7.0f} resources/s"
                                   "  (inputs only)"),
        ("  and same dependencies", f"{deps_s:6.2f} s  {deps_n:5d} resources  {deps_n / deps_s:7.0f} resources/s"),
        ("ratio ours/same payload", f"{ours_per / same_per:.2f}x (inputs only; target <= {TARGET_RATIO}x)"),
        ("  in CPU time", f"{(_CPU['ours'] / ours_n) / (_CPU['same'] / same_n):.2f}x (CPU seconds of the process: "
                          "what the work costs, less moved by a busy machine than wall time)"),
        ("ratio ours/same+deps", f"{ours_per / deps_per:.2f}x (inputs and dependencies: the kit's own cost; "
                                 f"target <= {TARGET_RATIO}x)"),
        ("ratio ours/empty bare", f"{ours_per / bare_per:.2f}x (an empty resource: SDK floor, not a like payload)"),
        ("ratio ours/typed", f"{ours_per / typed_per:.2f}x"),
    ]
