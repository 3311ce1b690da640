"""GET /v1/resolve/{ns}/{name}@{ref} and GET /v1/blobs/sha256/{hex}."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response, StreamingResponse

from mol_catalog.auth import Principal
from mol_catalog.deps import Catalog, get_catalog, get_principal
from mol_catalog.errors import BadRequest, NotFound, json_response
from mol_catalog.resolve import repository, service

router = APIRouter(tags=["resolve"])
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
HEX_RE = re.compile(r"^[0-9a-f]{64}$")


@router.get("/v1/resolve/{ns}/{name_ref}")
async def resolve(ns: str, name_ref: str, request: Request, catalog: CatalogDep,
                  who: PrincipalDep, profile: str | None = None) -> Response:
    """``name_ref`` is ``name@ref`` with ref = alias | latest | vN | sha256:<hex>."""
    ref = service.parse(ns, name_ref)
    who.require_read(ref.namespace)
    out = await service.resolve(catalog.db, ref, profile)
    base_url = catalog.base_url(request)
    out["files"] = [{**f, "url": catalog.blobs.download_url(f["digest"], base_url)}
                    for f in out["files"]]
    return json_response(out)


@router.get("/v1/blobs/sha256/{hexdigest}")
async def download_blob(hexdigest: str, catalog: CatalogDep, who: PrincipalDep) -> Response:
    """Stream a blob (the local store's download URL); needs read on a namespace using it."""
    if not HEX_RE.match(hexdigest):
        raise BadRequest("a blob is addressed by 64 lowercase hex digits of its sha256")
    digest = f"sha256:{hexdigest}"
    if not who.can_read():
        async with catalog.db.unit(write=False) as uow:
            namespaces = await repository.blob_namespaces(uow.session, digest)
        if not any(who.can_read(ns) for ns in namespaces):
            who.require_read(namespaces[0] if namespaces else None)
    if not await catalog.blobs.exists(digest):
        raise NotFound(f"no blob {digest}")
    return StreamingResponse(catalog.blobs.read(digest), media_type="application/octet-stream",
                             headers={"ETag": f'"{digest}"'})
