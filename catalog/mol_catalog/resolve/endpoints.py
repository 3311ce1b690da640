"""GET /v1/resolve/{ns}/{name}@{ref} and GET /v1/blobs/sha256/{hex}."""

from __future__ import annotations

import re

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from mol_catalog.deps import (
    Catalog,
    CatalogDep,
    PrincipalDep,
    principal_for,
)
from mol_catalog.errors import ApiError, BadRequest, NotFound, json_bytes
from mol_catalog.openapi import LeanRoute, query
from mol_catalog.resolve import service
from mol_catalog.resolve.schemas import ResolveOut
from mol_catalog.util import valid_name

router = APIRouter(tags=["resolve"])
HEX_RE = re.compile(r"[0-9a-f]{64}")


async def resolve(request: Request) -> bytes:
    """``name_ref`` is ``name@ref`` with ref = alias | latest | vN | sha256:<hex>."""
    catalog: Catalog = request.app.state.catalog
    tracing = catalog.tracing
    if tracing is None:
        return await _resolve(catalog, request)
    span = tracing.root("mol.catalog.resolve", tracing.SERVER, request.headers, {
        "mol.adapter.ref": f"{request.path_params['ns']}/{request.path_params['name_ref']}"})
    if span is None:
        return await _resolve(catalog, request)
    try:
        out = await _resolve(catalog, request)
    except ApiError as exc:
        span.set_attribute("http.response.status_code", exc.status)
        span.set_attribute("error.type", str(exc.status))
        raise
    else:
        span.set_attribute("http.response.status_code", 200)
    finally:
        span.end()
    return out


async def _resolve(catalog: Catalog, request: Request) -> bytes:
    who = await principal_for(catalog, request.headers.get("authorization"))
    ref = service.parse(request.path_params["ns"], request.path_params["name_ref"])
    profile = query(request).get("profile")
    if profile is not None:
        valid_name(profile, "serving profile name")
    who.require_read(ref.namespace)
    out = await service.resolve(catalog.db, ref, profile)
    if profile is not None and not ref.immutable and ref.ref != "latest":
        catalog.bindings.seen(ref.adapter, ref.ref, profile)
    blobs = catalog.blobs
    base = catalog.download_base if blobs.serves_downloads else ""
    out["files"] = [{**f, "url": blobs.download_url(f["digest"], base)} for f in out["files"]]
    return json_bytes(out)


def _resolve_params(ns: str, name_ref: str, profile: str | None = None) -> None:
    """What ``resolve`` reads: documented in /openapi.json."""


lean_routes = [LeanRoute("/v1/resolve/{ns}/{name_ref}", resolve, _resolve_params, ResolveOut,
                         "resolve")]


@router.get("/v1/blobs/sha256/{hexdigest}", response_class=Response, responses={200: {
    "description": "The blob's bytes",
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def download_blob(hexdigest: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """Stream a blob (the local store's download URL); needs read on a namespace using it.

    A blob the caller may not read is answered exactly like a missing one: a 403 would
    confirm the content exists and name the namespace holding it.
    """
    if not HEX_RE.fullmatch(hexdigest):
        raise BadRequest("a blob is addressed by 64 lowercase hex digits of its sha256")
    digest = f"sha256:{hexdigest}"
    missing = NotFound(f"no blob {digest}")
    if not await service.may_read_blob(catalog.db, who, digest):
        raise missing
    if not await catalog.blobs.exists(digest):
        raise missing
    return StreamingResponse(catalog.blobs.read(digest), media_type="application/octet-stream",
                             headers={"ETag": f'"{digest}"'})
