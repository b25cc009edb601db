"""The `aifactory` console script (pyproject.toml [project.scripts]).

The script an installer writes imports this module, then calls `entry()`. This module imports nothing but `sys`,
so Ctrl-C while the kit's modules are imported (the first second or two of every command: the CLI, the stack
model, the Pulumi SDK) lands in `entry()` and ends the command with one line and exit 130, as it does later.
"""

import sys

__all__ = ["INTERRUPTED", "EXIT_INTERRUPTED", "entry"]

INTERRUPTED = "aifactory: interrupted"

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command that Ctrl-C ended


def entry() -> None:
    """Run the command line. Like other Unix tools, `aifactory synth prod | head` ends quietly when the reader goes
    away (default SIGPIPE); only here, never for in-process callers of `infra.cli.main`."""
    try:
        import signal

        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        from infra.cli import main

        code = main()
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr, flush=True)
        code = EXIT_INTERRUPTED
    sys.exit(code)
