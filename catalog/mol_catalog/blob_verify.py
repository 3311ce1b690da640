"""``POST /v1/admin/verify``: every referenced blob is in the store, whole and unchanged.

Checks each blob a version references (all of them, or a random sample): present, of
the size the versions recorded and, unless ``content=false``, hashing to its digest
(every byte is read back). Reports the blobs that fail and the versions they break;
``mol catalog verify`` exits non-zero when any does. A publish of the same bytes
stores a missing blob again.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel
from sqlalchemy import func, select
from starlette.responses import Response

from mol_catalog.auth import Principal
from mol_catalog.blobs import BlobStore
from mol_catalog.db import Database
from mol_catalog.deps import Catalog, get_catalog, get_principal
from mol_catalog.errors import json_response
from mol_catalog.models import Adapter, Version, VersionBlob

BATCH = 500  # digests per query and per round of checks
CONCURRENCY = 8
MAX_VERSIONS_LISTED = 100


class BadBlob(BaseModel):
    digest: str
    reason: str
    versions: list[str]  # "ns/name@vN", at most 100
    version_count: int


class VerifyReport(BaseModel):
    referenced: int  # distinct blobs versions reference
    checked: int
    ok: bool
    missing: list[BadBlob]
    corrupt: list[BadBlob]


async def _count(db: Database) -> int:
    distinct = select(VersionBlob.digest).distinct().subquery()
    async with db.unit(write=False) as uow:
        return int((await uow.session.execute(
            select(func.count()).select_from(distinct))).scalar_one())


async def _batches(db: Database, sample: int | None) -> AsyncIterator[list[str]]:
    """The digests to check, a batch at a time: a random sample, or all in key order
    (keyset pages, so a large store is never listed in memory at once)."""
    if sample is not None:
        query = (select(VersionBlob.digest).group_by(VersionBlob.digest)
                 .order_by(func.random()).limit(sample))
        async with db.unit(write=False) as uow:
            digests = list((await uow.session.execute(query)).scalars())
        for i in range(0, len(digests), BATCH):
            yield digests[i:i + BATCH]
        return
    last = ""
    while True:
        query = (select(VersionBlob.digest).where(VersionBlob.digest > last)
                 .group_by(VersionBlob.digest).order_by(VersionBlob.digest).limit(BATCH))
        async with db.unit(write=False) as uow:
            digests = list((await uow.session.execute(query)).scalars())
        if not digests:
            return
        yield digests
        last = digests[-1]


async def _expected_sizes(db: Database, digests: list[str]) -> dict[str, int]:
    """Each digest's size as one version that references it recorded it."""
    sizes: dict[str, int] = {}
    async with db.unit(write=False) as uow:
        for i in range(0, len(digests), BATCH):
            chunk = digests[i:i + BATCH]
            first = (select(VersionBlob.digest, func.min(VersionBlob.version_id).label("vid"))
                     .where(VersionBlob.digest.in_(chunk)).group_by(VersionBlob.digest)
                     .subquery())
            rows = await uow.session.execute(
                select(first.c.digest, Version.files).join(Version, Version.id == first.c.vid))
            for digest, files in rows:
                sizes[digest] = next(int(f["size"]) for f in files if f["digest"] == digest)
    return sizes


async def _versions(db: Database, digest: str) -> tuple[list[str], int]:
    """The versions that reference the blob ("ns/name@vN", the first 100) and how many."""
    where = VersionBlob.digest == digest
    async with db.unit(write=False) as uow:
        count = int((await uow.session.execute(
            select(func.count()).select_from(VersionBlob).where(where))).scalar_one())
        rows = await uow.session.execute(
            select(Adapter.full_name, Version.number)
            .join(Version, Version.adapter_id == Adapter.id)
            .join(VersionBlob, VersionBlob.version_id == Version.id)
            .where(where).order_by(Version.id).limit(MAX_VERSIONS_LISTED))
        return [f"{name}@v{number}" for name, number in rows], count


async def _check(blobs: BlobStore, digest: str, size: int, content: bool) -> str | None:
    """Why the stored blob is not what versions reference, or None when it is."""
    stored = await blobs.size(digest)
    if stored is None:
        return "missing"
    if stored != size:
        return f"size {stored} bytes, versions recorded {size}"
    if content:
        hasher = hashlib.sha256()
        async for chunk in blobs.read(digest):
            hasher.update(chunk)
        if f"sha256:{hasher.hexdigest()}" != digest:
            return f"content hashes to sha256:{hasher.hexdigest()}"
    return None


async def verify(db: Database, blobs: BlobStore, sample: int | None = None,
                 content: bool = True) -> VerifyReport:
    """Check referenced blobs (a random ``sample`` of them, or all)."""
    gate = asyncio.Semaphore(CONCURRENCY)
    checked = 0
    missing: list[BadBlob] = []
    corrupt: list[BadBlob] = []

    async def one(digest: str, size: int) -> str | None:
        async with gate:
            return await _check(blobs, digest, size, content)

    async for digests in _batches(db, sample):
        sizes = await _expected_sizes(db, digests)
        reasons = await asyncio.gather(*(one(d, sizes[d]) for d in digests))
        checked += len(digests)
        for digest, reason in zip(digests, reasons, strict=True):
            if reason is None:
                continue
            versions, count = await _versions(db, digest)
            bad = BadBlob(digest=digest, reason=reason, versions=versions, version_count=count)
            (missing if reason == "missing" else corrupt).append(bad)
    return VerifyReport(referenced=await _count(db), checked=checked,
                        ok=not missing and not corrupt, missing=missing, corrupt=corrupt)


router = APIRouter(tags=["operations"])


@router.post("/v1/admin/verify", responses={200: {"model": VerifyReport}})
async def run_verify(
    catalog: Annotated[Catalog, Depends(get_catalog)],
    who: Annotated[Principal, Depends(get_principal)],
    sample: Annotated[int | None, Query(
        ge=1, le=1_000_000, description="Check this many random referenced blobs "
        "(default: all).")] = None,
    content: Annotated[bool, Query(
        description="Read every checked blob back and hash it (false: presence and "
        "size only).")] = True,
) -> Response:
    """Check that referenced blobs are in the store with their size and digest (admin)."""
    who.require_admin()
    report = await verify(catalog.db, catalog.blobs, sample, content)
    body: dict[str, Any] = report.model_dump()
    return json_response(body)
