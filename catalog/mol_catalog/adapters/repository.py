"""Reads of one adapter, its versions, aliases and verdicts: ``Prepared`` statements.

Every function takes a read connection (``Database.read()``) or a unit of work's
connection; the listing and its search are in ``listing``, the domain's writes in
``writes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    String,
    bindparam,
    func,
    select,
)

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import (
    Adapter,
    Alias,
    AliasHistory,
    ServingProfile,
    Verdict,
    Version,
)
from mol_platform.contract.refs import MAX_VERSION


@dataclass(frozen=True)
class AdapterRow:
    """What the write paths need of an adapter."""

    id: int
    full_name: str
    base_model_id: int
    base_name: str
    tags: list[str]
    labels: dict[str, str]


@dataclass(frozen=True)
class VersionRow:
    id: int
    number: int
    digest: str
    status: str
    rank: int
    alpha: float
    target_modules: list[str]
    size: int
    parent: int | None
    source: str | None
    created_by: str | None
    created_at: datetime | None
    yank_reason: str | None
    files: list[dict[str, Any]]
    base_model_id: int
    signed_by: str | None = None  # the key id the signature verified with at publish
    signature: str | None = None  # the model-signing bundle (JSON)

    @classmethod
    def of(cls, r: Sequence[Any]) -> VersionRow:
        return cls(int(r[0]), int(r[1]), r[2], r[3], int(r[4]), float(r[5]), json_value(r[6]),
                   int(r[7]), r[8], r[9], r[10], datetime_value(r[11]), r[12],
                   json_value(r[13]), int(r[14]), r[15], r[16])


_FULL_NAME = Adapter.full_name == bindparam("full_name", type_=String)
_ADAPTER_ID = bindparam("adapter_id", type_=BigInteger)
_ADAPTER_ROW = select(Adapter.id, Adapter.full_name, Adapter.base_model_id, Adapter.base_name,
                      Adapter.tags, Adapter.labels).where(_FULL_NAME)
_ADAPTER = Prepared(_ADAPTER_ROW)
# FOR UPDATE on Postgres; SQLite renders none (its writers are serialized by BEGIN IMMEDIATE).
_ADAPTER_LOCKED = Prepared(_ADAPTER_ROW.with_for_update())
_VERSION_ROW = select(Version.id, Version.number, Version.digest, Version.status, Version.rank,
                      Version.alpha, Version.target_modules, Version.size, Version.parent,
                      Version.source, Version.created_by, Version.created_at,
                      Version.yank_reason, Version.files, Version.base_model_id,
                      Version.signed_by, Version.signature)
_VERSION_BY_NUMBER = _VERSION_ROW.where(Version.adapter_id == _ADAPTER_ID,
                                        Version.number == bindparam("number", type_=Integer))
_VERSION = Prepared(_VERSION_BY_NUMBER)
_VERSION_LOCKED = Prepared(_VERSION_BY_NUMBER.with_for_update())
_VERSIONS_PAGE = Prepared(_VERSION_ROW.where(
    Version.adapter_id == _ADAPTER_ID, Version.number < bindparam("before", type_=BigInteger))
    .order_by(Version.number.desc()).limit(bindparam("limit", type_=Integer)))
_NEWEST_READY = Prepared(select(func.max(Version.number)).where(
    Version.adapter_id == _ADAPTER_ID, Version.status == "ready"))
_ALIASES = Prepared(select(Alias.name, Alias.version).where(Alias.adapter_id == _ADAPTER_ID)
                    .order_by(Alias.name))
_ALIAS = Prepared(select(Alias.version).where(Alias.adapter_id == _ADAPTER_ID,
                                              Alias.name == bindparam("name", type_=String)))
_ALIASES_AT = Prepared(select(Alias.name).where(
    Alias.adapter_id == _ADAPTER_ID, Alias.version == bindparam("number", type_=Integer))
    .order_by(Alias.name))
_ALIAS_HISTORY = Prepared(
    select(AliasHistory.version, AliasHistory.previous, AliasHistory.changed_by,
           AliasHistory.changed_at, AliasHistory.forced, AliasHistory.overridden)
    .where(AliasHistory.adapter_id == _ADAPTER_ID,
           AliasHistory.alias == bindparam("name", type_=String))
    .order_by(AliasHistory.id.desc()).limit(bindparam("limit", type_=Integer)))
_VERDICTS = Prepared(
    select(ServingProfile.name, Verdict.compatible, Verdict.reasons)
    .join(ServingProfile, ServingProfile.id == Verdict.profile_id)
    .where(Verdict.version_id == bindparam("version_id", type_=BigInteger),
           Verdict.profile_generation == ServingProfile.generation)
    .order_by(ServingProfile.name))


async def adapter(conn: ReadConn, full_name: str, lock: bool = False) -> AdapterRow | None:
    r = await (_ADAPTER_LOCKED if lock else _ADAPTER).first(conn, full_name=full_name)
    if r is None:
        return None
    return AdapterRow(int(r[0]), r[1], int(r[2]), r[3], json_value(r[4]) or [],
                      json_value(r[5]) or {})


async def version_by_number(conn: ReadConn, adapter_id: int, number: int,
                            lock: bool = False) -> VersionRow | None:
    r = await (_VERSION_LOCKED if lock else _VERSION).first(conn, adapter_id=adapter_id,
                                                            number=number)
    return VersionRow.of(r) if r is not None else None


async def newest_ready(conn: ReadConn, adapter_id: int) -> int | None:
    r = await _NEWEST_READY.first(conn, adapter_id=adapter_id)
    return None if r is None or r[0] is None else int(r[0])


async def aliases(conn: ReadConn, adapter_id: int) -> dict[str, int]:
    return {r[0]: int(r[1]) for r in await _ALIASES.all(conn, adapter_id=adapter_id)}


async def alias(conn: ReadConn, adapter_id: int, name: str) -> int | None:
    """The version the alias points at, None when there is no such alias."""
    r = await _ALIAS.first(conn, adapter_id=adapter_id, name=name)
    return int(r[0]) if r is not None else None


async def aliases_at(conn: ReadConn, adapter_id: int, number: int) -> list[str]:
    return [r[0] for r in await _ALIASES_AT.all(conn, adapter_id=adapter_id, number=number)]


async def alias_history(conn: ReadConn, adapter_id: int, name: str,
                        limit: int,
                        ) -> list[dict[str, Any]]:
    """Moves (version, previous, changed_by, changed_at, forced, overridden), newest
    first; version None: removed."""
    return [{"version": r[0], "previous": r[1], "changed_by": r[2],
             "changed_at": datetime_value(r[3]), "forced": bool(r[4]),
             "overridden": json_value(r[5])}
            for r in await _ALIAS_HISTORY.all(conn, adapter_id=adapter_id, name=name,
                                              limit=limit)]


async def versions_page(conn: ReadConn, adapter_id: int, before: int | None,
                        limit: int) -> list[VersionRow]:
    """Newest first, below ``before`` (a version number) when given."""
    rows = await _VERSIONS_PAGE.all(conn, adapter_id=adapter_id,
                                    before=before if before is not None else MAX_VERSION + 1,
                                    limit=limit)
    return [VersionRow.of(r) for r in rows]


async def verdicts_for_version(conn: ReadConn, version_id: int) -> dict[str, Any]:
    """The version's verdicts that are current (judged at their profile's generation)."""
    return {r[0]: {"compatible": bool(r[1]), "reasons": json_value(r[2])}
            for r in await _VERDICTS.all(conn, version_id=version_id)}
