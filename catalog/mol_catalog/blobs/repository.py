"""SQL about blobs: which versions (and eval reports) reference them (gc, verify,
downloads), gc's deletions and the advisory locks gc and publish meet on (see ``blobs.orphans``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import BigInteger, Integer, String, Table, bindparam, exists, func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, json_value
from mol_catalog.models import Adapter, BlobDeletion, EvalReport, Version, VersionBlob

BATCH = 500  # digests per statement: one IN list of this many parameters
# The advisory lock class of blob digests ("molb"); the second key is from the digest.
LOCK_CLASS = 0x6D6F6C62
MAX_VERSIONS_LISTED = 100

DELETIONS = cast(Table, BlobDeletion.__table__)
VERSION_BLOBS = cast(Table, VersionBlob.__table__)
EVAL_REPORTS = cast(Table, EvalReport.__table__)
# The newest deletion id: what a publish reads before it stores its blobs.
WATERMARK = select(func.coalesce(func.max(DELETIONS.c.id), 0)).scalar_subquery()


def _in_list(column: Any, width: int) -> Any:
    """``column IN (:d0 .. :d{width-1})``: a fixed width, so the statement compiles once;
    ``_padded`` fills the unused places with NULL, which matches nothing."""
    return column.in_([bindparam(f"d{i}", type_=String) for i in range(width)])


def _padded(values: Sequence[str], width: int) -> dict[str, Any]:
    if len(values) > width:
        raise ValueError(f"at most {width} digests a statement, got {len(values)}")
    return {f"d{i}": values[i] if i < len(values) else None for i in range(width)}


# gc keeps a blob a version's files or an eval report reference.
_REFERENCED = Prepared(select(
    exists().where(VERSION_BLOBS.c.digest == bindparam("digest", type_=String))
    | exists().where(EVAL_REPORTS.c.report_digest == bindparam("digest", type_=String))))
_REFERENCED_AMONG = Prepared(
    select(VERSION_BLOBS.c.digest).where(_in_list(VERSION_BLOBS.c.digest, BATCH))
    .union(select(EVAL_REPORTS.c.report_digest)
           .where(_in_list(EVAL_REPORTS.c.report_digest, BATCH))))
_WATERMARK = Prepared(select(WATERMARK))
_GONE = Prepared(select(DELETIONS.c.digest, DELETIONS.c.id)
                 .where(DELETIONS.c.id > bindparam("after", type_=BigInteger),
                        _in_list(DELETIONS.c.digest, 2)))
_RECORD = insert(DELETIONS)
_LOCK = Prepared(select(func.pg_advisory_xact_lock(LOCK_CLASS, bindparam("key", type_=Integer))))
_LOCK_SHARED_2 = Prepared(select(
    func.pg_advisory_xact_lock_shared(LOCK_CLASS, bindparam("k1", type_=Integer)),
    func.pg_advisory_xact_lock_shared(LOCK_CLASS, bindparam("k2", type_=Integer))))
_COUNT = Prepared(select(func.count()).select_from(
    select(VersionBlob.digest).distinct().subquery()))
_SAMPLE = Prepared(select(VersionBlob.digest).group_by(VersionBlob.digest)
                   .order_by(func.random()).limit(bindparam("limit", type_=Integer)))
_PAGE = Prepared(select(VersionBlob.digest)
                 .where(VersionBlob.digest > bindparam("last", type_=String))
                 .group_by(VersionBlob.digest).order_by(VersionBlob.digest)
                 .limit(bindparam("limit", type_=Integer)))
_FIRST_REFERENCE = (select(VersionBlob.digest, func.min(VersionBlob.version_id).label("vid"))
                    .where(_in_list(VersionBlob.digest, BATCH)).group_by(VersionBlob.digest)
                    .subquery())
_FILES = Prepared(select(_FIRST_REFERENCE.c.digest, Version.files)
                  .join(Version, Version.id == _FIRST_REFERENCE.c.vid))
_REFERENCES = Prepared(select(func.count()).select_from(VersionBlob)
                       .where(VersionBlob.digest == bindparam("digest", type_=String)))
_VERSIONS = Prepared(
    select(Adapter.full_name, Version.number)
    .join(Version, Version.adapter_id == Adapter.id)
    .join(VersionBlob, VersionBlob.version_id == Version.id)
    .where(VersionBlob.digest == bindparam("digest", type_=String))
    .order_by(Version.id).limit(MAX_VERSIONS_LISTED))


def lock_key(digest: str) -> int:
    """A signed 32-bit key from the digest's first hex digits."""
    return int.from_bytes(bytes.fromhex(digest[7:15]), "big", signed=True)


async def lock(conn: AsyncConnection, digest: str) -> None:
    """The digest's lock, exclusive until commit (Postgres only: gc)."""
    await _LOCK.all(conn, key=lock_key(digest))


async def lock_shared(conn: AsyncConnection, digests: Sequence[str]) -> None:
    """The locks of one or two digests, shared until commit (Postgres only: publish)."""
    keys = sorted({lock_key(d) for d in digests})
    await _LOCK_SHARED_2.all(conn, k1=keys[0], k2=keys[-1])


async def deleted_since(conn: ReadConn, after: int,
                        digests: Sequence[str]) -> list[tuple[str, int]]:
    """(digest, deletion id) of deletions of one or two ``digests`` past ``after``."""
    rows = await _GONE.all(conn, after=after, **_padded(digests, 2))
    return [(r[0], int(r[1])) for r in rows]


async def deletion_watermark(conn: ReadConn) -> int:
    """The newest deletion id: read before storing a blob a later transaction references
    (``orphans.guard`` then tells whether gc deleted it in between)."""
    return int((await _WATERMARK.all(conn))[0][0])


async def record_deletion(conn: AsyncConnection, digest: str, now: datetime) -> None:
    await conn.execute(_RECORD, {"digest": digest, "deleted_at": now})


async def is_referenced(conn: ReadConn, digest: str) -> bool:
    row = await _REFERENCED.first(conn, digest=digest)
    return bool(row is not None and row[0])


async def referenced_among(conn: ReadConn, digests: Sequence[str]) -> set[str]:
    """Which of the digests (at most BATCH) a version or an eval report references."""
    return {r[0] for r in await _REFERENCED_AMONG.all(conn, **_padded(digests, BATCH))}


async def count_referenced(conn: ReadConn) -> int:
    """How many distinct blobs versions reference."""
    return int((await _COUNT.all(conn))[0][0])


async def sample_referenced(conn: ReadConn, count: int) -> list[str]:
    return [r[0] for r in await _SAMPLE.all(conn, limit=count)]


async def referenced_after(conn: ReadConn, last: str, limit: int) -> list[str]:
    """Referenced digests above ``last``, in order: a keyset page."""
    return [r[0] for r in await _PAGE.all(conn, last=last, limit=limit)]


async def recorded_sizes(conn: ReadConn, digests: Sequence[str]) -> dict[str, int]:
    """Each digest's size (at most BATCH) as one version that references it recorded it."""
    return {digest: next(int(f["size"]) for f in json_value(files) if f["digest"] == digest)
            for digest, files in await _FILES.all(conn, **_padded(digests, BATCH))}


async def referencing_versions(conn: ReadConn, digest: str) -> tuple[list[str], int]:
    """The versions that reference the blob ("ns/name@vN", the first 100) and how many."""
    count = int((await _REFERENCES.all(conn, digest=digest))[0][0])
    rows = await _VERSIONS.all(conn, digest=digest)
    return [f"{name}@v{number}" for name, number in rows], count
