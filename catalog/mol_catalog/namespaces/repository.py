"""SQL of namespace policies and alias bindings."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import String, Table, bindparam, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import AliasBinding, NamespacePolicy

POLICIES = cast(Table, NamespacePolicy.__table__)
BINDINGS = cast(Table, AliasBinding.__table__)

_POLICY = Prepared(select(NamespacePolicy.protected_aliases, NamespacePolicy.updated_by,
                          NamespacePolicy.updated_at, NamespacePolicy.required_evals)
                   .where(NamespacePolicy.namespace == bindparam("namespace", type_=String)))
_UPDATE_POLICY = update(POLICIES).where(POLICIES.c.namespace == bindparam("b_namespace"))
_UPDATE_BINDING = update(BINDINGS).where(BINDINGS.c.adapter == bindparam("b_adapter"),
                                         BINDINGS.c.alias == bindparam("b_alias"),
                                         BINDINGS.c.profile == bindparam("b_profile"))


async def policy(conn: ReadConn, namespace: str,
                 ) -> tuple[list[str], str | None, datetime | None, list[str]] | None:
    """(protected aliases, updated_by, updated_at, required eval suites), None when the
    namespace has no policy."""
    r = await _POLICY.first(conn, namespace=namespace)
    if r is None:
        return None
    return (list(json_value(r[0]) or []), r[1], datetime_value(r[2]),
            list(json_value(r[3]) or []))


async def set_policy(conn: AsyncConnection, namespace: str, protected: list[str],
                     who: str | None, now: datetime, required_evals: list[str]) -> None:
    values: dict[str, Any] = {"protected_aliases": protected, "updated_by": who,
                              "updated_at": now, "required_evals": required_evals}
    result = await conn.execute(_UPDATE_POLICY, {"b_namespace": namespace, **values})
    if result.rowcount == 0:
        await conn.execute(insert(POLICIES), {"namespace": namespace, **values})


async def bound_profiles(conn: AsyncConnection, adapter: str, alias: str,
                         since: datetime) -> list[str]:
    """The profiles ``adapter@alias`` was resolved under at or after ``since`` (a Core
    statement: the timestamp is bound as the column's type on both backends)."""
    rows = await conn.execute(
        select(BINDINGS.c.profile).where(BINDINGS.c.adapter == adapter,
                                         BINDINGS.c.alias == alias,
                                         BINDINGS.c.last_seen >= since)
        .order_by(BINDINGS.c.profile))
    return [r[0] for r in rows]


async def record_binding(conn: AsyncConnection, adapter: str, alias: str, profile: str,
                         now: datetime) -> None:
    """Upsert one binding's ``last_seen`` (a concurrent insert makes the caller retry)."""
    result = await conn.execute(_UPDATE_BINDING, {"b_adapter": adapter, "b_alias": alias,
                                                  "b_profile": profile, "last_seen": now})
    if result.rowcount == 0:
        await conn.execute(insert(BINDINGS), {"adapter": adapter, "alias": alias,
                                              "profile": profile, "last_seen": now})


async def forget_bindings(conn: AsyncConnection, adapter: str, alias: str,
                          before: datetime) -> None:
    """Drop the alias's bindings not seen since ``before`` (past the retention window)."""
    await conn.execute(delete(BINDINGS).where(BINDINGS.c.adapter == adapter,
                                              BINDINGS.c.alias == alias,
                                              BINDINGS.c.last_seen < before))
