"""SQL of eval reports: ``Prepared`` reads, Core writes on a unit's connection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import BigInteger, String, Table, bindparam, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, datetime_value, json_value
from mol_catalog.models import EvalReport

EVAL_REPORTS = cast(Table, EvalReport.__table__)


@dataclass(frozen=True)
class EvalRow:
    """One stored report."""

    id: int
    suite: str
    suite_version: str
    metrics: dict[str, float]
    dataset_digest: str | None
    judge_model: str | None
    report_digest: str | None
    report_size: int | None
    created_by: str | None
    created_at: datetime | None

    @classmethod
    def of(cls, r: Sequence[Any]) -> EvalRow:
        metrics = {str(k): float(v) for k, v in (json_value(r[3]) or {}).items()}
        return cls(int(r[0]), r[1], r[2], metrics, r[4], r[5], r[6],
                   None if r[7] is None else int(r[7]), r[8], datetime_value(r[9]))


_VERSION_ID = bindparam("version_id", type_=BigInteger)
_ROW = select(EvalReport.id, EvalReport.suite, EvalReport.suite_version, EvalReport.metrics,
              EvalReport.dataset_digest, EvalReport.judge_model, EvalReport.report_digest,
              EvalReport.report_size, EvalReport.created_by, EvalReport.created_at)
_OF_VERSION = Prepared(_ROW.where(EvalReport.version_id == _VERSION_ID)
                       .order_by(EvalReport.suite, EvalReport.suite_version))
_ONE = Prepared(_ROW.where(EvalReport.version_id == _VERSION_ID,
                           EvalReport.suite == bindparam("suite", type_=String),
                           EvalReport.suite_version == bindparam("suite_version", type_=String)))
_COUNT = Prepared(select(func.count()).select_from(EVAL_REPORTS)
                  .where(EVAL_REPORTS.c.version_id == _VERSION_ID))
_INSERT = insert(EVAL_REPORTS)
_UPDATE = (update(EVAL_REPORTS).where(EVAL_REPORTS.c.id == bindparam("b_id"))
           .values({c: bindparam(c) for c in ("metrics", "dataset_digest", "judge_model",
                                              "report_digest", "report_size", "created_by",
                                              "created_at")}))


async def of_version(conn: ReadConn, version_id: int) -> list[EvalRow]:
    """Every report of the version, by suite then suite version."""
    return [EvalRow.of(r) for r in await _OF_VERSION.all(conn, version_id=version_id)]


async def one(conn: ReadConn, version_id: int, suite: str, suite_version: str) -> EvalRow | None:
    r = await _ONE.first(conn, version_id=version_id, suite=suite, suite_version=suite_version)
    return EvalRow.of(r) if r is not None else None


async def count(conn: ReadConn, version_id: int) -> int:
    return int((await _COUNT.all(conn, version_id=version_id))[0][0])


async def insert_report(conn: AsyncConnection, values: dict[str, Any]) -> None:
    await conn.execute(_INSERT, values)


async def replace_report(conn: AsyncConnection, report_id: int, values: dict[str, Any]) -> None:
    await conn.execute(_UPDATE, {"b_id": report_id, **values})
