"""Loopback helpers: free ports, waiting for a listener, clear errors for missing tools."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOOPBACK = "127.0.0.1"

DEPS_HINT = "install the system packages with `make deps` (or `bash scripts/system-deps.sh`)"


class InfraError(RuntimeError):
    """A piece of test infrastructure could not start; the message says what to do."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now (the kernel picks it).

    There is a short window before the caller binds it; good enough on a test box.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(port: int, host: str = LOOPBACK) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_port(port: int, host: str = LOOPBACK, timeout: float = 30.0) -> None:
    """Block until host:port accepts connections, or raise InfraError after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(port, host):
            return
        time.sleep(0.05)
    raise InfraError(f"nothing listens on {host}:{port} after {timeout:.0f}s")


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """Terminate a child, wait up to ``grace`` seconds, then kill it; safe if it has exited."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded standard-library HTTP server on loopback answering with ``handler``
    (a scripted upstream for a test); its base URL. Stopped and closed on exit."""
    server = ThreadingHTTPServer((LOOPBACK, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{LOOPBACK}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
