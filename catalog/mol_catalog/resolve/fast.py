"""A raw ASGI handler for ``GET /v1/resolve/{ns}/{name_ref}``, the catalog's hottest path.

Routers and engines resolve adapters on every deployment change and cache miss, so
resolve is what the catalog spends most of its time on. Through FastAPI a resolve paid
for routing, dependency solving and several middleware layers, which cost more than the
answer itself. This handler sits in front of the FastAPI app and answers matching GETs
with the same function the FastAPI route uses (``endpoints.answer``): same auth, same
body, same errors. The FastAPI route stays: it documents the endpoint in OpenAPI and
serves any request this handler passes on.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from mol_catalog.errors import CatalogError

PREFIX = "/v1/resolve/"
TEMPLATE = "/v1/resolve/{ns}/{name_ref}"
JSON_HEADER = (b"content-type", b"application/json")


class _Route:
    """What the metrics middleware reads from ``scope["route"]``: the route template."""

    path = TEMPLATE


ROUTE = _Route()


class ResolveFastPath:
    """Answers ``GET /v1/resolve/<ns>/<name@ref>[?profile=P]``; everything else goes on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            path: str = scope["path"]
            if path.startswith(PREFIX) and not scope.get("root_path"):
                ns, sep, name_ref = path[len(PREFIX):].partition("/")
                if sep and ns and name_ref and "/" not in name_ref:
                    await self._resolve(scope, send, ns, name_ref)
                    return
        await self.app(scope, receive, send)

    async def _resolve(self, scope: Scope, send: Send, ns: str, name_ref: str) -> None:
        from mol_catalog.resolve.endpoints import answer

        scope["route"] = ROUTE
        profile = None
        if scope["query_string"]:
            for key, value in parse_qsl(scope["query_string"].decode("latin-1"),
                                        keep_blank_values=True):
                if key == "profile":
                    profile = value
        authorization = None
        for key, value in scope["headers"]:
            if key == b"authorization":
                authorization = value.decode("latin-1")
                break
        catalog = scope["app"].state.catalog
        headers: list[tuple[bytes, bytes]] = [JSON_HEADER]
        try:
            body = await answer(catalog, ns, name_ref, profile, authorization,
                                lambda: catalog.base_url(Request(scope)))
            status = 200
        except CatalogError as exc:
            from mol_catalog.errors import error_body

            status, body = exc.status, error_body(exc)
            if status == 401:
                headers.append((b"www-authenticate", b"Bearer"))
        headers.append((b"content-length", str(len(body)).encode()))
        start: dict[str, Any] = {"type": "http.response.start", "status": status,
                                 "headers": headers}
        await send(start)
        await send({"type": "http.response.body", "body": body})
