"""Resolve ``ns/name@ref`` for a serving profile; verdicts missing or stale are computed once."""

from __future__ import annotations

from typing import Any

from mol_catalog import shared_docs
from mol_catalog.base_models import repository as base_repo
from mol_catalog.base_models import service as base_service
from mol_catalog.db import Database
from mol_catalog.errors import BadRequest, NotFound
from mol_catalog.models import Version
from mol_catalog.profiles import repository as profiles_repo
from mol_catalog.profiles import service as profiles
from mol_catalog.resolve import repository
from mol_platform.refs import AdapterRef, RefError


def parse(namespace: str, name_ref: str) -> AdapterRef:
    try:
        return AdapterRef.parse(f"{namespace}/{name_ref}")
    except RefError as exc:
        raise BadRequest(str(exc)) from None


async def resolve(db: Database, ref: AdapterRef, profile: str | None) -> dict[str, Any]:
    """The resolve answer without URLs (the endpoint adds them)."""
    alias = None if ref.immutable or ref.ref == "latest" else ref.ref
    async with db.read() as conn:
        row = await repository.resolve(conn, ref.adapter, number=ref.version,
                                       digest=ref.digest, alias=alias, profile=profile)
        if row is None:
            if not await repository.adapter_exists(conn, ref.adapter):
                raise NotFound(f"unknown adapter {ref.adapter!r}")
            if alias is not None:
                what = f"no alias {alias!r}"
            elif ref.ref == "latest":
                what = "no ready version (every version is yanked)"
            else:
                what = f"no version {ref.ref}"
            raise NotFound(f"{ref.adapter}: {what} (see GET /v1/adapters/{ref.adapter}/versions)")
    verdict = None
    if profile is not None:
        if row["profile_id"] is None:
            raise NotFound(f"unknown serving profile {profile!r}")
        if row["compatible"] is None or row["verdict_generation"] != row["profile_generation"]:
            verdict = await _compute_verdict(db, row["id"], profile)
        else:
            verdict = {"compatible": row["compatible"], "reasons": row["reasons"]}
    return {"adapter": ref.adapter, "version": row["number"], "digest": row["digest"],
            "status": row["status"], "yank_reason": row["yank_reason"],
            "base": f"{row['base_name']}@{row['revision']}", "files": row["files"],
            "verdict": verdict}


async def _compute_verdict(db: Database, version_id: int, profile_name: str) -> dict[str, Any]:
    async with db.unit() as uow:
        version = await uow.session.get(Version, version_id)
        profile = await profiles_repo.get(uow.session, profile_name)
        if version is None or profile is None:
            raise NotFound(f"unknown serving profile {profile_name!r}")
        profile_base = None
        if profile.base_model_id != version.base_model_id:
            base_row = await base_repo.get_by_id(uow.session, profile.base_model_id)
            assert base_row is not None
            profile_base = base_service.shapes_of(base_row)
        docs = await shared_docs.load(uow.session,
                                      (version.config_digest, version.tensors_digest))
        info = profiles.adapter_info(docs[version.config_digest], docs[version.tensors_digest])
        ok, reasons = profiles.judge(info, profile,
                                     version.base_model_id, profile_base)
        await profiles_repo.store_verdict(uow.session, version_id, profile, ok, reasons)
    return {"compatible": ok, "reasons": reasons}
