"""Every referenced blob is in the store, whole and unchanged (``POST /v1/admin/verify``).

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

from mol_catalog.admin.schemas import BadBlob, VerifyReport
from mol_catalog.blobs import repository as repo
from mol_catalog.blobs.store import BlobStore
from mol_catalog.db import Database

BATCH = repo.BATCH  # digests per query and per round of checks
CONCURRENCY = 8


async def _batches(db: Database, sample: int | None) -> AsyncIterator[list[str]]:
    """The digests to check, a batch at a time: a random sample, or all in key order
    (keyset pages, so a large store is never listed in memory at once)."""
    if sample is not None:
        async with db.read() as conn:
            digests = await repo.sample_referenced(conn, sample)
        for i in range(0, len(digests), BATCH):
            yield digests[i:i + BATCH]
        return
    last = ""
    while True:
        async with db.read() as conn:
            digests = await repo.referenced_after(conn, last, BATCH)
        if not digests:
            return
        yield digests
        last = digests[-1]


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
        async with db.read() as conn:
            sizes = await repo.recorded_sizes(conn, digests)
        reasons = await asyncio.gather(*(one(d, sizes[d]) for d in digests))
        checked += len(digests)
        for digest, reason in zip(digests, reasons, strict=True):
            if reason is None:
                continue
            async with db.read() as conn:
                versions, count = await repo.referencing_versions(conn, digest)
            bad = BadBlob(digest=digest, reason=reason, versions=versions, version_count=count)
            (missing if reason == "missing" else corrupt).append(bad)
    async with db.read() as conn:
        referenced = await repo.count_referenced(conn)
    return VerifyReport(referenced=referenced, checked=checked,
                        ok=not missing and not corrupt, missing=missing, corrupt=corrupt)
