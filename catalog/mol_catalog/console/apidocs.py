"""/docs and /redoc with their scripts and styles served by the catalog itself (from
the wheel's vendor folder, built from npm at install), so they work offline; FastAPI's
own pages load them from a CDN."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from starlette.responses import Response

router = APIRouter(include_in_schema=False)
VENDOR = "/ui/static/vendor"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"


@router.get("/docs")
async def swagger_ui(request: Request) -> Response:
    return get_swagger_ui_html(
        openapi_url="/openapi.json", title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{VENDOR}/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url=f"{VENDOR}/swagger-ui/swagger-ui.css",
        swagger_favicon_url=f"{VENDOR}/swagger-ui/favicon-32x32.png",
        oauth2_redirect_url=OAUTH2_REDIRECT)


@router.get(OAUTH2_REDIRECT)
async def swagger_ui_redirect() -> Response:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc(request: Request) -> Response:
    return get_redoc_html(openapi_url="/openapi.json", title=f"{request.app.title} - ReDoc",
                          redoc_js_url=f"{VENDOR}/redoc/redoc.standalone.js",
                          redoc_favicon_url=f"{VENDOR}/swagger-ui/favicon-32x32.png",
                          with_google_fonts=False)
