"""The `aifactory` console script (pyproject.toml [project.scripts]: `infra.cli:entry`; `python -m infra.cli` too).

The script an installer writes imports this module, then calls `entry()`. This module imports nothing but `sys`,
so Ctrl-C while the kit's modules are still being imported (the first second or two of every command: the parser,
the stack model, the Pulumi SDK) lands in `entry()` and ends the command as it does later: one line, exit 130.
The command line itself is infra/commands.py.

Python swallows an exception raised inside a callback it cannot return it from (a weakref callback, `__del__`): a
Ctrl-C that lands in the import system's module-lock callback prints "Exception ignored in ..." and the command goes
on. `entry()` ends the process on such a swallowed Ctrl-C (sys.unraisablehook) the same way, one line and 130.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not imported here: this module runs before Ctrl-C can be caught anywhere else
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["INTERRUPTED", "EXIT_INTERRUPTED", "entry", "main"]

INTERRUPTED = "aifactory: interrupted"

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command that Ctrl-C ended


def main(argv: Sequence[str] | None = None) -> int:
    """The command line in-process (`argv`, default sys.argv[1:]): its exit code; Ctrl-C propagates."""
    from infra.commands import main as run

    return run(argv)


def __getattr__(name: str) -> Any:
    """The command line's other names (build_parser, the exit codes, ...), from infra/commands.py when first asked:
    this module was the whole command line, and importers still reach them here. Never a dunder: the import system
    asks a module for `__path__` and others while it is imported, before Ctrl-C is caught."""
    if name.startswith("__"):
        raise AttributeError(f"module 'infra.cli' has no attribute {name!r}")
    import infra.commands

    return getattr(infra.commands, name)


def _undelivered_interrupt(unraisable: Any) -> None:
    """sys.unraisablehook: a KeyboardInterrupt Python could not deliver ends the command at once (module docstring);
    anything else is reported as Python does."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        print(INTERRUPTED, file=sys.stderr, flush=True)
        import os

        os._exit(EXIT_INTERRUPTED)
    sys.__unraisablehook__(unraisable)


def entry() -> None:
    """Run the command line and exit with its code. Like other Unix tools, `aifactory synth prod | head` ends
    quietly when the reader goes away (default SIGPIPE); only here, never for in-process callers of main()."""
    sys.unraisablehook = _undelivered_interrupt
    try:
        import signal

        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        code = main()
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr, flush=True)
        code = EXIT_INTERRUPTED
    sys.exit(code)


if __name__ == "__main__":
    entry()
