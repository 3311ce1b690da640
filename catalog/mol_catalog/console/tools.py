"""The console's tools pages: a namespace's tools with every version proposed or
approved, one version's source, parameters, automatic checks and lineage, and its
approval, which moves the protected ``approved`` alias.

A tool written by a model is offered to sessions only once a person approves it, so the
version page puts what must be read before approving (the code, what it may be called
with, where it came from) above the button, and the checks beside it as advice. The
pages call the tools service with the logged-in principal: reading needs ``read:<ns>``
and approving ``admin``, exactly as through the API."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from starlette.responses import RedirectResponse, Response

from mol_catalog.auth import Principal
from mol_catalog.console import session
from mol_catalog.console.render import PageRoute, refusal, render
from mol_catalog.errors import ApiError, InvalidName
from mol_catalog.tools import service as tools
from mol_catalog.util import valid_name, version_number
from mol_platform.contract import tools as tc

pages = APIRouter(route_class=PageRoute, include_in_schema=False)
FormText = Annotated[str, Form()]


def _names(ns: str, name: str) -> tuple[str, str]:
    try:
        return valid_name(ns, "namespace"), tc.check_tool_name(name)
    except tc.ToolError as exc:
        raise InvalidName(str(exc)) from None


@pages.get("/ui/tools")
async def tools_page(request: Request,
                     namespace: Annotated[str | None, Query()] = None) -> Response:
    """A namespace's tools, each with its versions newest first, proposed or approved."""
    who = await session.principal(request)
    listed: list[dict[str, Any]] = []
    if namespace:
        ns = valid_name(namespace, "namespace")
        who.require_read(ns)
        async with session.catalog_of(request).db.read() as conn:
            for item in await tools.tools(conn, ns):
                listed.append({**item, "versions": await tools.versions(conn, ns,
                                                                          item["name"])})
    return render(request, "tools.html", who, namespace=namespace or "", tools=listed)


async def _version_page(request: Request, who: Principal, ns: str, name: str, version: str,
                        status: int = 200, **refused: Any) -> Response:
    who.require_read(ns)
    async with session.catalog_of(request).db.read() as conn:
        v = await tools.version(conn, ns, name, version_number(version))
    return render(request, "tool.html", who, status=status, v=v, may_approve=who.admin,
                  **refused)


@pages.get("/ui/tools/{ns}/{name}/versions/{version}")
async def tool_page(request: Request, ns: str, name: str, version: str) -> Response:
    """One version: source, parameters, example, checks (advice), lineage, approval."""
    who = await session.principal(request)
    ns, name = _names(ns, name)
    return await _version_page(request, who, ns, name, version)


@pages.post("/ui/tools/{ns}/{name}/approve")
async def approve(request: Request, ns: str, name: str, version: FormText,
                  csrf: FormText = "") -> Response:
    """Move ``approved`` to the version (admin). A refusal (409: an unsigned version where
    the namespace requires signatures) shows the version page again with the reasons."""
    session.check_csrf(request, csrf)
    who = await session.principal(request)
    ns, name = _names(ns, name)
    try:
        async with session.catalog_of(request).db.unit() as uow:
            await tools.approve(uow, ns, name, tc.APPROVED, version_number(version), False,
                                who.name, who.admin)
    except ApiError as exc:
        if exc.status != 409:
            raise
        return await _version_page(request, who, ns, name, version, 409, **refusal(exc))
    return RedirectResponse(f"/ui/tools?namespace={ns}#tool-{name}", 303)
