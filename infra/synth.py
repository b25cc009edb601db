"""`aifactory synth`: run the Pulumi program offline under the SDK's mock monitor and write artifacts.

No Pulumi CLI, engine or cloud is involved. The stack file is read the way the CLI reads it (structured
values passed as JSON text), the program in infra/program.py runs unchanged, and every resource it
registers is recorded with what a `pulumi stack export` would hold. Artifact writers (infra/writers/)
then render the result into a temporary directory that replaces the output directory only when all
of them have succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import heapq
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from infra import stack_yaml
from infra.artifacts import SynthResult  # re-exported: what a program run gives the writers
from infra.config import (
    DEFAULT_STACKS_DIR,
    NAMESPACE,
    TOP_LEVEL_KEYS,
    ConfigError,
    PlatformConfig,
    Problem,
    namespace_typo_problem,
)
from infra.gateway_size import gateway_fits

__all__ = [
    "PROJECT",
    "DEFAULT_STACKS_DIR",
    "SHIPPED_STACKS",
    "StackFileError",
    "OutputDirError",
    "OUTPUT_MARKER",
    "check_output_dir",
    "is_synth_output",
    "SynthResult",
    "SynthSummary",
    "stack_file",
    "read_stack_config",
    "raw_for_validation",
    "load_stack",
    "gateway_fits",
    "shipped_stacks",
    "run_program",
    "synth",
    "state_export",
]

PROJECT = NAMESPACE
SHIPPED_STACKS = ("dev", "onprem", "prod", "staging")  # the stacks the kit ships in stacks/
EXPORT_TIME = "1970-01-01T00:00:00Z"  # fixed: same config, same bytes

Progress = Callable[[str], None]


class StackFileError(Exception):
    """The stack file is missing or is not a Pulumi stack config file."""


@dataclass
class SynthSummary:
    stack: str
    out: Path
    resources: int
    by_type: Counter[str]
    artifacts: dict[str, list[Path]]
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    policy: dict[str, Any] = field(default_factory=dict)  # policy-report.json's content
    preflight: list[Any] = field(default_factory=list)  # policies.preflight.Finding (preflight-report.json)


def stack_file(stack: str, stacks_dir: Path | None = None) -> Path:
    return (stacks_dir or DEFAULT_STACKS_DIR) / f"Pulumi.{stack}.yaml"


def read_stack_config(path: Path) -> dict[str, str]:
    """The stack's config as the Pulumi CLI hands it to a program: `ns:key` -> text (JSON for objects)."""
    if not path.is_file():
        known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        raise StackFileError(f"{path}: no such stack file; stacks: {', '.join(known) or '(none)'}")
    try:
        with path.open("rb") as f:  # never more than the limit into memory, but to name what makes it larger
            data = f.read(stack_yaml.MAX_STACK_FILE_BYTES + 1)
            if len(data) > stack_yaml.MAX_STACK_FILE_BYTES:
                f.seek(0)
                raise stack_yaml.oversized(f, path.stat().st_size)
        doc = stack_yaml.load(data.decode("utf-8"))
    except stack_yaml.StackYamlError as err:
        raise StackFileError("\n".join(f"{path}{f' line {line}' if line else ''}: {message}"
                                        for line, message in err.problems)) from None
    except OSError as err:
        raise StackFileError(f"{path}: cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise StackFileError(f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); "
                             "save it as UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise StackFileError(f"{path}{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config", {}), dict):
        raise StackFileError(f"{path}: expected a mapping with a 'config:' mapping (Pulumi stack settings)")
    if misplaced := [str(k) for k in doc if str(k) in TOP_LEVEL_KEYS or str(k).startswith(f"{NAMESPACE}:")]:
        # Pulumi hands a program only what is under `config:`; at the top level these reach nobody.
        raise StackFileError(f"{path}: {', '.join(misplaced)}: the kit's settings must sit under 'config:' "
                             f"(indented below a top-level `config:` line); the Pulumi CLI passes the program "
                             "nothing else from a stack file")
    values: dict[str, str] = {}
    problems = []
    for key, value in (doc.get("config") or {}).items():
        key = str(key)
        full = key if ":" in key else f"{PROJECT}:{key}"
        if (typo := namespace_typo_problem(full, key)) is not None:
            problems.append(typo)
            continue
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
    """The kit's own stacks (SHIPPED_STACKS) that have a file in `stacks_dir`; a user's other stack files there
    are theirs, and tests and benchmarks never pick them up."""
    return [s for s in SHIPPED_STACKS if stack_file(s, stacks_dir).is_file()]


def load_stack(stack: str, stacks_dir: Path | None = None) -> PlatformConfig:
    """The validated PlatformConfig of a stack file, without running the program."""
    from infra.config import parse

    return parse(raw_for_validation(read_stack_config(stack_file(stack, stacks_dir))), stack=stack)


def run_program(stack: str, values: Mapping[str, str], program: Callable[[PlatformConfig], None] | None = None,
                *, stacks_dir: Path | None = None) -> SynthResult:
    """Run `program` (default: infra.program.program) under mocks in a fresh context; return what it registered."""
    # Ctrl-C waits for the run (seconds): a KeyboardInterrupt raised inside the SDK's event loop, its RPC threads
    # or an import half-way hangs the process or is swallowed; held, it is delivered as soon as the run is over.
    if program is None and stacks_dir is not None:  # the default program reads the fidelity results there
        from infra.program import program as default_program

        program = functools.partial(default_program, stacks_dir=stacks_dir)
    with _interrupts_deferred():
        return _run_in_fresh_loop(stack, values, program)


def _run_in_fresh_loop(stack: str, values: Mapping[str, str], program: Callable[[PlatformConfig], None] | None,
                       ) -> SynthResult:
    # A fresh context (Pulumi keeps its settings, config and root resource in context variables) and a
    # fresh event loop per run: runs stay independent of each other and of whatever ran before.
    loop = asyncio.new_event_loop()
    executor, thread_loops = _rpc_executor()
    loop.set_default_executor(executor)
    previous = asyncio.get_event_loop_policy()._local._loop  # type: ignore[attr-defined]
    asyncio.set_event_loop(loop)
    try:
        return contextvars.Context().run(_run_program, stack, dict(values), program)
    except BaseException:
        # The run's own error (or Ctrl-C) is what the caller reports: the tasks it left behind say nothing
        # more, so their "Task exception was never retrieved" / "destroyed but pending" noise is dropped.
        loop.set_exception_handler(lambda _loop, _context: None)
        raise
    finally:
        _finish_loop(loop)
        asyncio.set_event_loop(previous)
        loop.close()
        for thread_loop in thread_loops:  # the executor's threads are gone: close the loops they held
            thread_loop.close()


def _rpc_executor() -> tuple[ThreadPoolExecutor, list[asyncio.AbstractEventLoop]]:
    """The run loop's default executor, where the SDK makes its (mock) RPC calls, and the event loops its threads
    use. The SDK gives each such thread a loop of its own (pulumi/runtime/sync_await.py _ensure_event_loop) and
    never closes it; left to the garbage collector after its self-pipe socket, a loop's __del__ fails with
    "Invalid file descriptor: -1" noise on stderr. Here each thread starts with a loop the run closes itself."""
    loops: list[asyncio.AbstractEventLoop] = []
    lock = threading.Lock()

    def own_loop() -> None:
        thread_loop = asyncio.new_event_loop()
        asyncio.set_event_loop(thread_loop)
        with lock:
            loops.append(thread_loop)

    return ThreadPoolExecutor(thread_name_prefix="aifactory-rpc", initializer=own_loop), loops


def _finish_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and collect what a failed run left on its loop, so nothing outlives it."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_default_executor())


def _own_output_tracking() -> None:
    """Give this run its own set of tracked outputs (and its lock).

    The SDK's `wait_for_rpcs` awaits every Output in `SETTINGS.outputs` before a program ends. That set is
    a context property, but `set_mocks` (MockSettings.__init__ skips Settings.__init__) never resets it, so
    in a fresh context it falls back to one process-wide set. A run that fails before `run_pulumi_func`
    (a ConfigError in `load()`, Ctrl-C) leaves Outputs of its now-closed loop there, and the next run in
    the same process waits on them forever. (pulumi 3.272: pulumi/runtime/mocks.py MockSettings,
    pulumi/_utils.py ContextProperty, pulumi/runtime/stack.py wait_for_rpcs.)
    """
    from pulumi.runtime.settings import SETTINGS

    SETTINGS.outputs = set()
    SETTINGS.lock = threading.Lock()


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

    _own_output_tracking()
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

    out: dict[str, Any] = {}
    for r in regs:
        if r.custom and not r.provider and not r.type.startswith("pulumi:providers:"):
            pkg = r.type.split(":")[0]
            if pkg in out:  # one provider per package: its version is read once, not per resource
                r.provider = f"{out[pkg].urn}::{out[pkg].id}"
                continue
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
        if r.external:
            entry["external"] = True
        entry["type"] = r.type
        entry["inputs"] = r.inputs
        entry["outputs"] = r.outputs
        if r.protect:  # as `pulumi stack export` writes it
            entry["protect"] = True
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
    """Render one stack offline into `out` (default build/<stack>), atomically.

    `out` is replaced only when it is a previous output of synth (it holds OUTPUT_MARKER), is empty or does
    not exist; anything else raises OutputDirError before any work, and nothing is written or removed.
    """
    from infra.artifacts import ArtifactContext, writers

    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    path = stack_file(stack, stacks_dir)
    out = Path(out) if out is not None else Path("build") / stack
    say(f"[1/3] config   {path}")
    values = read_stack_config(path)
    from infra.config import parse

    cfg = parse(raw_for_validation(values), stack=stack)  # fail fast, before any Pulumi runtime work
    gateway_fits(cfg)
    from infra import fidelity

    for v in fidelity.load_verdicts(cfg, stacks_dir or DEFAULT_STACKS_DIR):  # fidelity suites too (ConfigError)
        if not v.routable:
            say(f"               fidelity: {v.variant} gets none of workload {v.workload}'s traffic: {v.message}")
    dest = check_output_dir(out, stack=stack)
    say("[2/3] program  running infra/ under the Pulumi SDK mock monitor")
    result = run_program(stack, values, stacks_dir=stacks_dir)
    say(f"               {len(result.resources)} resources registered")

    dest.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(dest)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-{os.getpid()}-", dir=dest.parent))
    ctx = ArtifactContext(result=result, out=tmp)
    artifacts: dict[str, list[Path]] = {}
    try:
        (tmp / OUTPUT_MARKER).write_text(_marker_text(stack))
        all_writers = writers()
        say(f"[3/3] write    {len(all_writers)} artifact kinds -> {out}")
        for name, write in all_writers:
            files = write(ctx)
            artifacts[name] = [f.relative_to(tmp) for f in files]
            say(f"               {name:<16} {len(files)} file(s)")
        with _interrupts_deferred():
            _replace_dir(tmp, dest)
    except OSError as err:  # the disk filled or went read-only while writing: the old output is left as it was
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputDirError(f"--out {out}: writing {err.filename or tmp} failed: {err.strerror or err}; nothing "
                             "was replaced") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return SynthSummary(stack, out, len(result.resources), Counter(r.type for r in result.resources), artifacts,
                        ctx.failures, time.perf_counter() - started, ctx.policy,
                        ctx.preflight)


# ---------------------------------------------------------------------------------------------
# the output directory: only synth's own output is ever replaced

OUTPUT_MARKER = ".aifactory-synth"  # written into every output; its presence makes a directory replaceable
# What synth writes at the top of an output; a directory holding only these (and state.json) is an output of a
# kit version older than the marker.
_OUTPUT_ENTRIES = frozenset({OUTPUT_MARKER, "state.json", "policy-report.json", "manifests", "helm", "dashboards",
                             "rules", "envoy", "otel"})


class OutputDirError(Exception):
    """`--out` names something synth must not replace; the message says what and what to do instead."""


def _marker_text(stack: str) -> str:
    return json.dumps({"generator": "aifactory synth", "stack": stack}, sort_keys=True) + "\n"


def is_synth_output(path: Path) -> bool:
    """Whether `path` is a directory synth wrote (its marker, or only the entries older versions wrote)."""
    if (path / OUTPUT_MARKER).is_file():
        return True
    names = {p.name for p in path.iterdir()}
    return "state.json" in names and names <= _OUTPUT_ENTRIES


def _marker_stack(path: Path) -> str | None:
    """The stack whose output `path` holds, from its marker; None when the marker does not say (older outputs)."""
    try:
        doc = json.loads((path / OUTPUT_MARKER).read_text())
    except (OSError, ValueError):
        return None
    stack = doc.get("stack") if isinstance(doc, dict) else None
    return stack if isinstance(stack, str) else None


def check_output_dir(out: Path, *, stack: str | None = None) -> Path:
    """The absolute directory synth may write `out` to, or OutputDirError saying why not. With `stack`, an output
    of another stack is not replaced either (`synth dev --out build/staging` would lose staging's render)."""
    dest = Path(os.path.abspath(out))
    cwd = Path.cwd()
    if dest == Path(dest.anchor):
        raise OutputDirError(f"--out {out}: is the filesystem root; choose a directory such as build/<stack>")
    if dest == cwd or dest in cwd.parents:
        raise OutputDirError(f"--out {out}: is the current directory or contains it ({dest}); synth replaces its "
                             "output directory as a whole, so choose a new directory such as build/<stack>")
    if dest.is_symlink():
        raise OutputDirError(f"--out {out}: is a symbolic link; give the directory it points to, or a new one")
    if dest.exists() and not dest.is_dir():
        raise OutputDirError(f"--out {out}: exists and is not a directory; choose a new directory")
    if dest.is_dir() and any(dest.iterdir()) and not is_synth_output(dest):
        held = sorted(p.name for p in dest.iterdir())
        shown = ", ".join(held[:5]) + (f", ... ({len(held)} entries)" if len(held) > 5 else "")
        raise OutputDirError(f"--out {out}: is not an output of aifactory synth (no {OUTPUT_MARKER} marker) and is "
                             f"not empty (it holds {shown}); synth replaces its output directory as a whole, so "
                             "choose a new or empty directory, or remove this one yourself")
    other = _marker_stack(dest) if stack is not None and dest.is_dir() else None
    if other is not None and other != stack:
        raise OutputDirError(f"--out {out}: holds the output of stack {other!r}, not {stack!r}; synth replaces its "
                             f"output directory as a whole, so choose build/{stack} or a new directory, or remove "
                             "this one yourself")
    _probe_writable(out, dest.parent)
    return dest


def _probe_writable(out: Path, parent: Path) -> None:
    """OutputDirError unless a file can be written where synth will build the output (the nearest existing
    directory above it): a read-only or full disk is said before the program runs, with the path."""
    where = parent
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        fd, probe = tempfile.mkstemp(prefix=".aifactory-probe-", dir=where)
        try:
            os.write(fd, b"\0" * 65536)  # a full disk refuses data, not always an empty file
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as err:
        raise OutputDirError(f"--out {out}: cannot write in {where}: {err.strerror or err}; choose a writable "
                             "location with free space") from None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid < 2**31
    return True


def _remove_leftovers(dest: Path) -> None:
    """Remove what an interrupted earlier synth into `dest` left beside it (`.<name>.old-PID`, `.<name>.tmp-PID-*`):
    only directories that carry synth's marker and whose process is gone."""
    for p in dest.parent.glob(f".{dest.name}.*-*"):
        kind, _, rest = p.name[len(dest.name) + 2:].partition("-")
        pid = rest.split("-", 1)[0]
        if kind not in ("old", "tmp") or not pid.isdigit() or _pid_alive(int(pid)):
            continue
        if p.is_dir() and not p.is_symlink() and (p / OUTPUT_MARKER).is_file():
            shutil.rmtree(p)


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while the program runs or the output is swapped, then deliver them: an interrupt
    never hangs the SDK's runtime, nor leaves a half-swapped or half-deleted output behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: held.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])


def _replace_dir(new: Path, dest: Path) -> None:
    """Move `new` to `dest`; an existing `dest` is swapped out first and removed after."""
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.rename(dest, old)
    os.rename(new, dest)
    os.chmod(dest, 0o755)
    if old is not None:
        shutil.rmtree(old)
