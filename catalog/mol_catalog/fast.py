"""A raw ASGI handler in front of FastAPI for the catalog's hottest GETs.

Routers and engines resolve adapters on every deployment change and cache miss, and
user interfaces page through listings and searches; through FastAPI each such request
paid for routing, dependency solving and several middleware layers, which cost more
than the answer itself. ``FastPath`` answers the matching GETs with the same functions
the FastAPI routes use (``resolve.endpoints.answer``, ``adapters.endpoints.list_answer``):
same auth, same bodies, same errors, same route template for the metrics. The FastAPI
routes stay: they document the endpoints in OpenAPI and serve any request passed on.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from mol_catalog.errors import CatalogError, error_body

RESOLVE_PREFIX = "/v1/resolve/"
ADAPTERS = "/v1/adapters"
JSON_HEADER = (b"content-type", b"application/json")
INTEGER = re.compile(r"[+-]?[0-9]{1,9}")
LIST_PARAMS = ("base", "tag", "q", "namespace", "cursor")

Answer = Callable[[], Awaitable[bytes]]


class _Route:
    """What the metrics middleware reads from ``scope["route"]``: the route template."""

    def __init__(self, path: str) -> None:
        self.path = path


RESOLVE_ROUTE = _Route("/v1/resolve/{ns}/{name_ref}")
LIST_ROUTE = _Route(ADAPTERS)


def _query(scope: Scope) -> dict[str, str]:
    """Query parameters, the last value winning as with Starlette's ``QueryParams.get``."""
    raw: bytes = scope["query_string"]
    return dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True)) if raw else {}


def _authorization(scope: Scope) -> str | None:
    for key, value in scope["headers"]:
        if key == b"authorization":
            return str(value.decode("latin-1"))
    return None


class FastPath:
    """Answers ``GET /v1/resolve/<ns>/<name@ref>`` and ``GET /v1/adapters``; the rest goes on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("root_path"):
            answer = self._match(scope)
            if answer is not None:
                await _respond(send, answer)
                return
        await self.app(scope, receive, send)

    @staticmethod
    def _match(scope: Scope) -> Answer | None:
        path: str = scope["path"]
        if path.startswith(RESOLVE_PREFIX):
            ns, sep, name_ref = path[len(RESOLVE_PREFIX):].partition("/")
            if sep and ns and name_ref and "/" not in name_ref:
                return _resolve(scope, ns, name_ref)
        elif path == ADAPTERS:
            return _list(scope)
        return None


def _resolve(scope: Scope, ns: str, name_ref: str) -> Answer:
    from mol_catalog.resolve.endpoints import answer

    scope["route"] = RESOLVE_ROUTE
    catalog = scope["app"].state.catalog
    profile = _query(scope).get("profile")
    return lambda: answer(catalog, ns, name_ref, profile, _authorization(scope),
                          lambda: catalog.base_url(Request(scope)))


def _list(scope: Scope) -> Answer | None:
    from mol_catalog.adapters.endpoints import list_answer

    query = _query(scope)
    limit = 50
    if "limit" in query:
        if not INTEGER.fullmatch(query["limit"]):
            return None  # FastAPI's validation error answers it
        limit = int(query["limit"])
    scope["route"] = LIST_ROUTE
    catalog = scope["app"].state.catalog
    base, tag, q, namespace, cursor = (query.get(k) for k in LIST_PARAMS)
    return lambda: list_answer(catalog, _authorization(scope), base, tag, q, namespace, limit,
                               cursor)


async def _respond(send: Send, answer: Answer) -> None:
    headers: list[tuple[bytes, bytes]] = [JSON_HEADER]
    try:
        body = await answer()
        status = 200
    except CatalogError as exc:
        status, body = exc.status, error_body(exc)
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
    headers.append((b"content-length", str(len(body)).encode()))
    start: dict[str, Any] = {"type": "http.response.start", "status": status, "headers": headers}
    await send(start)
    await send({"type": "http.response.body", "body": body})
