"""The machine under test and the processes the benchmark starts.

Absolute figures on a 2-core box are only worth reporting when nothing else uses the
CPU, so `busy_cpu()` measures what other processes consume before a run.
"""

from __future__ import annotations

import contextlib
import os
import platform as _platform_info
import resource
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MachineInfo:
    cpu: str
    cores: int
    ram_gib: float
    kernel: str
    python: str

    def markdown(self) -> str:
        return (
            f"{self.cpu}, {self.cores} cores, {self.ram_gib:.0f} GiB RAM, "
            f"Linux {self.kernel}, Python {self.python}"
        )


def machine_info() -> MachineInfo:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) / 1024 / 1024
    return MachineInfo(cpu, os.cpu_count() or 1, ram, _platform_info.release(),
                       _platform_info.python_version())


def _cpu_times() -> tuple[float, float]:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [float(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)
    return sum(values), idle


def busy_cpu(seconds: float = 2.0) -> float:
    """Cores' worth of CPU in use over `seconds` (0.0 .. cores), by everyone."""
    total0, idle0 = _cpu_times()
    time.sleep(seconds)
    total1, idle1 = _cpu_times()
    span = total1 - total0
    if span <= 0:
        return 0.0
    return (1.0 - (idle1 - idle0) / span) * (os.cpu_count() or 1)


def quiet_check(limit: float, seconds: float = 3.0) -> tuple[bool, str]:
    """Whether the machine is quiet enough to measure; the message says what was seen."""
    busy = busy_cpu(seconds)
    load1, _, _ = os.getloadavg()
    ok = busy <= limit
    msg = f"other processes used {busy:.2f} cores over {seconds:.0f}s (load average {load1:.2f})"
    return ok, msg


def pinned(argv: Sequence[str], cores: str | None) -> list[str]:
    """`argv` under `taskset -c cores` when cores are given and taskset exists."""
    if not cores or shutil.which("taskset") is None:
        return list(argv)
    return ["taskset", "-c", cores, *argv]


class Proc:
    """A child process in its own process group, stopped with its children."""

    def __init__(self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 log: Path, cwd: Path | None = None) -> None:
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as fh:
            self.popen = subprocess.Popen(
                list(argv), env=dict(env) if env is not None else None, cwd=cwd,
                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-chars:]
        return ""

    def stop(self, timeout: float = 20.0) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)
        # Workers that outlived their parent in the same group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)


def wait_http(url: str, proc: Proc, timeout: float = 120.0) -> None:
    """Block until GET url answers below 500, or fail with the process log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited early:\n{proc.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status < 500:
                    return
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code < 500:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{proc.name} did not answer {url} within {timeout:.0f}s:\n{proc.tail()}")


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds incl. reaped children) of one process, None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    ticks = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return int(fields[1]), ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu(roots: Sequence[int]) -> float:
    """CPU seconds used so far by the given processes and all their descendants.

    Noise from other processes does not enter this figure, so CPU per request stays
    comparable on a busy machine where latencies and rates do not.
    """
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            got = _stat(entry)
            if got is not None:
                stats[int(entry)] = got
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo, seen = 0.0, list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        total += stats[pid][1]
        todo.extend(children.get(pid, ()))
    return total


def busy_seconds() -> float:
    """CPU seconds spent so far by the whole machine (all cores, all processes)."""
    total, idle = _cpu_times()
    return (total - idle) / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """CPU seconds of this process and its reaped children (wrk runs end before reading)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def callgrind_total(out: Path) -> int:
    """The instructions callgrind counted: the largest dump total among the files it
    wrote for ``out`` (``--callgrind-out-file``; one per dump and thread)."""
    best = 0
    for path in out.parent.glob(out.name + "*"):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                best = max(best, int(line.split()[1]))
    return best


def callgrind_dumps(out: Path) -> list[int]:
    """The instructions of each dump callgrind wrote for ``out``, in order: the files
    ``out.1``, ``out.2``, ... that ``callgrind_control -d`` makes, counters zeroed
    (``-z``) before each counting phase."""
    found: dict[int, int] = {}
    for path in out.parent.glob(out.name + ".*"):
        suffix = path.name[len(out.name) + 1 :]
        if not suffix.isdigit():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("summary:"):
                found[int(suffix)] = int(line.split()[1])
    return [found[k] for k in sorted(found)]
