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
from typing import Any, cast

from sqlalchemy import Table, bindparam, exists, func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog import leftovers
from mol_catalog.blobs import BlobStore
from mol_catalog.db import Database
from mol_catalog.models import BlobDeletion, VersionBlob, utcnow

BATCH = 500
# The advisory lock class of blob digests ("molb"); the second key is from the digest.
LOCK_CLASS = 0x6D6F6C62

DELETIONS = cast(Table, BlobDeletion.__table__)
VERSION_BLOBS = cast(Table, VersionBlob.__table__)
_REFERENCED = select(exists().where(VERSION_BLOBS.c.digest == bindparam("digest")))
_RECORD = insert(DELETIONS)
_GONE = (select(DELETIONS.c.digest, DELETIONS.c.id)
         .where(DELETIONS.c.id > bindparam("after"),
                DELETIONS.c.digest.in_(bindparam("digests", expanding=True))))
_LOCK = select(func.pg_advisory_xact_lock(LOCK_CLASS, bindparam("key")))
_LOCK_SHARED_2 = select(func.pg_advisory_xact_lock_shared(LOCK_CLASS, bindparam("k1")),
                        func.pg_advisory_xact_lock_shared(LOCK_CLASS, bindparam("k2")))
# What precheck reads before a publish stores its blobs.
WATERMARK = select(func.coalesce(func.max(DELETIONS.c.id), 0)).scalar_subquery()


class BlobsGone(Exception):
    """gc deleted blobs of a publish in flight: store them again (``digests``) and retry
    with ``after`` as the new watermark."""

    def __init__(self, digests: set[str], after: int) -> None:
        super().__init__(f"blobs deleted by gc during the publish: {sorted(digests)}")
        self.digests = digests
        self.after = after


def lock_key(digest: str) -> int:
    """A signed 32-bit key from the digest's first hex digits."""
    return int.from_bytes(bytes.fromhex(digest[7:15]), "big", signed=True)


async def guard(conn: AsyncConnection, postgres: bool, digests: Sequence[str],
                after: int) -> None:
    """In a publishing transaction: lock the digests against gc until commit and raise
    BlobsGone when gc deleted one of them after ``after`` (a deletion id)."""
    if postgres:
        keys = sorted({lock_key(d) for d in digests})
        await conn.execute(_LOCK_SHARED_2, {"k1": keys[0], "k2": keys[-1]})
    rows = (await conn.execute(_GONE, {"after": after, "digests": list(digests)})).all()
    if rows:
        raise BlobsGone({r[0] for r in rows}, max(int(r[1]) for r in rows))


async def _delete_if_orphan(db: Database, blobs: BlobStore, digest: str) -> bool:
    async with db.unit() as uow:
        conn = await uow.session.connection()
        if db.postgres:
            await conn.execute(_LOCK, {"key": lock_key(digest)})
        if (await conn.execute(_REFERENCED, {"digest": digest})).scalar():
            return False
        await blobs.delete(digest)
        await conn.execute(_RECORD, {"digest": digest, "deleted_at": utcnow()})
    return True


async def collect(db: Database, blobs: BlobStore, grace_seconds: float) -> dict[str, Any]:
    """Delete unreferenced blobs older than ``grace_seconds``, and leftovers of killed
    publishes as old; {"deleted": [...], "kept": n, "leftovers_removed": n}."""
    cutoff = time.time() - grace_seconds
    listed = await blobs.list()
    old = [b.digest for b in listed if b.modified < cutoff]
    referenced: set[str] = set()
    async with db.unit(write=False) as uow:
        for i in range(0, len(old), BATCH):
            chunk = old[i:i + BATCH]
            rows = await uow.session.execute(
                select(VersionBlob.digest).where(VersionBlob.digest.in_(chunk)).distinct())
            referenced.update(rows.scalars())
    # The candidates are checked again, one by one, under their lock.
    deleted = sorted([d for d in old if d not in referenced
                      and await _delete_if_orphan(db, blobs, d)])
    removed = await leftovers.clean(blobs, grace_seconds)
    return {"deleted": deleted, "kept": len(listed) - len(deleted), "leftovers_removed": removed}
