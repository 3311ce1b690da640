"""SQL for base models."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from mol_catalog.models import BaseModel


async def get(session: AsyncSession, name: str, revision: str) -> BaseModel | None:
    return (await session.execute(
        select(BaseModel).where(BaseModel.name == name, BaseModel.revision == revision)
    )).scalar_one_or_none()


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
