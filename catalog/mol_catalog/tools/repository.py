"""SQL for tools: names, their immutable versions (the documents themselves) and the
``approved`` alias; what every versioned document shares is ``versioned_sql``'s, read
here through ``DOCS``. Reads are ``Prepared`` statements; writes Core statements on the
unit's connection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import Tool, ToolAlias, ToolVersion
from mol_catalog.versioned_sql import ALIAS, NS, StoredVersion, VersionedDocs


@dataclass(frozen=True)
class VersionRow(StoredVersion):
    """A stored version with its document (a few KiB: every read shows the source)."""

    description: str
    checks: list[dict[str, Any]]
    size_bytes: int
    document: bytes
    signature: str | None
    signed_by: str | None
    session_id: str | None
    deployment: str | None
    expert: str | None
    tenant: str | None
    created_by: str | None
    created_at: datetime | None

    @classmethod
    def of(cls, r: Sequence[Any]) -> VersionRow:
        return cls(r[0], r[1], int(r[2]), r[3], r[4], json_value(r[5]), int(r[6]), bytes(r[7]),
                   r[8], r[9], r[10], r[11], r[12], r[13], r[14], datetime_value(r[15]))


@dataclass(frozen=True)
class Approval:
    """Where ``approved`` points, who moved it and when."""

    version: int
    by: str | None
    at: datetime | None


DOCS = VersionedDocs(Tool, ToolVersion, ToolAlias, owner="tool_id", columns=(
    "number", "digest", "description", "checks", "size_bytes", "document", "signature",
    "signed_by", "session_id", "deployment", "expert", "tenant", "created_by", "created_at"),
    row=VersionRow.of)
TOOLS, ALIASES = DOCS.name_table, DOCS.alias_table
T, V, A = DOCS.n, DOCS.v, DOCS.a
_WIDTH = DOCS.width
_APPROVALS = Prepared(select(T.name, A.version, A.updated_by, A.updated_at)
                      .select_from(TOOLS.join(ALIASES, A.tool_id == T.id))
                      .where(T.namespace == NS, A.name == ALIAS).order_by(T.name))
_AT_ALIAS = Prepared(select(*DOCS.columns, A.updated_by, A.updated_at).select_from(
    DOCS.joined.join(ALIASES, (A.tool_id == T.id) & (A.version == V.number)))
    .where(T.namespace == NS, A.name == ALIAS).order_by(T.name))

version = DOCS.version
versions = DOCS.versions
latest = DOCS.latest
tool = DOCS.name
same_content = DOCS.same_content
insert_tool = DOCS.insert_name
insert_version = DOCS.insert_version
alias_version = DOCS.alias_version
set_alias = DOCS.set_alias
delete_alias = DOCS.delete_alias


async def approvals(conn: ReadConn, namespace: str, alias: str) -> dict[str, Approval]:
    """tool name -> where ``alias`` points, for the whole namespace."""
    return {r[0]: Approval(int(r[1]), r[2], datetime_value(r[3]))
            for r in await _APPROVALS.all(conn, namespace=namespace, alias=alias)}


async def at_alias(conn: ReadConn, namespace: str,
                   alias: str) -> list[tuple[VersionRow, Approval]]:
    """The version ``alias`` names, of every tool of the namespace that has it (by name)."""
    return [(VersionRow.of(r), Approval(int(r[2]), r[_WIDTH], datetime_value(r[_WIDTH + 1])))
            for r in await _AT_ALIAS.all(conn, namespace=namespace, alias=alias)]
