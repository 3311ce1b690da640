"""SQL for router heads: names, their immutable versions (the documents themselves) and
aliases; what every versioned document shares is ``versioned_sql``'s, read here through
``DOCS``. Reads are ``Prepared`` statements; writes Core statements on the unit's
connection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import RouterHead, RouterHeadAlias, RouterHeadVersion
from mol_catalog.versioned_sql import ALIAS, DIGEST, NS, StoredVersion, VersionedDocs


@dataclass(frozen=True)
class VersionRow(StoredVersion):
    """A stored version, without its document."""

    experts: list[str]
    embedding_model: str
    dims: int
    ngram_dims: int
    data_digest: str | None
    source: str | None
    cross_validation: dict[str, Any] | None
    size_bytes: int
    created_by: str | None
    created_at: datetime | None

    @classmethod
    def of(cls, r: Sequence[Any]) -> VersionRow:
        return cls(r[0], r[1], int(r[2]), r[3], json_value(r[4]), r[5], int(r[6]), int(r[7]),
                   r[8], r[9], json_value(r[10]), int(r[11]), r[12], datetime_value(r[13]))


DOCS = VersionedDocs(RouterHead, RouterHeadVersion, RouterHeadAlias, owner="head_id", columns=(
    "number", "digest", "experts", "embedding_model", "dims", "ngram_dims", "data_digest",
    "source", "cross_validation", "size_bytes", "created_by", "created_at"), row=VersionRow.of)
HEADS, ALIASES = DOCS.name_table, DOCS.alias_table
H, V, A = DOCS.n, DOCS.v, DOCS.a

_ALIAS_LIST = Prepared(select(H.name, A.name, A.version, A.updated_at)
                       .select_from(HEADS.join(ALIASES, A.head_id == H.id))
                       .where(H.namespace == NS).order_by(H.name, A.name))
_ALIASES_OF = Prepared(select(A.name, A.version, A.updated_at)
                       .select_from(HEADS.join(ALIASES, A.head_id == H.id))
                       .where(*DOCS.of_name).order_by(A.name))
_AT_ALIAS = Prepared(select(*DOCS.columns).select_from(
    DOCS.joined.join(ALIASES, (A.head_id == H.id) & (A.version == V.number)))
    .where(*DOCS.of_name, A.name == ALIAS))
# The first published (name, version) of a digest in a namespace.
_REF = Prepared(select(H.name, V.number).select_from(DOCS.joined)
                .where(H.namespace == NS, V.digest == DIGEST).order_by(V.id).limit(1))

version = DOCS.version
versions = DOCS.versions
document = DOCS.document
latest = DOCS.latest
head = DOCS.name
same_content = DOCS.same_content
insert_head = DOCS.insert_name
insert_version = DOCS.insert_version
alias_version = DOCS.alias_version
set_alias = DOCS.set_alias
delete_alias = DOCS.delete_alias


async def namespace_aliases(conn: ReadConn, namespace: str) -> dict[str, dict[str, int]]:
    """head name -> {alias: version} for the whole namespace."""
    out: dict[str, dict[str, int]] = {}
    for head, alias, number, _ in await _ALIAS_LIST.all(conn, namespace=namespace):
        out.setdefault(head, {})[alias] = int(number)
    return out


async def aliases(conn: ReadConn, namespace: str, name: str
                  ) -> list[tuple[str, int, datetime | None]]:
    return [(r[0], int(r[1]), datetime_value(r[2]))
            for r in await _ALIASES_OF.all(conn, namespace=namespace, name=name)]


async def at_alias(conn: ReadConn, namespace: str, name: str, alias: str) -> VersionRow | None:
    r = await _AT_ALIAS.first(conn, namespace=namespace, name=name, alias=alias)
    return VersionRow.of(r) if r is not None else None


async def refs(conn: ReadConn, namespace: str, digests: Sequence[str]) -> dict[str, str]:
    """digest -> ``name@vN`` of its first publish in the namespace (a digest
    published under two names keeps the first); digests never published are left out.
    One indexed probe per digest: a namespace runs a head or two at a time."""
    out: dict[str, str] = {}
    for digest in dict.fromkeys(digests):
        r = await _REF.first(conn, namespace=namespace, digest=digest)
        if r is not None:
            out[digest] = f"{r[0]}@v{int(r[1])}"
    return out
