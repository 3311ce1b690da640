"""SQL for routing feedback: decisions, their labels, the batch ids recorded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    DateTime,
    Integer,
    String,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from mol_catalog.db import Prepared, ReadConn, datetime_value, dialect_insert
from mol_catalog.db import claim_batch as claim_batch_id
from mol_catalog.models import RoutingBatch, RoutingDecision

DECISIONS = cast(Table, RoutingDecision.__table__)
BATCHES = cast(Table, RoutingBatch.__table__)
D = DECISIONS.c
# SQLAlchemy's SQLite DateTime stores naive UTC text in this form; driver SQL compares
# parameters with it as text.
_SQLITE_TS = "%Y-%m-%d %H:%M:%S.%f"


def ts_param(dialect: Dialect, when: datetime) -> Any:
    """A timestamp as driver SQL compares it with a stored one."""
    if dialect.name == "sqlite":
        return when.astimezone(UTC).replace(tzinfo=None).strftime(_SQLITE_TS)
    return when


@dataclass(frozen=True)
class DecisionRow:
    """A stored decision and its label (``label_expert`` None: not labelled)."""

    request_id: str
    namespace: str
    deployment: str
    text: str
    expert: str
    route: str
    head: str | None
    decided_at: datetime | None
    label_expert: str | None
    label_source: str | None
    label_note: str | None
    labelled_at: datetime | None
    candidate_head: str | None = None
    candidate_expert: str | None = None

    @classmethod
    def of(cls, r: Sequence[Any]) -> DecisionRow:
        return cls(r[0], r[1], r[2], r[3], r[4], r[5], r[6], datetime_value(r[7]), r[8],
                   r[9], r[10], datetime_value(r[11]), r[12], r[13])

    def picks(self) -> list[tuple[str, str]]:
        """(head digest, expert) of every trained head that picked on this turn: the
        head that routed it (route ``head``, or ``keywords`` the head's own measured
        keywords settled) and a canary's candidate."""
        out = []
        if self.head is not None and self.route in HEAD_ROUTES:
            out.append((self.head, self.expert))
        if self.candidate_head is not None and self.candidate_expert is not None:
            out.append((self.candidate_head, self.candidate_expert))
        return out


# The routes on which a decision's ``head`` picked the expert (the router sets ``head``
# only when the trained head decided, or its keywords did).
HEAD_ROUTES = ("head", "keywords")
_COLUMNS = (D.request_id, D.namespace, D.deployment, D.text, D.expert, D.route, D.head,
            D.decided_at, D.label_expert, D.label_source, D.label_note, D.labelled_at,
            D.candidate_head, D.candidate_expert)
_NS = bindparam("namespace", type_=String)
_REQUEST_ID = bindparam("request_id", type_=String)
_ONE = Prepared(select(*_COLUMNS).where(D.namespace == _NS, D.request_id == _REQUEST_ID))


async def claim_batch(conn: AsyncConnection, batch_id: str, now: datetime) -> bool:
    """Record the batch id; False when it was recorded before (``db.claim_batch``)."""
    return await claim_batch_id(conn, BATCHES, batch_id, now)


