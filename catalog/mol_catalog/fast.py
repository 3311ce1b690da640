"""The catalog app: FastAPI, with its hottest GETs answered before FastAPI's stack.

Routers and engines resolve adapters on every deployment change and cache miss, and
user interfaces page through listings and searches; through FastAPI each such request
paid for its middleware layers (each wrapping ``send``), routing and dependency solving,
which cost more than the answer itself. ``CatalogApp`` answers the matching GETs first,
with the same functions the FastAPI routes use (``resolve.endpoints.answer``,
``adapters.endpoints.list_answer``): same auth, same bodies, same errors, counted in the
same metrics under the same route templates. The FastAPI routes stay: they document the
endpoints in OpenAPI and serve any request passed on.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from mol_catalog.errors import INTERNAL_ERROR, CatalogError, error_body, error_headers, json_bytes
from mol_catalog.outages import backend_error

log = logging.getLogger("mol_catalog")

RESOLVE_PREFIX = "/v1/resolve/"
ADAPTERS = "/v1/adapters"
JSON_HEADER = (b"content-type", b"application/json")
INTEGER = re.compile(r"[+-]?[0-9]{1,9}")
LIST_PARAMS = ("base", "tag", "q", "namespace", "cursor")

Answer = Callable[[], Awaitable[bytes]]


class _Route:
    """A route template: the label the metrics count the fast answers under."""

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


class CatalogApp(FastAPI):
    """Answers ``GET /v1/resolve/<ns>/<name@ref>`` and ``GET /v1/adapters`` itself; every
    other request (and the lifespan) goes through FastAPI as usual."""

    def openapi(self) -> dict[str, Any]:
        """FastAPI's schema plus what ``mol_catalog.openapi`` documents."""
        if self.openapi_schema is None:
            from mol_catalog.openapi import document

            document(super().openapi())
        return self.openapi_schema or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("root_path"):
            found = _match(self, scope)
            if found is not None:
                route, answer = found
                start = time.perf_counter()
                status = await _respond(send, answer)
                self.state.catalog.metrics.observe(route.path, status,
                                                   time.perf_counter() - start)
                return
        await super().__call__(scope, receive, send)


def _match(app: FastAPI, scope: Scope) -> tuple[_Route, Answer] | None:
    path: str = scope["path"]
    if path.startswith(RESOLVE_PREFIX):
        ns, sep, name_ref = path[len(RESOLVE_PREFIX):].partition("/")
        if sep and ns and name_ref and "/" not in name_ref:
            return RESOLVE_ROUTE, _resolve(app, scope, ns, name_ref)
    elif path == ADAPTERS:
        answer = _list(app, scope)
        if answer is not None:
            return LIST_ROUTE, answer
    return None


def _resolve(app: FastAPI, scope: Scope, ns: str, name_ref: str) -> Answer:
    from mol_catalog.resolve.endpoints import answer

    catalog = app.state.catalog
    profile = _query(scope).get("profile")
    return lambda: answer(catalog, ns, name_ref, profile, _authorization(scope))


def _list(app: FastAPI, scope: Scope) -> Answer | None:
    from mol_catalog.adapters.endpoints import list_answer

    query = _query(scope)
    limit = 50
    if "limit" in query:
        if not INTEGER.fullmatch(query["limit"]):
            return None  # FastAPI's validation error answers it
        limit = int(query["limit"])
    catalog = app.state.catalog
    base, tag, q, namespace, cursor = (query.get(k) for k in LIST_PARAMS)
    return lambda: list_answer(catalog, _authorization(scope), base, tag, q, namespace, limit,
                               cursor)


def _error(exc: CatalogError, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """Status and body of an error; its headers are added to ``headers``."""
    headers += [(k.lower().encode(), v.encode()) for k, v in (error_headers(exc) or {}).items()]
    return exc.status, error_body(exc)


async def _respond(send: Send, answer: Answer) -> int:
    """Run the answer and send it; returns the status sent."""
    headers: list[tuple[bytes, bytes]] = [JSON_HEADER]
    try:
        body = await answer()
        status = 200
    except CatalogError as exc:
        status, body = _error(exc, headers)
    except Exception as exc:
        outage = backend_error(exc)
        if outage is not None:  # as the app's outage handler answers
            status, body = _error(outage, headers)
        else:
            # What FastAPI's error middleware would do, in the catalog's error format.
            log.exception("request failed")
            status, body = 500, json_bytes(INTERNAL_ERROR)
    headers.append((b"content-length", str(len(body)).encode()))
    start: dict[str, Any] = {"type": "http.response.start", "status": status, "headers": headers}
    await send(start)
    await send({"type": "http.response.body", "body": body})
    return status
