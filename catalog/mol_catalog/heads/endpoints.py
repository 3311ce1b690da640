"""``/v1/namespaces/{ns}/router-heads``: publish trained router heads, list and read
their versions (the stored document included), and move their aliases."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import InvalidName, PayloadTooLarge, json_response
from mol_catalog.heads import service
from mol_catalog.heads.schemas import (
    HeadAliasPut,
    RouterHeadAliasDeletedOut,
    RouterHeadAliasListOut,
    RouterHeadAliasOut,
    RouterHeadAliasSetOut,
    RouterHeadListOut,
    RouterHeadVersionListOut,
    RouterHeadVersionOut,
)
from mol_catalog.util import valid_alias, valid_name, version_number
from mol_platform.contract import router_heads as rh
from mol_platform.contract.refs import RefError

router = APIRouter(tags=["router-heads"])
HEADS = "/v1/namespaces/{ns}/router-heads"
HEAD = HEADS + "/{name}"
MAX_BODY = rh.MAX_DOCUMENT_BYTES
PUBLISH_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {
        "type": "object", "description": (
            f"A router head document (kind {rh.KIND}, as mol router train writes it), at "
            f"most {MAX_BODY} bytes"),
        "additionalProperties": True}}}}}
DOCUMENT_ANSWER: dict[int | str, dict[str, Any]] = {200: {
    "description": "The stored document, byte for byte (canonical JSON); its sha256 is the "
                   "digest",
    "content": {"application/json": {"schema": {"type": "object"}}},
    "headers": {"ETag": {"description": "The digest, in quotes",
                         "schema": {"type": "string"}}}}}


def _ns(ns: str) -> str:
    return valid_name(ns, "namespace")


def _name(name: str) -> str:
    """A head name as the path holds it; one that is no DNS label names no head (none
    can be published), so reads answer 404 for it."""
    return valid_name(name, "router head name")


async def _body(request: Request) -> bytes:
    """The request body, refused with 413 past MAX_BODY (before reading it all)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise PayloadTooLarge(f"a router head is at most {MAX_BODY} bytes; this body "
                              f"declares {declared}")
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise PayloadTooLarge(f"a router head is at most {MAX_BODY} bytes")
        parts.append(chunk)
    return b"".join(parts)


@router.post(HEAD + "/versions", status_code=201, response_model=RouterHeadVersionOut,
             openapi_extra=PUBLISH_BODY, responses={200: {
                 "model": RouterHeadVersionOut,
                 "description": "The same document is already a version (a retry)"}})
async def publish(ns: str, name: str, request: Request, catalog: CatalogDep,
                  who: PrincipalDep) -> Response:
    """Publish a trained head (the JSON ``mol router train`` wrote) as the name's next
    version (scope ``publish:<ns>`` or ``admin``, as adapters). 422 names the rule the
    document breaks; the stored bytes are its canonical JSON, the digest their sha256;
    the same document again answers 200 with its version. Writes ``router_head.published``."""
    who.require_publish(_ns(ns))
    try:
        rh.check_head_name(name)
    except RefError as exc:
        raise InvalidName(str(exc)) from None
    doc = service.check(await _body(request))
    out, created = await catalog.db.transact(
        lambda uow: service.publish(uow, ns, name, doc, who.name))
    if created:  # committed: the labels counter's series for it start at 0
        catalog.metrics.head_published(f"{ns}/{name}@v{out['version']}", list(out["experts"]))
    return json_response(out, 201 if created else 200)


@router.get(HEADS, response_model=RouterHeadListOut)
async def list_heads(ns: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """The namespace's router heads by name, each with its latest version and aliases."""
    who.require_read(_ns(ns))
    async with catalog.db.read() as conn:
        items = await service.heads(conn, ns)
    return json_response({"items": items})


@router.get(HEAD + "/versions", response_model=RouterHeadVersionListOut)
async def list_versions(ns: str, name: str, catalog: CatalogDep,
                        who: PrincipalDep) -> Response:
    """The head's versions, newest first (404 for an unknown head)."""
    who.require_read(_ns(ns))
    async with catalog.db.read() as conn:
        items = await service.versions(conn, ns, _name(name))
    return json_response({"items": items})


@router.get(HEAD + "/versions/{version}", response_model=RouterHeadVersionOut)
async def get_version(ns: str, name: str, version: str, catalog: CatalogDep,
                      who: PrincipalDep) -> Response:
    """One version: digest, experts, embedding and lineage."""
    who.require_read(_ns(ns))
    async with catalog.db.read() as conn:
        out = await service.version(conn, ns, _name(name), version_number(version))
    return json_response(out)


@router.get(HEAD + "/versions/{version}/document", response_class=Response,
            responses=DOCUMENT_ANSWER)
async def get_document(ns: str, name: str, version: str, catalog: CatalogDep,
                       who: PrincipalDep) -> Response:
    """The version's document exactly as stored (``application/json``); ``ETag`` is the
    digest in quotes, so a router checks what it loads against the digest it resolved."""
    who.require_read(_ns(ns))
    async with catalog.db.read() as conn:
        body, digest = await service.document(conn, ns, _name(name), version_number(version))
    return Response(body, media_type="application/json", headers={"ETag": f'"{digest}"'})


@router.get(HEAD + "/aliases", response_model=RouterHeadAliasListOut)
async def list_aliases(ns: str, name: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """The head's aliases and the versions they name."""
    who.require_read(_ns(ns))
    async with catalog.db.read() as conn:
        items = await service.aliases(conn, ns, _name(name))
    return json_response({"items": items})


@router.get(HEAD + "/aliases/{alias}", response_model=RouterHeadAliasOut)
async def get_alias(ns: str, name: str, alias: str, catalog: CatalogDep,
                    who: PrincipalDep) -> Response:
    """The version an alias names (what a router resolves ``ns/name@alias`` to)."""
    who.require_read(_ns(ns))
    async with catalog.db.read() as conn:
        out = await service.alias(conn, ns, _name(name), valid_alias(alias))
    return json_response(out)


@router.put(HEAD + "/aliases/{alias}", response_model=RouterHeadAliasSetOut)
async def set_alias(ns: str, name: str, alias: str, body: HeadAliasPut, catalog: CatalogDep,
                    who: PrincipalDep) -> Response:
    """Point an alias at a version (scope ``publish:<ns>``; 404 for an unknown version).
    Writes ``router_head.alias.set`` when it moves: routers following the feed refetch."""
    who.require_publish(_ns(ns))
    async with catalog.db.unit() as uow:
        out = await service.set_alias(uow, ns, _name(name), valid_alias(alias), body.version,
                                      who.name)
    return json_response(out)


@router.delete(HEAD + "/aliases/{alias}", response_model=RouterHeadAliasDeletedOut)
async def delete_alias(ns: str, name: str, alias: str, catalog: CatalogDep,
                       who: PrincipalDep) -> Response:
    """Remove an alias (scope ``publish:<ns>``); writes ``router_head.alias.deleted``."""
    who.require_publish(_ns(ns))
    async with catalog.db.unit() as uow:
        out = await service.delete_alias(uow, ns, _name(name), valid_alias(alias), who.name)
    return json_response(out)
