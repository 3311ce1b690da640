"""Documents many versions share, stored once: adapter configs and tensor-shape maps.

A real Llama-3-8B all-linear rank-16 LoRA has 448 tensors, ~35 KB of shape-map JSON;
the versions of one adapter, and every adapter trained with one recipe, repeat the
same map and the same adapter_config. Each distinct document is one ``shared_docs``
row keyed by ``sha256:`` of its canonical JSON (sorted keys, no spaces), and versions
hold the two digests. Inserts are ``ON CONFLICT DO NOTHING`` on Postgres and SQLite, in
a transaction that commits before the publish's own (``adapters.publish``), so publishes
racing with the same document both succeed, leave one row and never wait on each other. Rows are
immutable and never deleted: one per distinct document, so a version's delete or a
blob gc leaves them for the versions that still share them (or the next publish).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, cast

import orjson
from sqlalchemy import Table
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.models import SharedDoc

SHARED_DOCS = cast(Table, SharedDoc.__table__)
_INSERT = {
    "postgresql": pg_insert(SHARED_DOCS).on_conflict_do_nothing(index_elements=["digest"]),
    "sqlite": sqlite_insert(SHARED_DOCS).on_conflict_do_nothing(index_elements=["digest"]),
}


def canonical(value: Any) -> bytes:
    """One byte string per JSON value, whatever its key order or whitespace."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def digest_of(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


async def store(conn: AsyncConnection, docs: Mapping[str, Any]) -> None:
    """Insert ``{digest: body}`` rows not stored yet, in one statement. Digest order is
    the lock order, so two transactions inserting the same pair never deadlock."""
    rows = [{"digest": d, "body": docs[d]} for d in sorted(docs)]
    if rows:
        await conn.execute(_INSERT[conn.dialect.name], rows)

