"""The sandbox service's client (docs/sandbox.md), on the router's own HTTP session.

It speaks for the caller: the ``Authorization`` it sends is what makes the session the
caller's tenant's (:func:`mol_router.harness.loop.sandbox_auth`). Whatever goes wrong on
the way is one of three things the loop acts on: the session is unknown (another
tenant's, or deleted), it was reaped (idle past its time-to-live), or the service is not
usable now.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import orjson

log = logging.getLogger("mol.router.harness")
_PEEK = 2000  # bytes of an error body kept for the log


class SandboxError(Exception):
    """The service could not be used: down, full, refusing the router, or too slow."""


class SessionUnknown(Exception):
    """404: no such session for this tenant (another tenant's id answers the same)."""


class SessionReaped(Exception):
    """410: the session was reaped; a new one must be made."""


class SandboxClient:
    def __init__(self, http: aiohttp.ClientSession, url: str, auth: str | None,
                 timeout: float) -> None:
        self.http, self.url, self.timeout = http, url.rstrip("/"), timeout
        self.headers = {"Content-Type": "application/json"}
        if auth:
            self.headers["Authorization"] = auth

    async def _call(self, method: str, path: str, body: dict[str, Any] | None,
                    limit: float) -> tuple[int, Any]:
        try:
            async with self.http.request(
                    method, self.url + path, headers=self.headers,
                    data=orjson.dumps(body) if body is not None else None,
                    timeout=aiohttp.ClientTimeout(total=limit)) as resp:
                data = await resp.read()
                status = resp.status
        except TimeoutError:
            raise
        except (aiohttp.ClientError, OSError) as exc:
            raise SandboxError(f"the sandbox service could not be reached: "
                               f"{exc.__class__.__name__}") from None
        if status == 404:
            raise SessionUnknown(path)
        if status == 410:
            raise SessionReaped(path)
        if status >= 300:
            detail = data[:_PEEK].decode("utf-8", "replace")
            if status in (401, 403):
                log.warning("the sandbox service refused the router's credentials (%d): %s",
                            status, detail)
            raise SandboxError(_why(status, data))
        try:
            return status, orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            raise SandboxError("the sandbox service answered something other than JSON") \
                from None

    async def create(self) -> str:
        """A new session's id."""
        try:
            _, obj = await self._call("POST", "/v1/sessions", None, self.timeout)
        except TimeoutError:
            raise SandboxError(f"no session started within {self.timeout:g} s") from None
        ident = obj.get("id") if isinstance(obj, dict) else None
        if not isinstance(ident, str):
            raise SandboxError("the sandbox service answered without a session id")
        return ident

    async def check(self, session: str) -> None:
        """That ``session`` is there for this tenant (raises SessionUnknown,
        SessionReaped, SandboxError)."""
        try:
            await self._call("GET", f"/v1/sessions/{session}", None, min(self.timeout, 10.0))
        except TimeoutError:
            raise SandboxError("the sandbox service did not answer in time") from None

    async def execute(self, session: str, code: str, limit: float) -> dict[str, Any]:
        """The execute answer; TimeoutError past ``limit`` seconds (the sandbox stops
        the call at its own limit)."""
        _, obj = await self._call("POST", f"/v1/sessions/{session}/execute", {"code": code},
                                  limit)
        if not isinstance(obj, dict):
            raise SandboxError("the sandbox service answered an unexpected body")
        return obj


def _why(status: int, data: bytes) -> str:
    """The service's own words where it has some (``{"error", "detail"}``)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("detail"), str):
        return f"the sandbox service answered {status}: {obj['detail'][:300]}"
    return f"the sandbox service answered {status}"
