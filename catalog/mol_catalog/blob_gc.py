"""Garbage collection of orphan blobs.

A publish writes blobs before its row, so a crash in between leaves a blob no version
references. gc deletes blobs that no version references and that are older than a
grace period (which protects publishes in flight).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select

from mol_catalog.blobs import BlobStore
from mol_catalog.db import Database
from mol_catalog.models import VersionBlob

BATCH = 500


async def collect(db: Database, blobs: BlobStore, grace_seconds: float) -> dict[str, Any]:
    """Delete unreferenced blobs older than ``grace_seconds``; {"deleted": [...], "kept": n}."""
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
    deleted = sorted(d for d in old if d not in referenced)
    for digest in deleted:
        await blobs.delete(digest)
    return {"deleted": deleted, "kept": len(listed) - len(deleted)}
