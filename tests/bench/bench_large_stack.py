"""synth cost of a generated large AWS stack vs a bare program declaring the same resources, under the same mocks.

Each program is timed in a process of its own (`python -m tests.bench.bench_large_stack KIND RECORDED`): one run to
warm imports and first-call caches, then the timed run, in CPU seconds of that process (getrusage: user and system,
every thread), which a busy machine moves less than wall time."""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import io
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
import typing
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi import _types

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


# Options a program passes to a constructor, besides the three the replays map themselves (provider, depends_on and
# the parent they leave out) and those a typed constructor adds on its own (version, aliases).
PASSED_OPTIONS = ("protect", "retain_on_delete", "ignore_changes", "delete_before_replace", "replace_on_changes",
                  "custom_timeouts", "additional_secret_outputs")


@dataclass(frozen=True)
class Constructed:
    """What a program handed the SDK for one resource: the class it called and the options it passed."""

    cls: type
    options: dict[str, Any]


@dataclass(frozen=True)
class Recorded:
    """The kit's run of the large stack: its registrations (infra.mocks.Registration, export order) and, by
    (type token, name), what constructed each (the default providers the harness adds after a run have none)."""

    resources: list[Any]
    constructed: dict[tuple[str, str], Constructed]


def record(stack: str, values: dict[str, str]) -> Recorded:
    """Run the kit's program on `stack` once, noting the class and options behind every resource it registers."""
    constructed: dict[tuple[str, str], Constructed] = {}
    init = pulumi.Resource.__init__

    def noting(self: pulumi.Resource, t: str, name: str, *args: Any, **kwargs: Any) -> None:
        opts = kwargs.get("opts") if "opts" in kwargs else (args[2] if len(args) > 2 else None)
        passed = {k: getattr(opts, k) for k in PASSED_OPTIONS if opts is not None and getattr(opts, k) is not None}
        constructed[(t, name)] = Constructed(type(self), passed)
        init(self, t, name, *args, **kwargs)

    pulumi.Resource.__init__ = noting  # type: ignore[method-assign]
    try:
        resources = run_program(stack, values).resources
    finally:
        pulumi.Resource.__init__ = init  # type: ignore[method-assign]
    return Recorded(resources, constructed)


@functools.cache
def _keywords(cls: type) -> dict[str, str]:
    """Pulumi property name -> the constructor's keyword for it, for the keywords the class's `_internal_init`
    takes (its `__init__` is `*args, **kwargs` in pulumi-aws); the SDK's own table, `<Class>Args` beside the class
    (pulumi/_types.py input_type_py_to_pulumi_names), `<Class>InitArgs` where a nested type took that name."""
    module = vars(sys.modules[cls.__module__])
    (args_cls,) = [module[n] for n in (f"{cls.__name__}InitArgs", f"{cls.__name__}Args")
                   if n in module and module[n].__module__ == cls.__module__]
    taken = set(inspect.signature(cls._internal_init).parameters)  # type: ignore[attr-defined]
    return {pulumi_name: py for py, pulumi_name in _types.input_type_py_to_pulumi_names(args_cls).items()
            if py in taken}


