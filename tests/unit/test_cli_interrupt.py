"""Ctrl-C while a command is still importing the kit (its first second or two) ends it as Ctrl-C does later: one
line on stderr and exit 130, no traceback (issue 46 item 9; README.md, "Commands").

Each run starts the console script as an installer writes it from pyproject.toml's [project.scripts] (import the
entry's module, call the function, exit with what it returns: the same lines pip and uv write into .venv/bin), so
it tests the entry point the package declares, whatever an install in .venv says. The child's import log
(PYTHONPROFILEIMPORTTIME, one stderr line per finished import) tells when it is importing a given module; SIGINT
goes out as soon as that line is read, so it lands in the imports that follow."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest

from infra.cli import EXIT_INTERRUPTED, INTERRUPTED

REPO = Path(__file__).resolve().parents[2]


def _console_script(tmp_path: Path) -> Path:
    """`aifactory` as an installer writes it from the declared entry point."""
    module, func = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["aifactory"].split(":")
    script = tmp_path / "aifactory"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\n"
                      f"if __name__ == \"__main__\":\n    sys.exit({func}())\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("command, after", [
    (["validate", "dev"], "argparse"),  # infra/commands.py is being imported
    (["validate", "dev"], "infra.commands"),  # the command line is in; the stack model is being imported
    (["policy", "check", "state.json"], "pydantic"),  # deep in the stack model
    (["validate", "dev"], "grpc"),  # the Pulumi SDK
])
def test_ctrl_c_while_importing_prints_one_line_and_exits_130(tmp_path: Path, command: list[str], after: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "PYTHONPROFILEIMPORTTIME": "1", "AIFACTORY_DEBUG": ""}
    stdout = tmp_path / "stdout"
    with stdout.open("w") as out:  # a file: a pipe nobody reads while stderr is read could fill and stall the child
        proc = subprocess.Popen([str(_console_script(tmp_path)), *command], cwd=REPO, env=env, text=True,
                                stdout=out, stderr=subprocess.PIPE)
    watchdog = threading.Timer(60, proc.kill)  # a child that hangs ends the test's wait too
    watchdog.start()
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the child's import log ends when the child does
            if line.startswith("import time:") and line.rsplit("|", 1)[1].strip() == after:
                break
        else:
            pytest.fail(f"the command ended before it imported {after}")
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    err = [line for line in rest.splitlines() if not line.startswith("import time:")]
    assert (proc.returncode, err, stdout.read_text()) == (EXIT_INTERRUPTED, [INTERRUPTED], ""), "\n".join(err)


def test_a_ctrl_c_python_would_swallow_still_ends_the_command(tmp_path: Path) -> None:
    """A KeyboardInterrupt raised inside a callback Python cannot return it from (here a weakref callback, as the
    import system's module-lock callback is) is printed as "Exception ignored" and dropped, and the command would go
    on (seen once on a clean-clone run: SIGINT landed in `_get_module_lock.<locals>.cb` and `validate` finished).
    The entry point ends the command on it as on any other Ctrl-C."""
    script = tmp_path / "swallowed.py"
    script.write_text(
        "import weakref\n"
        "from infra.cli import entry\n"
        "import infra.cli\n"
        "class Thing: pass\n"
        "def run(argv=None):\n"
        "    def callback(ref): raise KeyboardInterrupt\n"
        "    thing = Thing(); ref = weakref.ref(thing, callback); del thing\n"
        "    print('the command went on')\n"
        "    return 0\n"
        "infra.cli.main = run\n"
        "entry()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, text=True, capture_output=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stderr.splitlines(), done.stdout) == (EXIT_INTERRUPTED, [INTERRUPTED], "")
