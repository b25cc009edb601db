"""What every command shares, below the CLI: exit codes, the usage error, and `--json` targets written whole.

infra/commands.py and the commands it runs (node-check, fabric-check, preflight) import this module; none of them
imports the CLI, so there is no import circle between the CLI and its commands.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE", "UsageError", "json_target", "write_json"]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A bad argument (an unusable --json target, ...): exit 2 with the message, nothing written."""


def json_target(value: str | None, *, flag: str = "--json", example: str = "report.json") -> Path | None:
    """`--json OUT` (or `flag`): `-` is stdout; a file is written only into an existing directory and never over a
    directory. Checked before any work, so a bad target writes nothing."""
    if value is None or value == "-":
        return Path("-") if value == "-" else None
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag} {value}: is a directory; give a file name such as {Path(value) / example}")
    if not path.parent.is_dir():
        raise UsageError(f"{flag} {value}: directory {path.parent} does not exist; create it first or use "
                         f"`{flag} -` for stdout")
    return path


def write_json(target: Path, doc: Any) -> None:
    """The document to stdout (`-`), or to the file whole: written beside it, then moved into place, so a reader
    (or an interrupted run) never sees half a report."""
    text = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if str(target) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
