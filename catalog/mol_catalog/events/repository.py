"""SQL for the outbox."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from mol_catalog.models import Event


async def after(session: AsyncSession, last_id: int, limit: int) -> Sequence[Event]:
    return (await session.execute(
        select(Event).where(Event.id > last_id).order_by(Event.id).limit(limit)
    )).scalars().all()
