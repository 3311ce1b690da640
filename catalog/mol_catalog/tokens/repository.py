"""SQL for tokens."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import BigInteger, String, Table, bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import Token

TOKENS = cast(Table, Token.__table__)


@dataclass(frozen=True)
class TokenRow:
    id: int
    name: str
    scopes: list[str]
    created_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def of(cls, row: Any) -> TokenRow:
        return cls(int(row[0]), row[1], json_value(row[2]), datetime_value(row[3]),
                   datetime_value(row[4]))


_ACTIVE = Prepared(select(Token.name, Token.scopes).where(
    Token.token_hash == bindparam("digest", type_=String), Token.revoked_at.is_(None)))
_LISTED = select(Token.id, Token.name, Token.scopes, Token.created_at, Token.revoked_at).where(
    Token.name.like(bindparam("pattern", type_=String), escape="\\")).order_by(Token.id)
_MATCHING = Prepared(_LISTED)
_MATCHING_ACTIVE = Prepared(_LISTED.where(Token.revoked_at.is_(None)))
_EXISTS = Prepared(select(Token.id).where(Token.id == bindparam("id", type_=BigInteger)))
_INSERT = insert(TOKENS).returning(TOKENS.c.id)


async def find_active(conn: ReadConn, digest: str) -> tuple[str, list[str]] | None:
    """(name, scopes) of the unrevoked token with this hash."""
    row = await _ACTIVE.first(conn, digest=digest)
    return (row[0], json_value(row[1])) if row is not None else None


async def insert_token(conn: AsyncConnection, name: str, digest: str, scopes: list[str],
                       now: datetime) -> int:
    return int((await conn.execute(_INSERT, {"name": name, "token_hash": digest,
                                             "scopes": scopes, "created_at": now})).scalar_one())


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def list_tokens(conn: ReadConn, prefix: str = "", active: bool = False) -> list[TokenRow]:
    """Tokens whose name starts with ``prefix`` (all by default), by id; ``active``: only
    those not revoked."""
    query = _MATCHING_ACTIVE if active else _MATCHING
    return [TokenRow.of(r) for r in await query.all(conn, pattern=_like_prefix(prefix))]


async def revoke(conn: AsyncConnection, token_id: int, when: datetime) -> bool:
    result = await conn.execute(update(TOKENS).where(TOKENS.c.id == token_id,
                                                     TOKENS.c.revoked_at.is_(None))
                                .values(revoked_at=when))
    return bool(result.rowcount)


async def exists(conn: ReadConn, token_id: int) -> bool:
    return await _EXISTS.first(conn, id=token_id) is not None
