"""``mol up`` waits for the router's examples to be embedded before its banner (the
banner's second example relies on them), and says so when they are not, without failing:
against a scripted ``/readyz`` on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from mol_platform.apps.up.supervisor import wait_semantic
from mol_testkit.net import http_server


@contextmanager
def readyz(states: list[str]) -> Iterator[str]:
    """Answers each GET with the next state (the last one repeated), 503 as an engine
    not ready yet would: the body is read whatever the status."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state = states.pop(0) if len(states) > 1 else states[0]
            body = json.dumps({"ready": False, "semantic": state}).encode()
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as url:
        yield f"{url}/readyz"


def test_waits_while_building_then_returns_ready_quietly() -> None:
    said: list[str] = []
    with readyz(["building", "building", "ready"]) as url:
        assert wait_semantic(url, 10.0, said.append) == "ready"
    assert said == []


def test_a_build_that_outlasts_the_wait_is_said_not_fatal() -> None:
    said: list[str] = []
    with readyz(["building"]) as url:
        assert wait_semantic(url, 0.6, said.append) == "building"
    assert len(said) == 1
    assert "not embedded yet (building)" in said[0]


def test_a_failed_build_is_said_and_an_unused_one_is_not() -> None:
    said: list[str] = []
    with readyz(["failed"]) as url:
        assert wait_semantic(url, 5.0, said.append) == "failed"
    with readyz(["unused"]) as url:
        assert wait_semantic(url, 5.0, said.append) == "unused"
    assert len(said) == 1
    assert "(failed)" in said[0]
