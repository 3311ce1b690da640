"""Creating, listing and revoking tokens."""

from __future__ import annotations

from typing import Any

from mol_catalog.auth import Principal, new_token, token_hash
from mol_catalog.db import Database, UnitOfWork
from mol_catalog.errors import NotFound
from mol_catalog.models import Token, utcnow
from mol_catalog.tokens import repository
from mol_catalog.util import checked, iso
from mol_platform import refs


def _public(row: Token) -> dict[str, Any]:
    return {"id": row.id, "name": row.name, "scopes": list(row.scopes),
            "created_at": iso(row.created_at), "revoked_at": iso(row.revoked_at)}


async def create(uow: UnitOfWork, name: str, scopes: list[str]) -> dict[str, Any]:
    for scope in scopes:
        checked(refs.check_scope, scope)
    token = new_token()
    row = await repository.insert(uow.session, name, token_hash(token), sorted(set(scopes)))
    body = _public(row)
    del body["revoked_at"]
    body["token"] = token
    return body


async def list_tokens(uow: UnitOfWork) -> list[dict[str, Any]]:
    return [_public(r) for r in await repository.list_all(uow.session)]


async def revoke(uow: UnitOfWork, token_id: int) -> None:
    if not await repository.revoke(uow.session, token_id, utcnow()) and not (
        await repository.exists(uow.session, token_id)
    ):
            raise NotFound(f"no token with id {token_id}")


async def principal_of(db: Database, digest: str) -> Principal | None:
    """The principal of an active token's hash; None for an unknown or revoked one."""
    async with db.unit(write=False) as uow:
        row = await repository.find_active(uow.session, digest)
    return Principal(row.name, frozenset(row.scopes)) if row is not None else None
