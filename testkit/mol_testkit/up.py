"""``mol up`` as a subprocess, the way a user runs it: read its banner, find every
process it started, stop it with a signal and check that nothing is left behind."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from mol_platform.apps.procs import group_members

READY_LINE = "Ctrl-C stops everything."


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, their children, ...)."""
    out: list[int] = []
    todo = _children(pid)
    while todo:
        child = todo.pop()
        out.append(child)
        todo += _children(child)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class MolUp:
    """One ``mol up`` run; stdout lines are collected by a reader thread."""

    def __init__(self, args: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None,
                 log: Path | None = None) -> None:
        self.lines: list[str] = []
        self.started: list[int] = []  # what it had started, seen when it was stopped
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.stderr_path = log or cwd / "mol-up.err"
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mol_platform", "up", *args], cwd=cwd,
                env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=err, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_ready(self, timeout: float) -> str:
        """The banner (stdout up to the ready line); raises with stderr if it exits first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"mol up not ready in {timeout:.0f}s:\n{self.stderr}") from None
            if line is None:
                raise RuntimeError(f"mol up exited ({self.proc.wait()}):\n{self.stderr}")
            self.lines.append(line)
            if line.strip() == READY_LINE:
                return "\n".join(self.lines)

    def wait_exit(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 90.0) -> list[int]:
        """Signal ``mol up``, wait for it; returns what it had started that is still alive."""
        started = self.started = descendants(self.proc.pid)
        self.proc.send_signal(sig)
        self.wait_exit(timeout)
        deadline = time.monotonic() + 5
        while (left := [p for p in started if alive(p)] +
               [p for pg in started for p in group_members(pg)]) and time.monotonic() < deadline:
            time.sleep(0.2)
        return sorted(set(left))

    def kill(self) -> None:
        """Last-resort cleanup for a failed test: the process groups it started, then it."""
        for pid in descendants(self.proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait_exit(30)
