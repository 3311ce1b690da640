"""Creating, listing and revoking tokens."""

from __future__ import annotations

from typing import Any

from mol_catalog.auth import Principal, new_token, token_hash
from mol_catalog.db import Database, ReadConn, UnitOfWork
from mol_catalog.errors import NotFound
from mol_catalog.models import utcnow
from mol_catalog.tokens import repository
from mol_catalog.tokens.repository import TokenRow
from mol_catalog.util import checked
from mol_platform.contract import refs


def _public(row: TokenRow) -> dict[str, Any]:
    return {"id": row.id, "name": row.name, "scopes": list(row.scopes),
            "created_at": row.created_at, "revoked_at": row.revoked_at}


async def create(uow: UnitOfWork, name: str, scopes: list[str]) -> dict[str, Any]:
    for scope in scopes:
        checked(refs.check_scope, scope)
    token = new_token()
    now = utcnow()
    kept = sorted(set(scopes))
    token_id = await repository.insert_token(uow.conn, name, token_hash(token), kept, now)
    body = _public(TokenRow(token_id, name, kept, now, None))
    del body["revoked_at"]
    body["token"] = token
    return body


async def list_tokens(conn: ReadConn, prefix: str = "", active: bool = False
                      ) -> list[dict[str, Any]]:
    return [_public(r) for r in await repository.list_tokens(conn, prefix, active)]


async def revoke(uow: UnitOfWork, token_id: int) -> None:
    if not await repository.revoke(uow.conn, token_id, utcnow()) and not (
        await repository.exists(uow.conn, token_id)
    ):
        raise NotFound(f"no token with id {token_id}")


async def principal_of(db: Database, digest: str) -> Principal | None:
    """The principal of an active token's hash; None for an unknown or revoked one."""
    async with db.read() as conn:
        row = await repository.find_active(conn, digest)
    return Principal(row[0], frozenset(row[1])) if row is not None else None
