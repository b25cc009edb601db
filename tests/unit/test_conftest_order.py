"""The suite's scheduling list (tests/conftest.py LONGEST_FIRST) names test files that exist, once each, and
`make test` hands files out in collection order, so that list decides which files start first. Under xdist a test
marked `alone` holds the run's lock exclusively, every other test shared (tests/conftest.py `_RunLock` and its
hooks), probed here from another open file description as another worker would meet it."""

from __future__ import annotations

import fcntl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import tests.conftest as conftest
from tests.conftest import LONGEST_FIRST, _RunLock

REPO = Path(__file__).resolve().parents[2]


def test_every_listed_file_exists_once() -> None:
    assert [p for p in LONGEST_FIRST if not (REPO / p).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_make_test_keeps_the_collection_order() -> None:
    recipe = [line for line in (REPO / "Makefile").read_text().splitlines() if "-m pytest" in line and "-n " in line]
    assert recipe and all("--dist loadfile" in line and "--no-loadscope-reorder" in line for line in recipe), recipe


def _free(path: Path, mode: int) -> bool:
    """Whether another worker could take `path`'s lock in `mode` now (probed without waiting)."""
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    """An xdist worker's config as the hooks read it: its --basetemp under the run's directory (tmp_path)."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    config = SimpleNamespace(stash=pytest.Stash(), option=SimpleNamespace(basetemp=str(tmp_path / "popen-gw0")))
    yield config
    if (lock := config.stash.get(conftest._RUN_LOCK, None)) is not None:
        lock.release()


def _item(config: Any, alone: bool) -> Any:
    """A test item as the hooks read it: its config and whether it is marked `alone`."""
    return SimpleNamespace(config=config, get_closest_marker=lambda name: name if alone and name == "alone" else None)


def _through(hook: Any, *args: Any) -> None:
    """Run a wrapper hook around a hook body that does nothing."""
    gen = hook(*args)
    next(gen)
    with pytest.raises(StopIteration):
        gen.send(None)


def test_alone_tests_hold_the_run_lock_alone_from_setup_until_the_next_test_is_not_alone(
        worker: SimpleNamespace, tmp_path: Path) -> None:
    lock = tmp_path / ".alone.lock"
    first, second, shared = _item(worker, True), _item(worker, True), _item(worker, False)
    _through(conftest.pytest_runtest_setup, first)
    assert not _free(lock, fcntl.LOCK_SH)  # no other worker's test starts beside it
    _through(conftest.pytest_runtest_teardown, first, second)
    assert not _free(lock, fcntl.LOCK_SH)  # kept for the next alone test: one wait for the tests in flight
    _through(conftest.pytest_runtest_setup, second)
    _through(conftest.pytest_runtest_teardown, second, shared)
    assert _free(lock, fcntl.LOCK_EX)
    _through(conftest.pytest_runtest_setup, shared)
    assert _free(lock, fcntl.LOCK_SH) and not _free(lock, fcntl.LOCK_EX)  # beside others, never beside an alone one
    _through(conftest.pytest_runtest_teardown, shared, None)
    assert _free(lock, fcntl.LOCK_EX)


def test_outside_xdist_no_lock_is_taken(worker: SimpleNamespace, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    _through(conftest.pytest_runtest_setup, _item(worker, True))
    assert not (tmp_path / ".alone.lock").exists()


def test_a_waiting_alone_test_keeps_new_tests_from_starting(tmp_path: Path) -> None:
    """Worker 1 runs a test (shared); worker 2 waits to run an alone one and holds the turnstile meanwhile, so no
    other test starts and starves it; once worker 1's test ends, worker 2 runs."""
    running, waiting = _RunLock(tmp_path), _RunLock(tmp_path)
    running.take(fcntl.LOCK_SH)
    taker = threading.Thread(target=waiting.take, args=(fcntl.LOCK_EX,), daemon=True)
    taker.start()
    try:
        deadline = time.monotonic() + 5
        while _free(tmp_path / ".turnstile.lock", fcntl.LOCK_EX):  # until worker 2 waits at the run's lock
            assert time.monotonic() < deadline, "the alone test never waited"
            time.sleep(0.01)
        assert waiting.mode is None
        running.release()
        taker.join(timeout=5)
        assert waiting.mode == fcntl.LOCK_EX and not _free(tmp_path / ".alone.lock", fcntl.LOCK_SH)
    finally:
        running.release()
        taker.join(timeout=5)
        waiting.release()