def replay_typed(recorded: Recorded) -> None:
    """The kit's resources as a flat bare program declares them: each custom resource through the class the kit
    called (`pulumi_kubernetes.apps.v1.StatefulSet(...)`, `pulumi_aws.eks.Cluster(...)`), from the top level, with
    its recorded inputs as the constructor's keywords, its provider, the options the kit passed and its recorded
    dependencies (state.json's, components expanded to their resources; implicit ones from Outputs included, as the
    inputs here are plain values) as `depends_on`; no parents. Components are registered as plain
    `ComponentResource`s of their type, so the same resources exist. Providers the harness adds for resources
    without one (infra/synth.py _default_providers) are left to it, as a program leaves them to the engine."""
    replayed: dict[str, pulumi.Resource] = {}
    for r in recorded.resources:  # export order: a resource's provider and dependencies come before it
        made = recorded.constructed.get((r.type, r.name))
        if made is None:  # a default provider
            continue
        provider = replayed.get(r.provider.rsplit("::", 1)[0]) if r.provider else None
        opts = pulumi.ResourceOptions(
            provider=provider if isinstance(provider, pulumi.ProviderResource) else None,
            depends_on=[replayed[u] for u in r.dependencies if u in replayed] or None, **made.options)
        if not r.custom:
            replayed[r.urn] = pulumi.ComponentResource(r.type, r.name, opts=opts)
            continue
        keywords = _keywords(made.cls)
        if r.external:  # read, not managed: `Class.get(name, id)`
            replayed[r.urn] = made.cls.get(r.name, r.id, opts=opts)  # type: ignore[attr-defined]
            continue
        inputs = r.inputs
        if issubclass(made.cls, pulumi.ProviderResource):
            inputs = {k: _provider_input(made.cls, keywords.get(k), v) for k, v in inputs.items()}
        replayed[r.urn] = made.cls(r.name, opts=opts, **{keywords[k]: v for k, v in inputs.items() if k in keywords})


def _provider_input(cls: type, keyword: str | None, value: str) -> Any:
    """A provider's input as a program gives it: a typed provider sends the inputs its keywords do not take as
    strings JSON-encoded (pulumi-aws 7.51.1 provider.py `_internal_init`: `.apply(pulumi.runtime.to_json)`), and
    the mocks record what it sent."""
    hint = inspect.signature(cls._internal_init).parameters[keyword].annotation if keyword else str  # type: ignore[attr-defined]
    return value if str in (hint, *typing.get_args(hint)) else json.loads(value)


def replay_inputs(resources: list[Any]) -> None:
    """Register every recorded resource again as a plain `CustomResource`: same type token, same inputs, no
    component wrappers, typed args or Outputs; each on its recorded provider. The SDK engine's floor for this
    payload: no typed translation of inputs and outputs, and no source positions (pulumi 3.272
    runtime/resource.py `_get_stack_trace` finds no third `__init__` above a plain `CustomResource` called from a
    program, so it sends an empty trace) and no dependencies."""
    replayed: dict[str, pulumi.Resource] = {}
    for r in resources:  # export order: a resource's provider and dependencies come before it
        # On its recorded provider, as the program registered it: without one, every resource would be
        # attributed to a default provider after the run (infra/synth.py _default_providers), which is the
        # harness's work, not the SDK's.
        provider = replayed.get(r.provider.rsplit("::", 1)[0]) if r.provider else None
        opts = pulumi.ResourceOptions(
            provider=provider if isinstance(provider, pulumi.ProviderResource) else None)
        if r.type.startswith("pulumi:providers:"):
            replayed[r.urn] = pulumi.ProviderResource(r.type.split(":")[-1], f"bare-{r.name}", dict(r.inputs),
                                                      opts=opts)
        elif r.custom:
            replayed[r.urn] = pulumi.CustomResource(r.type, f"bare-{r.name}", dict(r.inputs), opts=opts)
        else:
            replayed[r.urn] = pulumi.ComponentResource(r.type, f"bare-{r.name}", opts=opts)


def differences(ours: list[Any], replay: list[Any]) -> list[str]:
    """How a replay's registrations differ from the kit's: resources per type, inputs per resource (the kit's URN
    matched to the replay's by type and name, as the replay has no parents) and the number of dependency edges."""
    problems = []
    count_ours, count_replay = Counter(r.type for r in ours), Counter(r.type for r in replay)
    if count_ours != count_replay:
        problems.append(f"resources per type: ours {dict(count_ours - count_replay)}, "
                        f"replay {dict(count_replay - count_ours)}")
    by_key = {(r.type, r.name): r for r in replay}
    for r in ours:
        other = by_key.get((r.type, r.name))
        if other is not None and other.inputs != r.inputs:
            problems.append(f"inputs of {r.urn}: {r.inputs} != {other.inputs}")
    edges_ours, edges_replay = (sum(len(r.dependencies) for r in rs) for rs in (ours, replay))
    if edges_ours != edges_replay:
        problems.append(f"dependency edges: ours {edges_ours}, replay {edges_replay}")
    return problems


