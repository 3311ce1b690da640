"""A kill -9 during a publish leaves a temp upload folder and partial blobs: removed at
the next start (their process is gone) and by gc once past its grace period."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from mol_testkit.net import free_port, stop_process, wait_port

SPILL = 17 * 1024 * 1024  # past the 16 MiB kept in memory: the upload spills to disk


def _start(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MOL_CATALOG_AUTH": "off", "TMPDIR": str(tmp / "tmp")}
    code = ("from mol_catalog.server import serve; "
            f"serve('127.0.0.1', {port}, 'sqlite:///{tmp / 'catalog.db'}', "
            f"'file://{tmp / 'blobs'}')")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    wait_port(port, timeout=60)
    return proc


def _slow_body(boundary: str, stop: threading.Event) -> Iterator[bytes]:
    yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"adapter_model.safetensors\"; "
           f"filename=\"w\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
    chunk = b"\0" * (1024 * 1024)
    for _ in range(SPILL // len(chunk)):
        yield chunk
    stop.wait(30)  # the rest never comes: the server is killed meanwhile


def _upload_dirs(tmp: Path) -> list[Path]:
    return sorted((tmp / "tmp").glob("mol-publish-*"))


def test_leftovers_of_a_killed_publish_are_removed(tmp_path: Path, model: Any) -> None:
    (tmp_path / "tmp").mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(tmp_path, port)
    stop = threading.Event()
    try:
        assert httpx.post(f"{url}/v1/base-models", json=model.base_body()).status_code == 201
        boundary = "molboundary"

        def send() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the server dies
                httpx.post(f"{url}/v1/adapters/acme/big/versions",
                           content=_slow_body(boundary, stop), timeout=60,
                           headers={"content-type":
                                    f"multipart/form-data; boundary={boundary}"})

        sender = threading.Thread(target=send)
        sender.start()
        deadline = time.monotonic() + 30
        while not any(p.stat().st_size >= SPILL for d in _upload_dirs(tmp_path)
                      for p in d.iterdir()):
            assert time.monotonic() < deadline, "the upload never spilled to disk"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        stop.set()
        sender.join()
    finally:
        stop.set()
        stop_process(proc)
    (killed,) = _upload_dirs(tmp_path)
    assert killed.name.startswith(f"mol-publish-{proc.pid}-")
    blob_dir = tmp_path / "blobs" / "blobs" / "sha256"
    # A copy into the store cut short, named as the store names it: ".<hex>.<pid>.<ns>".
    partial = blob_dir / f".{'a' * 64}.{proc.pid}.123"
    partial.write_bytes(b"partial")
    # The same of a process that still runs (this one), just started: both must stay.
    live_dir = tmp_path / "tmp" / f"mol-publish-{os.getpid()}-live"
    live_dir.mkdir()
    (live_dir / "adapter_model.safetensors").write_bytes(b"x")
    live_partial = blob_dir / f".{'b' * 64}.{os.getpid()}.456"
    live_partial.write_bytes(b"x")

    proc = _start(tmp_path, port)
    try:
        assert not killed.exists()
        assert not partial.exists()
        assert live_dir.exists()
        assert live_partial.exists()
        gc = httpx.post(f"{url}/v1/admin/gc", params={"grace_seconds": 60}).json()
        assert gc["leftovers_removed"] == 0  # young: a publish may still use them
        old = time.time() - 120
        for path in (live_dir / "adapter_model.safetensors", live_dir, live_partial):
            os.utime(path, (old, old))
        gc = httpx.post(f"{url}/v1/admin/gc", params={"grace_seconds": 60}).json()
        assert gc["leftovers_removed"] == 2
        assert not live_dir.exists()
        assert not live_partial.exists()
    finally:
        stop_process(proc)
