"""SQL for tokens."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from mol_catalog.models import Token


async def find_active(session: AsyncSession, digest: str) -> Token | None:
    return (await session.execute(
        select(Token).where(Token.token_hash == digest, Token.revoked_at.is_(None))
    )).scalar_one_or_none()


async def insert(session: AsyncSession, name: str, digest: str, scopes: list[str]) -> Token:
    row = Token(name=name, token_hash=digest, scopes=scopes)
    session.add(row)
    await session.flush()
    return row


async def list_all(session: AsyncSession) -> list[Token]:
    return list((await session.execute(select(Token).order_by(Token.id))).scalars())


async def revoke(session: AsyncSession, token_id: int, when: datetime) -> bool:
    result = await session.execute(
        update(Token).where(Token.id == token_id, Token.revoked_at.is_(None))
        .values(revoked_at=when)
    )
    return bool(getattr(result, "rowcount", 0))


async def exists(session: AsyncSession, token_id: int) -> bool:
    return (await session.execute(select(Token.id).where(Token.id == token_id))).first() is not None
