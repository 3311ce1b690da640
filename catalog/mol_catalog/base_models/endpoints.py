"""/v1/base-models."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from mol_catalog.base_models import service
from mol_catalog.base_models.schemas import BaseModelCreate, BaseModelDetailOut, BaseModelOut
from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import json_response

router = APIRouter(tags=["base-models"])


@router.post("/v1/base-models", status_code=201, response_model=BaseModelOut, responses={
    200: {"model": BaseModelOut, "description": "Identical content already registered"}})
async def register_base_model(body: BaseModelCreate, catalog: CatalogDep,
                              who: PrincipalDep) -> Response:
    """Register a revision (admin). 201 new, 200 identical content, 409 other content."""
    who.require_admin()
    # A concurrent registration of the same revision may win: the retry sees it.
    out, created = await catalog.db.transact(lambda uow: service.register(uow, body))
    return json_response(out, 201 if created else 200)


@router.get("/v1/base-models/{name}", response_model=BaseModelDetailOut)
async def get_base_model(name: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """Any authenticated caller may read base models (they belong to no namespace)."""
    async with catalog.db.read() as conn:
        out = await service.describe(conn, name)
    return json_response(out)
