"""GET /v1/events?after=N: the ordered change feed."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Query
from starlette.responses import Response

from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import json_response
from mol_catalog.events import service
from mol_catalog.events.schemas import EventPageOut
from mol_catalog.util import MAX_BIGINT

router = APIRouter(tags=["events"])


@router.get("/v1/events", response_model=EventPageOut)
async def events(catalog: CatalogDep, who: PrincipalDep, after: int = Query(0, ge=0, le=MAX_BIGINT),
                 limit: int = Query(100, ge=1, le=1000),
                 wait: float = Query(0.0, ge=0.0, le=30.0)) -> Response:
    """Events with id > after, in id order; ``wait`` seconds long-polls when there are none."""
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        async with catalog.db.read() as conn:
            items, last = await service.feed(conn, who, after, limit)
        if items or last != after or asyncio.get_running_loop().time() >= deadline:
            return json_response({"items": items, "last": last})
        await asyncio.sleep(0.2)
