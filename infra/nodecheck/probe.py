"""Running commands on one node through a testinfra host, and running a script there with a hard bound.

`Probe` wraps a `testinfra.host.Host` (any backend: local, ssh, paramiko, kubectl, docker, ...): the
checks ask it for a command's output, and a command that fails becomes `CannotRun` with the tool's own
words, so "the check applies but could not run" is always a failure with its reason. Outputs are
memoised per probe: several checks read the same nvidia-smi query, the node is asked once.

`run_bounded` runs a Python script on the node under `timeout` (GNU coreutils puts the command in its
own process group and signals the whole group: TERM at the limit, KILL `DEFAULT_KILL_AFTER_S` later),
tags it with a unique token, and afterwards looks for any process still carrying the token: one found
is killed by pid and reported, so a burn-in never leaves work behind on a node about to take traffic.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "CannotRun",
    "ClusterAccess",
    "Probe",
    "describe_failure",
    "BoundedRun",
    "DEFAULT_KILL_AFTER_S",
    "DEFAULT_KILL_WAIT_S",
    "TIMEOUT_EXIT",
    "KILLED_EXIT",
    "missing_tool",
    "TOKEN_PREFIX",
    "new_token",
    "bounded_command",
    "leftover_command",
    "kill_command",
    "run_bounded",
]

DEFAULT_KILL_AFTER_S = 10  # SIGKILL this long after the SIGTERM at the limit
DEFAULT_KILL_WAIT_S = 5  # how long leftovers may take to disappear after SIGKILL
TIMEOUT_EXIT = 124  # what `timeout` exits with when the limit was hit and the command obeyed SIGTERM
KILLED_EXIT = 137  # 128 + SIGKILL: the command ignored SIGTERM and `timeout --kill-after` killed it
# `timeout --verbose` says on stderr when it signals the command (GNU coreutils >= 8.29, src/timeout.c):
# "timeout: sending signal KILL to command 'python3'"; only this tells a KILL at the limit from any other
# SIGKILL (the OOM killer) that also ends in exit 137.
_SENT_KILL = re.compile(r"^timeout: sending signal KILL to command ", re.MULTILINE)
TOKEN_PREFIX = "aifactory-node-check-"
HEREDOC_END = "AIFACTORY_NODE_CHECK_EOF"


class CannotRun(Exception):
    """A check applies but could not run on this node (tool missing, permission, unknown output)."""


class ClusterAccess(Protocol):
    """How a check asks the cluster (infra.nodecheck.cluster.Kubectl; tests replay recordings)."""

    def json(self, args: Sequence[str]) -> Any:
        """`kubectl ARGS -o json` parsed; CannotRun when the cluster cannot be asked."""
        ...


@dataclass
class Probe:
    host: Any  # testinfra.host.Host, or anything with .run(command) -> CommandResult
    url: str = ""  # the host URL the node was reached by (names the node for cluster look-ups)
    kubectl: ClusterAccess | None = None  # for checks that ask the cluster (dcgm-exporter); None: no cluster access
    _cache: dict[str, str] = field(default_factory=dict)

    def run(self, command: str) -> Any:
        return self.host.run(command)

    def output(self, command: str) -> str:
        """stdout of `command`; CannotRun with its exit status and first stderr line when it fails."""
        if command not in self._cache:
            result = self.run(command)
            if result.rc != 0:
                raise CannotRun(describe_failure(command, result.rc, result.stderr or result.stdout))
            self._cache[command] = result.stdout
        return self._cache[command]


# How a shell or `timeout` names the program it could not find (exit 127): dash "sh: 1: TOOL: not found",
# bash "bash: line 1: TOOL: command not found", busybox/ash "sh: TOOL: not found", GNU timeout "timeout: failed
# to run command 'TOOL': No such file or directory" (quotes are U+2018/U+2019 in UTF-8 locales).
_NOT_FOUND = (re.compile(r"^[\w./-]+: (?:line )?(?:\d+: )?([^:\s]+): (?:command )?not found"),
              re.compile(r"^timeout: failed to run command ['\u2018]([^'\u2019]+)['\u2019]"))


def missing_tool(command: str, text: str) -> str:
    """The program a shell reported missing in `text` (exit 127); else the command's first word."""
    for line in text.splitlines():
        for pattern in _NOT_FOUND:
            if m := pattern.match(line.strip()):
                return m.group(1)
    return command.split()[0]


