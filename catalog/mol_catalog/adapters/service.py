"""Adapters, versions, aliases and yanks: the rules, in one transaction per call."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from mol_catalog.adapters import listing, protection, writes
from mol_catalog.adapters import repository as repo
from mol_catalog.adapters.repository import AdapterRow, VersionRow
from mol_catalog.adapters.schemas import PublishRequest
from mol_catalog.auth import Principal
from mol_catalog.base_models import repository as base_repo
from mol_catalog.blobs import orphans
from mol_catalog.db import ReadConn, UnitOfWork
from mol_catalog.deps import Catalog
from mol_catalog.errors import BadRequest, Conflict, NotFound
from mol_catalog.models import utcnow
from mol_catalog.profiles import repository as profiles_repo
from mol_catalog.profiles import service as profiles
from mol_catalog.profiles.repository import ProfileRow
from mol_catalog.util import checked, clean_text, valid_alias, valid_name
from mol_platform.contract import refs


def version_item(v: VersionRow) -> dict[str, Any]:
    return {"version": v.number, "digest": v.digest, "status": v.status, "rank": v.rank,
            "alpha": v.alpha, "target_modules": list(v.target_modules), "size": v.size,
            "parent": v.parent, "source": v.source, "created_by": v.created_by,
            "created_at": v.created_at, "yank_reason": v.yank_reason,
            "signed": v.signed_by is not None, "signed_by": v.signed_by}


async def get_adapter(conn: ReadConn, full_name: str, lock: bool = False) -> AdapterRow:
    row = await repo.adapter(conn, full_name, lock=lock)
    if row is None:
        raise NotFound(f"unknown adapter {full_name!r}")
    return row


async def get_version(conn: ReadConn, row: AdapterRow, number: int,
                      lock: bool = False) -> VersionRow:
    v = await repo.version_by_number(conn, row.id, number, lock=lock)
    if v is None:
        raise NotFound(f"adapter {row.full_name!r} has no version {number}")
    return v


async def publish(uow: UnitOfWork, req: PublishRequest, base_profiles: list[ProfileRow],
                  namespaces: dict[str, int]) -> tuple[dict[str, Any], bool]:
    """Insert the version (blobs are already stored). Same content again: the existing one.

    ``base_profiles`` are the base revision's profiles, read before the transaction: a profile
    changed since is judged again on resolve (its verdict's generation is stale), a new
    one on its first resolve. ``namespaces`` caches namespace ids (never deleted).

    Core statements on the unit's connection: one SELECT finds the
    adapter (locked on Postgres), a version with the same content and the alias's
    current target; then one INSERT or UPDATE per table (executemany for blobs, tags
    and verdicts). The response is built from what was written, not read back.
    """
    conn = uow.conn
    req.verdict_reasons.clear()
    digest = req.upload.manifest_digest()
    found = await writes.target(conn, req.full_name, digest, req.alias)
    if found is not None and found.existing is not None:
        existing = await repo.version_by_number(conn, found.id, found.existing)
        assert existing is not None
        applied, changed = await _apply_to_existing(uow, req, existing)
        same = await _published_body(conn, req.full_name, existing, created=False)
        refusal = applied.pop("alias_refused", None)
        if refusal is not None:
            applied.pop("alias")  # asked for, not in effect
        return {**same, "applied": applied, "changed": changed,
                "alias_refused": refusal}, False
    # A new version references the blobs: none may have been removed by gc since the
    # publish stored them, and none may be until this commits.
    await orphans.guard(uow, req.upload.digests(), req.blobs_after)
    count = found.version_count if found is not None else 0
    if req.parent is not None and not 1 <= req.parent <= count:
        raise BadRequest(f"parent version {req.parent} does not exist in {req.full_name!r}")
    number = count + 1
    now = utcnow()
    base_name = req.base_ref.split("@", 1)[0]
    changes: dict[str, Any] = {"version_count": number, "latest_version": number,
                               "base_model_id": req.base_model_id, "base_name": base_name,
                               "updated_at": now}
    if req.tags is not None:
        changes["tags"] = req.tags
    if req.labels is not None:
        changes["labels"] = req.labels
    if found is None:
        ns_id = await writes.namespace_id(conn, req.namespace, namespaces)
        adapter_id = await writes.insert_adapter(conn, {
            "namespace_id": ns_id, "name": req.name, "full_name": req.full_name, "tags": [],
            "labels": {}, "created_at": now, **changes})
        if req.tags:
            await writes.set_tags(conn, adapter_id, req.full_name, req.tags, base_name,
                                  req.base_model_id, fresh=True)
    else:
        adapter_id = found.id
        await writes.update_adapter(conn, adapter_id, changes)
        old_tags = list(found.tags or [])
        tags = req.tags if req.tags is not None else old_tags
        if tags != old_tags or found.base_model_id != req.base_model_id:
            await writes.set_tags(conn, adapter_id, req.full_name, tags, base_name,
                                  req.base_model_id, fresh=False)
    files = [{"path": p, "digest": f.digest, "size": f.size}
             for p, f in sorted(req.upload.files.items())]
    version_id = await writes.insert_version(conn, {
        "adapter_id": adapter_id, "number": number, "digest": digest,
        "base_model_id": req.base_model_id, "rank": req.info.max_rank, "alpha": req.info.alpha,
        "target_modules": sorted(req.info.target_kinds()), "status": "ready",
        "parent": req.parent, "source": req.source, "size": sum(f.size for f in
                                                               req.upload.files.values()),
        "files": files, "config_digest": req.config_digest,
        "tensors_digest": req.tensors_digest,
        "created_by": req.created_by, "created_at": now, "signature": req.signature,
        "signed_by": req.signed_by})
    await writes.insert_rows(conn, writes.VERSION_BLOBS, [
        {"digest": d, "version_id": version_id} for d in sorted({f.digest for f in
                                                                 req.upload.files.values()})])
    verdicts = await _judge_new_version(uow, req, base_profiles, version_id, now)
    uow.emit("version.published", adapter=req.full_name, version=number,
             data={"digest": digest, "base": req.base_ref})
    body: dict[str, Any] = {"adapter": req.full_name, "version": number, "digest": digest,
                            "created": True, "status": "ready", "base": req.base_ref,
                            "verdicts": verdicts, "alias_refused": None}
    if req.alias is not None:
        row = AdapterRow(adapter_id, req.full_name, req.base_model_id, base_name, [], {})
        target = protection.MoveTarget(version_id, number, "ready", None)
        previous = found.alias_version if found is not None else None
        body["alias_refused"] = await _publish_alias(uow, req, row, target, digest, previous)
    return body, True


async def _publish_alias(uow: UnitOfWork, req: PublishRequest, row: AdapterRow,
                         target: protection.MoveTarget, digest: str,
                         previous: int | None) -> dict[str, Any] | None:
    """Move the form's alias to the published version unless refused: then the version
    stays stored, the alias where it was, and the answer carries the reasons."""
    assert req.alias is not None
    assert req.bindings_since is not None
    reasons = await _refusals(uow, row, req.alias, target, req.bindings_since)
    decision = protection.decide(reasons, req.force, req.admin)
    if not decision.allowed:
        return {"alias": req.alias, "reasons": reasons}
    await _move_alias(uow, row, req.alias, target, digest, req.created_by, previous, decision)
    return None


async def _refusals(uow: UnitOfWork, row: AdapterRow, alias: str,
                    target: protection.MoveTarget, since: datetime) -> list[dict[str, Any]]:
    policy = await protection.policy_of(uow, row.full_name.split("/", 1)[0])
    facts = await protection.gather(uow, row, alias, target, since, policy)
    return protection.refusals(facts, policy)


async def _judge_new_version(uow: UnitOfWork, req: PublishRequest,
                             base_profiles: list[ProfileRow], version_id: int,
                             now: datetime) -> dict[str, Any]:
    """Verdicts for every profile of the version's base revision, stored in one statement.

    The base itself was checked before the blobs were stored, so only the profile's own
    limits (rank, modules) remain.
    """
    verdicts: dict[str, Any] = {}
    rows = []
    for p in base_profiles:
        ok, reasons = profiles.judge(req.info, p, req.base_model_id, None)
        rows.append(profiles_repo.verdict_row(version_id, p, ok, reasons, now))
        verdicts[p.name] = {"compatible": ok, "reasons": reasons}
        if reasons:
            req.verdict_reasons[p.name] = [r["code"] for r in reasons]
    await profiles_repo.insert_verdicts(uow.conn, rows)
    return verdicts


async def _apply_to_existing(uow: UnitOfWork, req: PublishRequest,
                             v: VersionRow) -> tuple[dict[str, Any], list[str]]:
    """Same content again: the version stays, the form's alias, tags and labels apply
    (a pipeline re-running "publish and tag prod" gets prod). Returns (what the form
    asked for, now in effect; which of them changed anything)."""
    applied: dict[str, Any] = {}
    changed: list[str] = []
    if req.alias is None and req.tags is None and req.labels is None:
        return applied, changed
    row = await get_adapter(uow.conn, req.full_name)  # locked by the publish's first statement
    values: dict[str, Any] = {}
    if req.alias is not None:
        applied["alias"] = req.alias
        current = await repo.alias(uow.conn, row.id, req.alias)
        if current != v.number:
            refusal = await _publish_alias(uow, req, row, protection.MoveTarget.of(v),
                                           v.digest, current)
            if refusal is not None:
                applied["alias_refused"] = refusal
            else:
                changed.append("alias")
    if req.tags is not None:
        applied["tags"] = req.tags
        if row.tags != req.tags:
            values["tags"] = req.tags
            await writes.set_tags(uow.conn, row.id, row.full_name, req.tags, row.base_name,
                                  row.base_model_id, fresh=False)
            changed.append("tags")
    if req.labels is not None:
        applied["labels"] = req.labels
        if row.labels != req.labels:
            values["labels"] = req.labels
            changed.append("labels")
    if changed:
        await writes.update_adapter(uow.conn, row.id, {**values, "updated_at": utcnow()})
    return applied, changed


async def _published_body(conn: ReadConn, full_name: str, v: VersionRow,
                          created: bool) -> dict[str, Any]:
    return {"adapter": full_name, "version": v.number, "digest": v.digest,
            "created": created, "status": v.status,
            "base": await base_repo.base_ref(conn, v.base_model_id),
            "verdicts": await repo.verdicts_for_version(conn, v.id)}


async def _move_alias(uow: UnitOfWork, row: AdapterRow, name: str,
                      v: protection.MoveTarget, digest: str, who: str | None,
                      previous: int | None, decision: protection.Decision) -> None:
    """Point the alias at ``v`` (``previous``: where it points now, None when new); a
    forced move records who forced it past which reasons, in the history and the event."""
    overridden = decision.reasons if decision.forced else None
    await writes.move_alias(uow.conn, row.id, name, v.number, previous, who, utcnow(),
                            overridden)
    data: dict[str, Any] = {"previous": previous, "digest": digest, "by": who}
    if overridden:
        data.update(forced=True, overridden=overridden)
    uow.emit("alias.moved", adapter=row.full_name, version=v.number, alias=name, data=data)


async def set_alias(uow: UnitOfWork, full_name: str, name: str, number: int,
                    who: Principal, *, force: bool = False,
                    bindings_since: datetime) -> dict[str, Any]:
    """Move an alias; 409 with the reasons when the namespace's rules refuse it (see
    ``protection``), unless an admin forces it."""
    valid_alias(name)
    row = await get_adapter(uow.conn, full_name, lock=uow.postgres)
    v = await get_version(uow.conn, row, number)
    target = protection.MoveTarget.of(v)
    reasons = await _refusals(uow, row, name, target, bindings_since)
    decision = protection.decide(reasons, force, who.admin)
    if not decision.allowed:
        raise protection.refused(full_name, name, number, reasons)
    previous = await repo.alias(uow.conn, row.id, name)
    await _move_alias(uow, row, name, target, v.digest, who.name, previous, decision)
    return {"alias": name, "version": number, "previous": previous,
            "forced": decision.forced, "overridden": reasons if decision.forced else None}


async def alias_history(conn: ReadConn, full_name: str, name: str,
                        limit: int) -> list[dict[str, Any]]:
    row = await get_adapter(conn, full_name)
    items = await repo.alias_history(conn, row.id, name, limit)
    if not items and await repo.alias(conn, row.id, name) is None:
        raise NotFound(f"adapter {full_name!r} has no alias {name!r}")
    return items


async def yank(uow: UnitOfWork, full_name: str, number: int, reason: str) -> dict[str, Any]:
    row = await get_adapter(uow.conn, full_name, lock=uow.postgres)
    v = await get_version(uow.conn, row, number)
    pointing = await repo.aliases_at(uow.conn, row.id, number)
    if pointing:
        raise Conflict(f"{full_name} v{number} is the target of alias(es) "
                       f"{', '.join(pointing)}: move them to another version first")
    if v.status != "yanked":
        v = dataclasses.replace(v, status="yanked", yank_reason=reason)
        await writes.update_version(uow.conn, v.id, {"status": v.status, "yank_reason": reason})
        await writes.update_adapter(uow.conn, row.id, {
            "latest_version": await repo.newest_ready(uow.conn, row.id),
            "updated_at": utcnow()})
        uow.emit("version.yanked", adapter=full_name, version=number,
                 data={"reason": reason, "digest": v.digest})
    return {"adapter": full_name, **version_item(v)}


async def describe(conn: ReadConn, full_name: str) -> dict[str, Any]:
    item = await listing.adapter_item(conn, full_name)
    if item is None:
        raise NotFound(f"unknown adapter {full_name!r}")
    adapter_id, body = item
    body["aliases"] = await repo.aliases(conn, adapter_id)
    return body


async def versions(conn: ReadConn, full_name: str, before: int | None,
                   limit: int) -> tuple[list[dict[str, Any]], int | None]:
    row = await get_adapter(conn, full_name)
    rows = await repo.versions_page(conn, row.id, before, limit + 1)
    items = [version_item(v) for v in rows[:limit]]
    more = len(rows) > limit
    return items, (rows[limit - 1].number if more else None)


async def version_detail(conn: ReadConn, full_name: str, number: int) -> dict[str, Any]:
    row = await get_adapter(conn, full_name)
    v = await get_version(conn, row, number)
    return {"adapter": full_name, **version_item(v),
            "base": await base_repo.base_ref(conn, v.base_model_id),
            "files": list(v.files), "signature": v.signature,
            "verdicts": await repo.verdicts_for_version(conn, v.id)}


async def list_adapters(conn: ReadConn, *, base: str | None, tag: str | None,
                        q: str | None, namespaces: set[str] | None, after: int | None,
                        limit: int, window: int = listing.SEARCH_WINDOW, rare: bool = False,
                        ) -> tuple[list[dict[str, Any]], int | None]:
    """One page of the listing on a read connection (single statements, no transaction).

    Items are for orjson: ``updated_at`` stays a datetime (UTC; naive from SQLite), tags
    and labels are the stored JSON text as ``orjson.Fragment``.
    """
    base_name = base_id = None
    if base:
        base_name, _, revision = base.partition("@")
        if revision:
            from mol_catalog.base_models import repository as base_repo

            base_id = await base_repo.id_of(conn, base_name, revision)
            if base_id is None:
                return [], None
    rows = await listing.list_adapters(conn, after=after, limit=limit + 1, tag=tag,
                                    base_name=base_name, base_model_id=base_id, q=q,
                                    namespaces=namespaces, window=window, rare=rare)
    items = [item for _, item in rows[:limit]]
    return items, (rows[limit - 1][0] if len(rows) > limit else None)


async def search(catalog: Catalog, who: Principal, *, base: str | None, tag: str | None,
                 q: str | None, namespace: str | None, after: int | None,
                 limit: int) -> tuple[list[dict[str, Any]], int | None]:
    """One page of the listing as ``who`` may see it (their namespaces only), filters
    checked (400 on bad ones); the REST listing and the console's search both use it.
    A text search picks its first step from the name sample (``catalog.names``)."""
    namespaces = who.readable_namespaces()
    if namespace is not None:
        valid_name(namespace, "namespace")
        who.require_read(namespace)
        namespaces = {namespace}
    clean_text(base, "base")
    clean_text(q, "q")
    if tag is not None:
        checked(refs.check_tag, tag)
    searching = bool(q)
    rare = False
    if searching:
        await catalog.names.ensure(catalog.db)
        rare = catalog.names.rare(str(q).lower(), catalog.settings.search_window, limit + 1,
                                  listing.scanned_filter(tag, base, namespaces))
    async with catalog.db.read(generic_plans=searching) as conn:
        return await list_adapters(conn, base=base, tag=tag, q=q, namespaces=namespaces,
                                   after=after, limit=limit,
                                   window=catalog.settings.search_window, rare=rare)


async def delete_version(uow: UnitOfWork, full_name: str, number: int,
                         who: str | None) -> dict[str, Any]:
    """Delete one version for good, in one transaction: its aliases go (each removal in
    the alias history), ``latest`` moves back, a ``version.deleted`` event is recorded.
    Its blobs become unreferenced (unless another version shares them) and go at the
    next gc; the number is never given again (``version_count`` stays)."""
    row = await get_adapter(uow.conn, full_name, lock=uow.postgres)
    v = await get_version(uow.conn, row, number, lock=uow.postgres)
    if v.status == "pending":
        raise Conflict(f"{full_name} v{number} is still being published: try again later")
    removed = await repo.aliases_at(uow.conn, row.id, number)
    await writes.delete_version(uow.conn, row.id, v.id, number)
    now = utcnow()
    await writes.insert_rows(uow.conn, writes.ALIAS_HISTORY, [
        {"adapter_id": row.id, "alias": name, "version": None, "previous": number,
         "changed_by": who, "changed_at": now} for name in removed])
    latest = await repo.newest_ready(uow.conn, row.id)
    await writes.update_adapter(uow.conn, row.id, {"latest_version": latest, "updated_at": now})
    uow.emit("version.deleted", adapter=full_name, version=number,
             data={"digest": v.digest, "aliases_removed": removed, "by": who})
    return {"adapter": full_name, "version": number, "digest": v.digest,
            "aliases_removed": removed, "latest_version": latest}
