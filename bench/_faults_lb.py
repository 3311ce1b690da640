"""An L4 balancer in front of router replicas, as a Service with readiness would be.

Each new client connection goes to the next backend whose ``/readyz`` answered 200 at
the last check (every ``check_s``); a backend that refuses the connection is skipped
for the next one (as Envoy or HAProxy redispatch on a connect failure). Bytes are
piped both ways until either side closes: a connection lives and dies with the router
process holding it, which is what a client of a real cluster sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading

import aiohttp

LOOPBACK = "127.0.0.1"


class Balancer:
    def __init__(self, backends: list[int], *, check_s: float = 0.5) -> None:
        self.backends = list(backends)  # ports
        self.ready: set[int] = set(backends)
        self.check_s = check_s
        self.port = 0
        self._rr = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    def start(self) -> Balancer:
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._main(started))

        self._thread = threading.Thread(target=run, name="balancer", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the balancer did not start")
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _main(self, started: threading.Event) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._accept, LOOPBACK, 0)
        self.port = server.sockets[0].getsockname()[1]
        checker = asyncio.create_task(self._check())
        started.set()
        await self._stop.wait()
        checker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await checker
        server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2)

    async def _check(self) -> None:
        async with aiohttp.ClientSession() as http:
            while True:
                ready = set()
                for port in self.backends:
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        async with http.get(f"http://{LOOPBACK}:{port}/readyz",
                                            timeout=aiohttp.ClientTimeout(total=1)) as r:
                            if r.status == 200:
                                ready.add(port)
                self.ready = ready
                await asyncio.sleep(self.check_s)

    async def _accept(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        ready = [p for p in self.backends if p in self.ready] or list(self.backends)
        first = next(self._rr)
        upstream = None
        for k in range(len(ready)):
            port = ready[(first + k) % len(ready)]
            try:
                upstream = await asyncio.open_connection(LOOPBACK, port)
                break
            except OSError:
                continue
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            dst.close()
