"""SQL for serving profiles and verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import BigInteger, String, Table, bindparam, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import BaseLLM, ServingProfile, Verdict

PROFILES = cast(Table, ServingProfile.__table__)
VERDICTS = cast(Table, Verdict.__table__)
# The columns of a ProfileRow, in its order (other statements select them too).
PROFILE_COLUMNS = (PROFILES.c.id, PROFILES.c.name, PROFILES.c.base_model_id, PROFILES.c.engine,
                   PROFILES.c.max_lora_rank, PROFILES.c.max_loras,
                   PROFILES.c.supported_modules, PROFILES.c.generation, PROFILES.c.updated_at,
                   PROFILES.c.require_signatures)


@dataclass(frozen=True)
class ProfileRow:
    id: int
    name: str
    base_model_id: int
    engine: str
    max_lora_rank: int
    max_loras: int | None
    supported_modules: list[str] | None
    generation: int
    updated_at: datetime | None
    require_signatures: bool = False

    @classmethod
    def of(cls, row: Any) -> ProfileRow:
        return cls(int(row[0]), row[1], int(row[2]), row[3], int(row[4]), row[5],
                   json_value(row[6]), int(row[7]), datetime_value(row[8]), bool(row[9]))


_GET = Prepared(select(*PROFILE_COLUMNS).where(
    PROFILES.c.name == bindparam("name", type_=String)))
_ALL = Prepared(select(*PROFILE_COLUMNS, BaseLLM.name, BaseLLM.revision)
                .join(BaseLLM, BaseLLM.id == PROFILES.c.base_model_id)
                .order_by(PROFILES.c.name))
_OF_BASE = Prepared(select(*PROFILE_COLUMNS).where(
    PROFILES.c.base_model_id == bindparam("base_model_id", type_=BigInteger))
    .order_by(PROFILES.c.name))
_INSERT = insert(PROFILES).returning(PROFILES.c.id)
_INSERT_VERDICTS = insert(VERDICTS)


async def get(conn: ReadConn, name: str) -> ProfileRow | None:
    row = await _GET.first(conn, name=name)
    return ProfileRow.of(row) if row is not None else None


async def list_all(conn: ReadConn) -> list[tuple[ProfileRow, str]]:
    """Every profile with its base's ``name@revision``, by name."""
    return [(ProfileRow.of(r), f"{r[10]}@{r[11]}") for r in await _ALL.all(conn)]


async def of_base(conn: ReadConn, base_model_id: int) -> list[ProfileRow]:
    """The profiles declared for a base revision, by name."""
    return [ProfileRow.of(r) for r in await _OF_BASE.all(conn, base_model_id=base_model_id)]


async def insert_profile(conn: AsyncConnection, values: dict[str, Any]) -> int:
    return int((await conn.execute(_INSERT, values)).scalar_one())


async def update_profile(conn: AsyncConnection, profile_id: int, values: dict[str, Any]) -> None:
    await conn.execute(update(PROFILES).where(PROFILES.c.id == profile_id).values(**values))


def verdict_row(version_id: int, profile: ProfileRow, compatible: bool,
                reasons: list[dict[str, str]], now: datetime) -> dict[str, Any]:
    """A verdicts row: the judgement of the version under the profile's generation."""
    return {"version_id": version_id, "profile_id": profile.id,
            "profile_generation": profile.generation, "compatible": compatible,
            "reasons": reasons, "computed_at": now}


async def insert_verdicts(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    """One statement for all rows (executemany when there are several)."""
    if rows:
        await conn.execute(_INSERT_VERDICTS, rows[0] if len(rows) == 1 else rows)


async def store_verdict(conn: AsyncConnection, row: dict[str, Any]) -> None:
    """Replace the verdict for the row's (version, profile)."""
    await conn.execute(delete(VERDICTS).where(VERDICTS.c.version_id == row["version_id"],
                                              VERDICTS.c.profile_id == row["profile_id"]))
    await insert_verdicts(conn, [row])
