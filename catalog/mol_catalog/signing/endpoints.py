"""/v1/namespaces/{ns}/keys and /v1/namespaces/{ns}/signature-policy."""

from __future__ import annotations

import re

from fastapi import APIRouter
from starlette.responses import Response

from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import BadRequest, json_response
from mol_catalog.signing import service
from mol_catalog.signing.schemas import KeyAdd, KeyListOut, KeyOut, PolicyOut, PolicyPut
from mol_catalog.util import valid_name
from mol_platform.contract.model_signature import KEY_ID_PATTERN

router = APIRouter(tags=["signing"])
_KEY_ID = re.compile(KEY_ID_PATTERN)


def _key_id(value: str) -> str:
    if _KEY_ID.fullmatch(value) is None:
        raise BadRequest(f"invalid key id {value[:80]!r}: 64 lowercase hex digits, as "
                         "`mol catalog keys ls` shows")
    return value


@router.post("/v1/namespaces/{ns}/keys", status_code=201, response_model=KeyOut)
async def add_key(ns: str, body: KeyAdd, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """Register a public key that may sign the namespace's adapters (admin or
    ``publish:<ns>``); 409 when it is registered already."""
    who.require_publish(valid_name(ns, "namespace"))
    out = await catalog.db.transact(
        lambda uow: service.add_key(uow, ns, body, who.name, catalog.namespace_ids))
    return json_response(out, 201)


@router.get("/v1/namespaces/{ns}/keys", response_model=KeyListOut)
async def list_keys(ns: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """The namespace's keys, revoked ones too, oldest first."""
    who.require_read(valid_name(ns, "namespace"))
    async with catalog.db.read() as conn:
        items = await service.list_keys(conn, ns)
    return json_response({"items": items})


@router.post("/v1/namespaces/{ns}/keys/{key_id}/revoke", response_model=KeyOut)
async def revoke_key(ns: str, key_id: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """Revoke a key for good (admin or ``publish:<ns>``): publishes it signed are refused
    from now on, and engines that require signatures stop loading what it signed."""
    who.require_publish(valid_name(ns, "namespace"))
    async with catalog.db.unit() as uow:
        out = await service.revoke_key(uow, ns, _key_id(key_id))
    return json_response(out)


@router.get("/v1/namespaces/{ns}/signature-policy", response_model=PolicyOut)
async def get_policy(ns: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    who.require_read(valid_name(ns, "namespace"))
    async with catalog.db.read() as conn:
        out = await service.get_policy(conn, ns)
    return json_response(out)


@router.put("/v1/namespaces/{ns}/signature-policy", response_model=PolicyOut)
async def put_policy(ns: str, body: PolicyPut, catalog: CatalogDep,
                     who: PrincipalDep) -> Response:
    """Require (or stop requiring) signatures on the namespace's publishes (admin: a
    publisher could otherwise switch the requirement off)."""
    who.require_admin()
    valid_name(ns, "namespace")
    out = await catalog.db.transact(
        lambda uow: service.set_policy(uow, ns, body, catalog.namespace_ids))
    return json_response(out)
