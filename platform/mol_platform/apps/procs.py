"""Child processes that leave nothing behind: own process group, stopped as a whole.

``mol up`` and the test engine start each component in a new session (so a Ctrl-C in
the terminal reaches only the supervisor, which then stops the children in order)
and with a parent-death signal (so even a ``kill -9`` of the supervisor stops them).
vLLM starts worker processes of its own; stopping the process group stops them too.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
# Resolved before any fork: the child may only make async-signal-safe calls.
_LIBC = ctypes.CDLL(None, use_errno=True)


class ProcessError(RuntimeError):
    """Processes of a group survived SIGKILL."""


def _new_group_dying_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def start_group(argv: list[str], *, env: dict[str, str], log_path: Path | None = None,
                cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new process group that dies with this process."""
    out = None if log_path is None else log_path.open("ab")
    try:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT if out is not None else None,
                                preexec_fn=_new_group_dying_with_parent)
    finally:
        if out is not None:
            out.close()


def stop_process_group(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM the process group led by ``proc``, SIGKILL what is left, reap the leader."""
    pgid = proc.pid  # a session leader's pid is its group id
    _signal_group(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal_group(pgid, signal.SIGKILL)
        proc.wait(timeout=grace)
    # Workers may outlive the leader: wait for the group to empty, then insist.
    deadline = time.monotonic() + grace
    while live := group_members(pgid):
        if time.monotonic() > deadline:
            raise ProcessError(f"processes {live} (group {pgid}) survived SIGKILL")
        late = time.monotonic() > deadline - grace / 2
        _signal_group(pgid, signal.SIGKILL if late else signal.SIGTERM)
        time.sleep(0.2)


def group_members(pgid: int) -> list[int]:
    """Pids of live (not zombie) processes in a process group, read from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may contain spaces and parentheses.
        fields = text[text.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file (for error messages)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])
