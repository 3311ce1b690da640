"""Keep-alive HTTP/1.1 connections to the engines, one pool per endpoint.

A request is one write (head and body together) on an idle connection; the answer is
parsed by httptools as it arrives and handed over chunk by chunk (chunked transfer
encoding and ``Content-Length`` alike), so server-sent events pass through as the
engine sends them. Closing a response that is not finished closes its connection,
which is how the engine learns the client went away (vLLM aborts the request).

A deadline bounds each whole exchange (connect, head and body): one sweep every
50 ms checks the requests in flight (cheaper than a timer per request); past its
deadline a request's connection is closed and the waiting read raises ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

from mol_router.httpd.wire import Waiter

_HIGH_WATER = 1 << 20  # bytes buffered from an engine before reading pauses
_SWEEP = 0.05  # seconds between deadline checks
_TARGETS_LIMIT = 4096


class UpstreamUnreachable(Exception):
    """No answer began: connect failed, or the connection closed before a status line.
    Safe to try another engine. ``down``: nothing listens there (connection refused),
    so the engine is taken out of selection at once rather than after a count."""

    def __init__(self, message: str, *, down: bool = False) -> None:
        super().__init__(message)
        self.down = down


class UpstreamBroken(Exception):
    """The answer began and then the connection failed (closed or malformed)."""


class _Connection(asyncio.Protocol):
    __slots__ = ("closed", "parser", "response", "seen_bytes", "transport")

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.response: UpstreamResponse | None = None
        self.closed = False
        self.seen_bytes = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.response is not None:
            self.response.lost()

    def data_received(self, data: bytes) -> None:
        self.seen_bytes = True
        if self.response is None:  # nothing asked: an engine talking out of turn
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.response.lost()
            self.close()

    def on_headers_complete(self) -> None:
        if self.response is not None:
            self.response.head(self.parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response.chunk(body)

    def on_message_complete(self) -> None:
        if self.response is not None:
            self.response.complete(self.parser.should_keep_alive())

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class UpstreamResponse:
    """An engine's answer: :attr:`status` once the head arrived, the body through
    :meth:`read` (whole) or :meth:`next_chunk` (as it comes). End it with
    :meth:`release` when read to the end (the connection goes back to the pool) or
    :meth:`close` (the connection is closed)."""

    __slots__ = ("_buffered", "_chunks", "_conn", "_error", "_keep", "_pool", "_slot",
                 "_waiter", "deadline", "done", "endpoint", "headed", "status")

    def __init__(self, pool: EnginePool, endpoint: str, conn: _Connection,
                 deadline: float) -> None:
        self._pool = pool
        self.deadline = deadline
        self.endpoint = endpoint
        self._conn = conn
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._waiter = Waiter()
        self._error: BaseException | None = None
        self._keep = False
        self._slot: asyncio.Semaphore | None = None
        self.status = 0
        self.headed = False
        self.done = False

    # --- from the connection --------------------------------------------------------

    def head(self, status: int) -> None:
        self.status = status
        self.headed = True
        self._waiter.wake()

    def chunk(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _HIGH_WATER and self._conn.transport is not None:
            self._conn.transport.pause_reading()
        self._waiter.wake()

    def complete(self, keep_alive: bool) -> None:
        self.done = True
        self._keep = keep_alive
        self._waiter.wake()

    def lost(self) -> None:
        if not self.done and self._error is None:
            self._error = (UpstreamBroken("the engine closed the connection mid-answer")
                           if self.headed else
                           UpstreamUnreachable("the engine closed the connection"))
        self._waiter.wake()

    def timed_out(self) -> None:
        self._pool.inflight.discard(self)
        if not self.done:
            self._error = TimeoutError()
            self._conn.close()
            self._waiter.wake()

    # --- for the caller -----------------------------------------------------------------

    async def wait_head(self) -> None:
        while not self.headed:
            if self._error is not None:
                raise self._error
            await self._waiter.wait()

    async def next_chunk(self) -> bytes:
        """What of the body has arrived since the last call (waiting for some); ``b""``
        at its end. Pieces that arrived together are returned together, so a burst of
        events from the engine costs one write to the client, not one per event."""
        while True:
            chunks = self._chunks
            if chunks:
                data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                if self._buffered > _HIGH_WATER and self._conn.transport is not None:
                    self._conn.transport.resume_reading()
                self._buffered = 0
                return data
            if self.done:
                return b""
            if self._error is not None:
                raise self._error
            await self._waiter.wait()

    def unread(self, data: bytes) -> None:
        """Put a whole body read with :meth:`read` back, for the next reader: a caller
        that looked at an engine's error and passes it on."""
        if data:
            self._chunks.appendleft(data)

    async def read(self) -> bytes:
        while not self.done:
            if self._error is not None:
                raise self._error
            await self._waiter.wait()
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        return data

    def release(self) -> None:
        """Done with it: the connection is reused when the answer was read whole."""
        self._pool.inflight.discard(self)
        conn = self._conn
        conn.response = None
        if self.done and self._keep and not self._chunks and not conn.closed:
            self._pool.put_back(self.endpoint, conn)
        else:
            conn.close()
        if self._slot is not None:
            self._slot.release()
            self._slot = None

    def close(self) -> None:
        """Cut it short: closing the connection tells the engine to stop."""
        self._keep = False
        self.release()


