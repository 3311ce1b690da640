"""SQL for base models."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import BigInteger, String, Table, bindparam, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import BaseLLM

BASE_MODELS = cast(Table, BaseLLM.__table__)


@dataclass(frozen=True)
class BaseRow:
    """One revision of a base model as stored."""

    id: int
    name: str
    revision: str
    architecture: str
    config: dict[str, Any]
    tensors: dict[str, Any]
    shapes: dict[str, Any]
    content_digest: str
    created_at: datetime | None

    @classmethod
    def of(cls, row: Any) -> BaseRow:
        return cls(int(row[0]), row[1], row[2], row[3], json_value(row[4]), json_value(row[5]),
                   json_value(row[6]), row[7], datetime_value(row[8]))

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.revision}"


_ROW = select(BaseLLM.id, BaseLLM.name, BaseLLM.revision, BaseLLM.architecture, BaseLLM.config,
              BaseLLM.tensors, BaseLLM.shapes, BaseLLM.content_digest, BaseLLM.created_at)
_NAME = BaseLLM.name == bindparam("name", type_=String)
_REVISION = BaseLLM.revision == bindparam("rev", type_=String)
_GET = Prepared(_ROW.where(_NAME, _REVISION))
_BY_ID = Prepared(_ROW.where(BaseLLM.id == bindparam("id", type_=BigInteger)))
_REVISIONS = Prepared(_ROW.where(_NAME).order_by(BaseLLM.id.desc()))
_LATEST = Prepared(_ROW.where(_NAME).order_by(BaseLLM.id.desc()).limit(1))
_REF = Prepared(select(BaseLLM.name, BaseLLM.revision).where(
    BaseLLM.id == bindparam("id", type_=BigInteger)))
_ID_OF = Prepared(select(BaseLLM.id).where(_NAME, _REVISION))
_INSERT = insert(BASE_MODELS).returning(BASE_MODELS.c.id)


async def get(conn: ReadConn, name: str, revision: str) -> BaseRow | None:
    row = await _GET.first(conn, name=name, rev=revision)
    return BaseRow.of(row) if row is not None else None


async def id_of(conn: ReadConn, name: str, revision: str) -> int | None:
    """The id of ``name@revision`` (listing filters)."""
    row = await _ID_OF.first(conn, name=name, rev=revision)
    return int(row[0]) if row is not None else None


async def base_ref(conn: ReadConn, base_id: int) -> str:
    """``name@revision`` of a revision by id (one a foreign key names: it exists)."""
    row = await _REF.first(conn, id=base_id)
    assert row is not None, f"no base model {base_id}"
    return f"{row[0]}@{row[1]}"


async def get_by_id(conn: ReadConn, base_id: int) -> BaseRow | None:
    row = await _BY_ID.first(conn, id=base_id)
    return BaseRow.of(row) if row is not None else None


async def latest(conn: ReadConn, name: str) -> BaseRow | None:
    row = await _LATEST.first(conn, name=name)
    return BaseRow.of(row) if row is not None else None


async def revisions(conn: ReadConn, name: str) -> list[BaseRow]:
    """Newest first."""
    return [BaseRow.of(r) for r in await _REVISIONS.all(conn, name=name)]


async def insert_base(conn: AsyncConnection, values: dict[str, Any]) -> int:
    return int((await conn.execute(_INSERT, values)).scalar_one())