async def add(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> int:
    """Insert decisions, one statement; a (namespace, request id) already stored keeps
    its row. The number inserted."""
    if not rows:
        return 0
    stmt = (dialect_insert(conn)(DECISIONS).values(list(rows))
            .on_conflict_do_nothing(index_elements=["namespace", "request_id"])
            .returning(D.id))
    return len((await conn.execute(stmt)).all())


async def one(conn: ReadConn, namespace: str, request_id: str) -> DecisionRow | None:
    r = await _ONE.first(conn, namespace=namespace, request_id=request_id)
    return DecisionRow.of(r) if r is not None else None


_LOCKED = Prepared(select(*_COLUMNS).where(D.namespace == _NS, D.request_id == _REQUEST_ID)
                  .with_for_update(of=DECISIONS))


async def locked(conn: AsyncConnection, namespace: str, request_id: str) -> DecisionRow | None:
    """The decision as it is before a label changes it (row-locked on Postgres, so two
    first labels at once see one another; SQLite's writers are serialized)."""
    r = await _LOCKED.first(conn, namespace=namespace, request_id=request_id)
    return DecisionRow.of(r) if r is not None else None


async def set_label(conn: AsyncConnection, namespace: str, request_id: str,
                    values: dict[str, Any]) -> DecisionRow | None:
    """Label (or relabel) a decision; None when none has that id in the namespace."""
    stmt = (update(DECISIONS).where(D.namespace == namespace, D.request_id == request_id)
            .values(values).returning(*_COLUMNS))
    r = (await conn.execute(stmt)).first()
    return DecisionRow.of(r) if r is not None else None


@cache
def _labels(deployment: bool, since: bool, after: bool) -> Prepared:
    """A page of a namespace's labelled decisions in labelled order (then id), after the
    key ``(after_at, after_id)`` of the previous page."""
    stmt = (select(*_COLUMNS, D.id)
            .where(D.namespace == _NS, D.labelled_at.is_not(None)))
    if deployment:
        stmt = stmt.where(D.deployment == bindparam("deployment", type_=String))
    if since:
        stmt = stmt.where(D.labelled_at >= bindparam("since", type_=DateTime(timezone=True)))
    if after:
        at = bindparam("after_at", type_=DateTime(timezone=True))
        stmt = stmt.where(or_(D.labelled_at > at, and_(
            D.labelled_at == at, D.id > bindparam("after_id", type_=BigInteger))))
    return Prepared(stmt.order_by(D.labelled_at, D.id)
                    .limit(bindparam("limit", type_=Integer)))


@dataclass(frozen=True)
class LabelPage:
    rows: list[DecisionRow]
    key: tuple[Any, int] | None  # where the next page starts (None: this was the last)


async def labels(conn: ReadConn, namespace: str, *, deployment: str | None,
                 since: datetime | None, after: tuple[Any, int] | None, limit: int
                 ) -> LabelPage:
    """One page of labels; ``after`` is the previous page's ``key``, passed back as the
    driver handed it (the stored value, compared as stored)."""
    params: dict[str, Any] = {"namespace": namespace, "limit": limit}
    if deployment is not None:
        params["deployment"] = deployment
    if since is not None:
        params["since"] = ts_param(conn.dialect, since)
    if after is not None:
        params["after_at"], params["after_id"] = after
    raw = await _labels(deployment is not None, since is not None, after is not None).all(
        conn, **params)
    key = (raw[-1][11], int(raw[-1][len(_COLUMNS)])) if len(raw) == limit else None
    return LabelPage([DecisionRow.of(r) for r in raw], key)


async def prune(conn: AsyncConnection, before: datetime, batches_before: datetime
                ) -> tuple[int, int]:
    """Delete unlabelled decisions made before ``before`` and batch ids received before
    ``batches_before``; (decisions, batch ids) deleted."""
    rows = await conn.execute(delete(DECISIONS).where(D.decided_at < before,
                                                      D.labelled_at.is_(None)))
    ids = await conn.execute(delete(BATCHES).where(BATCHES.c.received_at < batches_before))
    return int(rows.rowcount or 0), int(ids.rowcount or 0)


@cache
def _accuracy(deployment: bool, since: bool) -> Prepared:
    """Per (head digest, right expert): labelled decisions the head picked on, and how
    many of its picks were right. The serving head's picks and the candidates' in one
    UNION ALL, grouped once."""
    def where(stmt: Any) -> Any:
        stmt = stmt.where(D.namespace == _NS, D.labelled_at.is_not(None))
        if deployment:
            stmt = stmt.where(D.deployment == bindparam("deployment", type_=String))
        if since:
            stmt = stmt.where(D.labelled_at >= bindparam("since",
                                                         type_=DateTime(timezone=True)))
        return stmt

    served = where(select(D.head.label("head"), D.expert.label("picked"),
                          D.label_expert.label("right"))
                   .where(D.head.is_not(None), or_(*(D.route == r for r in HEAD_ROUTES))))
    canary = where(select(D.candidate_head, D.candidate_expert, D.label_expert)
                   .where(D.candidate_head.is_not(None), D.candidate_expert.is_not(None)))
    picks = union_all(served, canary).subquery("picks")
    right = case((picks.c.picked == picks.c.right, 1), else_=0)
    return Prepared(select(picks.c.head, picks.c.right, func.count(), func.sum(right))
                    .group_by(picks.c.head, picks.c.right)
                    .order_by(picks.c.head, picks.c.right))


async def accuracy(conn: ReadConn, namespace: str, deployment: str | None,
                   since: datetime | None) -> list[tuple[str, str, int, int]]:
    """(head digest, right expert, labelled, correct) rows, by head then expert."""
    params: dict[str, Any] = {"namespace": namespace}
    if deployment is not None:
        params["deployment"] = deployment
    if since is not None:
        params["since"] = ts_param(conn.dialect, since)
    rows = await _accuracy(deployment is not None, since is not None).all(conn, **params)
    return [(r[0], r[1], int(r[2]), int(r[3] or 0)) for r in rows]
