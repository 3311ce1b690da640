"""Routing feedback: recording the routers' decisions, labelling them, exporting labels.

A decision is recorded once per (namespace, request id): a router that reports the
same id again (a retried batch under a new id, a client that reuses its x-request-id)
leaves the first record as it was. A label is the expert a person says was right;
the export writes each labelled decision as the JSON line ``mol router train
--prompts`` reads, so the next head learns from real traffic. Nothing here crosses a
namespace: every call names one and the token must hold a scope on it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from mol_catalog.auth import Principal
from mol_catalog.db import Database, ReadConn, UnitOfWork
from mol_catalog.errors import NotFound
from mol_catalog.heads import repository as heads_repo
from mol_catalog.models import utcnow
from mol_catalog.routing import repository as repo
from mol_catalog.routing.repository import DecisionRow
from mol_catalog.routing.schemas import DecisionBatchIn, LabelIn
from mol_catalog.usage.service import BATCH_ID_DAYS, EPOCH, window_start

EXPORT_PAGE = 1000  # labels read per statement while the export streams


async def record(uow: UnitOfWork, who: Principal, batch: DecisionBatchIn) -> dict[str, Any]:
    """Record a batch once: its id is claimed in the same transaction as its decisions.
    The token needs ``usage``/``usage:<ns>`` for every decision's namespace (else 403,
    nothing recorded)."""
    for ns in sorted({d.namespace for d in batch.decisions}):
        who.require_usage(ns)
    now = utcnow()
    if not await repo.claim_batch(uow.conn, batch.batch_id, now):
        return {"batch_id": batch.batch_id, "duplicate": True, "recorded": 0}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for d in batch.decisions:
        # The first of a request id within the batch wins, as it does across batches.
        rows.setdefault((d.namespace, d.request_id), {
            "namespace": d.namespace, "request_id": d.request_id, "deployment": d.deployment,
            "text": d.text, "expert": d.expert, "route": d.route, "head": d.head,
            "candidate_head": d.candidate.head if d.candidate else None,
            "candidate_expert": d.candidate.expert if d.candidate else None,
            # A reporter's clock ahead of ours: it decided now, as far as we know.
            "decided_at": min(d.at, now), "batch_id": batch.batch_id, "received_at": now})
    recorded = await repo.add(uow.conn, list(rows.values()))
    return {"batch_id": batch.batch_id, "duplicate": False, "recorded": recorded}


def _missing(namespace: str, request_id: str) -> NotFound:
    return NotFound(f"no routing decision with request id {request_id!r} is recorded in "
                    f"namespace {namespace!r}: routers record their automatic decisions "
                    "when semantic.recordDecisions is on, and unlabelled ones are kept "
                    "USAGE_RETENTION_DAYS days")


def label_item(r: DecisionRow) -> dict[str, Any]:
    return {"request_id": r.request_id, "namespace": r.namespace,
            "deployment": r.deployment, "text": r.text, "routed": r.expert,
            "expert": r.label_expert, "source": r.label_source, "note": r.label_note,
            "labelled_at": r.labelled_at}


def decision_item(r: DecisionRow) -> dict[str, Any]:
    label = None if r.label_expert is None else {
        "expert": r.label_expert, "source": r.label_source, "note": r.label_note,
        "labelled_at": r.labelled_at}
    return {"request_id": r.request_id, "namespace": r.namespace,
            "deployment": r.deployment, "text": r.text, "expert": r.expert,
            "route": r.route, "head": r.head, "decided_at": r.decided_at, "label": label,
            "candidate": None if r.candidate_head is None else {
                "head": r.candidate_head, "expert": r.candidate_expert}}


def head_label(namespace: str, digest: str, refs: dict[str, str]) -> str:
    """A head as the labels counter names it: ``ns/name@vN`` when the digest is a
    published router head of the namespace, else ``ns/`` and the digest's first 12 hex
    digits. The namespace lives in this value, not in a label of its own: Prometheus
    gives every scraped series the catalog pod's ``namespace``."""
    return f"{namespace}/" + (refs.get(digest) or digest.removeprefix("sha256:")[:12])


@dataclass(frozen=True)
class Labelled:
    """A label's answer, and the (head, expert, result) counts it adds to
    ``mol_catalog_routing_labels_total`` once committed (none unless first labelled)."""

    body: dict[str, Any]
    counts: list[tuple[str, str, str]] = field(default_factory=list)


