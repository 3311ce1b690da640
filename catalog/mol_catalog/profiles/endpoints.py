"""/v1/serving-profiles."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import json_response
from mol_catalog.profiles import service
from mol_catalog.profiles.schemas import ProfileListOut, ProfileOut, ProfilePut

router = APIRouter(tags=["serving-profiles"])


@router.put("/v1/serving-profiles/{profile}", response_model=ProfileOut, responses={
    201: {"model": ProfileOut, "description": "Profile created"}})
async def put_profile(profile: str, body: ProfilePut, catalog: CatalogDep,
                      who: PrincipalDep) -> Response:
    """Declare or change a profile (admin); verdicts for it are computed on demand."""
    who.require_admin()
    # A concurrent first declaration of the same name may win: the retry updates it.
    out, created = await catalog.db.transact(lambda uow: service.put(uow, profile, body))
    return json_response(out, 201 if created else 200)


@router.get("/v1/serving-profiles", response_model=ProfileListOut)
async def list_profiles(catalog: CatalogDep, who: PrincipalDep) -> Response:
    async with catalog.db.read() as conn:
        items = await service.list_profiles(conn)
    return json_response({"items": items})


@router.get("/v1/serving-profiles/{profile}", response_model=ProfileOut)
async def get_profile(profile: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    async with catalog.db.read() as conn:
        out = await service.get(conn, profile)
    return json_response(out)
