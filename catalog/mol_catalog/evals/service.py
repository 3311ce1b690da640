"""Eval reports: attach one to a version, read a version's reports.

:func:`reports_of` is the query other rules build on (e.g. a check before an alias
moves): the reports of one version, by suite. Attaching stores the free-form report in
the blob store first (content-addressed, write-once), then one transaction writes the
row and the ``eval.attached`` event; gc keeps a blob a report references, and a
report whose blob gc removed in between is stored again (``blobs.orphans``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from mol_catalog.adapters import service as adapters
from mol_catalog.blobs import orphans
from mol_catalog.blobs import repository as blobs_repo
from mol_catalog.db import ReadConn, UnitOfWork
from mol_catalog.deps import Catalog
from mol_catalog.errors import Conflict, NotFound, Unavailable
from mol_catalog.evals import repository as repo
from mol_catalog.evals.repository import EvalRow
from mol_catalog.evals.schemas import EvalAttach
from mol_catalog.models import utcnow
from mol_platform.contract.evals import MAX_REPORTS_PER_VERSION

RETRIES = 4  # attempts when gc removes the report blob between its store and the commit


@dataclass(frozen=True)
class StoredReport:
    digest: str
    size: int
    after: int  # the newest blob deletion id seen before the blob was stored


def report_item(full_name: str, number: int, r: EvalRow) -> dict[str, Any]:
    return {"adapter": full_name, "version": number, "suite": r.suite,
            "suite_version": r.suite_version, "metrics": dict(r.metrics),
            "dataset_digest": r.dataset_digest, "judge_model": r.judge_model,
            "report_digest": r.report_digest, "report_size": r.report_size,
            "created_by": r.created_by, "created_at": r.created_at}


async def reports_of(conn: ReadConn, full_name: str, number: int) -> list[EvalRow]:
    """The eval reports of ``full_name`` version ``number``, by suite and suite version;
    NotFound (404) when the adapter or the version does not exist."""
    row = await adapters.get_adapter(conn, full_name)
    v = await adapters.get_version(conn, row, number)
    return await repo.of_version(conn, v.id)


async def report_blob(conn: ReadConn, full_name: str, number: int, suite: str,
                      suite_version: str) -> tuple[str, int]:
    """(digest, size) of a report's free-form blob; NotFound when there is none."""
    row = await adapters.get_adapter(conn, full_name)
    v = await adapters.get_version(conn, row, number)
    found = await repo.one(conn, v.id, suite, suite_version)
    if found is None:
        raise NotFound(f"{full_name} v{number} has no report of suite {suite} "
                       f"version {suite_version}")
    if found.report_digest is None or found.report_size is None:
        raise NotFound(f"the {suite} {suite_version} report of {full_name} v{number} was "
                       "attached without a free-form report")
    return found.report_digest, found.report_size


async def store_report(catalog: Catalog, text: str) -> StoredReport:
    """Write the free-form report to the blob store (before the transaction)."""
    data = text.encode("utf-8")
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    async with catalog.db.read() as conn:
        after = await blobs_repo.deletion_watermark(conn)
    await catalog.blobs.put(digest, data, len(data))
    return StoredReport(digest, len(data), after)


async def attach(uow: UnitOfWork, full_name: str, number: int, body: EvalAttach,
                 stored: StoredReport | None, who: str | None) -> tuple[dict[str, Any], int]:
    """Attach (or replace) the report of ``body.suite`` ``body.suite_version``; returns
    (the stored report, 201 new | 200 replaced or unchanged). The answer's ``replaced``
    says whether an earlier report of that suite version was overwritten."""
    row = await adapters.get_adapter(uow.conn, full_name, lock=uow.postgres)
    v = await adapters.get_version(uow.conn, row, number)
    if v.status == "pending":
        raise Conflict(f"{full_name} v{number} is still being published: try again later")
    values: dict[str, Any] = {
        "metrics": dict(body.metrics), "dataset_digest": body.dataset_digest,
        "judge_model": body.judge_model,
        "report_digest": stored.digest if stored is not None else None,
        "report_size": stored.size if stored is not None else None,
        "created_by": who, "created_at": utcnow()}
    existing = await repo.one(uow.conn, v.id, body.suite, body.suite_version)
    if existing is not None and _same(existing, values):
        return {**report_item(full_name, number, existing), "created": False,
                "replaced": False}, 200
    if existing is None and await repo.count(uow.conn, v.id) >= MAX_REPORTS_PER_VERSION:
        raise Conflict(f"{full_name} v{number} already has {MAX_REPORTS_PER_VERSION} eval "
                       "reports, the most a version holds: replace one (same suite and suite "
                       "version) instead")
    if stored is not None:
        await orphans.guard(uow, [stored.digest], stored.after)
    if existing is None:
        await repo.insert_report(uow.conn, {"version_id": v.id, "suite": body.suite,
                                            "suite_version": body.suite_version, **values})
    else:
        await repo.replace_report(uow.conn, existing.id, values)
    uow.emit("eval.attached", adapter=full_name, version=number, data={
        "suite": body.suite, "suite_version": body.suite_version,
        "metrics": values["metrics"], "report_digest": values["report_digest"],
        "replaced": existing is not None})
    out = EvalRow(0, body.suite, body.suite_version, values["metrics"], body.dataset_digest,
                  body.judge_model, values["report_digest"], values["report_size"], who,
                  values["created_at"])
    return {**report_item(full_name, number, out), "created": existing is None,
            "replaced": existing is not None}, 201 if existing is None else 200


def _same(r: EvalRow, values: dict[str, Any]) -> bool:
    return bool(r.metrics == values["metrics"]
                and r.dataset_digest == values["dataset_digest"]
                and r.judge_model == values["judge_model"]
                and r.report_digest == values["report_digest"])


async def attach_with_blob(catalog: Catalog, full_name: str, number: int, body: EvalAttach,
                           who: str | None) -> tuple[dict[str, Any], int]:
    """Store the report's blob, then attach in one transaction (again when gc removed the
    blob in between, or a concurrent attach of the same suite won the insert)."""
    stored = await store_report(catalog, body.report) if body.report is not None else None
    for attempt in range(RETRIES):
        blob = stored

        async def work(uow: UnitOfWork, blob: StoredReport | None = blob,
                       ) -> tuple[dict[str, Any], int]:
            return await attach(uow, full_name, number, body, blob, who)

        try:
            return await catalog.db.transact(work, attempts=3, pause=0.01)
        except orphans.BlobsGone as gone:
            if stored is None or attempt == RETRIES - 1:
                raise Unavailable(f"gc deleted the report blob {RETRIES} times while it was "
                                  "attached; retry") from gone
            await catalog.blobs.put(stored.digest, (body.report or "").encode("utf-8"),
                                    stored.size)
            stored = StoredReport(stored.digest, stored.size, gone.after)
    raise AssertionError("unreachable")
