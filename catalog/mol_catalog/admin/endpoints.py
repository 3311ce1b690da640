"""``POST /v1/admin/gc`` and ``POST /v1/admin/verify``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.responses import Response

from mol_catalog.admin.schemas import GcOut, VerifyReport
from mol_catalog.blobs import orphans, verify
from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import json_response
from mol_catalog.routing import service as routing
from mol_catalog.usage import service as usage

router = APIRouter(tags=["operations"])
MAX_GRACE_SECONDS = 10 * 365 * 86400.0


@router.post("/v1/admin/gc", response_model=GcOut)
async def run_gc(catalog: CatalogDep, who: PrincipalDep,
                 grace_seconds: float = Query(3600.0, ge=0, le=MAX_GRACE_SECONDS)) -> Response:
    """Delete blobs no version references that are older than the grace period, and usage
    roll-ups and unlabelled routing decisions older than USAGE_RETENTION_DAYS (admin)."""
    who.require_admin()
    out = await orphans.collect(catalog.db, catalog.blobs, grace_seconds)
    async with catalog.db.unit() as uow:
        out |= await usage.prune(uow, catalog.settings.usage_retention_days)
        out |= await routing.prune(uow, catalog.settings.usage_retention_days)
    return json_response(out)


@router.post("/v1/admin/verify", responses={200: {"model": VerifyReport}})
async def run_verify(
    catalog: CatalogDep,
    who: PrincipalDep,
    sample: Annotated[int | None, Query(
        ge=1, le=1_000_000, description="Check this many random referenced blobs "
        "(default: all).")] = None,
    content: Annotated[bool, Query(
        description="Read every checked blob back and hash it (false: presence and "
        "size only).")] = True,
) -> Response:
    """Check that referenced blobs are in the store with their size and digest (admin)."""
    who.require_admin()
    report = await verify.verify(catalog.db, catalog.blobs, sample, content)
    body: dict[str, Any] = report.model_dump()
    return json_response(body)
