"""One cgroup (v1) folder per session, under the pids, memory and cpu controllers.

bubblewrap's namespaces do not limit resources, and rlimits do not bind a process that
is root outside its user namespace (``RLIMIT_NPROC`` counts per real uid and exempts
root): a fork bomb would take the host. A cgroup binds whoever runs in it: ``pids.max``
stops the forks, ``memory.limit_in_bytes`` (and the swap one) stops the memory, a CFS
quota caps the CPU. The folders are named by a random handle, never by the session id
(the id is a secret; cgroup names are visible to whoever can read /proc on the host).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = ("pids", "memory", "cpu")
PREFIX = "mol-sandbox-"
CFS_PERIOD_US = 100_000


@dataclass(frozen=True, slots=True)
class CgroupLimits:
    max_processes: int
    memory_bytes: int
    cpus: float


class SessionCgroup:
    """The folders of one session; ``close`` kills what is left in them and removes them."""

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders

    @property
    def procs_files(self) -> list[str]:
        return [str(f / "cgroup.procs") for f in self.folders]

    def pids(self) -> list[int]:
        found: set[int] = set()
        for folder in self.folders:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
        return sorted(found)

    def oom_killed(self) -> bool:
        """Whether the kernel's OOM killer struck in the memory cgroup."""
        for folder in self.folders:
            if folder.parent.name == "memory":
                with contextlib.suppress(OSError, ValueError):
                    for line in (folder / "memory.oom_control").read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value) > 0
        return False

    def close(self, timeout: float = 5.0) -> bool:
        """Kill every process left in the folders, then remove them; False if some stay."""
        deadline = time.monotonic() + timeout
        remaining = list(self.folders)
        while remaining:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            left = []
            for folder in remaining:
                try:
                    folder.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    left.append(folder)
            remaining = left
            if remaining:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
        return True


class Cgroups:
    """Makes session cgroups under ``root`` (``/sys/fs/cgroup``), when it can."""

    def __init__(self, root: Path, limits: CgroupLimits) -> None:
        self.root = root
        self.limits = limits

    def probe(self) -> str | None:
        """None when session cgroups can be made here, else why not (said at start)."""
        try:
            group = self.create()
        except OSError as exc:
            return f"{exc.strerror or exc} ({exc.filename or self.root})"
        group.close()
        return None

    def create(self) -> SessionCgroup:
        name = PREFIX + secrets.token_hex(8)
        made: list[Path] = []
        try:
            for controller in CONTROLLERS:
                folder = self.root / controller / name
                folder.mkdir(mode=0o755)
                made.append(folder)
                self._limit(controller, folder)
        except OSError:
            SessionCgroup(made).close(timeout=1.0)
            raise
        return SessionCgroup(made)

    def _limit(self, controller: str, folder: Path) -> None:
        lim = self.limits
        if controller == "pids":
            (folder / "pids.max").write_text(str(lim.max_processes))
        elif controller == "memory":
            (folder / "memory.limit_in_bytes").write_text(str(lim.memory_bytes))
            swap = folder / "memory.memsw.limit_in_bytes"
            if swap.exists():  # memory + swap: no spilling past the limit into swap
                swap.write_text(str(lim.memory_bytes))
        else:
            (folder / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
            (folder / "cpu.cfs_quota_us").write_text(str(max(1000, int(lim.cpus * CFS_PERIOD_US))))
