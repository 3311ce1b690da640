"""HTTP/1.1 messages as the router's server writes them: a parsed request, a whole
response, and a chunked stream for server-sent events.

The router answers a handful of routes with bodies it builds itself, so a response is
serialized in one ``bytes`` join and one transport write; a stream frames each write
as one chunk, waiting only when the client's socket buffer is full.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from http import HTTPStatus
from typing import Protocol

from mol_router.errors import RouterError, error_body

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_STATUS_LINES: dict[int, bytes] = {}


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        line = _STATUS_LINES[status] = (b"HTTP/1.1 %d %s\r\n"
                                        % (status, _REASONS.get(status, b"Unknown")))
    return line


def head(status: int, headers: Mapping[str, str] | None, tail: bytes) -> bytes:
    """Status line and headers; ``tail`` ends the block (framing headers + CRLF)."""
    parts = [status_line(status)]
    if headers:
        for name, value in headers.items():
            parts.append(f"{name}: {value}\r\n".encode("latin-1", "replace"))
    parts.append(tail)
    return b"".join(parts)


class Response:
    """A whole response; ``close`` ends the connection after it (e.g. 408, 413)."""

    __slots__ = ("body", "close", "headers", "status")

    def __init__(self, status: int = 200, body: bytes = b"",
                 headers: Mapping[str, str] | None = None, *, close: bool = False) -> None:
        self.status = status
        self.body = body
        self.headers = headers
        self.close = close

    def encode(self, keep_alive: bool) -> bytes:
        framing = b"Content-Length: %d\r\n" % len(self.body)
        if not keep_alive:
            framing += b"Connection: close\r\n"
        return head(self.status, self.headers, framing + b"\r\n") + self.body


class Channel(Protocol):
    """What a stream needs from the connection it answers on."""

    def send(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def closing(self) -> bool:
        """Whether this connection is to close after the response (the server drains)."""
        ...


class Request:
    """One parsed request with its whole body (read before the handler runs, under the
    body limit and the body-read timeout). ``headers``: those the router reads
    (``listener.READ_HEADERS``), names lower case."""

    __slots__ = ("_stream", "body", "channel", "chunked", "headers", "keep_alive", "method",
                 "path", "query")

    def __init__(self, method: str, path: str, query: str, headers: dict[str, str],
                 body: bytes, channel: Channel, chunked: bool, keep_alive: bool) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.channel = channel
        self.chunked = chunked  # the client speaks HTTP/1.1: chunked streams allowed
        self.keep_alive = keep_alive
        self._stream: Stream | None = None

    @property
    def streamed(self) -> bool:
        return self._stream is not None

    def stream_ended(self) -> bool:
        return self._stream is not None and self._stream.ended

    def stream(self, status: int, headers: Mapping[str, str]) -> Stream:
        """Start a streamed response (the handler then returns None). The head goes out
        with the first bytes of the body."""
        if self.keep_alive and self.channel.closing():
            self.keep_alive = False  # said in the head: the client will not reuse it
        framing = ((b"Transfer-Encoding: chunked\r\n\r\n" if self.keep_alive
                    else b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
                   if self.chunked else b"Connection: close\r\n\r\n")
        self._stream = Stream(self.channel, self.chunked, head(status, headers, framing))
        return self._stream


class Stream:
    """The body of a streamed response, one chunk per write. Bytes can be held back
    to leave with the next write (the head, or the last event of an engine's answer
    that is followed at once by the end): fewer, larger writes, nothing delayed."""

    __slots__ = ("_channel", "_chunked", "_held", "ended")

    def __init__(self, channel: Channel, chunked: bool, held: bytes = b"") -> None:
        self._channel = channel
        self._chunked = chunked
        self._held = held
        self.ended = False

    def _frame(self, data: bytes) -> bytes:
        return b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data

    def hold(self, data: bytes) -> None:
        """Send ``data`` with the next write or the end, which the caller makes now."""
        self._held += self._frame(data)

    async def write(self, data: bytes) -> None:
        """Send ``data``; waits while the client reads slower than the engine writes.
        Raises ConnectionResetError once the client has gone."""
        held, self._held = self._held, b""
        self._channel.send(held + self._frame(data) if held else self._frame(data))
        await self._channel.drain()

    def end(self, tail: bytes = b"") -> None:
        """The last bytes and the end of the body, in one write."""
        if self.ended:
            return
        self.ended = True
        last = self._held + (self._frame(tail) if tail else b"")
        self._held = b""
        self._channel.send(last + b"0\r\n\r\n" if self._chunked else last)


def closed_error() -> ConnectionResetError:
    return ConnectionResetError("the client closed the connection")


class Waiter:
    """A reusable wake-up for one waiting coroutine (flow control)."""

    __slots__ = ("_future",)

    def __init__(self) -> None:
        self._future: asyncio.Future[None] | None = None

    async def wait(self) -> None:
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
        await self._future

    def wake(self, error: BaseException | None = None) -> None:
        fut, self._future = self._future, None
        if fut is not None and not fut.done():
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)


def error_response(exc: RouterError, headers: Mapping[str, str] | None = None, *,
                   close: bool = False) -> Response:
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if exc.retry_after is not None:
        hdrs["Retry-After"] = str(max(1, int(exc.retry_after + 0.999)))
    return Response(exc.status, error_body(exc.status, exc.message, exc.code, param=exc.param,
                                           extra=exc.extra), hdrs, close=close)
