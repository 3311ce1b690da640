"""Resolve ``ns/name@ref`` for a serving profile; verdicts missing or stale are computed once."""

from __future__ import annotations

from typing import Any

from mol_catalog.auth import Principal
from mol_catalog.db import Database
from mol_catalog.errors import BadRequest, NotFound
from mol_catalog.profiles import repository as profiles_repo
from mol_catalog.profiles import service as profiles
from mol_catalog.resolve import repository
from mol_platform.contract.refs import AdapterRef, RefError


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
            "verdict": verdict, "signature": row["signature"], "signed_by": row["signed_by"],
            "signer_key": row["signer_key"],
            "signer_revoked": row["signer_revoked_at"] is not None,
            "signature_required": row["require_signatures"]}


async def _compute_verdict(db: Database, version_id: int, profile_name: str) -> dict[str, Any]:
    async with db.unit() as uow:
        profile = await profiles_repo.get(uow.conn, profile_name)
        if profile is None:
            raise NotFound(f"unknown serving profile {profile_name!r}")
        ok, reasons = await profiles.judge_stored(uow, version_id, profile)
    return {"compatible": ok, "reasons": reasons}


async def may_read_blob(db: Database, who: Principal, digest: str) -> bool:
    """Whether ``who`` may read a namespace with a version that uses the blob."""
    if who.can_read():
        return True
    async with db.read() as conn:
        namespaces = await repository.blob_namespaces(conn, digest)
    return any(who.can_read(ns) for ns in namespaces)
