"""Running the router: ``serve()`` for the CLI, ``RouterServer`` for embedding (tests,
benchmarks) in a running event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from aiohttp import web

from mol_platform.router_config import RouterConfig, load_router_config
from mol_router.app import RouterHandler
from mol_router.settings import RouterSettings
from mol_router.state import Runtime

log = logging.getLogger("mol.router")


class RouterServer:
    """The router on ``settings.host:settings.port`` inside the current loop."""

    def __init__(self, settings: RouterSettings, config: RouterConfig | None = None) -> None:
        self.settings = settings
        self.runtime = Runtime(settings, config or load_router_config(settings.config))
        # Slow-loris protection: a connection without complete headers within
        # headerRead is closed (aiohttp's keep-alive timer also runs before the first
        # request); a body that stops coming is cut after 2 s of lingering.
        self._server = web.Server(RouterHandler(self.runtime), handler_cancellation=True,
                                  access_log=None, lingering_time=2.0,
                                  keepalive_timeout=self.runtime.limits.header_read)
        self._runner = web.ServerRunner(self._server, shutdown_timeout=5.0)
        self.port = settings.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        await self.runtime.start()
        try:
            await self._runner.setup()
            site = web.TCPSite(self._runner, self.settings.host, self.settings.port,
                               backlog=1024, reuse_address=True)
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            await self.runtime.stop()
            raise
        server = site._server
        for sock in getattr(server, "sockets", None) or ():
            self.port = sock.getsockname()[1]
            break

    async def stop(self) -> None:
        await self._runner.cleanup()
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
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()


def serve(settings: RouterSettings) -> None:
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop
    except ImportError:
        asyncio.run(_main(settings))
    else:
        uvloop.run(_main(settings))
