"""Serving profiles and compatibility verdicts per (version, profile)."""

from __future__ import annotations

from typing import Any

from mol_catalog.base_models import repository as base_repo
from mol_catalog.base_models import service as base_service
from mol_catalog.db import ReadConn, UnitOfWork
from mol_catalog.errors import NotFound
from mol_catalog.models import utcnow
from mol_catalog.profiles import repository
from mol_catalog.profiles.repository import ProfileRow
from mol_catalog.profiles.schemas import ProfilePut
from mol_catalog.util import valid_name
from mol_platform.contract.compat import (
    AdapterInfo,
    BaseShapes,
    ServingProfileSpec,
    check_base,
    check_profile,
)
from mol_platform.contract.safetensors_header import TensorInfo


def record(row: ProfileRow, base: str) -> dict[str, Any]:
    return {"name": row.name, "base_model": base, "engine": row.engine,
            "max_lora_rank": row.max_lora_rank, "max_loras": row.max_loras,
            "supported_modules": row.supported_modules,
            "require_signatures": row.require_signatures, "generation": row.generation,
            "updated_at": row.updated_at}


def adapter_info(adapter_config: dict[str, Any], tensors: dict[str, Any]) -> AdapterInfo:
    """Rebuild the adapter's facts from what the version row keeps (config + shapes)."""
    header = {name: TensorInfo(name, "F32", tuple(shape), (0, 0))
              for name, shape in tensors.items()}
    return AdapterInfo.from_files(adapter_config, header)


def judge(info: AdapterInfo, profile: ProfileRow, version_base_id: int,
          profile_base: BaseShapes | None) -> tuple[bool, list[dict[str, str]]]:
    """The verdict (the one place one is made, at publish and on resolve); the base is
    re-checked when the profile serves another base revision (``profile_base``)."""
    modules = tuple(profile.supported_modules) if profile.supported_modules is not None else None
    spec = ServingProfileSpec(name=profile.name, max_lora_rank=profile.max_lora_rank,
                              supported_modules=modules)
    reasons = []
    if profile.base_model_id != version_base_id and profile_base is not None:
        reasons.extend(check_base(info, profile_base))
    reasons.extend(check_profile(info, spec))
    return not reasons, [{"code": r.code, "message": r.message} for r in reasons]


async def judge_stored(uow: UnitOfWork, version_id: int,
                       profile: ProfileRow) -> tuple[bool, list[dict[str, str]]]:
    """Judge a stored version under ``profile`` from what its row keeps and store the
    verdict (a profile new or changed since the version was published)."""
    from mol_catalog.resolve import repository as resolve_repo

    facts = await resolve_repo.version_facts(uow.conn, version_id)
    if facts is None:
        raise NotFound(f"version id {version_id} is gone")
    base_model_id, adapter_config, tensors = facts
    profile_base = None
    if profile.base_model_id != base_model_id:
        base_row = await base_repo.get_by_id(uow.conn, profile.base_model_id)
        assert base_row is not None
        profile_base = base_service.shapes_of(base_row)
    ok, reasons = judge(adapter_info(adapter_config, tensors), profile, base_model_id,
                        profile_base)
    await repository.store_verdict(uow.conn, repository.verdict_row(
        version_id, profile, ok, reasons, utcnow()))
    return ok, reasons


async def put(uow: UnitOfWork, name: str, body: ProfilePut) -> tuple[dict[str, Any], bool]:
    valid_name(name, "serving profile name")
    base = await base_service.find(uow.conn, body.base_model)
    row = await repository.get(uow.conn, name)
    values: dict[str, Any] = {"base_model_id": base.id, "engine": body.engine,
                              "max_lora_rank": body.max_lora_rank, "max_loras": body.max_loras,
                              "supported_modules": body.supported_modules,
                              "require_signatures": body.require_signatures}
    now = utcnow()
    if row is None:
        values.update(name=name, generation=1, updated_at=now)
        profile_id = await repository.insert_profile(uow.conn, values)
        row, created = ProfileRow(id=profile_id, **values), True
    elif any(getattr(row, k) != v for k, v in values.items()):
        values.update(generation=row.generation + 1, updated_at=now)
        await repository.update_profile(uow.conn, row.id, values)
        row, created = ProfileRow(**{**vars(row), **values}), False
    else:
        return record(row, base.ref), False
    uow.emit("profile.set", data=record(row, base.ref))
    return record(row, base.ref), created


async def get(conn: ReadConn, name: str) -> dict[str, Any]:
    valid_name(name, "serving profile name")
    row = await repository.get(conn, name)
    if row is None:
        raise NotFound(f"unknown serving profile {name!r}")
    return record(row, await base_repo.base_ref(conn, row.base_model_id))


async def list_profiles(conn: ReadConn) -> list[dict[str, Any]]:
    return [record(p, base) for p, base in await repository.list_all(conn)]
