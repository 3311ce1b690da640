"""The console's catalog pages: login, the adapter search, an adapter and its versions,
publish, alias moves and yanks. Pages call the catalog's services with the logged-in
user's principal, so a token sees and changes exactly what it could through the API."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request
from starlette.responses import RedirectResponse, Response

from mol_catalog.adapters import publish as pipeline
from mol_catalog.adapters import service as adapters
from mol_catalog.auth import Principal
from mol_catalog.console import session
from mol_catalog.console.render import PageRoute, refusal, render
from mol_catalog.db import ReadConn
from mol_catalog.errors import ApiError, BadRequest, json_response
from mol_catalog.evals import service as evals
from mol_catalog.events import service as events
from mol_catalog.profiles import service as profiles
from mol_catalog.usage import service as usage
from mol_catalog.util import (
    decode_cursor,
    encode_cursor,
    valid_alias,
    valid_name,
    version_number,
)

pages = APIRouter(route_class=PageRoute, include_in_schema=False)
calls = APIRouter(include_in_schema=False)  # script requests: JSON answers and errors
PAGE_SIZE = 25  # adapters per search page
VERSIONS_SHOWN = 100  # newest versions on an adapter's page
USAGE_DAYS = 30  # the usage window the adapter and version pages show
FEED_LIMIT = 200  # events the live feed reads per poll (other adapters' included)
FormText = Annotated[str, Form()]
OptionalText = Annotated[str | None, Query()]


def _full(ns: str, name: str) -> str:
    return f"{valid_name(ns, 'namespace')}/{valid_name(name, 'adapter name')}"


def _safe_next(target: str | None) -> str:
    """Where a login goes on: only a console path (never another site)."""
    if target and target.startswith("/ui/") and not target.startswith("//"):
        return target
    return "/ui/adapters"


@pages.get("/ui")
async def home() -> Response:
    return RedirectResponse("/ui/adapters", 303)


@pages.get("/ui/login")
async def login_form(request: Request, next: OptionalText = None) -> Response:  # noqa: A002
    if not session.catalog_of(request).settings.auth_enabled:
        return RedirectResponse(_safe_next(next), 303)
    return render(request, "login.html", None, next=_safe_next(next), problem=None)


@pages.post("/ui/login")
async def login(request: Request, token: FormText, csrf: FormText = "",
                next: FormText = "") -> Response:  # noqa: A002
    session.check_csrf(request, csrf)
    try:
        await session.login(request, token)
    except ApiError as exc:
        return render(request, "login.html", None, status=exc.status, next=_safe_next(next),
                      problem=exc.detail)
    response = RedirectResponse(_safe_next(next), 303)
    session.set_session(response, request, token)
    return response


@pages.post("/ui/logout")
async def logout(request: Request, csrf: FormText = "") -> Response:
    session.check_csrf(request, csrf)
    response = RedirectResponse("/ui/login", 303)
    session.end_session(response)
    return response


@pages.get("/ui/adapters")
async def adapter_list(request: Request, q: OptionalText = None, base: OptionalText = None,
                       tag: OptionalText = None, namespace: OptionalText = None,
                       cursor: OptionalText = None) -> Response:
    """The search: text, base model, tag and namespace filters, keyset paging."""
    who = await session.principal(request)
    filters = {"q": q or None, "base": base or None, "tag": tag or None,
               "namespace": namespace or None}
    items, last = await adapters.search(session.catalog_of(request), who, **filters,
                                        after=decode_cursor(cursor), limit=PAGE_SIZE)
    more = None
    if last is not None:
        more = "/ui/adapters?" + urlencode({**{k: v for k, v in filters.items() if v},
                                            "cursor": encode_cursor(last)})
    return render(request, "adapters.html", who, items=items, filters=filters, more=more,
                  paged=cursor is not None)


async def _adapter_context(request: Request, who: Principal, ns: str,
                           name: str) -> dict[str, Any]:
    who.require_read(ns)
    full = _full(ns, name)
    catalog = session.catalog_of(request)
    async with catalog.db.read() as conn:
        adapter = await adapters.describe(conn, full)
        versions, _ = await adapters.versions(conn, full, None, VERSIONS_SHOWN)
        history = {alias: await adapters.alias_history(conn, full, alias, 20)
                   for alias in sorted(adapter["aliases"])}
        feed_after = await events.latest_id(conn)
        used = await _usage(conn, full)
    return {"adapter": adapter, "versions": versions, "history": history,
            "feed_after": feed_after, "may_publish": _may_publish(who, ns), "usage": used}


async def _usage(conn: ReadConn, full: str) -> dict[str, Any]:
    """The adapter's use in the last USAGE_DAYS days, with its versions' by number."""
    row = await adapters.get_adapter(conn, full)
    out = await usage.adapter_usage(conn, row.id, full, USAGE_DAYS, 0)
    out["by_version"] = {v["version"]: v for v in out["versions"]}
    return out


def _may_publish(who: Principal, ns: str) -> bool:
    return who.admin or f"publish:{ns}" in who.scopes


@pages.get("/ui/adapters/{ns}/{name}")
async def adapter_page(request: Request, ns: str, name: str,
                       since: Annotated[int | None, Query(ge=0)] = None) -> Response:
    """Versions, aliases with their history, and the adapter's live event feed (from
    ``since`` when a change made here sent the browser back to this page)."""
    who = await session.principal(request)
    context = await _adapter_context(request, who, ns, name)
    if since is not None:
        context["feed_after"] = min(since, context["feed_after"])
    return render(request, "adapter.html", who, **context)


async def _version(request: Request, who: Principal, ns: str, name: str,
                   version: str) -> dict[str, Any]:
    who.require_read(ns)
    async with session.catalog_of(request).db.read() as conn:
        detail = await adapters.version_detail(conn, _full(ns, name), version_number(version))
        used = await _usage(conn, _full(ns, name))
    detail["usage"] = used["by_version"].get(detail["version"])
    detail["usage_days"] = used["days"]
    return detail


@pages.get("/ui/adapters/{ns}/{name}/versions/{version}")
async def version_page(request: Request, ns: str, name: str, version: str) -> Response:
    """Files with digests and sizes, the verdict per serving profile, lineage, eval
    reports, yank."""
    who = await session.principal(request)
    detail = await _version(request, who, ns, name, version)
    async with session.catalog_of(request).db.read() as conn:
        reports = await evals.reports_of(conn, detail["adapter"], detail["version"])
    return render(request, "version.html", who, v=detail, ns=ns, name=name, evals=reports,
                  may_publish=_may_publish(who, ns))


@pages.get("/ui/adapters/{ns}/{name}/alias")
async def alias_confirm(request: Request, ns: str, name: str,
                        alias: Annotated[str, Query()],
                        version: Annotated[str, Query()]) -> Response:
    """The confirmation of an alias move: the target version's verdicts first."""
    who = await session.principal(request)
    who.require_publish(ns)
    valid_alias(alias)
    return await _confirmation(request, who, ns, name, alias, version)