class _Target:
    __slots__ = ("host", "host_header", "idle", "port", "slots", "ssl")

    def __init__(self, endpoint: str, limit: int) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamUnreachable(f"not an http(s) endpoint: {endpoint}")
        self.host = parts.hostname
        self.ssl: ssl.SSLContext | None = (ssl.create_default_context()
                                           if parts.scheme == "https" else None)
        self.port = parts.port or (443 if self.ssl else 80)
        self.host_header = parts.netloc.encode("idna")
        self.idle: list[_Connection] = []
        self.slots = asyncio.Semaphore(limit) if limit > 0 else None


class EnginePool:
    """Connections per engine endpoint (``http://host:port``); ``limit`` bounds the
    connections to one engine (0: unbounded)."""

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self._targets: dict[str, _Target] = {}
        self.inflight: set[UpstreamResponse] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def _target(self, endpoint: str) -> _Target:
        target = self._targets.get(endpoint)
        if target is None:
            if len(self._targets) >= _TARGETS_LIMIT:  # endpoints come and go
                self._drop_idle()
            target = self._targets[endpoint] = _Target(endpoint, self.limit)
        return target

    async def post(self, endpoint: str, path: str, payload: bytes,
                   headers: Mapping[str, str], *, limit: float, connect: float
                   ) -> UpstreamResponse:
        """Send ``payload`` and wait for the answer's head. Raises UpstreamUnreachable
        (try another engine) or TimeoutError (``limit`` is for the whole exchange and
        keeps running while the caller reads the body)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        target = self._target(endpoint)
        if self._sweeper is None:
            self._sweeper = loop.create_task(self._sweep(), name="mol-router-upstream-deadlines")
        if target.slots is not None:
            await target.slots.acquire()
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")
        message = (b"POST %b HTTP/1.1\r\nHost: %b\r\nContent-Length: %d\r\n%b\r\n%b"
                   % (path.encode(), target.host_header, len(payload), extra, payload))
        try:
            for _ in range(2):  # a reused connection the engine just closed: once more
                conn, reused = self._idle(target), True
                if conn is None:
                    conn, reused = await self._connect(target, min(
                        connect, deadline - loop.time())), False
                response = UpstreamResponse(self, endpoint, conn, deadline)
                conn.response = response
                conn.seen_bytes = False
                self.inflight.add(response)
                assert conn.transport is not None
                conn.transport.write(message)
                try:
                    await response.wait_head()
                except UpstreamUnreachable:
                    response.close()
                    if reused and not conn.seen_bytes and loop.time() < deadline:
                        continue
                    raise
                except BaseException:
                    response.close()
                    raise
                response._slot = target.slots
                return response
            raise UpstreamUnreachable("the engine closed the connection")
        except BaseException:
            if target.slots is not None:
                target.slots.release()
            raise

    def _idle(self, target: _Target) -> _Connection | None:
        idle = target.idle
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.transport is not None \
                    and not conn.transport.is_closing():
                return conn
        return None

    async def _connect(self, target: _Target, within: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(max(within, 0.001)):
                _, conn = await loop.create_connection(
                    _Connection, target.host, target.port, ssl=target.ssl)
        except TimeoutError:
            raise UpstreamUnreachable(f"connect timed out after {within:g} s") from None
        except ConnectionRefusedError as exc:
            raise UpstreamUnreachable(f"connect failed: {exc.strerror or exc}",
                                      down=True) from None
        except OSError as exc:
            raise UpstreamUnreachable(f"connect failed: {exc.strerror or exc}") from None
        return conn

    def idle_connections(self, endpoint: str) -> int:
        target = self._targets.get(endpoint)
        return len(target.idle) if target is not None else 0

    def put_back(self, endpoint: str, conn: _Connection) -> None:
        target = self._targets.get(endpoint)
        if target is None:
            conn.close()
            return
        target.idle.append(conn)

    def _drop_idle(self) -> None:
        for target in self._targets.values():
            for conn in target.idle:
                conn.close()
        self._targets.clear()

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(_SWEEP)
            now = loop.time()
            for response in [r for r in self.inflight if r.deadline <= now]:
                response.timed_out()

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        self._drop_idle()
        await asyncio.sleep(0)  # let the transports report their close
