"""``/v1/namespaces/{ns}/tools``: propose tools written in sandbox sessions, read their
versions with the automatic checks, approve one by moving the protected ``approved``
alias, and ``/v1/namespaces/{ns}/approved-tools``: what routers and sandboxes load."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.responses import Response

from mol_catalog import versioned_routes as versioned
from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import BadRequest, InvalidName, json_response
from mol_catalog.tools import service
from mol_catalog.tools.schemas import (
    ApprovedToolListOut,
    ToolApprovalOut,
    ToolApprove,
    ToolListOut,
    ToolPublish,
    ToolVersionListOut,
    ToolVersionOut,
)
from mol_catalog.util import valid_alias, version_number
from mol_platform.contract import tools as tc

router = APIRouter(tags=["tools"])
TOOLS = "/v1/namespaces/{ns}/tools"
TOOL = TOOLS + "/{tool}"
MAX_BODY = tc.MAX_BODY_BYTES
PUBLISH_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": ToolPublish.model_json_schema()}}}}
DOCUMENT_ANSWER = versioned.document_answer(
    "The stored document, byte for byte (canonical ASCII JSON); its sha256 is the digest")


def _name(name: str) -> str:
    """A tool name as the path holds it (400 for one no tool can have)."""
    try:
        return tc.check_tool_name(name)
    except tc.ToolError as exc:
        raise InvalidName(str(exc)) from None


async def _body(request: Request) -> ToolPublish:
    """The publish body, refused with 413 past MAX_BODY (before reading it all) and 422
    when it is not a ``ToolPublish``."""
    raw = await versioned.body(request, MAX_BODY, "a tool proposal")
    try:
        return ToolPublish.model_validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


@router.post(TOOL + "/versions", status_code=201, response_model=ToolVersionOut,
             openapi_extra=PUBLISH_BODY, responses={200: {
                 "model": ToolVersionOut,
                 "description": "The same document is already a version (a retry)"}})
async def publish(ns: str, tool: str, request: Request, catalog: CatalogDep,
                  who: PrincipalDep) -> Response:
    """Propose a tool (scope ``publish:<ns>`` or ``admin``): the next version of the
    name, with the automatic checks as advice (its example is run in a fresh sandbox
    session when the catalog has a sandbox service); the same document again answers 200
    with its version. It is offered to no one until an admin approves it. Writes
    ``tool.published``."""
    who.require_publish(versioned.namespace(ns))
    name = _name(tool)
    body = await _body(request)
    proposal = service.propose(name, body)
    async with catalog.db.read() as conn:
        signed_by = await service.signer(conn, ns, proposal)
        retry = await service.stored(conn, ns, name, proposal)
    if not retry:
        proposal = await service.with_example(catalog.examples, name, body, proposal)
    out, created = await catalog.db.transact(
        lambda uow: service.publish(uow, ns, name, proposal, signed_by, who.name))
    return json_response(out, 201 if created else 200)


@router.get(TOOLS, response_model=ToolListOut)
async def list_tools(ns: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """The namespace's tools by name: the latest version (checks included) and the
    approved one."""
    return await versioned.items(catalog.db, who, ns, lambda conn: service.tools(conn, ns))


@router.get(TOOL + "/versions", response_model=ToolVersionListOut)
async def list_versions(ns: str, tool: str, catalog: CatalogDep,
                        who: PrincipalDep) -> Response:
    """The tool's versions, newest first (404 for an unknown tool)."""
    return await versioned.items(catalog.db, who, ns,
                                 lambda conn: service.versions(conn, ns, _name(tool)))


@router.get(TOOL + "/versions/{version}", response_model=ToolVersionOut)
async def get_version(ns: str, tool: str, version: str, catalog: CatalogDep,
                      who: PrincipalDep) -> Response:
    """One version: source, schema, checks, signature and lineage."""
    return await versioned.one(catalog.db, who, ns, lambda conn: service.version(
        conn, ns, _name(tool), version_number(version)))


@router.get(TOOL + "/versions/{version}/document", response_class=Response,
            responses=DOCUMENT_ANSWER)
async def get_document(ns: str, tool: str, version: str, catalog: CatalogDep,
                       who: PrincipalDep) -> Response:
    """The version's document exactly as stored; ``ETag`` is the digest in quotes."""
    return await versioned.document(catalog.db, who, ns, lambda conn: service.document(
        conn, ns, _name(tool), version_number(version)))


@router.put(TOOL + "/aliases/{tool_alias}", response_model=ToolApprovalOut)
async def approve(ns: str, tool: str, tool_alias: str, body: ToolApprove, catalog: CatalogDep,
                  who: PrincipalDep) -> Response:
    """Approve a version: move the protected alias ``approved`` to it (scope ``admin``;
    a tool has no other alias). 409 with ``reasons`` when the namespace's rules refuse
    it (``force`` overrides, on record). Writes ``tool.alias.set`` when it moves."""
    versioned.namespace(ns)
    async with catalog.db.unit() as uow:
        out = await service.approve(uow, ns, _name(tool), valid_alias(tool_alias), body.version,
                                    body.force, who.name, who.admin)
    return json_response(out)


@router.delete(TOOL + "/aliases/{tool_alias}", response_model=ToolApprovalOut)
async def withdraw(ns: str, tool: str, tool_alias: str, catalog: CatalogDep,
                   who: PrincipalDep) -> Response:
    """Withdraw the approval (scope ``admin``): the tool is offered no more. Writes
    ``tool.alias.deleted``."""
    versioned.namespace(ns)
    async with catalog.db.unit() as uow:
        out = await service.withdraw(uow, ns, _name(tool), valid_alias(tool_alias), who.name,
                                     who.admin)
    return json_response(out)


@router.get("/v1/namespaces/{ns}/approved-tools", response_model=ApprovedToolListOut)
async def approved_tools(
        ns: str, catalog: CatalogDep, who: PrincipalDep,
        tool: Annotated[list[str] | None, Query(
            max_length=service.MAX_NAMES,
            description="Only these tools (repeat the parameter); default: all")] = None,
) -> Response:
    """The approved version of each tool, with the stored document, its digest and its
    signature (and the signer's key): what a loader checks with
    ``mol_platform.contract.tools.verify_load`` before each load. ``missing`` lists the
    names asked for that have no approved version."""
    who.require_read(versioned.namespace(ns))
    names = [_name(n) for n in tool or []]
    if len(names) > service.MAX_NAMES:
        raise BadRequest(f"at most {service.MAX_NAMES} names per lookup")
    async with catalog.db.read() as conn:
        items, missing = await service.approved(conn, ns, names)
    return json_response({"items": items, "missing": missing})
