"""``POST /v1/usage`` (routers report), ``GET /v1/usage`` (listing, unused ones) and
``GET /v1/adapters/{ns}/{name}/usage`` (one adapter)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.responses import Response

from mol_catalog.adapters import service as adapters
from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import json_response
from mol_catalog.usage import service
from mol_catalog.usage.schemas import (
    AdapterUsageOut,
    UsageBatchIn,
    UsageBatchOut,
    UsagePageOut,
)
from mol_catalog.util import valid_name
from mol_platform.contract.refs import EXACT_NAME_PATTERN

router = APIRouter(tags=["usage"])
MAX_DAYS = 3650
Days = Annotated[int, Query(ge=1, le=MAX_DAYS, description=(
    "Window in days ending today (UTC); cut to USAGE_RETENTION_DAYS (the answer's "
    "``days`` says the window it covers)"))]


@router.post("/v1/usage", response_model=UsageBatchOut)
async def post_usage(body: UsageBatchIn, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """Add a batch of per-version counts to the daily roll-ups (scope ``usage``,
    ``usage:<ns>`` for every entry's namespace, or ``admin``). A batch id seen before is
    answered ``duplicate: true`` and counted nothing."""
    async with catalog.db.unit() as uow:
        out = await service.record(uow, who, body, catalog.settings.usage_retention_days)
    catalog.metrics.usage_batches.labels("duplicate" if out["duplicate"] else "counted").inc()
    return json_response(out)


@router.get("/v1/usage", response_model=UsagePageOut)
async def list_usage(
    catalog: CatalogDep, who: PrincipalDep, days: Days = 30,
    unused: Annotated[bool, Query(description=(
        "Only versions (adapters) with no use in the window, never used included"))] = False,
    group: Annotated[Literal["version", "adapter"], Query(description=(
        "One item per version, or per adapter (summed over its versions)"))] = "version",
    sort: Annotated[Literal["name", "usage"], Query(description=(
        "By name, or by requests in the window (most first)"))] = "name",
    namespace: Annotated[str | None, Query(max_length=63, json_schema_extra={
        "pattern": f"^{EXACT_NAME_PATTERN}$"})] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> Response:
    """Versions (or adapters) with their use in the window and their last use."""
    days = service.window(days, catalog.settings.usage_retention_days)
    if namespace is not None:
        valid_name(namespace, "namespace")
    async with catalog.db.read() as conn:
        out = await service.listing(conn, who, days=days, by_adapter=group == "adapter",
                                    unused=unused, by_usage=sort == "usage",
                                    namespace=namespace, limit=limit, offset=offset)
    return json_response(out)


@router.get("/v1/adapters/{ns}/{name}/usage", response_model=AdapterUsageOut)
async def adapter_usage(ns: str, name: str, catalog: CatalogDep, who: PrincipalDep,
                        days: Days = 30,
                        daily_limit: Annotated[int, Query(ge=0, le=10_000, description=(
                            "At most this many (version, day) rows, newest first"))] = 1000,
                        ) -> Response:
    """One adapter's use in the window: totals, per version and per day."""
    who.require_read(ns)
    full = f"{valid_name(ns, 'namespace')}/{valid_name(name, 'adapter name')}"
    days = service.window(days, catalog.settings.usage_retention_days)
    async with catalog.db.read() as conn:
        row = await adapters.get_adapter(conn, full)
        out = await service.adapter_usage(conn, row.id, full, days, daily_limit)
    return json_response(out)
