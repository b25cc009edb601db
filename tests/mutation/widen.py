"""A pytest plugin for `make mutate`: mutmut picks, per mutant, the tests that called the mutated function while it
collected its stats, and counts a call made in a module-scoped fixture's setup for the first test that used the
fixture only. The known-answer tests read what such fixtures built (a Prometheus over backfilled rules, a running
Envoy), so without this a mutant there would run one test, never the ones that check its result. Here every test is
also credited with the functions the earlier tests of its module called. Loaded by tests/conftest.py only when
AIFACTORY_MUTATION_STATS is set (tests/mutation sets it).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

_seen: dict[str, set[str]] = defaultdict(set)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: Any, nextitem: Any) -> None:
    try:
        from mutmut.state import state
    except ImportError:  # not under mutmut
        return
    calls = state()._stats
    module = item.nodeid.split("::", 1)[0]
    _seen[module] |= calls
    calls |= _seen[module]
