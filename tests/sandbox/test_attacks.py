"""The attack table (docs/sandbox.md): escape and abuse attempts, none of which may
succeed, while a bystander session keeps its state and keeps answering through all of
them. Each attempt runs in a fresh session of one service with small limits; code prints
ESCAPED where the attempt would have worked, and the host's secrets (an environment
variable of the server, a file standing in for the catalog's data) must appear nowhere."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sandbox.conftest import Sandbox

SECRET = "s3cr3t-" + "9f2c" * 8
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Host:
    sandbox: Sandbox
    listener: socket.socket  # the "catalog's port" on loopback
    data_file: Path  # the "catalog's data folder"
    bystander: str
    victim: str  # another session, with a file in its /tmp
    victim_pid: int  # its interpreter's host pid


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    from mol_sandbox.settings import SandboxSettings
    from mol_testkit.net import free_port
    from tests.sandbox.conftest import running, tokens_file

    folder = tmp_path_factory.mktemp("host")
    data = folder / "catalog-data" / "catalog.db"
    data.parent.mkdir()
    data.write_text(SECRET)
    os.environ["MOL_SANDBOX_TEST_SECRET"] = SECRET
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    settings = SandboxSettings(port=free_port(), tokens_file=tokens_file(folder),
                               call_timeout=3.0, memory_mib=128, max_processes=32,
                               output_bytes=4096)
    try:
        with running(settings) as sandbox:
            bystander = sandbox.new()
            sandbox.run(bystander, "count = 0")
            victim = sandbox.new()
            sandbox.run(victim, f"open('/tmp/mine', 'w').write({SECRET!r})")
            interp = sandbox.service.get("team-a", victim).interp
            assert interp is not None
            assert interp.cgroup is not None
            yield Host(sandbox, listener, data, bystander, victim, interp.cgroup.pids()[-1])
    finally:
        listener.close()
        del os.environ["MOL_SANDBOX_TEST_SECRET"]


def _connect(host: str, port: str) -> str:
    return ("import socket\ntry:\n"
            f"    socket.create_connection(({host!r}, {port}), timeout=1)\n"
            "    print('ESCAPED')\nexcept OSError as e:\n    print('refused', e)")


def _read(path: str) -> str:
    return f"try:\n    print(open({path!r}).read())\nexcept OSError as e:\n    print('no', e)"


# name -> code; {port}, {server_port}, {data}, {repo}, {server_pid}, {victim_pid} are filled in.
ATTACKS: dict[str, str] = {
    "network: loopback, the sandbox service's own port": _connect("127.0.0.1", "{server_port}"),
    "network: the catalog's port on loopback": _connect("127.0.0.1", "{port}"),
    "network: IPv6 loopback": _connect("::1", "{port}"),
    "network: cloud metadata 169.254.169.254": _connect("169.254.169.254", "80"),
    "network: a public address": _connect("1.1.1.1", "443"),
    "network: DNS lookup": ("import socket\ntry:\n    socket.getaddrinfo('example.com', 80)\n"
                            "    print('ESCAPED')\nexcept OSError as e:\n    print('no', e)"),
    "network: UDP out": ("import socket\ntry:\n    s = socket.socket(socket.AF_INET, "
                         "socket.SOCK_DGRAM)\n    s.sendto(b'x', ('8.8.8.8', 53))\n"
                         "    print('ESCAPED')\nexcept OSError as e:\n    print('no', e)"),
    "read host files: /etc/shadow": _read("/etc/shadow"),
    "read host files: the repository": _read("{repo}/pyproject.toml"),
    "read host files: the catalog's data folder": _read("{data}"),
    "read another session's files": _read("/tmp/mine"),
    "another session's process in /proc": (
        "import os\nprint(os.path.exists('/proc/{victim_pid}'), os.listdir('/proc'))\n"
        + _read("/proc/{victim_pid}/root/tmp/mine")),
    "signal another session's process": (
        "import os\ntry:\n    os.kill({victim_pid}, 9)\n    print('ESCAPED')\n"
        "except OSError as e:\n    print('no', e)"),
    "signal the server's process": (
        "import os\ntry:\n    os.kill({server_pid}, 9)\n    print('ESCAPED')\n"
        "except OSError as e:\n    print('no', e)"),
    "signal every process it can see (kill -1)": "import os\nos.kill(-1, 9)",
    "server's environment: /proc/1/environ": _read("/proc/1/environ"),
    "server's environment: /proc/self/environ and os.environ": (
        _read("/proc/self/environ") + "\nimport os\nprint(dict(os.environ))"),
    "server's environment: every /proc/*/environ": (
        "import glob\nfor p in glob.glob('/proc/*/environ'):\n"
        "    try:\n        print(p, open(p, 'rb').read())\n    except OSError as e:\n"
        "        print(p, e)"),
    "/proc tricks: /proc/1/root of the host": _read("/proc/1/root/etc/shadow"),
    "/proc tricks: write /proc/sysrq-trigger": (
        "try:\n    open('/proc/sysrq-trigger', 'w').write('h')\n    print('ESCAPED')\n"
        "except OSError as e:\n    print('no', e)"),
    "symlink to a host file": (
        "import os\nos.symlink('/etc/shadow', '/tmp/link')\n" + _read("/tmp/link")
        + "\nos.symlink('{data}', '/tmp/link2')\n" + _read("/tmp/link2")),
    "write outside the sandbox": (
        "import os\nfor p in ['/usr/lib/owned', '/opt/mol/driver.py', '{data}', '/owned',\n"
        "          '/etc/owned', '/sys/fs/cgroup/pids/cgroup.procs']:\n"
        "    try:\n        open(p, 'a').write('x')\n        print('ESCAPED', p)\n"
        "    except OSError as e:\n        print('no', p, e)"),
    "become root": ("import os\ntry:\n    os.setuid(0)\n    print('ESCAPED')\n"
                    "except OSError as e:\n    print('no', e, os.getuid())"),
    "fill the disk": ("try:\n    with open('/tmp/big', 'wb') as f:\n"
                      "        for _ in range(1024):\n            f.write(b'x' * (1 << 20))\n"
                      "    print('ESCAPED')\nexcept OSError as e:\n    print('no', repr(e))"),
    "fork bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n"
                  "    except OSError:\n        pass"),
    "memory bomb: one allocation": "x = bytearray(8 * 1024 ** 3)",
    "memory bomb: growing list": "x = []\nwhile True:\n    x.append(bytearray(10 ** 7))",
    "memory bomb: forked children": (
        "import os, time\nfor _ in range(8):\n    if os.fork() == 0:\n"
        "        x = bytearray(100 * 1024 ** 2)\n        time.sleep(30)\ntime.sleep(30)"),
    "infinite loop": "while True:\n    pass",
    "huge output": "while True:\n    print('x' * 1000)",
    "huge output: one string": "print('y' * 50_000_000)",
    "kill its own interpreter": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
    "exit its own interpreter": "import os\nos._exit(0)",
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_fails(host: Host, name: str) -> None:
    sandbox = host.sandbox
    code = (ATTACKS[name].replace("{server_port}", sandbox.url.rsplit(":", 1)[1])
            .replace("{port}", str(host.listener.getsockname()[1]))
            .replace("{data}", str(host.data_file)).replace("{repo}", str(REPO))
            .replace("{server_pid}", str(os.getpid()))
            .replace("{victim_pid}", str(host.victim_pid)))
    sid = sandbox.new()
    started = time.monotonic()
    out = sandbox.run(sid, code)
    assert time.monotonic() - started < 10
    seen = " ".join(str(v) for v in out.values())
    assert f"PWD={os.getcwd()}" not in seen, out  # bwrap's environment holds nothing
    assert "ESCAPED" not in seen, out
    assert SECRET not in seen, out
    assert len(out["stdout"]) <= 4096
    assert len(out["error"] or "") <= 4096
    with pytest.raises(BlockingIOError):
        host.listener.accept()  # nothing ever reached the catalog's port
    assert host.data_file.read_text() == SECRET
    # The service keeps serving: the bystander keeps its state, the victim its file.
    assert sandbox.run(host.bystander, "count += 1; count")["fresh"] is False
    victim = sandbox.run(host.victim, "open('/tmp/mine').read()")
    assert victim["fresh"] is False
    assert SECRET in victim["result"]
    sandbox.a.delete(f"/v1/sessions/{sid}")


def test_another_tenants_session_id_is_unknown(host: Host) -> None:
    r = host.sandbox.b.post(f"/v1/sessions/{host.victim}/execute",
                            json={"code": "open('/tmp/mine').read()"})
    unknown = host.sandbox.b.post("/v1/sessions/" + "A" * 32 + "/execute", json={"code": "1"})
    assert (r.status_code, r.json()) == (404, unknown.json())
