"""A real sandbox service on loopback (uvicorn in a thread of the test process), with two
tenants' tokens; sessions run under the real bubblewrap and cgroups."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from mol_sandbox.app import create_app
from mol_sandbox.sessions.service import SessionService
from mol_sandbox.settings import SandboxSettings
from mol_testkit.net import free_port

TOKEN_A = "tok-a-" + "a" * 40
TOKEN_B = "tok-b-" + "b" * 40
AUTH_A = {"Authorization": f"Bearer {TOKEN_A}"}
AUTH_B = {"Authorization": f"Bearer {TOKEN_B}"}


class Sandbox:
    """A running service: its URL, its app's session service, and a client per tenant."""

    def __init__(self, url: str, service: SessionService) -> None:
        self.url = url
        self.service = service
        self.a = httpx.Client(base_url=url, headers=AUTH_A, timeout=60)
        self.b = httpx.Client(base_url=url, headers=AUTH_B, timeout=60)

    def new(self, client: httpx.Client | None = None) -> str:
        r = (client or self.a).post("/v1/sessions")
        assert r.status_code == 201, r.text
        sid: str = r.json()["id"]
        return sid

    def run(self, sid: str, code: str, client: httpx.Client | None = None) -> dict[str, Any]:
        r = (client or self.a).post(f"/v1/sessions/{sid}/execute", json={"code": code})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def close(self) -> None:
        self.a.close()
        self.b.close()


def tokens_file(folder: Path) -> Path:
    path = folder / "tokens.yaml"
    path.write_text(f"keys:\n  - {{tenant: team-a, key: {TOKEN_A}}}\n"
                    f"  - {{tenant: team-b, key: {TOKEN_B}}}\n")
    return path


@contextmanager
def running(settings: SandboxSettings) -> Iterator[Sandbox]:
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=settings.port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the sandbox service did not start")
        time.sleep(0.02)
    sandbox = Sandbox(f"http://127.0.0.1:{settings.port}", app.state.sessions)
    try:
        yield sandbox
    finally:
        sandbox.close()
        server.should_exit = True
        thread.join(30)


StartSandbox = Callable[..., Sandbox]


@pytest.fixture
def start_sandbox(tmp_path: Path) -> Iterator[StartSandbox]:
    """Start a service with the given settings (tokens for team-a and team-b unless
    ``tokens_file=None``); stopped at teardown."""
    stack: list[Any] = []

    def start(**overrides: Any) -> Sandbox:
        values: dict[str, Any] = {"port": free_port(), "tokens_file": tokens_file(tmp_path),
                                  "call_timeout": 10.0, **overrides}
        cm = running(SandboxSettings(**values))
        sandbox = cm.__enter__()
        stack.append(cm)
        return sandbox

    yield start
    for cm in reversed(stack):
        cm.__exit__(None, None, None)


@pytest.fixture
def sandbox(start_sandbox: StartSandbox) -> Sandbox:
    return start_sandbox()
