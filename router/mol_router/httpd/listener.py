"""The router's HTTP/1.1 server: an asyncio protocol over the httptools (llhttp) parser.

Why not a framework: on the request path the router only moves bytes, and a general
server's per-request layers (request objects with lazy properties, middleware, access
logging, per-request timers) cost more CPU than the routing itself. Here a request
costs one parse, one dict of headers, one task for the handler and one write.

- Only the headers in ``READ_HEADERS`` are kept (decoded, names lower case).
- Keep-alive and pipelining: requests on a connection are answered in order; while
  one is being handled, further complete requests wait (reading pauses).
- The body is read whole before the handler runs, counted as it arrives: over the
  limit is 413 (from ``Content-Length`` at once, else when the count passes it).
- Slow clients: headers not complete within ``header_read`` (also the idle keep-alive
  time) close the connection; a body not complete within the body-read time gets 408.
  One sweep per server checks the deadlines, so no timer is made per request.
- Bad input: a malformed request is 400, headers over 64 KiB are 431; refusals that
  leave unread input end the connection (half-closed first, so the client reads the
  answer before the close).
- A client that disconnects cancels its handler (which closes its upstream request).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable
from typing import Protocol, cast

import httptools

from mol_router.httpd.wire import Request, Response, Waiter, closed_error

log = logging.getLogger("mol.router.http")
HEADER_LIMIT = 64 * 1024
# The request headers the router reads; others are framing (handled by the parser)
# or not the router's business, and are not decoded at all.
READ_HEADERS = {h.encode(): h for h in (
    "accept", "authorization", "content-length", "expect", "traceparent", "x-mol-session",
    "x-mol-user", "x-request-id")}
_SWEEP = 0.1  # seconds between deadline checks
_LINGER = 2.0  # seconds a refused client may keep sending before the close
_IDLE, _HEADERS, _BODY, _BUSY, _LINGERING = range(5)


class App(Protocol):
    def __call__(self, request: Request) -> Awaitable[Response | None]: ...

    def refusal(self, status: int, message: str, code: str, reason: str | None
                ) -> Response: ...

    def body_limits(self) -> tuple[int, float]:
        """The body limit in bytes and the body-read timeout in seconds (per config)."""
        ...


class _Refused(Exception):
    pass


class Connection(asyncio.Protocol):
    __slots__ = ("_body", "_drain", "_headers", "_paused", "_pipeline", "_refused",
                 "_size", "_url", "app", "deadline", "limit", "listener", "parser", "phase",
                 "task", "transport")

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.app = listener.app
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.phase = _IDLE
        self.deadline = 0.0
        self.task: asyncio.Task[None] | None = None
        self.limit = 0
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._pipeline: deque[Request | Response] = deque()
        self._refused: Response | None = None
        self._paused = False
        self._drain = Waiter()

    # --- transport events ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.listener.connections.add(self)
        self._idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.listener.connections.discard(self)
        self._drain.wake(closed_error())
        self._pipeline.clear()
        if self.task is not None:
            self.task.cancel()  # the handler closes its upstream request

    def eof_received(self) -> bool:
        """The client closed its side: taken as gone (a half-close cannot be told from a
        hang-up), so the transport closes and a request in flight is cancelled."""
        return False

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._drain.wake()

    def data_received(self, data: bytes) -> None:
        if self.phase == _LINGERING:
            return  # the rest of a refused request
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError:
            refused, self._refused = self._refused, None
            if refused is None:  # a failure of ours, not of the request
                log.exception("failed parsing a request")
                refused = self.app.refusal(400, "malformed HTTP request", "invalid_request",
                                           None)
            self._queue_refusal(refused)
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed HTTP request: {exc}", "invalid_request", None)

    # --- parser callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        self.phase = _HEADERS
        self.deadline = self.listener.now() + self.listener.header_read
        self._url = b""
        self._headers = {}
        self._body = []
        self._size = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._size += len(url)
        if self._size > HEADER_LIMIT:
            self._raise(431, "request URL and headers are over 64 KiB",
                        "headers_too_large", None)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._size += len(name) + len(value) + 4
        if self._size > HEADER_LIMIT:
            self._raise(431, "request headers are over 64 KiB", "headers_too_large", None)
        key = READ_HEADERS.get(name.lower())
        if key is not None:
            self._headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._size = 0
        limit, body_read = self.app.body_limits()
        self.limit = limit
        self.phase = _BODY
        self.deadline = self.listener.now() + body_read
        if self.parser.should_upgrade():  # refused before it is served: one answer
            self._raise(400, "protocol upgrades (Upgrade: h2c, websocket, ...) are not "
                        "supported; send plain HTTP/1.1 requests", "invalid_request", None)
        length = self._headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            self._raise(413, f"request body of {length} bytes is over the limit of "
                        f"{limit} bytes", "body_too_large", "too_large")
        if self._headers.get("expect", "").lower() == "100-continue" and self.task is None:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self.limit:
            self._raise(413, f"request body is over the limit of {self.limit} bytes",
                        "body_too_large", "too_large")
        self._body.append(body)

    def on_message_complete(self) -> None:
        parser = self.parser
        url = self._url
        path, _, query = url.partition(b"?")
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request = Request(parser.get_method().decode("latin-1"), path.decode("latin-1"),
                          query.decode("latin-1"), self._headers, body, self,
                          parser.get_http_version() == "1.1", parser.should_keep_alive())
        self._body = []
        self.phase = _BUSY
        if self.task is None:
            self._start(request)
        else:
            self._pipeline.append(request)
            assert self.transport is not None
            self.transport.pause_reading()

    # --- the channel a response stream writes to -------------------------------------

    def closing(self) -> bool:
        return self.listener.draining

    def send(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            raise closed_error()
        transport.write(data)

    async def drain(self) -> None:
        if self._paused:
            await self._drain.wait()

    # --- requests ------------------------------------------------------------------

    def _start(self, request: Request) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(request))

    async def _run(self, request: Request) -> None:
        try:
            response = await self.app(request)
        except asyncio.CancelledError:
            return  # the client went away
        except Exception:  # the app answers its own failures; this is a last guard
            log.exception("unexpected failure on %s %s", request.method, request.path)
            response = None if request.streamed else self.app.refusal(
                503, "the router failed on this request; it was logged", "router_error", None)
        self.task = None
        transport = self.transport
        assert transport is not None
        if transport.is_closing():
            return
        if response is not None:
            keep = request.keep_alive and not response.close and not self.listener.draining
            transport.write(response.encode(keep))
            if not keep:
                self._close_gently()
                return
        elif not (request.keep_alive and request.chunked and request.stream_ended()):
            # a stream cut short, one only a close can end, or one whose head said close
            # (draining). A stream whose head went out before the drain began keeps the
            # connection: closing it now would race the client's next request on it; that
            # request is answered with Connection: close instead.
            self._close_gently()
            return
        self._next()

    def _next(self) -> None:
        """The next pipelined request, or wait for one."""
        while self._pipeline:
            item = self._pipeline.popleft()
            if isinstance(item, Request):
                self._start(item)
                return
            assert self.transport is not None
            self.transport.write(item.encode(False))
            self._close_gently()
            return
        if self.phase == _BUSY:
            self._idle()
        assert self.transport is not None
        self.transport.resume_reading()

    def _idle(self) -> None:
        self.phase = _IDLE
        self.deadline = self.listener.now() + self.listener.header_read

    def _raise(self, status: int, message: str, code: str, reason: str | None) -> None:
        self._refused = self.app.refusal(status, message, code, reason)
        raise _Refused(code)

    def _refuse(self, status: int, message: str, code: str, reason: str | None) -> None:
        self._queue_refusal(self.app.refusal(status, message, code, reason))

    def _queue_refusal(self, response: Response) -> None:
        """Answer after the requests before it, then end the connection: the rest of
        the input cannot be trusted."""
        self.phase = _LINGERING
        self.deadline = self.listener.now() + _LINGER
        if self.task is not None:
            self._pipeline.append(response)
            return
        assert self.transport is not None
        self.transport.write(response.encode(False))
        self._close_gently()

    def _close_gently(self) -> None:
        """Half-close so the client reads the answer; closed when it hangs up too, or by
        the sweep after the linger time."""
        transport = self.transport
        assert transport is not None
        self.phase = _LINGERING
        self.deadline = self.listener.now() + _LINGER
        self._pipeline.clear()
        if transport.can_write_eof():
            with contextlib.suppress(OSError, RuntimeError):
                transport.write_eof()
                transport.resume_reading()
                return
        transport.close()

    def expire(self) -> None:
        """Called by the sweep once :attr:`deadline` has passed."""
        transport = self.transport
        assert transport is not None
        if self.phase == _BODY and self.task is None:
            _, body_read = self.app.body_limits()
            self._refuse(408, f"request body not received within {body_read:g} s",
                         "body_timeout", "slow_body")
        elif self.phase == _LINGERING and self.task is None:
            transport.abort()
        elif self.phase in (_IDLE, _HEADERS) and self.task is None:
            transport.close()

    def close_if_idle(self) -> None:
        if self.task is None and self.transport is not None:
            self.transport.close()


class Listener:
    """Accepts connections for ``app``; :meth:`stop` lets requests in flight finish
    (up to ``shutdown_timeout``) before closing every connection. :meth:`drain` goes
    first on a SIGTERM: requests still arriving are served, but each connection closes
    after its response, so clients and load balancers reconnect elsewhere."""

    def __init__(self, app: App, header_read: float, *, shutdown_timeout: float = 5.0) -> None:
        self.app = app
        self.header_read = header_read
        self.shutdown_timeout = shutdown_timeout
        self.connections: set[Connection] = set()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.now = time.monotonic  # the loop's clock once started
        self.draining = False

    def drain(self) -> None:
        """Answer every request from now on with ``Connection: close``. Idle keep-alive
        connections are left open until :meth:`stop`: closing one now would race a
        client sending its next request on it, which is then answered (and closed)."""
        self.draining = True

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self.now = loop.time
        self._server = await loop.create_server(lambda: Connection(self), host, port,
                                                backlog=1024, reuse_address=True)
        for sock in self._server.sockets:
            self.port = sock.getsockname()[1]
            break
        self._sweeper = loop.create_task(self._sweep(), name="mol-router-deadlines")

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP)
            now = self.now()
            for conn in [c for c in self.connections if c.phase != _BUSY and
                         c.deadline <= now]:
                conn.expire()

    async def stop(self, shutdown_timeout: float | None = None) -> None:
        if self._server is None:
            return
        self.draining = True
        self._server.close()
        for conn in list(self.connections):
            conn.close_if_idle()
        busy = [c.task for c in self.connections if c.task is not None]
        if busy:
            await asyncio.wait(busy, timeout=self.shutdown_timeout if shutdown_timeout is None
                               else shutdown_timeout)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 1.0)
        self._server = None
