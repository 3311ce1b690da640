"""The command line that starts one session's interpreter: pure, from a spec.

bubblewrap gives the session its own namespaces (``--unshare-all``: no network but its
own loopback, its own pids, so no other process is visible or signalable), a read-only
root holding the host's /usr (read-only) and a private tmpfs /tmp of a fixed size, the
only place it can write; no capabilities, and no life beyond the service's
(``--die-with-parent``, ``--new-session`` against terminal injection). bubblewrap's own
process is pid 1 inside and keeps the environment it was started with, so the caller
starts it with an empty one. A small ``sh`` prologue first joins the session's cgroups,
so that bwrap and everything under it are counted from the first fork on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DRIVER_PATH = "/opt/mol/driver.py"
HOME = "/tmp"
# Writes the shell's own pid into each cgroup.procs file given before "--", then
# becomes the command after it.
JOIN_CGROUPS = ('while [ "$1" != "--" ]; do echo $$ > "$1" || exit 125; shift; done; '
                'shift; exec "$@"')


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    bwrap: str
    python: str
    driver: str  # the driver script's path on the host, bound read-only
    disk_bytes: int
    memory_bytes: int
    max_processes: int
    output_bytes: int
    # Top-level names of the host's root that the system's binaries need: a symlink's
    # target (merged /usr: /lib -> usr/lib), or None for a folder bound read-only.
    root_links: Mapping[str, str | None]
    # (uid, gid) to become before bwrap starts, where no cgroup binds the session.
    run_as: tuple[int, int] | None = None


def command(spec: SandboxSpec, cgroup_procs: Sequence[str] = ()) -> list[str]:
    """argv: join ``cgroup_procs`` (if any), then bwrap, then the driver."""
    argv: list[str] = []
    if cgroup_procs:
        argv += ["/bin/sh", "-c", JOIN_CGROUPS, "sh", *cgroup_procs, "--"]
    if spec.run_as is not None:
        uid, gid = spec.run_as
        argv += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                 "--"]
    argv += [spec.bwrap, "--unshare-all", "--die-with-parent", "--new-session",
             "--cap-drop", "ALL", "--uid", "65534", "--gid", "65534",
             "--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
    for name, target in sorted(spec.root_links.items()):
        if target is None:
            argv += ["--ro-bind", f"/{name}", f"/{name}"]
        else:
            argv += ["--symlink", target, f"/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(spec.disk_bytes), "--tmpfs", HOME,
             "--ro-bind", spec.driver, DRIVER_PATH, "--remount-ro", "/",
             "--clearenv", "--setenv", "HOME", HOME, "--setenv", "PATH", "/usr/bin:/bin",
             "--setenv", "LANG", "C.UTF-8", "--chdir", HOME,
             spec.python, "-I", DRIVER_PATH,
             "--memory", str(spec.memory_bytes), "--nproc", str(spec.max_processes),
             "--fsize", str(spec.disk_bytes), "--output", str(spec.output_bytes)]
    return argv
