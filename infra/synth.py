"""`aifactory synth`: run the Pulumi program offline under the SDK's mock monitor and write artifacts.

No Pulumi CLI, engine or cloud is involved. The stack file is read the way the CLI reads it (structured
values passed as JSON text), the program in infra/program.py runs unchanged, and every resource it
registers is recorded with what a `pulumi stack export` would hold. Artifact writers (infra/writers/)
then render the result into a temporary directory that replaces the output directory only when all
of them have succeeded.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from infra.config import NAMESPACE, ConfigError, PlatformConfig, Problem

__all__ = [
    "PROJECT",
    "DEFAULT_STACKS_DIR",
    "StackFileError",
    "SynthResult",
    "SynthSummary",
    "stack_file",
    "read_stack_config",
    "raw_for_validation",
    "load_stack",
    "shipped_stacks",
    "run_program",
    "synth",
    "state_export",
]

PROJECT = NAMESPACE
DEFAULT_STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"
EXPORT_TIME = "1970-01-01T00:00:00Z"  # fixed: same config, same bytes

Progress = Callable[[str], None]


class StackFileError(Exception):
    """The stack file is missing or is not a Pulumi stack config file."""


@dataclass(frozen=True)
class SynthResult:
    stack: str
    config: PlatformConfig
    stack_urn: str
    stack_outputs: dict[str, Any]
    resources: list[Any]  # infra.mocks.Registration, in stack-export order


@dataclass
class SynthSummary:
    stack: str
    out: Path
    resources: int
    by_type: Counter[str]
    artifacts: dict[str, list[Path]]
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    preflight: list[Any] = field(default_factory=list)  # policies.preflight.Finding (preflight-report.json)


def stack_file(stack: str, stacks_dir: Path | None = None) -> Path:
    return (stacks_dir or DEFAULT_STACKS_DIR) / f"Pulumi.{stack}.yaml"


def read_stack_config(path: Path) -> dict[str, str]:
    """The stack's config as the Pulumi CLI hands it to a program: `ns:key` -> text (JSON for objects)."""
    if not path.is_file():
        known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        raise StackFileError(f"{path}: no such stack file; stacks: {', '.join(known) or '(none)'}")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise StackFileError(f"{path}{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config", {}), dict):
        raise StackFileError(f"{path}: expected a mapping with a 'config:' mapping (Pulumi stack settings)")
    values: dict[str, str] = {}
    problems = []
    for key, value in (doc.get("config") or {}).items():
        key = str(key)
        full = key if ":" in key else f"{PROJECT}:{key}"
        if isinstance(value, dict) and set(value) == {"secure"}:
            problems.append(Problem(key.partition(":")[2] or key, "is a Pulumi secret; offline synth cannot "
                                    "decrypt it: keep secrets out of what synth needs, or use `pulumi up`"))
            continue
        values[full] = value if isinstance(value, str) else json.dumps(value)
    if problems:
        raise ConfigError(problems, source=str(path))
    return values


def raw_for_validation(values: Mapping[str, str]) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for full, text in values.items():
        ns, _, key = full.partition(":")
        if ns == PROJECT:
            raw[key] = json.loads(text) if text.lstrip()[:1] in ("{", "[") else text
    return raw


def shipped_stacks(stacks_dir: Path | None = None) -> list[str]:
    """Names of the stacks that have a Pulumi.<stack>.yaml file."""
    files = (stacks_dir or DEFAULT_STACKS_DIR).glob("Pulumi.*.yaml")
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in files)


def load_stack(stack: str, stacks_dir: Path | None = None) -> PlatformConfig:
    """The validated PlatformConfig of a stack file, without running the program."""
    from infra.config import parse

    return parse(raw_for_validation(read_stack_config(stack_file(stack, stacks_dir))), stack=stack)


def run_program(stack: str, values: Mapping[str, str], program: Callable[[PlatformConfig], None] | None = None,
                ) -> SynthResult:
    """Run `program` (default: infra.program.program) under mocks in a fresh context; return what it registered."""
    # A fresh context (Pulumi keeps its settings, config and root resource in context variables) and a
    # fresh event loop per run: runs stay independent of each other and of whatever ran before.
    loop = asyncio.new_event_loop()
    previous = asyncio.get_event_loop_policy()._local._loop  # type: ignore[attr-defined]
    asyncio.set_event_loop(loop)
    try:
        return contextvars.Context().run(_run_program, stack, dict(values), program)
    finally:
        asyncio.set_event_loop(previous)
        loop.close()


def _run_program(stack: str, values: dict[str, str], program: Callable[[PlatformConfig], None] | None
                 ) -> SynthResult:
    import pulumi
    from pulumi.runtime import config as runtime_config
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    from infra.config import load
    from infra.mocks import PlatformMocks, RecordingMonitor

    if program is None:
        from infra.program import program as default_program

        program = default_program

    runtime_config.set_all_config(values, [])
    mocks = PlatformMocks()
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    cfg = load()
    if cfg.target.region:
        mocks.region = cfg.target.region

    def main() -> None:
        program(cfg)
        # set_mocks finishes the root Stack before the program runs; under the CLI the Stack registers
        # its outputs after the program. Re-arm it so `pulumi.export`s reach state.json the same way.
        root = pulumi.runtime.settings.get_root_resource()
        root._outputs_registered = False  # type: ignore[union-attr]
        root._finish()  # type: ignore[union-attr]

    _sync_await(run_pulumi_func(main))
    return SynthResult(
        stack=stack,
        config=cfg,
        stack_urn=monitor.stack_urn,
        stack_outputs=dict(sorted(monitor.stack_outputs.items())),
        resources=_export_order(list(monitor.registrations.values()), stack, monitor.stack_urn),
    )


