"""The console's stack page and playground (both need ``router_url``)."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response, StreamingResponse

from mol_catalog.console import session, stack
from mol_catalog.console.render import PageRoute, render
from mol_catalog.errors import ApiError, BadRequest, json_response

pages = APIRouter(route_class=PageRoute, include_in_schema=False)
calls = APIRouter(include_in_schema=False)
MAX_CHAT_BYTES = 1024 * 1024
# The playground renders the ui expert's HTML in a sandboxed srcdoc frame; with no frame
# source allowed, that frame cannot navigate itself to a URL either (a request to
# anywhere, which neither its sandbox nor its own CSP would stop).
PLAYGROUND_CSP = "frame-src 'none'"


@pages.get("/ui/stack")
async def stack_page(request: Request) -> Response:
    """Experts (stable and canary, weights, live rate and TTFT) and engines; the page
    refreshes its figures from /ui/stack/data."""
    who = await session.principal(request)
    settings = session.catalog_of(request).settings
    deployment, problem = None, None
    if settings.router_url:
        try:
            deployment = await stack.snapshot(settings)
        except ApiError as exc:
            problem = exc.detail
    return render(request, "stack.html", who, deployment=deployment, problem=problem)


@calls.get("/ui/stack/data")
async def stack_data(request: Request) -> Response:
    await session.principal(request)
    return json_response(await stack.snapshot(session.catalog_of(request).settings))


@pages.get("/ui/playground")
async def playground(request: Request) -> Response:
    """Chat with an expert, ``auto`` or a tenant adapter through the router."""
    who = await session.principal(request)
    settings = session.catalog_of(request).settings
    models, problem = [], None
    if settings.router_url:
        try:
            models = await stack.models(settings)
        except ApiError as exc:
            problem = exc.detail
    response = render(request, "playground.html", who, models=models, problem=problem)
    response.headers["content-security-policy"] = PLAYGROUND_CSP
    return response


@calls.post("/ui/playground/chat")
async def chat(request: Request) -> Response:
    """The playground's request, passed to the router as it is, answered as the router
    answers (streamed), with the router's ``x-mol-*`` headers."""
    session.check_csrf(request, request.headers.get(session.CSRF_HEADER))
    await session.principal(request)
    payload = await request.body()
    if len(payload) > MAX_CHAT_BYTES:
        raise BadRequest(f"a playground request is at most {MAX_CHAT_BYTES} bytes")
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise BadRequest("the playground sends a JSON chat request") from None
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise BadRequest("a chat request is a JSON object with 'messages'")
    relay = await stack.chat(session.catalog_of(request).settings, payload)
    return StreamingResponse(relay.body, status_code=relay.status,
                             media_type=relay.content_type, headers=relay.headers)
