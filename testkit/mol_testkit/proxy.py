"""A loopback TCP proxy that can freeze: for tests of backends that stop answering.

``TcpProxy(target_port).start()`` listens on 127.0.0.1 and forwards to the target.
``freeze()`` makes it behave like a hung server or a silent network partition: it keeps
accepting connections and reading what clients send, but forwards nothing and never
answers. ``thaw()`` drops every connection (as a partition that ends does) and
forwards again. It runs its own event loop in a thread, so sync and async tests use it
alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from mol_testkit.net import LOOPBACK, InfraError


class TcpProxy:
    """127.0.0.1:<port> -> <target_host>:<target_port>; ``start()``/``stop()`` or ``with``."""

    def __init__(self, target_port: int, target_host: str = LOOPBACK) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._frozen = False
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self) -> TcpProxy:
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._accept, LOOPBACK, 0))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="tcp-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise InfraError("the TCP proxy did not start")
        return self

    def _call(self, fn: object) -> None:
        async def run() -> None:
            fn()  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def freeze(self) -> None:
        """Accept and read, never forward or answer (existing connections too)."""
        self._call(lambda: setattr(self, "_frozen", True))

    def thaw(self) -> None:
        """Drop every connection and forward again."""

        def go() -> None:
            self._frozen = False
            self._drop_all()

        self._call(go)

    def _drop_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        if self._frozen:
            await self._swallow(reader)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer),
                             return_exceptions=True)

    async def _swallow(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError):
            while await reader.read(65536):
                pass

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                if self._frozen:
                    await self._swallow(reader)
                    return
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.transport.abort()

    def stop(self) -> None:
        if self._thread is None:
            return

        async def close() -> None:
            self._drop_all()
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = None
        self._loop.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
