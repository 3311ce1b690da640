"""/v1/namespaces/{ns}/protected-aliases: which aliases of a namespace are protected."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import json_response
from mol_catalog.namespaces import service
from mol_catalog.namespaces.schemas import ProtectedOut, ProtectedPut

router = APIRouter(tags=["namespaces"])


@router.get("/v1/namespaces/{ns}/protected-aliases", response_model=ProtectedOut)
async def get_protected(ns: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """The namespace's protected aliases (``stable`` until an admin sets them)."""
    who.require_read(ns)
    async with catalog.db.read() as conn:
        out = await service.get_protected(conn, ns)
    return json_response(out)


@router.put("/v1/namespaces/{ns}/protected-aliases", response_model=ProtectedOut)
async def set_protected(ns: str, body: ProtectedPut, catalog: CatalogDep,
                        who: PrincipalDep) -> Response:
    """Replace the namespace's protected aliases (admin)."""
    who.require_admin()
    async with catalog.db.unit() as uow:
        out = await service.set_protected(uow, ns, body.protected_aliases, who.name,
                                          body.required_evals)
    return json_response(out)
