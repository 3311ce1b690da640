"""SQL for serving profiles and verdicts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from mol_catalog.models import BaseModel, ServingProfile, Verdict


async def get(session: AsyncSession, name: str) -> ServingProfile | None:
    return (await session.execute(
        select(ServingProfile).where(ServingProfile.name == name)
    )).scalar_one_or_none()


async def list_all(session: AsyncSession) -> Sequence[tuple[ServingProfile, BaseModel]]:
    rows = await session.execute(
        select(ServingProfile, BaseModel).join(BaseModel,
                                              BaseModel.id == ServingProfile.base_model_id)
        .order_by(ServingProfile.name)
    )
    return [(p, b) for p, b in rows]


async def for_base(session: AsyncSession, base_model_id: int) -> Sequence[ServingProfile]:
    return (await session.execute(
        select(ServingProfile).where(ServingProfile.base_model_id == base_model_id)
        .order_by(ServingProfile.name)
    )).scalars().all()


async def add(session: AsyncSession, row: ServingProfile) -> ServingProfile:
    session.add(row)
    await session.flush()
    return row


async def store_verdict(session: AsyncSession, version_id: int, profile: ServingProfile,
                        compatible: bool, reasons: list[dict[str, Any]]) -> None:
    """Replace the verdict for (version, profile) with one for the profile's generation."""
    await session.execute(delete(Verdict).where(Verdict.version_id == version_id,
                                                Verdict.profile_id == profile.id))
    session.add(Verdict(version_id=version_id, profile_id=profile.id,
                        profile_generation=profile.generation, compatible=compatible,
                        reasons=reasons))
    await session.flush()
