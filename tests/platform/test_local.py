"""`mol up --catalog-only --demo`: starts the embedded catalog, says how to call it, and
Ctrl-C stops everything it started (reuse of the data dir: test_mol_up.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from mol_testkit.net import free_port, port_open

READY = "Ctrl-C stops everything"


def _read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> str:
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"no {marker!r} within {timeout}s; output so far:\n{''.join(seen)}")


@contextmanager
def mol_up(data_dir: Path, port: int) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mol_platform", "up", "--catalog-only", "--demo",
         "--catalog-port", str(port),
         "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True, env={**os.environ, "MOL_CATALOG_TOKEN": ""},
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def ctrl_c(proc: subprocess.Popen[str]) -> int:
    """Ctrl-C in a terminal signals the whole foreground process group."""
    os.killpg(proc.pid, signal.SIGINT)
    return proc.wait(timeout=30)


def test_mol_up_demo_serves_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    port = free_port()
    with mol_up(tmp_path / "data", port) as proc:
        out = _read_until(proc, READY, timeout=120)
        url = f"http://127.0.0.1:{port}"
        assert url in out
        assert "demo/chat@stable -> v1" in out
        resolved = httpx.get(f"{url}/v1/resolve/demo/coding@stable", params={"profile": "local"})
        assert resolved.status_code == 200, resolved.text
        body = resolved.json()
        assert body["version"] == 1
        assert body["verdict"]["compatible"] is True
        listed = httpx.get(f"{url}/v1/adapters", params={"tag": "demo"}).json()
        assert {i["adapter"] for i in listed["items"]} == {
            f"demo/{n}" for n in ("agent", "chat", "coding", "router", "ui")
        }
        assert ctrl_c(proc) == 0
        assert not port_open(port)

