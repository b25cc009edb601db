"""Shared fixtures (each shipped stack is synthesized once per test run and reused read-only), the `slow` mark and
the `alone` one's lock.

Under pytest-xdist (`make test` runs `-n`), the workers share one synth per stack: the first worker that needs a
stack synthesizes it under a file lock in the run's common temporary directory, the others wait for it and read
the same directory. A test marked `alone` runs with no other worker's test beside it (`_RunLock`).
"""

from __future__ import annotations

import fcntl
import gc
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

from infra.synth import OUTPUT_MARKER, synth

# `slow` (pyproject.toml's markers): everything under tests/artifacts/ (each test runs a real tool: Envoy,
# Prometheus, promtool, amtool, kubernetes-validate) and the unit tests that took more than 10 s on the 2-core
# development machine (`pytest --durations`). `-m "not slow"` is the quick loop.
SLOW_DIRS = ("tests/artifacts/",)
SLOW_TESTS = frozenset({
    "tests/unit/test_aws_hardening.py::test_the_large_stack_runs_with_the_new_defaults",  # 126 s: the bench's stack
    "tests/unit/test_aws_cluster.py::test_addons_run_ekss_default_version_for_the_clusters_kubernetes_version",
    "tests/unit/test_aws_cluster.py::test_with_listed_admins_the_creator_gets_no_second_entry_and_the_provider_waits"
    "_for_theirs",
    "tests/unit/test_aws_cluster.py::test_the_stacks_aws_profile_and_account_guards_reach_the_kits_provider_and"
    "_kubeconfig",
})


