"""``mol up``: the embedded default, run as the same processes the chart runs.

Each component is started as ``python -m mol_platform <verb>`` so the local mode and
the cluster run the same code; this module only supervises: start, wait for health,
print how to call what is running, and stop everything on Ctrl-C or when one exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import typer


@dataclass
class Service:
    name: str
    argv: list[str]
    health_url: str
    hint: str
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None


def _mol(*args: str) -> list[str]:
    return [sys.executable, "-m", "mol_platform", *args]


def wait_healthy(svc: Service, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if svc.proc is not None and svc.proc.poll() is not None:
            return False
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(svc.health_url, timeout=1.0).status_code == 200:
                return True
        time.sleep(0.2)
    return False


def stop_all(services: list[Service], grace: float = 10.0) -> None:
    for svc in reversed(services):
        if svc.proc is not None and svc.proc.poll() is None:
            svc.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for svc in services:
        if svc.proc is None:
            continue
        try:
            svc.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            svc.proc.kill()
            svc.proc.wait()


def _seed(catalog_url: str, data_dir: Path) -> str:
    """Publish the demo adapters; returns what to tell the user."""
    try:
        from mol_platform.local_seed import seed_demo
    except ImportError as exc:
        return f"(demo not seeded: needs pip install 'mol-platform[demo]': {exc})"
    result = seed_demo(catalog_url, data_dir / "demo")
    lines = [f"demo      base {result.base}, serving profile '{result.profile}'"]
    for ref, version in result.adapters.items():
        lines.append(f"          {ref} -> v{version}")
    first = next(iter(result.adapters), "demo/chat@stable")
    lines.append(f"          curl '{catalog_url}/v1/resolve/{first}?profile={result.profile}'")
    return "\n".join(lines)


def run_local(
    *, file: Path | None, data_dir: Path, catalog_port: int, host: str, demo: bool = False
) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    db = data_dir.resolve() / "catalog.db"
    blobs = data_dir.resolve() / "blobs"
    catalog_url = f"http://{host}:{catalog_port}"
    services = [
        Service(
            name="catalog",
            argv=_mol("catalog", "serve", "--host", host, "--port", str(catalog_port),
                      "--db", f"sqlite:///{db}", "--blobs", f"file://{blobs}", "--no-auth"),
            health_url=f"{catalog_url}/healthz",
            hint=(f"catalog   {catalog_url}  (SQLite {db}, blobs {blobs})\n"
                  f"          curl {catalog_url}/v1/adapters\n"
                  f"          MOL_CATALOG_URL={catalog_url} mol catalog ls\n"
                  f"          API docs: {catalog_url}/docs"),
        ),
    ]
    if file is not None:
        typer.echo(f"mol up: {file}: the local engine and router are not built yet in this "
                   "release; starting the catalog only.", err=True)
    try:
        for svc in services:
            typer.echo(f"mol up: starting {svc.name} ...", err=True)
            svc.proc = subprocess.Popen(svc.argv, env={**os.environ, **svc.env})
            if not wait_healthy(svc, timeout=60):
                typer.echo(f"mol up: {svc.name} did not become healthy; stopping.", err=True)
                stop_all(services)
                return 1
        seeded = _seed(catalog_url, data_dir) if demo else ""
        typer.echo("\nMoL Platform is up (embedded default). Running:")
        for svc in services:
            typer.echo(svc.hint)
        if seeded:
            typer.echo(seeded)
        typer.echo("\nCtrl-C stops everything.")
        while all(s.proc is not None and s.proc.poll() is None for s in services):
            time.sleep(0.5)
        typer.echo("mol up: a component exited; stopping the rest.", err=True)
        stop_all(services)
        return 1
    except KeyboardInterrupt:
        typer.echo("\nmol up: stopping ...", err=True)
        stop_all(services)
        return 0
