"""The isolation underneath: the bwrap command line, the cgroups that bind a session
(and go with it), and the fallback where no cgroup can be made."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from mol_sandbox.isolation.bwrap import SandboxSpec, command
from mol_sandbox.isolation.cgroups import PREFIX
from tests.sandbox.conftest import Sandbox, StartSandbox

SPEC = SandboxSpec(bwrap="/usr/bin/bwrap", python="/usr/bin/python3", driver="/d.py",
                   disk_bytes=1 << 20, memory_bytes=1 << 26, max_processes=9,
                   output_bytes=1024, root_links={"lib": "usr/lib", "bin": None})


def test_command_isolates_and_joins_cgroups_first() -> None:
    argv = command(SPEC, ["/cg/pids/x/cgroup.procs", "/cg/memory/x/cgroup.procs"])
    bwrap = argv.index("/usr/bin/bwrap")
    assert argv[:2] == ["/bin/sh", "-c"]
    assert argv[4:bwrap] == ["/cg/pids/x/cgroup.procs", "/cg/memory/x/cgroup.procs", "--"]
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--size") + 1:argv.index("--size") + 4] == [
        str(1 << 20), "--tmpfs", "/tmp"]
    assert argv[argv.index("usr/lib") - 1:][:3] == ["--symlink", "usr/lib", "/lib"]
    assert argv[argv.index("/bin") - 1:][:3] == ["--ro-bind", "/bin", "/bin"]
    assert "/etc" not in argv
    assert "--bind" not in argv
    assert argv[argv.index("--remount-ro") + 1] == "/"
    assert command(SPEC)[0] == "/usr/bin/bwrap"
    fallback = command(replace(SPEC, run_as=(65534, 65533)))
    assert fallback[:5] == ["/usr/bin/setpriv", "--reuid=65534", "--regid=65533",
                            "--clear-groups", "--"]


def _cgroup_folders() -> set[str]:
    return {p.name for p in Path("/sys/fs/cgroup/pids").iterdir() if p.name.startswith(PREFIX)}


def test_a_session_lives_in_its_own_cgroups_and_they_go_with_it(sandbox: Sandbox) -> None:
    sid = sandbox.new()
    interp = sandbox.service.get("team-a", sid).interp
    assert interp is not None
    assert interp.cgroup is not None
    folders = interp.cgroup.folders
    assert {f.parent.name for f in folders} == {"pids", "memory", "cpu"}
    limits = {f.parent.name: f for f in folders}
    assert (limits["pids"] / "pids.max").read_text().strip() == "64"
    assert (limits["memory"] / "memory.limit_in_bytes").read_text().strip() == str(512 << 20)
    assert (limits["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "100000"
    assert interp.proc.pid in interp.cgroup.pids()  # joined before bwrap started
    out = sandbox.run(sid, "import os\nfor _ in range(200):\n    pid = os.fork()\n"
                           "    pid or os._exit(0)\n    os.waitpid(pid, 0)")
    assert out["error"] is None  # forks that end are fine
    # A fork bomb (capped here at 500 forks) stops at pids.max, though bwrap runs as
    # root outside, where RLIMIT_NPROC does not bind.
    bomb = sandbox.run(sid, "import os, time\nn = 0\nfor _ in range(500):\n    try:\n"
                            "        pid = os.fork()\n    except OSError:\n        break\n"
                            "    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
                            "    n += 1\nn")
    assert int(bomb["result"]) < 64
    sandbox.a.delete(f"/v1/sessions/{sid}")
    assert not any(f.exists() for f in folders)


def test_memory_past_the_cgroup_limit_stops_the_interpreter(
        start_sandbox: StartSandbox) -> None:
    sandbox = start_sandbox(memory_mib=96)
    sid = sandbox.new()
    # Each child stays under the address-space rlimit; together they pass the cgroup's.
    out = sandbox.run(sid, "import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n"
                           "        x = b'x' * (40 * 1024 ** 2)\n        time.sleep(20)\n"
                           "x = b'x' * (40 * 1024 ** 2)\ntime.sleep(20)")
    assert "went past its 96 MiB memory limit" in out["error"]
    assert sandbox.run(sandbox.new(), "1 + 1")["result"] == "2"


def test_without_cgroups_sessions_run_as_a_non_root_uid_with_rlimits(
        start_sandbox: StartSandbox, caplog) -> None:
    sandbox = start_sandbox(cgroups="off", max_processes=16, call_timeout=3.0)
    assert "no per-session cgroups" in caplog.text
    sid = sandbox.new()
    interp = sandbox.service.get("team-a", sid).interp
    assert interp is not None
    assert interp.cgroup is None
    assert os.stat(f"/proc/{interp.proc.pid}").st_uid == 65534  # bwrap itself
    assert sandbox.a.get(f"/v1/sessions/{sid}").json()["isolation"] == "rlimits"
    bomb = sandbox.run(sid, "import os\nn = 0\nwhile True:\n    try:\n        os.fork()\n"
                            "    except OSError:\n        break\nn")
    assert bomb["error"] is not None or int(bomb["result"] or 0) < 16
    assert sandbox.run(sandbox.new(), "x = bytearray(2 * 1024 ** 3)")["error"].endswith(
        "MemoryError\n")
    assert sandbox.run(sandbox.new(), "1 + 1")["result"] == "2"


def test_other_sessions_are_served_while_one_fork_bombs(start_sandbox: StartSandbox) -> None:
    sandbox = start_sandbox(call_timeout=6.0)
    bomber, other = sandbox.new(), sandbox.new()
    sandbox.run(other, "n = 0")
    with ThreadPoolExecutor(1) as pool:
        bomb = pool.submit(sandbox.run, bomber, "import os\nwhile True:\n    try:\n"
                                                "        os.fork()\n    except OSError:\n"
                                                "        pass")
        time.sleep(1.0)
        for _ in range(5):
            started = time.monotonic()
            out = sandbox.run(other, "n += 1; n")
            assert time.monotonic() - started < 2.0
        assert (out["result"], out["fresh"]) == ("5", False)
        assert bomb.result()["error"].startswith("TimeoutError")
