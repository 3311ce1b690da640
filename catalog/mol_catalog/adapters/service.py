"""Adapters, versions, aliases and yanks: the rules, in one transaction per call."""

from __future__ import annotations

import re
from typing import Any

from mol_catalog.adapters import repository as repo
from mol_catalog.adapters.schemas import PublishRequest
from mol_catalog.db import UnitOfWork
from mol_catalog.errors import BadRequest, Conflict, NotFound
from mol_catalog.models import Adapter, Alias, AliasHistory, Version, utcnow
from mol_catalog.profiles import repository as profiles_repo
from mol_catalog.profiles import service as profiles
from mol_catalog.util import iso
from mol_platform.refs import ALIAS_PATTERN

ALIAS_RE = re.compile(rf"^{ALIAS_PATTERN}$")


def check_alias(name: str) -> str:
    if not ALIAS_RE.match(name):
        raise BadRequest(f"invalid alias {name!r}: lowercase letter first, then letters, digits, "
                         "'-' or '_' (at most 63)")
    if name == "latest":
        raise BadRequest("alias 'latest' is reserved: it always means the newest ready version")
    return name


def adapter_item(row: Adapter, base: str) -> dict[str, Any]:
    namespace, _, name = row.full_name.partition("/")
    return {"adapter": row.full_name, "namespace": namespace, "name": name, "base": base,
            "tags": list(row.tags or []), "labels": dict(row.labels or {}),
            "latest_version": row.latest_version, "updated_at": iso(row.updated_at)}


def version_item(v: Version) -> dict[str, Any]:
    return {"version": v.number, "digest": v.digest, "status": v.status, "rank": v.rank,
            "alpha": v.alpha, "target_modules": list(v.target_modules), "size": v.size,
            "parent": v.parent, "source": v.source, "created_by": v.created_by,
            "created_at": iso(v.created_at), "yank_reason": v.yank_reason}


async def get_adapter(uow: UnitOfWork, full_name: str, lock: bool = False) -> Adapter:
    row = await repo.adapter(uow.session, full_name, lock=lock)
    if row is None:
        raise NotFound(f"unknown adapter {full_name!r}")
    return row


async def get_version(uow: UnitOfWork, row: Adapter, number: int, lock: bool = False) -> Version:
    v = await repo.version_by_number(uow.session, row.id, number, lock=lock)
    if v is None:
        raise NotFound(f"adapter {row.full_name!r} has no version {number}")
    return v


async def stored_verdicts(uow: UnitOfWork, version_id: int) -> dict[str, Any]:
    rows = await repo.verdicts_for_version(uow.session, version_id)
    return {r[0]: {"compatible": r[1], "reasons": r[2]} for r in rows if r[3] == r[4]}


async def publish(uow: UnitOfWork, req: PublishRequest) -> tuple[dict[str, Any], bool]:
    """Insert the version (blobs are already stored). Same content again: the existing one."""
    s = uow.session
    ns_id = await repo.namespace_id(s, req.namespace, create=True)
    assert ns_id is not None
    base_ref = await repo.base_ref(s, req.base_model_id)
    base_name = base_ref.split("@", 1)[0]
    row = await repo.adapter(s, req.full_name, lock=uow.postgres)
    if row is None:
        row = Adapter(namespace_id=ns_id, name=req.name, full_name=req.full_name,
                      base_model_id=req.base_model_id, base_name=base_name, tags=[], labels={},
                      version_count=0)
        await repo.add(s, row)
    digest = req.upload.manifest_digest()
    existing = await repo.version_by_digest(s, row.id, digest)
    if existing is not None:
        return await _published_body(uow, row, existing, created=False), False
    if req.parent is not None and not 1 <= req.parent <= row.version_count:
        raise BadRequest(f"parent version {req.parent} does not exist in {req.full_name!r}")
    number = row.version_count + 1
    files: list[dict[str, Any]] = [{"path": p, "digest": f.digest, "size": f.size}
                                   for p, f in sorted(req.upload.files.items())]
    version = Version(
        adapter_id=row.id, number=number, digest=digest, base_model_id=req.base_model_id,
        rank=req.info.max_rank, alpha=req.info.alpha,
        target_modules=sorted(req.info.target_kinds()),
        status="ready", parent=req.parent, source=req.source,
        size=sum(f["size"] for f in files), files=files, adapter_config=req.config,
        tensors=req.tensors, created_by=req.created_by,
    )
    await repo.add(s, version)
    await repo.add_version_blobs(s, version.id, {str(f["digest"]) for f in files})
    retag = req.tags is not None or row.base_model_id != req.base_model_id
    row.version_count = number
    row.latest_version = number
    row.base_model_id = req.base_model_id
    row.base_name = base_name
    row.updated_at = utcnow()
    if req.tags is not None:
        row.tags = req.tags
    if req.labels is not None:
        row.labels = req.labels
    await s.flush()
    if retag:
        await repo.replace_tags(s, row)
    for profile in await profiles_repo.for_base(s, req.base_model_id):
        ok, reasons = profiles.judge(req.info, profile, req.base_model_id, None)
        await profiles_repo.store_verdict(s, version.id, profile, ok, reasons)
        for r in reasons:
            req.verdict_reasons.setdefault(profile.name, []).append(r["code"])
    uow.emit("version.published", adapter=row.full_name, version=number,
             data={"digest": digest, "base": base_ref})
    if req.alias is not None:
        await _move_alias(uow, row, req.alias, version, req.created_by)
    return await _published_body(uow, row, version, created=True), True


