"""The `dashboards/<name>.dashboard.py` entry points grafanalib's `generate-dashboard(s)` runs: one dashboard of the
stack named by $AIFACTORY_STACK (default: dev). It reads the stack config, so it lives in the application layer;
dashboards/ builds boards from the config it is given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from grafanalib.core import Dashboard

__all__ = ["stack_board"]


def stack_board(key: str, *, environ: Mapping[str, str] | None = None) -> Dashboard:
    """The `key` dashboard of stack $AIFACTORY_STACK (default: dev), for grafanalib's `generate-dashboard(s)`.

    A missing or invalid stack raises grafanalib's DashboardError, which its scripts print as one `ERROR:` line
    (exit 1) before writing anything.
    """
    from grafanalib._gen import DashboardError

    from dashboards.core import build
    from infra.config import ConfigError
    from infra.monitoring import from_platform
    from infra.synth import StackFileError, load_stack

    stack = (environ if environ is not None else os.environ).get("AIFACTORY_STACK", "dev")
    try:
        cfg = load_stack(stack)
    except (ConfigError, StackFileError) as err:
        raise DashboardError(f"AIFACTORY_STACK={stack}: {err}") from None
    return build(from_platform(cfg))[key]