async def _confirmation(request: Request, who: Principal, ns: str, name: str, alias: str,
                        version: str, status: int = 200, **refused: Any) -> Response:
    detail = await _version(request, who, ns, name, version)
    async with session.catalog_of(request).db.read() as conn:
        current = (await adapters.describe(conn, detail["adapter"]))["aliases"].get(alias)
    return render(request, "alias_confirm.html", who, status=status, v=detail, ns=ns,
                  name=name, alias=alias, current=current, **refused)


@pages.post("/ui/adapters/{ns}/{name}/alias")
async def alias_move(request: Request, ns: str, name: str, alias: FormText, version: FormText,
                     csrf: FormText = "") -> Response:
    session.check_csrf(request, csrf)
    who = await session.principal(request)
    who.require_publish(ns)
    catalog = session.catalog_of(request)
    async with catalog.db.read() as conn:
        since = await events.latest_id(conn)
    try:
        async with catalog.db.unit() as uow:
            await adapters.set_alias(uow, _full(ns, name), alias, version_number(version),
                                     who, bindings_since=catalog.bindings.since())
    except ApiError as exc:
        if exc.status != 409:
            raise
        # Refused (a yanked target, a protected alias): the same confirmation again, with
        # the catalog's reasons, so the person sees why without leaving the move.
        return await _confirmation(request, who, ns, name, alias, version, 409,
                                   **refusal(exc))
    return RedirectResponse(f"/ui/adapters/{ns}/{name}?since={since}", 303)


@pages.post("/ui/adapters/{ns}/{name}/versions/{version}/yank")
async def yank(request: Request, ns: str, name: str, version: str, reason: FormText,
               csrf: FormText = "") -> Response:
    session.check_csrf(request, csrf)
    who = await session.principal(request)
    who.require_publish(ns)
    if not reason.strip():
        raise BadRequest("a yank needs a reason")
    async with session.catalog_of(request).db.unit() as uow:
        await adapters.yank(uow, _full(ns, name), version_number(version), reason.strip())
    return RedirectResponse(f"/ui/adapters/{ns}/{name}/versions/{version}", 303)


@pages.get("/ui/publish")
async def publish_form(request: Request, namespace: OptionalText = None,
                       name: OptionalText = None) -> Response:
    """Choose or drop a PEFT folder; the page uploads it and shows the verdicts."""
    who = await session.principal(request)
    async with session.catalog_of(request).db.read() as conn:
        known = await profiles.list_profiles(conn)
    return render(request, "publish.html", who, namespace=namespace or "", name=name or "",
                  profiles=known)


@calls.post("/ui/publish/{ns}/{name}")
async def publish(request: Request, ns: str, name: str) -> Response:
    """The page's upload (multipart, as the API's publish); JSON back, verdicts included."""
    session.check_csrf(request, request.headers.get(session.CSRF_HEADER))
    who = await session.principal(request)
    who.require_publish(ns)
    body, created = await pipeline.publish_form(session.catalog_of(request), ns, name,
                                                request, who)
    return json_response(body, 201 if created else 200)


@calls.get("/ui/events")
async def feed(request: Request, adapter: Annotated[str, Query()],
               after: Annotated[int, Query(ge=0)] = 0) -> Response:
    """The adapter page's live feed: that adapter's events after ``after``."""
    who = await session.principal(request)
    ns, _, name = adapter.partition("/")
    full = _full(ns, name)
    who.require_read(ns)
    async with session.catalog_of(request).db.read() as conn:
        items, last = await events.feed(conn, who, after, FEED_LIMIT)
    return json_response({"items": [e for e in items if e["adapter"] == full], "last": last})
