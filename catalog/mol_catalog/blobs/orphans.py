"""Garbage collection of orphan blobs, safe against publishes in flight.

A publish stores its blobs before the transaction that references them, so a crash in
between leaves a blob no version references; gc deletes such blobs once they are older
than a grace period. A publish may also find a blob already stored (an orphan, or one
a version references) and then reference it, so the grace period alone cannot protect
it: gc and publish meet on a lock per digest instead.

- gc, per digest, in one transaction: the digest's lock (exclusive), no version
  references it (committed), delete the object, record the deletion (``blob_deletions``).
- publish reads the newest deletion id before it stores its blobs; in its transaction
  it takes its digests' locks (shared) and looks for deletions of them past that id.
  Any there: gc removed a blob after the publish stored it, so the publish rolls back,
  stores it again and retries. None there: no gc can delete them until the reference
  commits, and after it gc sees the reference.

On Postgres the locks are transaction-level advisory locks (two-key form, a class of
their own); on SQLite writers are serialized by ``BEGIN IMMEDIATE``, which gives the
same order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from mol_catalog.blobs import leftovers
from mol_catalog.blobs import repository as repo
from mol_catalog.blobs.store import BlobStore
from mol_catalog.db import Database, UnitOfWork
from mol_catalog.models import utcnow


class BlobsGone(Exception):
    """gc deleted blobs of a publish in flight: store them again (``digests``) and retry
    with ``after`` as the new watermark."""

    def __init__(self, digests: set[str], after: int) -> None:
        super().__init__(f"blobs deleted by gc during the publish: {sorted(digests)}")
        self.digests = digests
        self.after = after


async def guard(uow: UnitOfWork, digests: Sequence[str], after: int) -> None:
    """In a publishing transaction: lock the digests against gc until commit and raise
    BlobsGone when gc deleted one of them after ``after`` (a deletion id)."""
    if uow.postgres:
        await repo.lock_shared(uow.conn, digests)
    rows = await repo.deleted_since(uow.conn, after, digests)
    if rows:
        raise BlobsGone({d for d, _ in rows}, max(i for _, i in rows))


async def _delete_if_orphan(db: Database, blobs: BlobStore, digest: str) -> bool:
    async with db.unit() as uow:
        if uow.postgres:
            await repo.lock(uow.conn, digest)
        if await repo.is_referenced(uow.conn, digest):
            return False
        await blobs.delete(digest)
        await repo.record_deletion(uow.conn, digest, utcnow())
    return True


async def collect(db: Database, blobs: BlobStore, grace_seconds: float) -> dict[str, Any]:
    """Delete unreferenced blobs older than ``grace_seconds``, and leftovers of killed
    publishes as old; {"deleted": [...], "kept": n, "leftovers_removed": n}."""
    cutoff = time.time() - grace_seconds
    listed = await blobs.list()
    old = [b.digest for b in listed if b.modified < cutoff]
    referenced: set[str] = set()
    async with db.read() as conn:
        for i in range(0, len(old), repo.BATCH):
            referenced |= await repo.referenced_among(conn, old[i:i + repo.BATCH])
    # The candidates are checked again, one by one, under their lock.
    deleted = sorted([d for d in old if d not in referenced
                      and await _delete_if_orphan(db, blobs, d)])
    removed = await leftovers.clean(blobs, grace_seconds)
    return {"deleted": deleted, "kept": len(listed) - len(deleted), "leftovers_removed": removed}