async def label(uow: UnitOfWork, namespace: str, request_id: str, body: LabelIn
                ) -> Labelled:
    """Say which expert was right for a recorded decision; a new label overwrites the
    last. NotFound (404) when no decision has that id in the namespace. A decision's
    first label is counted per head that picked on it; relabelling is not counted again
    (a counter cannot take the first back; the accuracy endpoint reads the labels as
    they are now)."""
    before = await repo.locked(uow.conn, namespace, request_id)
    if before is None:
        raise _missing(namespace, request_id)
    row = await repo.set_label(uow.conn, namespace, request_id, {
        "label_expert": body.expert, "label_source": body.source, "label_note": body.note,
        "labelled_at": utcnow()})
    if row is None:
        raise _missing(namespace, request_id)
    counts = []
    if before.label_expert is None:
        picks = row.picks()
        refs = await heads_repo.refs(uow.conn, namespace, [d for d, _ in picks])
        counts = [(head_label(namespace, d, refs), body.expert,
                   "correct" if picked == body.expert else "wrong") for d, picked in picks]
    return Labelled(label_item(row), counts)


async def accuracy(conn: ReadConn, namespace: str, deployment: str | None,
                   since: datetime | None) -> dict[str, Any]:
    """Every head that picked on a labelled decision: labelled and correct, in all and
    per right expert, most labelled first; ``ref`` names it when it is published here."""
    heads: dict[str, dict[str, Any]] = {}
    for digest, right, n, correct in await repo.accuracy(conn, namespace, deployment, since):
        h = heads.setdefault(digest, {"head": digest, "ref": None, "labelled": 0,
                                      "correct": 0, "experts": {}})
        h["labelled"] += n
        h["correct"] += correct
        h["experts"][right] = {"labelled": n, "correct": correct}
    refs = await heads_repo.refs(conn, namespace, list(heads))
    for digest, h in heads.items():
        if digest in refs:
            h["ref"] = f"{namespace}/{refs[digest]}"
    return {"namespace": namespace,
            "heads": sorted(heads.values(), key=lambda h: (-h["labelled"], h["head"]))}


async def decision(conn: ReadConn, namespace: str, request_id: str) -> dict[str, Any]:
    row = await repo.one(conn, namespace, request_id)
    if row is None:
        raise _missing(namespace, request_id)
    return decision_item(row)


def export_line(r: DecisionRow) -> str:
    """One label as the line ``mol router train --prompts`` reads. ASCII only: a raw
    U+2028 or U+0085 in a turn would end the line for ``str.splitlines``."""
    return json.dumps({"id": r.request_id, "text": r.text, "expert": r.label_expert,
                       "routed": r.expert, "deployment": r.deployment,
                       "source": r.label_source}, ensure_ascii=True) + "\n"


async def _page(db: Database, namespace: str, deployment: str | None,
                since: datetime | None, after: tuple[Any, int] | None) -> repo.LabelPage:
    async with db.read() as conn:
        return await repo.labels(conn, namespace, deployment=deployment, since=since,
                                 after=after, limit=EXPORT_PAGE)


async def export(db: Database, namespace: str, deployment: str | None,
                 since: datetime | None) -> AsyncIterator[bytes]:
    """The namespace's labels as JSON lines, in labelled order, a page per statement (a
    read connection is held per page, not for the whole download). The first page is
    read before this returns, so an unreachable database is an error answer, not a
    download cut short."""
    page = await _page(db, namespace, deployment, since, None)

    async def lines(page: repo.LabelPage) -> AsyncIterator[bytes]:
        while True:
            if page.rows:
                yield "".join(export_line(r) for r in page.rows).encode("ascii")
            if page.key is None:
                return
            page = await _page(db, namespace, deployment, since, page.key)

    return lines(page)


def prune_before(retention: int, now: datetime) -> datetime:
    """The start of the retention window (UTC midnight of its first day): usage keeps
    the same days."""
    day = EPOCH + timedelta(days=window_start(retention, now))
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


async def prune(uow: UnitOfWork, retention: int) -> dict[str, int]:
    """Drop unlabelled decisions older than the retention window (labelled ones are
    training data and stay) and old batch ids."""
    now = utcnow()
    rows, ids = await repo.prune(uow.conn, prune_before(retention, now),
                                 now - timedelta(days=BATCH_ID_DAYS))
    return {"routing_decisions_pruned": rows, "routing_batches_pruned": ids}
