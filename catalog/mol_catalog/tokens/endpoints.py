"""/v1/tokens (admin only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.responses import Response

from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import json_response
from mol_catalog.tokens import service
from mol_catalog.tokens.schemas import (
    TOKEN_NAME_PREFIX,
    TokenCreate,
    TokenCreatedOut,
    TokenListOut,
)
from mol_catalog.util import MAX_BIGINT

router = APIRouter(tags=["tokens"])


@router.post("/v1/tokens", status_code=201, response_model=TokenCreatedOut)
async def create_token(body: TokenCreate, catalog: CatalogDep, who: PrincipalDep) -> Response:
    who.require_admin()
    async with catalog.db.unit() as uow:
        out = await service.create(uow, body.name, body.scopes)
    return json_response(out, 201)


@router.get("/v1/tokens", response_model=TokenListOut)
async def list_tokens(
    catalog: CatalogDep, who: PrincipalDep,
    prefix: Annotated[str, Query(max_length=128, pattern=TOKEN_NAME_PREFIX, description=(
        "Only tokens whose name starts with this (an owner's tokens, when names "
        "carry their owner)"))] = "",
    active: Annotated[bool, Query(description="Only tokens not revoked")] = False,
) -> Response:
    who.require_admin()
    async with catalog.db.read() as conn:
        items = await service.list_tokens(conn, prefix, active)
    return json_response({"items": items})


@router.delete("/v1/tokens/{token_id}", status_code=204, response_class=Response)
async def revoke_token(token_id: Annotated[int, Path(ge=1, le=MAX_BIGINT)], catalog: CatalogDep,
                       who: PrincipalDep) -> Response:
    who.require_admin()
    async with catalog.db.unit() as uow:
        await service.revoke(uow, token_id)
    catalog.tokens.clear()
    return Response(status_code=204)
