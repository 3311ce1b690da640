"""/v1/serving-profiles."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from sqlalchemy.exc import IntegrityError
from starlette.responses import Response

from mol_catalog.auth import Principal
from mol_catalog.deps import Catalog, get_catalog, get_principal
from mol_catalog.errors import json_response
from mol_catalog.profiles import service
from mol_catalog.profiles.schemas import ProfileListOut, ProfileOut, ProfilePut

router = APIRouter(tags=["serving-profiles"])
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]


@router.put("/v1/serving-profiles/{profile}", response_model=ProfileOut, responses={
    201: {"model": ProfileOut, "description": "Profile created"}})
async def put_profile(profile: str, body: ProfilePut, catalog: CatalogDep,
                      who: PrincipalDep) -> Response:
    """Declare or change a profile (admin); verdicts for it are computed on demand."""
    who.require_admin()
    for attempt in range(3):
        try:
            async with catalog.db.unit() as uow:
                out, created = await service.put(uow, profile, body)
            return json_response(out, 201 if created else 200)
        except IntegrityError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@router.get("/v1/serving-profiles", response_model=ProfileListOut)
async def list_profiles(catalog: CatalogDep, who: PrincipalDep) -> Response:
    async with catalog.db.unit(write=False) as uow:
        items = await service.list_profiles(uow)
    return json_response({"items": items})


@router.get("/v1/serving-profiles/{profile}", response_model=ProfileOut)
async def get_profile(profile: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    async with catalog.db.unit(write=False) as uow:
        out = await service.get(uow, profile)
    return json_response(out)
