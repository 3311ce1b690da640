"""``/v1/namespaces/{ns}/router-heads``: publish trained router heads, list and read
their versions (the stored document included), and move their aliases."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from mol_catalog import versioned_routes as versioned
from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import InvalidName, json_response
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
DOCUMENT_ANSWER = versioned.document_answer(
    "The stored document, byte for byte (canonical JSON); its sha256 is the digest")


def _name(name: str) -> str:
    """A head name as the path holds it; one that is no DNS label names no head (none
    can be published), so reads answer 404 for it."""
    return valid_name(name, "router head name")


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
    who.require_publish(versioned.namespace(ns))
    try:
        rh.check_head_name(name)
    except RefError as exc:
        raise InvalidName(str(exc)) from None
    doc = service.check(await versioned.body(request, MAX_BODY, "a router head"))
    out, created = await catalog.db.transact(
        lambda uow: service.publish(uow, ns, name, doc, who.name))
    if created:  # committed: the labels counter's series for it start at 0
        catalog.metrics.head_published(f"{ns}/{name}@v{out['version']}", list(out["experts"]))
    return json_response(out, 201 if created else 200)


@router.get(HEADS, response_model=RouterHeadListOut)
async def list_heads(ns: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """The namespace's router heads by name, each with its latest version and aliases."""
    return await versioned.items(catalog.db, who, ns, lambda conn: service.heads(conn, ns))


@router.get(HEAD + "/versions", response_model=RouterHeadVersionListOut)
async def list_versions(ns: str, name: str, catalog: CatalogDep,
                        who: PrincipalDep) -> Response:
    """The head's versions, newest first (404 for an unknown head)."""
    return await versioned.items(catalog.db, who, ns,
                                 lambda conn: service.versions(conn, ns, _name(name)))


@router.get(HEAD + "/versions/{version}", response_model=RouterHeadVersionOut)
async def get_version(ns: str, name: str, version: str, catalog: CatalogDep,
                      who: PrincipalDep) -> Response:
    """One version: digest, experts, embedding and lineage."""
    return await versioned.one(catalog.db, who, ns, lambda conn: service.version(
        conn, ns, _name(name), version_number(version)))


@router.get(HEAD + "/versions/{version}/document", response_class=Response,
            responses=DOCUMENT_ANSWER)
async def get_document(ns: str, name: str, version: str, catalog: CatalogDep,
                       who: PrincipalDep) -> Response:
    """The version's document exactly as stored (``application/json``); ``ETag`` is the
    digest in quotes, so a router checks what it loads against the digest it resolved."""
    return await versioned.document(catalog.db, who, ns, lambda conn: service.document(
        conn, ns, _name(name), version_number(version)))


@router.get(HEAD + "/aliases", response_model=RouterHeadAliasListOut)
async def list_aliases(ns: str, name: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """The head's aliases and the versions they name."""
    return await versioned.items(catalog.db, who, ns,
                                 lambda conn: service.aliases(conn, ns, _name(name)))


@router.get(HEAD + "/aliases/{alias}", response_model=RouterHeadAliasOut)
async def get_alias(ns: str, name: str, alias: str, catalog: CatalogDep,
                    who: PrincipalDep) -> Response:
    """The version an alias names (what a router resolves ``ns/name@alias`` to)."""
    return await versioned.one(catalog.db, who, ns, lambda conn: service.alias(
        conn, ns, _name(name), valid_alias(alias)))


@router.put(HEAD + "/aliases/{alias}", response_model=RouterHeadAliasSetOut)
async def set_alias(ns: str, name: str, alias: str, body: HeadAliasPut, catalog: CatalogDep,
                    who: PrincipalDep) -> Response:
    """Point an alias at a version (scope ``publish:<ns>``; 404 for an unknown version).
    Writes ``router_head.alias.set`` when it moves: routers following the feed refetch."""
    who.require_publish(versioned.namespace(ns))
    async with catalog.db.unit() as uow:
        out = await service.set_alias(uow, ns, _name(name), valid_alias(alias), body.version,
                                      who.name)
    return json_response(out)


@router.delete(HEAD + "/aliases/{alias}", response_model=RouterHeadAliasDeletedOut)
async def delete_alias(ns: str, name: str, alias: str, catalog: CatalogDep,
                       who: PrincipalDep) -> Response:
    """Remove an alias (scope ``publish:<ns>``); writes ``router_head.alias.deleted``."""
    who.require_publish(versioned.namespace(ns))
    async with catalog.db.unit() as uow:
        out = await service.delete_alias(uow, ns, _name(name), valid_alias(alias), who.name)
    return json_response(out)
