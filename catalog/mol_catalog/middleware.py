"""The catalog's one middleware: every HTTP request counted, every failure in one shape.

It wraps the whole route table, so a route added later is counted under its template
and answers its errors like every other route without doing anything for it. It is a
plain ASGI callable (no ``BaseHTTPMiddleware``): a request costs a timer, a wrapped
``send`` and a metrics observation.

``error_response`` is the one mapping from an exception to the catalog's
``{"error", "detail"}`` answer. Everything reaches it by escaping the route: catalog
errors, outages, unexpected failures and FastAPI's own exceptions (request validation,
unknown path, wrong method), since the app's stack has no other exception handler
(``mol_catalog.app.CatalogAPI``).
"""

from __future__ import annotations

import logging
import time

from fastapi.exceptions import RequestValidationError
from starlette.datastructures import URL
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mol_catalog.errors import (
    INTERNAL_ERROR,
    ApiError,
    MethodNotAllowed,
    NotFound,
    ValidationFailed,
    error_headers,
    json_response,
)
from mol_catalog.metrics import CatalogMetrics
from mol_catalog.outages import backend_error

log = logging.getLogger("mol_catalog")
UNMATCHED = "unmatched"  # the route label of requests no route matched
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _api_error(exc: Exception, scope: Scope) -> ApiError | None:
    """The API error ``exc`` answers as; None for an unexpected failure."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RequestValidationError):
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            # A validator's own message as it wrote it, without pydantic's "Value error, ".
            msg = (err.get("ctx", {}).get("error", err.get("msg"))
                   if err.get("type") == "value_error" else err.get("msg"))
            parts.append(f"{loc}: {msg}" if loc else str(msg))
        return ValidationFailed("; ".join(parts))
    if isinstance(exc, HTTPException):
        path = URL(scope=scope).path
        if exc.status_code == 405:
            return MethodNotAllowed(f"method {scope['method']} not allowed on {path}",
                                    allow=_allowed_methods(scope))
        if path != "/" and path.endswith("/"):
            # Never a redirect: its Location would come from the Host header.
            return NotFound(f"no such path {path}; the catalog's paths have no trailing "
                            f"slash: {path.rstrip('/') or '/'}")
        return NotFound(f"no such path {path}")
    return backend_error(exc)


def _allowed_methods(scope: Scope) -> str:
    """The methods the app's routes answer on the scope's path (the ``Allow`` header of a
    405, RFC 9110). Starlette names only the first matching route's, so each method is
    tried on a bare scope (the routed one carries that route's context)."""
    routes = getattr(getattr(scope.get("app"), "router", None), "routes", ())
    base = {"type": "http", "path": scope["path"], "root_path": scope.get("root_path", "")}
    return ", ".join(m for m in HTTP_METHODS if any(
        r.matches({**base, "method": m})[0] is Match.FULL for r in routes))


def error_response(exc: Exception, scope: Scope) -> Response:
    """The answer to a request that raised ``exc``: its status and ``{"error", "detail"}``
    body; an unexpected failure is logged with its traceback and answered as a bare 500."""
    if isinstance(exc, HTTPException) and exc.status_code not in (404, 405):
        return json_response({"error": "HTTPError", "detail": str(exc.detail)}, exc.status_code)
    err = _api_error(exc, scope)
    if err is None:
        log.error("request failed: %s %s", scope.get("method"), scope.get("path"), exc_info=exc)
        return json_response(INTERNAL_ERROR, 500)
    return json_response(err.body(), err.status, error_headers(err))


class CatalogMiddleware:
    """Counts every HTTP request under its route template (``/v1/resolve/{ns}/{name_ref}``,
    ``unmatched`` when no route matched) and answers any exception a route raises."""

    def __init__(self, app: ASGIApp, metrics: CatalogMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 0

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception as exc:
            if status:  # the answer has begun: only the server can end the connection
                raise
            await error_response(exc, scope)(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            self.metrics.observe(getattr(route, "path", None) or UNMATCHED, status or 500,
                                 time.perf_counter() - start)
