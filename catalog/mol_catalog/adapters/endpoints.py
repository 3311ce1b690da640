"""/v1/adapters: publish, list, describe, versions, aliases, yank."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response

from mol_catalog.adapters import publish as pipeline
from mol_catalog.adapters import service
from mol_catalog.adapters.schemas import (
    AdapterOut,
    AdapterPageOut,
    AliasHistoryOut,
    AliasOut,
    AliasPut,
    DeletedOut,
    PublishOut,
    VersionOut,
    VersionPageOut,
    YankBody,
    YankOut,
)
from mol_catalog.adapters.uploads import FIELDS, FILE_PARTS
from mol_catalog.deps import Catalog, CatalogDep, PrincipalDep, principal_for
from mol_catalog.errors import ValidationFailed, json_bytes, json_response
from mol_catalog.openapi import LeanRoute, query
from mol_catalog.util import (
    clamp_limit,
    decode_cursor,
    encode_cursor,
    valid_alias,
    valid_name,
    version_number,
)
from mol_platform.contract.model_signature import MAX_SIGNATURE_BYTES

router = APIRouter(tags=["adapters"])
PAGE_LIMIT = 50  # items per page of a listing when the request sets no limit
INTEGER = TypeAdapter(int)

PUBLISH_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "multipart/form-data": {"schema": {"type": "object", "required": list(FILE_PARTS),
                                       "properties": {
        **{p: {"type": "string", "format": "binary"} for p in FILE_PARTS},
        **{f: {"type": "string"} for f in FIELDS},
        "source": {"type": "string", "maxLength": pipeline.MAX_SOURCE_CHARS},
        "signature": {"type": "string", "maxLength": MAX_SIGNATURE_BYTES, "description": (
            "the model-signing signature (Sigstore bundle JSON) over the two files")},
    }}}}}}


def _full(ns: str, name: str) -> str:
    return f"{valid_name(ns, 'namespace')}/{valid_name(name, 'adapter name')}"


@router.post("/v1/adapters/{ns}/{name}/versions", status_code=201, openapi_extra=PUBLISH_BODY,
             response_model=PublishOut, responses={200: {
                 "model": PublishOut, "description": "Identical content already published"}})
async def publish_version(ns: str, name: str, request: Request, catalog: CatalogDep,
                          who: PrincipalDep) -> Response:
    """Publish a version (multipart). 201 new, 200 identical content already published."""
    who.require_publish(ns)
    body, created = await pipeline.publish_form(catalog, ns, name, request, who)
    return json_response(body, 201 if created else 200)


def page_limit(raw: str | None) -> int:
    """A listing's ``limit`` query parameter: an integer as FastAPI reads one (else 422),
    from 1 to 500 (else 400); PAGE_LIMIT when absent."""
    if raw is None:
        return PAGE_LIMIT
    try:
        limit = INTEGER.validate_python(raw)
    except ValidationError as exc:
        raise ValidationFailed(f"query.limit: {exc.errors()[0]['msg']}") from None
    return clamp_limit(limit)


async def list_adapters(request: Request) -> bytes:
    """Keyset-paginated listing and search (pass next_cursor back as cursor)."""
    params = query(request)
    limit = page_limit(params.get("limit"))
    catalog: Catalog = request.app.state.catalog
    who = await principal_for(catalog, request.headers.get("authorization"))
    items, last = await service.search(
        catalog, who, base=params.get("base"), tag=params.get("tag"), q=params.get("q"),
        namespace=params.get("namespace"), after=decode_cursor(params.get("cursor")),
        limit=limit)
    return json_bytes({"items": items,
                       "next_cursor": encode_cursor(last) if last is not None else None})


def _list_params(base: str | None = None, tag: str | None = None, q: str | None = None,
                 namespace: str | None = None, limit: int = PAGE_LIMIT,
                 cursor: str | None = None) -> None:
    """What ``list_adapters`` reads: documented in /openapi.json."""


lean_routes = [LeanRoute("/v1/adapters", list_adapters, _list_params, AdapterPageOut, "adapters")]


@router.get("/v1/adapters/{ns}/{name}", response_model=AdapterOut)
async def get_adapter(ns: str, name: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    who.require_read(ns)
    async with catalog.db.read() as conn:
        out = await service.describe(conn, _full(ns, name))
    return json_response(out)


@router.get("/v1/adapters/{ns}/{name}/versions", response_model=VersionPageOut)
async def list_versions(ns: str, name: str, catalog: CatalogDep, who: PrincipalDep,
                        limit: int = PAGE_LIMIT, cursor: str | None = None) -> Response:
    """Versions, newest first."""
    who.require_read(ns)
    limit = clamp_limit(limit)
    before = decode_cursor(cursor)
    async with catalog.db.read() as conn:
        items, last = await service.versions(conn, _full(ns, name),
                                             before, limit)
    return json_response({"items": items,
                          "next_cursor": encode_cursor(last) if last is not None else None})


@router.get("/v1/adapters/{ns}/{name}/versions/{version}", response_model=VersionOut)
async def get_version(ns: str, name: str, version: str, catalog: CatalogDep,
                      who: PrincipalDep) -> Response:
    who.require_read(ns)
    async with catalog.db.read() as conn:
        out = await service.version_detail(conn, _full(ns, name), version_number(version))
    return json_response(out)


@router.put("/v1/adapters/{ns}/{name}/aliases/{alias}", response_model=AliasOut)
async def set_alias(ns: str, name: str, alias: str, body: AliasPut, catalog: CatalogDep,
                    who: PrincipalDep) -> Response:
    """Move an alias (history kept). 409 with ``reasons`` when refused: the version is
    yanked, or the alias is protected and the version is incompatible with a serving
    profile the alias is served under; ``force`` (admin) moves it anyway, on record."""
    who.require_publish(ns)
    async with catalog.db.unit() as uow:
        out = await service.set_alias(uow, _full(ns, name), alias, body.version, who,
                                      force=body.force,
                                      bindings_since=catalog.bindings.since())
    return json_response(out)


@router.get("/v1/adapters/{ns}/{name}/aliases/{alias}/history",
            response_model=AliasHistoryOut)
async def alias_history(ns: str, name: str, alias: str, catalog: CatalogDep,
                        who: PrincipalDep, limit: int = Query(100, ge=1, le=1000)) -> Response:
    """Every move of the alias, newest first."""
    who.require_read(ns)
    async with catalog.db.read() as conn:
        items = await service.alias_history(conn, _full(ns, name), valid_alias(alias), limit)
    return json_response({"items": items})


@router.post("/v1/adapters/{ns}/{name}/versions/{version}/yank", response_model=YankOut)
async def yank_version(ns: str, name: str, version: str, body: YankBody, catalog: CatalogDep,
                       who: PrincipalDep) -> Response:
    """Yank a version; 409 while an alias points at it."""
    who.require_publish(ns)
    async with catalog.db.unit() as uow:
        out = await service.yank(uow, _full(ns, name), version_number(version), body.reason)
    return json_response(out)


@router.delete("/v1/adapters/{ns}/{name}/versions/{version}", response_model=DeletedOut)
async def delete_version(ns: str, name: str, version: str, catalog: CatalogDep,
                         who: PrincipalDep) -> Response:
    """Delete one version for good (admin); its aliases are removed, its blobs go at the
    next gc, a ``version.deleted`` event records it."""
    who.require_admin()
    async with catalog.db.unit() as uow:
        out = await service.delete_version(uow, _full(ns, name), version_number(version),
                                           who.name)
    return json_response(out)
