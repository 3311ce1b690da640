"""What the HTTP endpoints of versioned documents with aliases (router heads, tools)
share: the bounded publish body, and the reads that check the namespace and the
caller's read scope, run one service call on a read connection and answer it as JSON
(or as the stored document, its digest the ``ETag``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from mol_catalog.auth import Principal
from mol_catalog.db import Database, ReadConn
from mol_catalog.errors import PayloadTooLarge, json_response
from mol_catalog.util import valid_name

T = TypeVar("T")


def document_answer(description: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI answer of a document read."""
    return {200: {
        "description": description,
        "content": {"application/json": {"schema": {"type": "object"}}},
        "headers": {"ETag": {"description": "The digest, in quotes",
                             "schema": {"type": "string"}}}}}


def namespace(ns: str) -> str:
    return valid_name(ns, "namespace")


async def body(request: Request, limit: int, what: str) -> bytes:
    """The request body, refused with 413 past ``limit`` bytes (before reading it all);
    ``what`` names the document in the refusal."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"{what} is at most {limit} bytes; this body "
                              f"declares {declared}")
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"{what} is at most {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


async def read(db: Database, who: Principal, ns: str,
               call: Callable[[ReadConn], Awaitable[T]]) -> T:
    """``call`` on a read connection, once the caller may read namespace ``ns``."""
    who.require_read(namespace(ns))
    async with db.read() as conn:
        return await call(conn)


async def one(db: Database, who: Principal, ns: str,
              call: Callable[[ReadConn], Awaitable[Any]]) -> Response:
    """The service's answer as the JSON body."""
    return json_response(await read(db, who, ns, call))


async def items(db: Database, who: Principal, ns: str,
                call: Callable[[ReadConn], Awaitable[list[Any]]]) -> Response:
    """The service's list as ``{"items": [...]}``."""
    return json_response({"items": await read(db, who, ns, call)})


async def document(db: Database, who: Principal, ns: str,
                   call: Callable[[ReadConn], Awaitable[tuple[bytes, str]]]) -> Response:
    """The stored bytes exactly (``application/json``), ``ETag`` their digest in quotes."""
    stored, digest = await read(db, who, ns, call)
    return Response(stored, media_type="application/json", headers={"ETag": f'"{digest}"'})
