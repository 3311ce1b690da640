"""Bearer tokens and scopes.

A token is ``mol_`` + 43 characters (32 random bytes, urlsafe base64); only its
sha256 is stored, so checking one is a hash and an indexed lookup. Lookups are cached
in-process for a few seconds; revoking through this process clears the cache at once,
other worker processes notice within ``CACHE_SECONDS``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from starlette.requests import Request

from mol_catalog.errors import Forbidden, Unauthorized

CACHE_SECONDS = 5.0
TOKEN_PREFIX = "mol_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who is calling and what they may do."""

    name: str
    scopes: frozenset[str]

    @property
    def admin(self) -> bool:
        return "admin" in self.scopes

    def can_read(self, namespace: str | None = None) -> bool:
        if self.admin or "read" in self.scopes:
            return True
        if namespace is None:
            return False
        return f"read:{namespace}" in self.scopes or f"publish:{namespace}" in self.scopes

    def readable_namespaces(self) -> set[str] | None:
        """None when every namespace is readable, else the namespaces this token may read."""
        if self.admin or "read" in self.scopes:
            return None
        return {s.split(":", 1)[1] for s in self.scopes if s.startswith(("read:", "publish:"))}

    def require_read(self, namespace: str | None = None) -> None:
        if not self.can_read(namespace):
            what = f"namespace {namespace!r}" if namespace else "the catalog"
            raise Forbidden(f"token {self.name!r} may not read {what}: needs scope 'read'"
                            + (f", 'read:{namespace}' or 'publish:{namespace}'"
                               if namespace else ""))

    def require_publish(self, namespace: str) -> None:
        if not (self.admin or f"publish:{namespace}" in self.scopes):
            raise Forbidden(f"token {self.name!r} may not publish to namespace {namespace!r}: "
                            f"needs scope 'publish:{namespace}' or 'admin'")

    def can_report_usage(self, namespace: str) -> bool:
        """``usage`` / ``usage:<ns>`` (or admin): the one thing a router's usage scope
        grants; read and publish scopes do not include it."""
        return self.admin or "usage" in self.scopes or f"usage:{namespace}" in self.scopes

    def require_usage(self, namespace: str) -> None:
        if not self.can_report_usage(namespace):
            raise Forbidden(f"token {self.name!r} may not report usage for namespace "
                            f"{namespace!r}: needs scope 'usage', 'usage:{namespace}' or "
                            "'admin'")

    def require_admin(self) -> None:
        if not self.admin:
            raise Forbidden(f"token {self.name!r} lacks the 'admin' scope")


ANONYMOUS_ADMIN = Principal("anonymous", frozenset({"admin"}))


class TokenCache:
    """hash -> (principal or None, expiry); a tiny TTL cache in front of the tokens table."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[Principal | None, float]] = {}

    def get(self, digest: str) -> tuple[bool, Principal | None]:
        entry = self._entries.get(digest)
        if entry is None or entry[1] < time.monotonic():
            return False, None
        return True, entry[0]

    def put(self, digest: str, principal: Principal | None) -> None:
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[digest] = (principal, time.monotonic() + CACHE_SECONDS)

    def clear(self) -> None:
        self._entries.clear()


def bearer(request: Request) -> str:
    return bearer_token(request.headers.get("authorization"))


def bearer_token(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header value."""
    if not header:
        raise Unauthorized("missing Authorization header: send 'Authorization: Bearer <token>'")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'")
    return token.strip()


def matches_admin_token(token: str, admin_token: str | None) -> bool:
    return bool(admin_token) and hmac.compare_digest(token.encode(), str(admin_token).encode())