PROGRAMS = {  # kind -> the program a child process times, given the kit's recorded run
    "ours": lambda _recorded: None,  # infra.program.program
    "same constructors": lambda recorded: lambda _cfg: replay_typed(recorded),
    "inputs only": lambda recorded: lambda _cfg: replay_inputs(recorded.resources),
}
RUNS = 3  # per program, interleaved; the minimum is reported


@dataclass(frozen=True)
class Timing:
    cpu_s: float
    wall_s: float
    resources: int


def _child(kind: str, recorded_path: str) -> None:
    """Time one program in this process and print its Timing as JSON."""
    import infra.program  # noqa: F401  the SDKs' modules as the program imports them, before pickle imports classes

    recorded = None
    if kind != "ours":  # (the classes pickle imports by module path upset pulumi-aws's lazy submodules for the kit)
        with open(recorded_path, "rb") as f:
            recorded = pickle.load(f)
    program = PROGRAMS[kind](recorded)
    run_program("large", large_stack_values(), program)  # warm
    gc.collect()
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    result = run_program("large", large_stack_values(), program)
    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - started
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(json.dumps({"cpu_s": cpu, "wall_s": wall, "resources": len(result.resources)}))


def _timed(kind: str, recorded_path: str) -> Timing:
    # stderr is kept for a failure only: the kit's program logs the generated stack's warnings (its capacity-block-only
    # workloads, add-ons without a pinned version) at every run, which are the stack's findings, not the bench's.
    run = subprocess.run([sys.executable, "-m", __name__, kind, recorded_path], capture_output=True, text=True,
                         env=os.environ | {"PYTHONPATH": os.getcwd()})
    if run.returncode != 0:
        raise RuntimeError(f"the {kind!r} program exited {run.returncode}:\n{run.stderr}")
    return Timing(**json.loads(run.stdout.splitlines()[-1]))


def run() -> list[tuple[str, str]]:
    values = large_stack_values()
    with contextlib.redirect_stderr(io.StringIO()):  # the stack's warnings, as in _timed
        recorded = record("large", values)
        problems = differences(recorded.resources, run_program("large", values, PROGRAMS["same constructors"](
            recorded)).resources)
    if problems:  # a baseline that registers something else measures nothing
        raise AssertionError("the same-constructor replay differs from the kit's run:\n" + "\n".join(problems))
    edges = sum(len(r.dependencies) for r in recorded.resources)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/recorded.pickle"
        with open(path, "wb") as f:
            pickle.dump(recorded, f)
        timings: dict[str, list[Timing]] = {kind: [] for kind in PROGRAMS}
        for _ in range(RUNS):
            for kind in PROGRAMS:
                timings[kind].append(_timed(kind, path))
                load.append(os.getloadavg()[0])
    best = {kind: min(ts, key=lambda t: t.cpu_s) for kind, ts in timings.items()}
    ours = best["ours"]
    rows = [("large stack", f"{POOLS} pools, {MODELS} models, {TENANTS} tenants: {ours.resources} resources, "
                            f"{edges} dependency edges")]
    for kind, t in best.items():
        rows.append((kind, f"{t.cpu_s:6.2f} s CPU  {t.wall_s:6.2f} s wall  {t.resources:5d} resources  "
                           f"(CPU of {RUNS} runs: {', '.join(f'{x.cpu_s:.2f}' for x in timings[kind])})"))
    rows += [
        ("ratio ours/same constructors", f"{ours.cpu_s / best['same constructors'].cpu_s:.2f}x CPU (the bare "
                                         f"program a user would write: the same classes, inputs, options and "
                                         f"dependencies; target <= {TARGET_RATIO}x)"),
        ("ratio ours/inputs only", f"{ours.cpu_s / best['inputs only'].cpu_s:.2f}x CPU (plain CustomResources: the "
                                   f"SDK engine's floor, no typed translation, source positions or dependencies)"),
        ("load average", f"{min(load):.1f}-{max(load):.1f} (1 min, {os.cpu_count()} CPUs)"),
    ]
    return rows


if __name__ == "__main__":
    _child(*sys.argv[1:])
