"""The resolve query: one indexed statement from ``ns/name@ref`` to version, files, verdict."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Integer, String, and_, bindparam, select
from sqlalchemy.orm import aliased

from mol_catalog.db import Prepared, ReadConn, json_value
from mol_catalog.models import (
    Adapter,
    Alias,
    BaseLLM,
    Namespace,
    ServingProfile,
    SharedDoc,
    SigningKey,
    Verdict,
    Version,
    VersionBlob,
)

RESOLVE_COLUMNS = ("id", "number", "digest", "status", "yank_reason", "files", "base_model_id",
                   "base_name", "revision", "signature", "signed_by", "signer_key",
                   "signer_revoked_at", "profile_id", "require_signatures",
                   "profile_generation", "compatible", "reasons", "verdict_generation")


def _resolve_statement(kind: str, profile: bool) -> Prepared:
    """One indexed statement per ref kind (alias, number, digest, latest) x profile or not."""
    cols: list[Any] = [Version.id, Version.number, Version.digest, Version.status,
                       Version.yank_reason, Version.files, Version.base_model_id,
                       BaseLLM.name.label("base_name"), BaseLLM.revision,
                       Version.signature, Version.signed_by,
                       SigningKey.public_key.label("signer_key"),
                       SigningKey.revoked_at.label("signer_revoked_at")]
    if profile:
        cols += [ServingProfile.id.label("profile_id"),
                 ServingProfile.require_signatures,
                 ServingProfile.generation.label("profile_generation"),
                 Verdict.compatible, Verdict.reasons,
                 Verdict.profile_generation.label("verdict_generation")]
    stmt = select(*cols).select_from(Adapter)
    if kind == "alias":
        stmt = stmt.join(Alias, and_(Alias.adapter_id == Adapter.id,
                                     Alias.name == bindparam("ref", type_=String))).join(
            Version, and_(Version.adapter_id == Adapter.id, Version.number == Alias.version))
    elif kind == "number":
        stmt = stmt.join(Version, and_(Version.adapter_id == Adapter.id,
                                       Version.number == bindparam("ref", type_=Integer)))
    elif kind == "digest":
        stmt = stmt.join(Version, and_(Version.adapter_id == Adapter.id,
                                       Version.digest == bindparam("ref", type_=String)))
    else:
        stmt = stmt.join(Version, and_(Version.adapter_id == Adapter.id,
                                       Version.number == Adapter.latest_version))
    stmt = stmt.join(BaseLLM, BaseLLM.id == Version.base_model_id).outerjoin(
        SigningKey, and_(SigningKey.namespace_id == Adapter.namespace_id,
                         SigningKey.key_id == Version.signed_by))
    if profile:
        stmt = stmt.outerjoin(
            ServingProfile, ServingProfile.name == bindparam("profile", type_=String)
        ).outerjoin(Verdict, and_(Verdict.version_id == Version.id,
                                  Verdict.profile_id == ServingProfile.id))
    return Prepared(stmt.where(Adapter.full_name == bindparam("full_name", type_=String)))


_STATEMENTS = {(kind, profile): _resolve_statement(kind, profile)
               for kind in ("alias", "number", "digest", "latest") for profile in (False, True)}


async def resolve(conn: ReadConn, full_name: str, *, number: int | None = None,
                  digest: str | None = None, alias: str | None = None,
                  profile: str | None = None) -> dict[str, Any] | None:
    """Exactly one of number/digest/alias, or none of them for ``latest``; a dict of
    RESOLVE_COLUMNS (the profile's columns None without a profile) or None."""
    params: dict[str, Any] = {"full_name": full_name}
    if alias is not None:
        kind, params["ref"] = "alias", alias
    elif number is not None:
        kind, params["ref"] = "number", number
    elif digest is not None:
        kind, params["ref"] = "digest", digest
    else:
        kind = "latest"
    if profile is not None:
        params["profile"] = profile
    row = await _STATEMENTS[kind, profile is not None].first(conn, **params)
    if row is None:
        return None
    out = dict(zip(RESOLVE_COLUMNS, row, strict=False))
    out["files"] = json_value(out["files"])
    if profile is not None:
        if out["compatible"] is not None:
            out["compatible"] = bool(out["compatible"])
        out["reasons"] = json_value(out["reasons"])
        out["require_signatures"] = bool(out["require_signatures"])
    else:
        out.update(profile_id=None, require_signatures=False, profile_generation=None,
                   compatible=None, reasons=None, verdict_generation=None)
    return out


_EXISTS = Prepared(select(Adapter.id).where(Adapter.full_name == bindparam("full_name",
                                                                          type_=String)))


async def adapter_exists(conn: ReadConn, full_name: str) -> bool:
    return await _EXISTS.first(conn, full_name=full_name) is not None


_BLOB_NAMESPACES = Prepared(
    select(Namespace.name).distinct()
    .select_from(VersionBlob)
    .join(Version, Version.id == VersionBlob.version_id)
    .join(Adapter, Adapter.id == Version.adapter_id)
    .join(Namespace, Namespace.id == Adapter.namespace_id)
    .where(VersionBlob.digest == bindparam("digest", type_=String)))


async def blob_namespaces(conn: ReadConn, digest: str) -> list[str]:
    """The namespaces whose versions reference the blob."""
    return [r[0] for r in await _BLOB_NAMESPACES.all(conn, digest=digest)]


_CONFIG = aliased(SharedDoc)
_SHAPES = aliased(SharedDoc)
_FACTS = Prepared(select(Version.base_model_id, _CONFIG.body, _SHAPES.body)
                  .join(_CONFIG, _CONFIG.digest == Version.config_digest)
                  .join(_SHAPES, _SHAPES.digest == Version.tensors_digest)
                  .where(Version.id == bindparam("id", type_=BigInteger)))


async def version_facts(conn: ReadConn, version_id: int,
                        ) -> tuple[int, dict[str, Any], dict[str, Any]] | None:
    """(base model id, adapter_config, tensor shapes) of a version: what a verdict needs."""
    row = await _FACTS.first(conn, id=version_id)
    if row is None:
        return None
    return int(row[0]), json_value(row[1]), json_value(row[2])