async def _published_body(uow: UnitOfWork, row: Adapter, v: Version,
                          created: bool) -> dict[str, Any]:
    return {"adapter": row.full_name, "version": v.number, "digest": v.digest,
            "created": created, "status": v.status,
            "base": await repo.base_ref(uow.session, v.base_model_id),
            "verdicts": await stored_verdicts(uow, v.id)}


async def _move_alias(uow: UnitOfWork, row: Adapter, name: str, v: Version,
                      who: str | None) -> int | None:
    current = await repo.alias(uow.session, row.id, name)
    previous = current.version if current is not None else None
    if current is None:
        uow.session.add(Alias(adapter_id=row.id, name=name, version=v.number))
    else:
        current.version = v.number
        current.updated_at = utcnow()
    uow.session.add(AliasHistory(adapter_id=row.id, alias=name, version=v.number,
                                 previous=previous, changed_by=who))
    await uow.session.flush()
    uow.emit("alias.moved", adapter=row.full_name, version=v.number, alias=name,
             data={"previous": previous, "digest": v.digest})
    return previous


async def set_alias(uow: UnitOfWork, full_name: str, name: str, number: int,
                    who: str | None) -> dict[str, Any]:
    check_alias(name)
    row = await get_adapter(uow, full_name, lock=uow.postgres)
    v = await get_version(uow, row, number)
    if v.status == "yanked":
        raise Conflict(f"{full_name} v{number} is yanked ({v.yank_reason}): an alias may not "
                       "point at a yanked version")
    previous = await _move_alias(uow, row, name, v, who)
    return {"alias": name, "version": number, "previous": previous}


async def alias_history(uow: UnitOfWork, full_name: str, name: str,
                        limit: int) -> list[dict[str, Any]]:
    row = await get_adapter(uow, full_name)
    items = await repo.alias_history(uow.session, row.id, name, limit)
    if not items and await repo.alias(uow.session, row.id, name) is None:
        raise NotFound(f"adapter {full_name!r} has no alias {name!r}")
    return [{"version": h.version, "previous": h.previous, "changed_by": h.changed_by,
             "changed_at": iso(h.changed_at)} for h in items]


async def yank(uow: UnitOfWork, full_name: str, number: int, reason: str) -> dict[str, Any]:
    row = await get_adapter(uow, full_name, lock=uow.postgres)
    v = await get_version(uow, row, number)
    pointing = await repo.aliases_at(uow.session, row.id, number)
    if pointing:
        raise Conflict(f"{full_name} v{number} is the target of alias(es) "
                       f"{', '.join(pointing)}: move them to another version first")
    if v.status != "yanked":
        v.status = "yanked"
        v.yank_reason = reason
        await uow.session.flush()
        row.latest_version = await repo.newest_ready(uow.session, row.id)
        row.updated_at = utcnow()
        await uow.session.flush()
        uow.emit("version.yanked", adapter=full_name, version=number,
                 data={"reason": reason, "digest": v.digest})
    return {"adapter": full_name, **version_item(v)}


async def describe(uow: UnitOfWork, full_name: str) -> dict[str, Any]:
    row = await get_adapter(uow, full_name)
    item = adapter_item(row, await repo.base_ref(uow.session, row.base_model_id))
    item["aliases"] = await repo.aliases(uow.session, row.id)
    return item


async def versions(uow: UnitOfWork, full_name: str, before: int | None,
                   limit: int) -> tuple[list[dict[str, Any]], int | None]:
    row = await get_adapter(uow, full_name)
    rows = await repo.versions_page(uow.session, row.id, before, limit + 1)
    items = [version_item(v) for v in rows[:limit]]
    more = len(rows) > limit
    return items, (rows[limit - 1].number if more else None)


async def version_detail(uow: UnitOfWork, full_name: str, number: int) -> dict[str, Any]:
    row = await get_adapter(uow, full_name)
    v = await get_version(uow, row, number)
    out = {"adapter": full_name, **version_item(v),
           "base": await repo.base_ref(uow.session, v.base_model_id),
           "files": list(v.files), "verdicts": await stored_verdicts(uow, v.id)}
    return out


async def list_adapters(uow: UnitOfWork, *, base: str | None, tag: str | None, q: str | None,
                        namespaces: set[str] | None, after: int | None,
                        limit: int) -> tuple[list[dict[str, Any]], int | None]:
    base_name = base_id = None
    if base:
        base_name, _, revision = base.partition("@")
        if revision:
            from mol_catalog.base_models import repository as base_repo

            found = await base_repo.get(uow.session, base_name, revision)
            if found is None:
                return [], None
            base_id = found.id
    rows = await repo.list_adapters(uow.session, after=after, limit=limit + 1, tag=tag,
                                    base_name=base_name, base_model_id=base_id, q=q,
                                    namespaces=namespaces)
    items = []
    for r in rows[:limit]:
        namespace, _, name = r.full_name.partition("/")
        items.append({"adapter": r.full_name, "namespace": namespace, "name": name,
                      "base": f"{r.name}@{r.revision}", "tags": list(r.tags or []),
                      "labels": dict(r.labels or {}), "latest_version": r.latest_version,
                      "updated_at": iso(r.updated_at)})
    return items, (rows[limit - 1].id if len(rows) > limit else None)
