"""The resolve query: one indexed statement from ``ns/name@ref`` to version, files, verdict."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, and_, literal, select
from sqlalchemy.ext.asyncio import AsyncSession

from mol_catalog.models import (
    Adapter,
    Alias,
    BaseModel,
    Namespace,
    ServingProfile,
    Verdict,
    Version,
    VersionBlob,
)


async def resolve(session: AsyncSession, full_name: str, *, number: int | None = None,
                  digest: str | None = None, alias: str | None = None,
                  profile: str | None = None) -> Row[Any] | None:
    """Exactly one of number/digest/alias, or none of them for ``latest``."""
    cols: list[Any] = [Version.id, Version.number, Version.digest, Version.status,
                       Version.yank_reason, Version.files, Version.base_model_id,
                       BaseModel.name.label("base_name"), BaseModel.revision]
    if profile is not None:
        cols += [ServingProfile.id.label("profile_id"),
                 ServingProfile.generation.label("profile_generation"),
                 Verdict.compatible, Verdict.reasons,
                 Verdict.profile_generation.label("verdict_generation")]
    stmt = select(*cols).select_from(Adapter)
    if alias is not None:
        stmt = stmt.join(Alias, and_(Alias.adapter_id == Adapter.id, Alias.name == alias)).join(
            Version, and_(Version.adapter_id == Adapter.id, Version.number == Alias.version))
    elif number is not None:
        stmt = stmt.join(Version, and_(Version.adapter_id == Adapter.id, Version.number == number))
    elif digest is not None:
        stmt = stmt.join(Version, and_(Version.adapter_id == Adapter.id, Version.digest == digest))
    else:
        stmt = stmt.join(Version, and_(Version.adapter_id == Adapter.id,
                                       Version.number == Adapter.latest_version))
    stmt = stmt.join(BaseModel, BaseModel.id == Version.base_model_id)
    if profile is not None:
        stmt = stmt.outerjoin(ServingProfile, ServingProfile.name == literal(profile)).outerjoin(
            Verdict, and_(Verdict.version_id == Version.id,
                          Verdict.profile_id == ServingProfile.id))
    stmt = stmt.where(Adapter.full_name == full_name)
    return (await session.execute(stmt)).first()


async def adapter_exists(session: AsyncSession, full_name: str) -> bool:
    stmt = select(Adapter.id).where(Adapter.full_name == full_name)
    return (await session.execute(stmt)).first() is not None


async def blob_namespaces(session: AsyncSession, digest: str) -> list[str]:
    rows = await session.execute(
        select(Namespace.name).distinct()
        .select_from(VersionBlob)
        .join(Version, Version.id == VersionBlob.version_id)
        .join(Adapter, Adapter.id == Version.adapter_id)
        .join(Namespace, Namespace.id == Adapter.namespace_id)
        .where(VersionBlob.digest == digest)
    )
    return list(rows.scalars())
