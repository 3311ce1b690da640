"""A router stand-in for the playground's and the stack page's edge cases, which a real
router in front of the simulator does not make on demand: answers that pause after their
first token, break off mid-stream (the connection dropped, or an error event), and
HTML documents from the ``ui`` expert. It also serves ``/status``, ``/metrics`` and
``/v1/models`` as the router does, the metrics from the router's own registry.

Beside it, a :class:`Sink`: a loopback TCP server that records every connection made to
it, so a test can check that a sandboxed artifact reached nothing.
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import generate_latest

from mol_router.telemetry.metrics import RouterMetrics

DEPLOYMENT = "demo"
EXPERTS = ("chat", "coding", "ui")


@dataclass
class Answer:
    """One scripted chat answer: ``pieces`` streamed as content deltas; then ``end``:
    ``done`` (``[DONE]``), ``drop`` (the connection closes mid-stream) or ``error`` (an
    error event, as the router sends when the engine fails mid-stream). ``hold``: after
    the first piece, wait until it is set."""

    pieces: list[str]
    expert: str = "chat"
    end: str = "done"
    hold: threading.Event | None = None


@dataclass
class FakeRouter:
    answers: dict[str, Answer] = field(default_factory=dict)  # by the user's message
    metrics: RouterMetrics = field(default_factory=lambda: RouterMetrics(DEPLOYMENT))
    url: str = ""

    def status(self) -> dict[str, Any]:
        return {"deployment": DEPLOYMENT, "base_model": "tiny", "mode": "semantic",
                "default": "chat", "engines": [], "avoided": [],
                "experts": [{"name": e, "description": f"the {e} expert",
                             "stable": {"ref": f"demo/{e}@stable", "resolved": f"demo/{e}@v1",
                                        "compatible": True},
                             "canary": None} for e in EXPERTS]}


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _handler(router: FakeRouter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Quiet: pytest shows what matters."""

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/status":
                self._send(200, json.dumps(router.status()).encode(), "application/json")
            elif self.path == "/metrics":
                self._send(200, generate_latest(router.metrics.registry), "text/plain")
            elif self.path == "/v1/models":
                models = [{"id": "auto"}, *({"id": e} for e in EXPERTS)]
                self._send(200, json.dumps({"data": models}).encode(), "application/json")
            else:
                self._send(404, b"{}", "application/json")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            prompt = body["messages"][-1]["content"]
            answer = router.answers.get(prompt)
            if answer is None:
                self._send(404, json.dumps({"error": {"message": f"no answer for {prompt!r}"}})
                           .encode(), "application/json")
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.send_header("x-mol-expert", answer.expert)
            self.send_header("x-mol-route", "router")
            self.end_headers()
            for i, piece in enumerate(answer.pieces):
                self._chunk(_event({"object": "chat.completion.chunk", "choices": [
                    {"index": 0, "delta": {"content": piece}}]}))
                if i == 0 and answer.hold is not None:
                    answer.hold.wait(30)
            if answer.end == "drop":  # mid-stream, without the last chunk
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            if answer.end == "error":
                self._chunk(_event({"error": {"message": "the engine failed mid-stream: "
                                              "ReadError", "type": "upstream_error",
                                              "code": 502}}))
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


@contextlib.contextmanager
def fake_router() -> Iterator[FakeRouter]:
    router = FakeRouter()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(router))
    server.daemon_threads = True
    router.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield router
    finally:
        server.shutdown()
        server.server_close()


class Sink:
    """A loopback HTTP server that records every request sent to it (``requests``: their
    first bytes) and every connection opened to it (``connections``: a browser may open
    one speculatively, before it decides not to send the request). It lets anyone read
    its answer, so a request that does not arrive was stopped by the browser."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        self.connections = 0
        sink = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sink.connections += 1
                self.request.settimeout(5)
                data = b""
                with contextlib.suppress(OSError):
                    data = self.request.recv(4096)
                if not data:
                    return
                sink.requests.append(data)
                with contextlib.suppress(OSError):
                    self.request.sendall(b"HTTP/1.1 200 OK\r\naccess-control-allow-origin: *\r\n"
                                         b"content-length: 2\r\nconnection: close\r\n\r\nok")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
