"""Pages from the Jinja2 templates shipped in this package, and the console's route
class: a page that fails shows the error as a page (a login form when no one is
logged in) instead of the API's JSON."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from mol_catalog.auth import Principal
from mol_catalog.console import session
from mol_catalog.errors import ApiError

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.auto_reload = False  # shipped files: no stat of each template per page


def _when(value: object) -> str:
    """A stored timestamp as the pages show it (UTC, to the second)."""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value or "")


def _size(value: object) -> str:
    """Bytes as people read them (1 decimal from KiB up)."""
    size = float(value) if isinstance(value, int | float) else 0.0
    if size < 1024:
        return f"{size:.0f} B"
    for unit in ("KiB", "MiB"):
        size /= 1024
        if size < 1024:
            return f"{size:.1f} {unit}"
    return f"{size / 1024:.1f} GiB"


def _decoded(value: object) -> Any:
    """Tags and labels as listings carry them (stored JSON text) as Python values."""
    return orjson.loads(orjson.dumps(value)) if isinstance(value, orjson.Fragment) else value


templates.env.filters["when"] = _when
templates.env.filters["decoded"] = _decoded
templates.env.filters["size"] = _size


def render(request: Request, template: str, who: Principal | None, *, status: int = 200,
           **context: Any) -> Response:
    """The page, with what every page shows (navigation, login, the CSRF value its
    forms carry); the CSRF cookie is set on the first page a browser gets."""
    catalog = session.catalog_of(request)
    csrf = session.csrf_token(request)
    response = templates.TemplateResponse(request, template, {
        "who": who, "csrf": csrf, "csrf_field": session.CSRF_FIELD,
        "auth": catalog.settings.auth_enabled,
        "router_url": catalog.settings.router_url, **context}, status_code=status)
    session.set_csrf(response, request, csrf)
    response.headers["cache-control"] = "no-store"
    return response


def refusal(exc: ApiError) -> dict[str, Any]:
    """What a page shows of a refused request: the detail and the reasons, when the error
    carries them (``{"code", "message"}`` items, as publish's 422 and any 409 may)."""
    reasons = exc.extra.get("reasons")
    items = [r for r in reasons if isinstance(r, dict | str)] if isinstance(reasons, list) else []
    return {"problem": exc.detail, "reasons": items}


class PageRoute(APIRoute):
    """A console page: a missing login redirects to the login form (coming back here
    afterwards), any other catalog error is shown on the error page with its status."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page(request: Request) -> Response:
            try:
                return await handler(request)
            except session.LoginRequired:
                target = request.url.path + (f"?{request.url.query}" if request.url.query
                                             else "")
                return RedirectResponse(f"/ui/login?next={quote(target)}", 303)
            except ApiError as exc:
                return render(request, "error.html", None, status=exc.status,
                              error=exc.error, **refusal(exc))

        return page
