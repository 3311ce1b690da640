"""``mol up``: the embedded default, run as the same processes the chart runs.

Each component is started as a process (``python -m mol_platform catalog serve``,
the engine through its launcher in the engine venv, ``mol router serve``) so the local
mode and the cluster run the same code, and ``mol_platform`` never imports a
component. This module supervises: start in order, wait for health (with progress),
print how to call what is running, and on Ctrl-C, SIGTERM or the exit of any
component stop everything, process groups included, so nothing is left behind.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import httpx
import typer

from mol_platform.apps.procs import start_group, stop_process_group, tail
from mol_platform.clients.catalog import CatalogError

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


class UpError(RuntimeError):
    """``mol up`` cannot go on; the message says what to do."""


class Stopped(BaseException):
    """SIGTERM or SIGINT arrived: stop everything and exit 0."""


def say(message: str) -> None:
    typer.echo(f"mol up: {message}", err=True)


@dataclass
class Service:
    name: str
    argv: list[str]
    health_url: str
    hint: str = ""
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def mol_argv(*args: str) -> list[str]:
    """A ``mol`` verb run with this interpreter (works without the console script)."""
    return [sys.executable, "-m", "mol_platform", *args]


def catalog_argv(host: str, port: int, data_dir: Path, *, auth: bool) -> list[str]:
    """``mol catalog serve`` on the embedded default (SQLite + a blob folder in data_dir)."""
    data_dir = data_dir.resolve()
    argv = mol_argv("catalog", "serve", "--host", host, "--port", str(port),
                    "--db", f"sqlite:///{data_dir / 'catalog.db'}",
                    "--blobs", f"file://{data_dir / 'blobs'}")
    return argv if auth else [*argv, "--no-auth"]


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_port_free(host: str, port: int, option: str) -> None:
    """Fail early, naming the fix, when something already listens on host:port."""
    if not 0 < port < 65536:
        raise UpError(f"{option} {port} is not a port (1-65535)")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise UpError(f"port {port} on {host} is in use ({exc.strerror}): stop what runs "
                          f"there (another `mol up`?) or pick another with {option} N") from None


def wait_healthy(svc: Service, timeout: float,
                 progress: Callable[[float], None] | None = None, every: float = 5.0) -> None:
    """Poll the health URL; ``progress(elapsed)`` is called about every ``every`` s."""
    start = time.monotonic()
    next_report = start + every
    with httpx.Client(timeout=1.0) as client:
        while True:
            if not svc.alive():
                log = f"; last lines of {svc.log_path}:\n{tail(svc.log_path)}" \
                    if svc.log_path else ""
                raise UpError(f"{svc.name} exited while starting{log}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(svc.health_url).status_code == 200:
                    return
            now = time.monotonic()
            if now - start > timeout:
                raise UpError(f"{svc.name} not healthy after {timeout:.0f}s at {svc.health_url}")
            if progress is not None and now >= next_report:
                progress(now - start)
                next_report = now + every
            time.sleep(0.25)


def wait_semantic(ready_url: str, timeout: float, say: Callable[[str], None]) -> str:
    """Wait until the router says its experts' examples are embedded (``semantic`` in
    its ``/readyz``), so that the examples the banner prints are decided as it says;
    the state it ended in. A build that fails or outlasts ``timeout`` is said and not
    fatal: requests fall back to keywords and the classifier meanwhile."""
    start = time.monotonic()
    state = "building"
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() - start < timeout:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                state = str(client.get(ready_url).json().get("semantic", "off"))
            if state != "building":
                break
            time.sleep(0.25)
    if state in ("building", "failed"):
        say(f"the experts' examples are not embedded yet ({state}); until they are, "
            "requests the keywords leave open go to the classifier")
    return state


class Supervisor:
    """Starts services in order and stops them in reverse, whatever happens."""

    def __init__(self) -> None:
        self.services: list[Service] = []

    def start(self, svc: Service, *, timeout: float = 60.0,
              progress: Callable[[float], None] | None = None, every: float = 5.0) -> None:
        self.launch(svc)
        wait_healthy(svc, timeout, progress, every)

    def launch(self, svc: Service) -> None:
        """Start without waiting (a slow service that comes up beside the next one);
        :func:`wait_healthy` it before use."""
        log = f" (log: {svc.log_path})" if svc.log_path else ""
        say(f"starting {svc.name} ...{log}")
        self.services.append(svc)
        svc.proc = start_group(svc.argv, env={**os.environ, **svc.env}, log_path=svc.log_path)

    def restart(self, name: str, *, timeout: float = 600.0) -> Service:
        """Stop one service's whole process group and start it again (same argv and env)."""
        svc = next(s for s in self.services if s.name == name)
        if svc.proc is not None:
            stop_process_group(svc.proc, grace=15.0)
        svc.proc = start_group(svc.argv, env={**os.environ, **svc.env}, log_path=svc.log_path)
        wait_healthy(svc, timeout)
        return svc

    def stop(self) -> None:
        for svc in reversed(self.services):
            if svc.proc is not None:
                with contextlib.suppress(Exception):
                    stop_process_group(svc.proc, grace=15.0)
        self.services.clear()

    def watch(self) -> str:
        """Block until a service exits; returns its name."""
        while True:
            for svc in self.services:
                if not svc.alive():
                    return svc.name
            time.sleep(0.5)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM (and SIGINT) into :class:`Stopped` in the main thread."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_supervised(body: Callable[[Supervisor], str]) -> int:
    """Run ``body`` (starts services, returns what to print), then watch until stopped."""
    sup = Supervisor()
    with stop_on_signals():
        try:
            try:
                typer.echo(body(sup) + "\n\nCtrl-C stops everything.")
                gone = sup.watch()
                say(f"{gone} exited; stopping the rest.")
                return 1
            except (UpError, CatalogError, OSError, ValueError) as exc:
                say(str(exc))
                return 1
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish stopping first
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                names = ", ".join(svc.name for svc in reversed(sup.services))
                if names:
                    say(f"stopping {names} ...")
                sup.stop()
                if names:
                    say("stopped.")
        except Stopped:
            return 0
