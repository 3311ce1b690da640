"""The console's login and CSRF protection.

The token a user logs in with stays in an HttpOnly, SameSite=Strict cookie scoped to
/ui, so page scripts never see it. Every form and every script request that changes
something repeats a second random cookie's value (double-submit): another site can
make the browser send the cookies, but cannot read them to repeat the value.
"""

from __future__ import annotations

import hmac
import secrets

from starlette.requests import Request
from starlette.responses import Response

from mol_catalog.auth import Principal
from mol_catalog.deps import Catalog, principal_for
from mol_catalog.errors import Forbidden, Unauthorized

SESSION_COOKIE = "mol_console"
CSRF_COOKIE = "mol_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
COOKIE_PATH = "/ui"
SESSION_SECONDS = 8 * 3600


class LoginRequired(Unauthorized):
    """No valid console login: pages send the browser to the login form, script
    requests get this 401."""


def catalog_of(request: Request) -> Catalog:
    catalog: Catalog = request.app.state.catalog
    return catalog


async def principal(request: Request) -> Principal:
    """The logged-in user (the anonymous admin when the catalog runs with auth off)."""
    catalog = catalog_of(request)
    if not catalog.settings.auth_enabled:
        return await principal_for(catalog, None)
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        raise LoginRequired("log in with a catalog token first")
    try:
        return await principal_for(catalog, f"Bearer {token}")
    except Unauthorized:
        raise LoginRequired("the token of this login is no longer valid: log in again") \
            from None


async def login(request: Request, token: str) -> Principal:
    """Who ``token`` is; 401 when it is no valid catalog token."""
    token = token.strip()
    if not token:
        raise Unauthorized("enter a catalog token (mol_...)")
    return await principal_for(catalog_of(request), f"Bearer {token}")


def csrf_token(request: Request) -> str:
    """This browser's CSRF value: the cookie's, or a new one (``set_csrf`` stores it)."""
    return request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(32)


def check_csrf(request: Request, sent: str | None) -> None:
    """403 unless ``sent`` (a form field or header) repeats the CSRF cookie."""
    cookie = request.cookies.get(CSRF_COOKIE)
    if not cookie or not sent or not hmac.compare_digest(cookie.encode(), sent.encode()):
        raise Forbidden("the form's CSRF token is missing or stale: reload the page and "
                        "try again")


def _secure(request: Request) -> bool:
    public = catalog_of(request).settings.public_url or ""
    return request.url.scheme == "https" or public.startswith("https://")


def set_csrf(response: Response, request: Request, value: str) -> None:
    if request.cookies.get(CSRF_COOKIE) != value:
        response.set_cookie(CSRF_COOKIE, value, path=COOKIE_PATH, httponly=True,
                            samesite="strict", secure=_secure(request))


def set_session(response: Response, request: Request, token: str) -> None:
    response.set_cookie(SESSION_COOKIE, token.strip(), max_age=SESSION_SECONDS,
                        path=COOKIE_PATH, httponly=True, samesite="strict",
                        secure=_secure(request))


def end_session(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH, httponly=True,
                           samesite="strict")
