"""Running the router: ``serve()`` for the CLI, ``RouterServer`` for embedding (tests,
benchmarks) in a running event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from mol_platform.contract.router_config import RouterConfig, load_router_config
from mol_router.app import RouterHandler
from mol_router.httpd.listener import Listener
from mol_router.runtime import Runtime
from mol_router.settings import RouterSettings
from mol_router.telemetry.logs import configure as configure_logging

log = logging.getLogger("mol.router")


class RouterServer:
    """The router on ``settings.host:settings.port`` inside the current loop."""

    def __init__(self, settings: RouterSettings, config: RouterConfig | None = None) -> None:
        self.settings = settings
        self.runtime = Runtime(settings, config or load_router_config(settings.config))
        # Slow-loris protection: a connection without complete headers within
        # headerRead (also the idle keep-alive time) is closed.
        self._listener = Listener(RouterHandler(self.runtime), self.runtime.limits.header_read)
        self.port = settings.port
        self._stopped = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        await self.runtime.start()
        try:
            await self._listener.start(self.settings.host, self.settings.port)
        except BaseException:
            await self._listener.stop()
            await self.runtime.stop()
            raise
        self.port = self._listener.port

    async def drain(self) -> None:
        """Stop as a SIGTERM asks: fail readiness, serve what still arrives for
        ``drain_delay`` with each connection closed after its response, then stop taking
        connections and give requests in flight up to ``drain_timeout``."""
        self.runtime.draining = True
        self._listener.drain()
        log.info("draining: readiness fails; new requests served for %g s, requests in "
                 "flight given %g s", self.settings.drain_delay, self.settings.drain_timeout)
        await asyncio.sleep(self.settings.drain_delay)
        await self._listener.stop(self.settings.drain_timeout)
        await self.stop()

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        await self._listener.stop()
        await self.runtime.stop()

    async def __aenter__(self) -> RouterServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def _main(settings: RouterSettings) -> None:
    server = RouterServer(settings)
    try:
        await server.start()
    except (OSError, ValueError) as exc:  # a port in use, an unreadable key file, ...
        log.error("cannot start the router: %s", exc)
        raise SystemExit(2) from None
    log.info("router %s listening on %s:%d", server.runtime.config.deployment,
             settings.host, server.port)
    stop = asyncio.Event()
    signals: list[int] = []

    def stopping(sig: int) -> None:
        signals.append(sig)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stopping, sig)
    try:
        await stop.wait()
    finally:
        if signals == [signal.SIGTERM]:  # a pod stopping: drain
            await server.drain()
        else:  # Ctrl-C: at once
            await server.stop()


def serve(settings: RouterSettings) -> None:
    configure_logging(settings.log_level, settings.access_log)
    try:
        import uvloop
    except ImportError:
        asyncio.run(_main(settings))
    else:
        uvloop.run(_main(settings))