# The files that take longest, longest first (per-file sums of `pytest --junitxml` on the development machine). The
# suite runs them first: `make test` hands files to the workers in collection order (--no-loadscope-reorder), so
# the run ends on short files and no worker idles while another finishes a long one (xdist's own order is by
# number of tests, which put a one-test 27 s promtool file and the eval files last). Files not listed follow in
# their usual order; a stale entry costs balance, never a test (tests/unit/test_conftest_order.py checks they exist).
LONGEST_FIRST = (
    "tests/unit/test_cli.py",
    "tests/unit/test_fidelity_known_answers.py",
    "tests/unit/test_fidelity_eval.py",
    "tests/artifacts/test_dashboards.py",
    "tests/unit/test_telemetry_frameworks.py",
    "tests/artifacts/test_rules.py",
    "tests/artifacts/test_envoy_affinity_live.py",
    "tests/unit/test_readme.py",
    "tests/unit/test_synth.py",
    "tests/artifacts/test_verify_live.py",
    "tests/artifacts/test_k8s_schemas.py",
    "tests/unit/test_aws_cluster.py",
    "tests/unit/test_aws_input_rules.py",
    "tests/unit/test_bringup.py",
    "tests/artifacts/test_day2_scenarios_live.py",
    "tests/unit/test_fidelity_job.py",
    "tests/artifacts/test_envoy_issuer_tenants_live.py",
    "tests/artifacts/test_envoy_live.py",
    "tests/unit/test_config_schema.py",
    "tests/unit/test_gateway.py",
    "tests/artifacts/test_envoy_variants_live.py",
    "tests/unit/test_config.py",
    "tests/unit/test_preflight.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SLOW_DIRS) or item.nodeid.partition("[")[0] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))  # stable: a file stays whole


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection built (every test module, the kit, its SDKs: some 400,000 objects) lives to the end of the
    run: frozen out of the cyclic collector's sight, a full collection scans only what the tests create since. The
    eval runs make one after each failed variant (infra/evaluate.py): 0.5-1 s of CPU each over the whole heap on
    the development machine, none once it is frozen."""
    gc.freeze()


# `alone` (pyproject.toml's markers): a test whose assertions depend on relative speed or on a real-time window
# (which replica Envoy picks while another is slow, a check's timeout against a busy replica, a hang's detection
# window). Under pytest-xdist it runs with no other test beside it, which on a 2-core machine would starve the
# replicas it times of CPU (test_a_slow_replica_gets_little_traffic failed so under `-n 2` on the development
# machine: the slow replica got 42 of 400 requests; two day-2 scenarios failed once beside other tests). Every other
# test runs beside the others.
ALONE = "alone"


def _alone(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker(ALONE) is not None


class _RunLock:
    """This xdist worker's hold on the run's lock, a file the workers share: shared while one of its tests runs,
    exclusive while an `alone` test runs. A turnstile taken before either keeps the other workers from starving a
    waiting exclusive holder: once one waits, no test starts until it has had its turn."""

    def __init__(self, root: Path) -> None:
        self._path, self._turnstile = root / ".alone.lock", root / ".turnstile.lock"
        self._handle: IO[str] | None = None
        self.mode: int | None = None

    def take(self, mode: int) -> None:
        if self.mode == mode:
            return
        self.release()
        handle = self._path.open("a")
        try:
            with _locked(self._turnstile):
                fcntl.flock(handle, mode)
        except BaseException:  # interrupted while waiting: nothing held
            handle.close()
            raise
        self._handle, self.mode = handle, mode

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
        self._handle = self.mode = None


_RUN_LOCK = pytest.StashKey[_RunLock]()


def _run_lock(config: pytest.Config) -> _RunLock | None:
    """The worker's `_RunLock` (None outside xdist), on a file in the run's directory: the parent of the workers'
    own base temporary directories (`.../pytest-N/popen-gw0`: xdist passes each worker its --basetemp)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    if _RUN_LOCK not in config.stash:
        config.stash[_RUN_LOCK] = _RunLock(Path(config.option.basetemp).parent)
    return config.stash[_RUN_LOCK]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Under xdist, the run's lock is taken before the test's fixtures are set up (its module's fixtures too: a
    backfilled Prometheus does not start beside an `alone` test), exclusively for an `alone` test."""
    lock = _run_lock(item.config)
    if lock is not None:
        lock.take(fcntl.LOCK_EX if _alone(item) else fcntl.LOCK_SH)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The lock is let go after the test's teardown (its module's fixtures' too, when it is the module's last), but
    kept from one `alone` test to the next (xdist names the worker's next test): a run of them waits once for the
    other workers' tests in flight, not once per test."""
    try:
        return (yield)
    finally:
        lock = _run_lock(item.config)
        if lock is not None and not (_alone(item) and _alone(nextitem)):
            lock.release()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created) for the block: one process at a time, across xdist workers."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _shared_root(tmp_path_factory: pytest.TempPathFactory, worker: str | None) -> Path:
    """The run's directory every worker sees: the parent of the workers' own base temporary directories under
    xdist (`.../pytest-N/popen-gw0`), else this session's own."""
    if worker is None:
        return tmp_path_factory.mktemp("synth")
    root = tmp_path_factory.getbasetemp().parent / "synth-shared"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`synthesized("prod")` -> build directory of that stack (synth runs once per test run per stack)."""
    root = _shared_root(tmp_path_factory, os.environ.get("PYTEST_XDIST_WORKER"))
    done: dict[str, Path] = {}

    def get(stack: str) -> Path:
        if stack not in done:
            out = root / stack
            with _locked(root / f".{stack}.lock"):
                if not (out / OUTPUT_MARKER).is_file():  # synth moves its output into place whole, marker in it
                    synth(stack, out, progress=None)
            done[stack] = out
        return done[stack]

    return get


@pytest.fixture(scope="session")
def large_stack_state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The generated large stack's (tests/bench/bench_large_stack.py: 40 pools, 150 models, 20 tenants) program run
    under the synth mocks, in stack-export form (infra.synth.state_export, as state.json holds it). It is the
    suite's costliest program run, so it runs once per test run and the workers share it as they share
    `synthesized`."""
    root = _shared_root(tmp_path_factory, os.environ.get("PYTEST_XDIST_WORKER"))
    path = root / "large-state.json"
    with _locked(root / ".large.lock"):
        if not path.is_file():
            from infra.synth import run_program, state_export
            from tests.bench.bench_large_stack import large_stack_values

            partial = path.with_suffix(".partial")
            partial.write_text(json.dumps(state_export(run_program("large", large_stack_values()))))
            partial.replace(path)  # whole or not at all, like synth's output
    state: dict[str, Any] = json.loads(path.read_text())
    return state


if os.environ.get("AIFACTORY_MUTATION_STATS"):  # `make mutate` (tests/mutation): credit fixture calls to every test
    from tests.mutation.widen import pytest_runtest_teardown  # noqa: F401
