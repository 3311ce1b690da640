"""The FastAPI app, built in a lifespan: the sessions service, the tenants and the
reaper live as long as the app, and every session's interpreter is stopped with it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from mol_platform.contract.router_config import ApiKeysFile
from mol_sandbox.auth import Tenants
from mol_sandbox.errors import SandboxError
from mol_sandbox.sessions import endpoints as sessions
from mol_sandbox.sessions.service import SessionService
from mol_sandbox.settings import SandboxSettings


def _error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SandboxError)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())


def create_app(settings: SandboxSettings | None = None) -> FastAPI:
    settings = settings or SandboxSettings()
    keys = ApiKeysFile.load(settings.tokens_file) if settings.tokens_file else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service = SessionService(settings)
        app.state.sessions = service
        reaper = asyncio.create_task(service.run_reaper(), name="sandbox-reaper")
        try:
            yield
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await service.shutdown()

    app = FastAPI(title="MoL sandbox", version="1", lifespan=lifespan,
                  description="Isolated Python sessions for model-written code.")
    app.state.settings = settings
    app.state.tenants = Tenants(keys)
    app.add_exception_handler(SandboxError, _error)
    app.include_router(sessions.router)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
