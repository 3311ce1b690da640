"""Serving profiles and compatibility verdicts per (version, profile)."""

from __future__ import annotations

from typing import Any

from mol_catalog.base_models import repository as base_repo
from mol_catalog.base_models import service as base_service
from mol_catalog.db import UnitOfWork
from mol_catalog.errors import NotFound
from mol_catalog.models import ServingProfile, utcnow
from mol_catalog.profiles import repository
from mol_catalog.profiles.schemas import ProfilePut
from mol_catalog.util import iso, valid_name
from mol_platform.compat import (
    AdapterInfo,
    BaseShapes,
    ServingProfileSpec,
    check_base,
    check_profile,
)
from mol_platform.safetensors_header import TensorInfo


def record(row: ServingProfile, base: str) -> dict[str, Any]:
    return {"name": row.name, "base_model": base, "engine": row.engine,
            "max_lora_rank": row.max_lora_rank, "max_loras": row.max_loras,
            "supported_modules": row.supported_modules, "generation": row.generation,
            "updated_at": iso(row.updated_at)}


def spec_of(row: ServingProfile) -> ServingProfileSpec:
    modules = tuple(row.supported_modules) if row.supported_modules is not None else None
    return ServingProfileSpec(name=row.name, max_lora_rank=row.max_lora_rank,
                              supported_modules=modules)


def adapter_info(config: dict[str, Any], tensors: dict[str, Any]) -> AdapterInfo:
    """Rebuild the adapter's facts from what its version keeps (config + shapes)."""
    header = {name: TensorInfo(name, "F32", tuple(shape), (0, 0))
              for name, shape in tensors.items()}
    return AdapterInfo.from_files(config, header)


def judge(info: AdapterInfo, profile: ServingProfile, version_base_id: int,
          profile_base: BaseShapes | None) -> tuple[bool, list[dict[str, str]]]:
    """The verdict; the base is re-checked when the profile serves another base revision."""
    reasons = []
    if profile.base_model_id != version_base_id and profile_base is not None:
        reasons.extend(check_base(info, profile_base))
    reasons.extend(check_profile(info, spec_of(profile)))
    return not reasons, [{"code": r.code, "message": r.message} for r in reasons]


async def put(uow: UnitOfWork, name: str, body: ProfilePut) -> tuple[dict[str, Any], bool]:
    valid_name(name, "serving profile name")
    base = await base_service.find(uow, body.base_model)
    base_ref = f"{base.name}@{base.revision}"
    row = await repository.get(uow.session, name)
    values = {"base_model_id": base.id, "engine": body.engine,
              "max_lora_rank": body.max_lora_rank, "max_loras": body.max_loras,
              "supported_modules": body.supported_modules}
    created = row is None
    if row is None:
        row = await repository.add(uow.session, ServingProfile(name=name, generation=1, **values))
    elif any(getattr(row, k) != v for k, v in values.items()):
        for k, v in values.items():
            setattr(row, k, v)
        row.generation += 1
        row.updated_at = utcnow()
        await uow.session.flush()
    else:
        return record(row, base_ref), False
    uow.emit("profile.set", data=record(row, base_ref))
    return record(row, base_ref), created


async def get(uow: UnitOfWork, name: str) -> dict[str, Any]:
    valid_name(name, "serving profile name")
    row = await repository.get(uow.session, name)
    if row is None:
        raise NotFound(f"unknown serving profile {name!r}")
    base = await base_repo.get_by_id(uow.session, row.base_model_id)
    assert base is not None
    return record(row, f"{base.name}@{base.revision}")


async def list_profiles(uow: UnitOfWork) -> list[dict[str, Any]]:
    return [record(p, f"{b.name}@{b.revision}") for p, b in await repository.list_all(uow.session)]
