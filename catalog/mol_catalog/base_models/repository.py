"""SQL for base models."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import String, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from mol_catalog.db import Prepared, ReadConn
from mol_catalog.models import BaseModel

_ID_OF = Prepared(select(BaseModel.id).where(BaseModel.name == bindparam("name", type_=String),
                                             BaseModel.revision == bindparam("rev", type_=String)))


async def get(session: AsyncSession, name: str, revision: str) -> BaseModel | None:
    return (await session.execute(
        select(BaseModel).where(BaseModel.name == name, BaseModel.revision == revision)
    )).scalar_one_or_none()


async def id_of(conn: ReadConn, name: str, revision: str) -> int | None:
    """The id of ``name@revision`` on a read connection (listing filters)."""
    row = await _ID_OF.first(conn, name=name, rev=revision)
    return int(row[0]) if row is not None else None


async def get_by_id(session: AsyncSession, base_id: int) -> BaseModel | None:
    return await session.get(BaseModel, base_id)


async def latest(session: AsyncSession, name: str) -> BaseModel | None:
    return (await session.execute(
        select(BaseModel).where(BaseModel.name == name).order_by(BaseModel.id.desc()).limit(1)
    )).scalar_one_or_none()


async def revisions(session: AsyncSession, name: str) -> Sequence[BaseModel]:
    return (await session.execute(
        select(BaseModel).where(BaseModel.name == name).order_by(BaseModel.id.desc())
    )).scalars().all()


async def insert(session: AsyncSession, row: BaseModel) -> BaseModel:
    session.add(row)
    await session.flush()
    return row