def describe_failure(command: str, rc: int, text: str) -> str:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if rc == 127:
        return f"{missing_tool(command, text)}: command not found on the node (exit 127){': ' + first if first else ''}"
    return f"`{command}` failed (exit {rc}){': ' + first if first else ''}"


@dataclass(frozen=True, slots=True)
class BoundedRun:
    rc: int
    stdout: str
    stderr: str
    leftovers: tuple[int, ...]  # pids still carrying the token after the run
    killed: bool  # every leftover is gone since (SIGKILL)

    @property
    def timed_out(self) -> bool:
        """Stopped at the limit: it obeyed SIGTERM (124), or ignored it and was killed (137 + timeout's word)."""
        return self.rc == TIMEOUT_EXIT or self.ignored_term

    @property
    def ignored_term(self) -> bool:
        return self.rc == KILLED_EXIT and _SENT_KILL.search(self.stderr) is not None


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_hex(6)


def bounded_command(script: str, args: Sequence[str], *, limit_s: int, token: str,
                    kill_after_s: int = DEFAULT_KILL_AFTER_S) -> str:
    """`timeout` + `python3 -` reading `script` from a here-document; the token leads the arguments.

    The script writes to files, printed once `timeout` returns: a process that escaped the limit then
    holds a file, not the connection's pipe, so the command returns at the limit whatever it left behind.
    """
    if HEREDOC_END in script:
        raise ValueError(f"script must not contain the here-document delimiter {HEREDOC_END}")
    argv = " ".join(shlex.quote(a) for a in (token, *args))
    return (f'out=$(mktemp) && err=$(mktemp) || exit 125\n'
            f"timeout --verbose --kill-after={int(kill_after_s)} {int(limit_s)} python3 - {argv} "
            f"<<'{HEREDOC_END}' >\"$out\" 2>\"$err\"\n{script}\n{HEREDOC_END}\n"
            'rc=$?; cat "$out"; cat "$err" >&2; rm -f "$out" "$err"; exit $rc')


def leftover_command(token: str) -> str:
    """pgrep for the token; '[x]rest' matches the token but not this pgrep's own shell command line."""
    if not re.fullmatch(rf"{TOKEN_PREFIX}[0-9a-f]+", token):
        raise ValueError(f"{token!r} is not a node-check token")
    return f"pgrep -f '[{token[0]}]{token[1:]}'"


def run_bounded(probe: Probe, script: str, args: Sequence[str], *, limit_s: int,
                token: str | None = None, kill_after_s: int = DEFAULT_KILL_AFTER_S) -> BoundedRun:
    """Run `script` on the node, bounded by `limit_s` (SIGKILL `kill_after_s` later); then find, kill and
    report leftovers."""
    token = token or new_token()
    result = probe.run(bounded_command(script, args, limit_s=limit_s, token=token, kill_after_s=kill_after_s))
    found = probe.run(settled_leftover_command(token))
    if found.rc not in (0, 1):  # 1: no process matched
        raise CannotRun("cannot verify that nothing was left behind: "
                        + describe_failure(leftover_command(token), found.rc, found.stderr))
    pids = tuple(int(p) for p in found.stdout.split() if p.isdigit())
    killed = not pids or probe.run(kill_command(pids, token)).rc == 0
    return BoundedRun(result.rc, result.stdout, result.stderr, pids, killed)


LEFTOVER_SETTLE_S = 2  # a process SIGKILLed as `timeout` returns may still be exiting: how long to let it go


def settled_leftover_command(token: str) -> str:
    """leftover_command once the run's processes had up to LEFTOVER_SETTLE_S to finish exiting: pgrep's output
    and status (1: none) as soon as nothing matches, else what still matches at the end. Without the wait, a
    script SIGKILLed by `timeout` on a busy node could be reported as left behind while the kernel still tears
    it down."""
    tries = int(LEFTOVER_SETTLE_S / 0.1)
    return (f"i=0; while [ $i -lt {tries} ]; do {leftover_command(token)} >/dev/null || exit 1; "
            f"i=$((i+1)); sleep 0.1; done; {leftover_command(token)}")


def kill_command(pids: Sequence[int], token: str) -> str:
    """SIGKILL `pids`, then wait (bounded) until no process carries the token; exit 1 if one still does."""
    tries = int(DEFAULT_KILL_WAIT_S / 0.1)
    return (f"kill -KILL {' '.join(map(str, pids))}; i=0; while [ $i -lt {tries} ]; do "
            f"{leftover_command(token)} >/dev/null || exit 0; i=$((i+1)); sleep 0.1; done; exit 1")