def _default_providers(regs: list[Any], stack: str) -> list[Any]:
    """Providers the engine would create for resources registered without an explicit provider."""
    from infra.mocks import Registration, _uuid

    out = {}
    for r in regs:
        if r.custom and not r.provider and not r.type.startswith("pulumi:providers:"):
            pkg = r.type.split(":")[0]
            try:
                version = metadata.version(f"pulumi_{pkg}")
            except metadata.PackageNotFoundError:
                version = "0.0.0"
            name = f"default_{version.replace('.', '_')}"
            urn = f"urn:pulumi:{stack}::{PROJECT}::pulumi:providers:{pkg}::{name}"
            pid = _uuid(urn)
            out[pkg] = Registration(urn, f"pulumi:providers:{pkg}", name, True, "", "", pid,
                                    {"version": version}, {"version": version})
            r.provider = f"{urn}::{pid}"
    return list(out.values())


def _export_order(regs: list[Any], stack: str, stack_urn: str) -> list[Any]:
    """Parents, providers and dependencies before dependents; ties broken by URN (deterministic)."""
    regs = _default_providers(regs, stack) + regs
    by_urn = {r.urn: r for r in regs}
    for r in regs:
        if not r.parent and not r.type.startswith("pulumi:providers:"):
            r.parent = stack_urn
    deps: dict[str, set[str]] = {}
    for r in regs:
        before = {r.parent} | set(r.dependencies)
        if r.provider:
            before.add(r.provider.rsplit("::", 1)[0])
        deps[r.urn] = {u for u in before if u in by_urn and u != r.urn}
    children: dict[str, list[str]] = {u: [] for u in by_urn}
    for urn, ds in deps.items():
        for d in ds:
            children[d].append(urn)
    ready = [u for u, ds in deps.items() if not ds]
    heapq.heapify(ready)
    ordered: list[Any] = []
    remaining = {u: len(ds) for u, ds in deps.items()}
    while ready:
        u = heapq.heappop(ready)
        ordered.append(by_urn[u])
        for c in children[u]:
            remaining[c] -= 1
            if remaining[c] == 0:
                heapq.heappush(ready, c)
    if len(ordered) != len(regs):  # a cycle cannot come from a real program; keep every resource anyway
        ordered += sorted((r for r in regs if r not in ordered), key=lambda r: r.urn)
    return ordered


def state_export(result: SynthResult) -> dict[str, Any]:
    """The result in Pulumi's stack-export format (`pulumi stack export`, version 3)."""
    stack_res = {"urn": result.stack_urn, "custom": False, "type": "pulumi:pulumi:Stack",
                 "outputs": result.stack_outputs}
    resources = [stack_res]
    for r in result.resources:
        entry: dict[str, Any] = {"urn": r.urn, "custom": r.custom}
        if r.custom:
            entry["id"] = r.id
        entry["type"] = r.type
        entry["inputs"] = r.inputs
        entry["outputs"] = r.outputs
        if r.parent:
            entry["parent"] = r.parent
        if r.provider:
            entry["provider"] = r.provider
        if r.dependencies:
            entry["dependencies"] = r.dependencies
        if r.property_dependencies:
            entry["propertyDependencies"] = r.property_dependencies
        resources.append(entry)
    return {
        "version": 3,
        "deployment": {
            "manifest": {"time": EXPORT_TIME, "magic": "", "version": f"v{metadata.version('pulumi')}"},
            "resources": resources,
        },
    }


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def synth(stack: str, out: Path | None = None, *, stacks_dir: Path | None = None,
          progress: Progress | None = _stderr) -> SynthSummary:
    """Render one stack offline into `out` (default build/<stack>), atomically."""
    from infra.artifacts import ArtifactContext, writers

    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    path = stack_file(stack, stacks_dir)
    out = Path(out) if out is not None else Path("build") / stack
    say(f"[1/3] config   {path}")
    values = read_stack_config(path)
    from infra.config import parse

    parse(raw_for_validation(values), stack=stack)  # fail fast, before any Pulumi runtime work
    say("[2/3] program  running infra/ under the Pulumi SDK mock monitor")
    result = run_program(stack, values)
    say(f"               {len(result.resources)} resources registered")

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    ctx = ArtifactContext(result=result, out=tmp)
    artifacts: dict[str, list[Path]] = {}
    try:
        all_writers = writers()
        say(f"[3/3] write    {len(all_writers)} artifact kinds -> {out}")
        for name, write in all_writers:
            files = write(ctx)
            artifacts[name] = [f.relative_to(tmp) for f in files]
            say(f"               {name:<16} {len(files)} file(s)")
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return SynthSummary(stack, out, len(result.resources), Counter(r.type for r in result.resources), artifacts,
                        ctx.failures, time.perf_counter() - started, ctx.preflight)


def _replace_dir(new: Path, dest: Path) -> None:
    """Move `new` to `dest`; an existing `dest` is swapped out first and removed after."""
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.rename(dest, old)
    os.rename(new, dest)
    os.chmod(dest, 0o755)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
