"""``/v1/sessions``: create, call, look at and delete sessions (docs/sandbox.md)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from mol_sandbox.auth import Tenants
from mol_sandbox.sessions.schemas import (
    ErrorBody,
    ExecuteRequest,
    ExecuteResult,
    SessionCreated,
    SessionInfo,
)
from mol_sandbox.sessions.service import SessionService

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
_bearer = HTTPBearer(auto_error=False, description="A token from the tokens file; "
                     "none needed on loopback without one")


def _err(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody} for code in (401, *codes)}


def service(request: Request) -> SessionService:
    svc: SessionService = request.app.state.sessions
    return svc


def tenant(request: Request, creds: Annotated[HTTPAuthorizationCredentials | None,
                                              Depends(_bearer)]) -> str:
    tenants: Tenants = request.app.state.tenants
    header = f"{creds.scheme} {creds.credentials}" if creds else None
    return tenants.tenant(header)


Tenant = Annotated[str, Depends(tenant)]
Service = Annotated[SessionService, Depends(service)]


@router.post("", status_code=201, response_model=SessionCreated,
             responses=_err(429, 503))
async def create_session(who: Tenant, svc: Service) -> SessionCreated:
    """Start a session: a fresh interpreter, ready for calls."""
    session = await svc.create(who)
    return SessionCreated(id=session.id)


@router.post("/{session_id}/execute", response_model=ExecuteResult,
             responses={**_err(404, 410, 503), 400: {"description": "a body that is not JSON"}})
async def execute(session_id: str, body: ExecuteRequest, who: Tenant,
                  svc: Service) -> ExecuteResult:
    """Run code in the session; variables persist between calls. An error of the code,
    a timeout or a stopped interpreter is ``error`` in a 200 answer."""
    return await svc.execute(who, session_id, body.code)


@router.get("/{session_id}", response_model=SessionInfo, responses=_err(404, 410))
async def get_session(session_id: str, who: Tenant, svc: Service) -> SessionInfo:
    """The session's state, use and limits."""
    return svc.info(svc.get(who, session_id))


@router.delete("/{session_id}", status_code=204, response_class=Response,
               responses=_err(404, 410))
async def delete_session(session_id: str, who: Tenant, svc: Service) -> Response:
    """Stop the session's interpreter and forget it."""
    await svc.delete(who, session_id)
    return Response(status_code=204)
