"""The ``example_runs`` check: a proposed tool's own example, run in a fresh sandbox
session at publish.

The catalog is a client of the sandbox service (docs/sandbox.md) like the router: it
makes a session, runs the tool's source and one call with the example's arguments
(``contract.tools.example_code``), and ends the session, all within
``sandbox_timeout`` seconds. What happened is the check's outcome, advice beside the
other checks: the example ran (``ok: true``, with its result), it raised or ran past
the time (``ok: false``, with the error), or it could not be run (``ok: null``: no
example, no function to call, no sandbox configured, the sandbox down, full or refusing
the catalog). A publish never fails because of it: a sandbox outage is the check's
detail, not the publish's status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import httpx

from mol_catalog.settings import CatalogSettings
from mol_platform.contract import tools as tc

log = logging.getLogger("mol.catalog.tools")
_SHOWN = 300  # characters of a result or error kept in the check's detail
# Examples run at once per process; more proposals wait for a turn within their time.
CONCURRENT_RUNS = 4


class _NotRun(Exception):
    """The example could not be run; the message says why."""


def _tail(text: str) -> str:
    """The end of a traceback (where it says what was raised), or the head of a result."""
    text = text.strip()
    return text if len(text) <= _SHOWN else "…" + text[-_SHOWN:]


def _head(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


class ExampleRunner:
    """The sandbox client of one catalog process (made in the app's lifespan)."""

    def __init__(self, url: str, token: str | None, timeout: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout
        self.http = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers,
                                      timeout=timeout, transport=transport)
        self._turns = asyncio.Semaphore(CONCURRENT_RUNS)

    @classmethod
    def from_settings(cls, settings: CatalogSettings) -> ExampleRunner | None:
        if not settings.sandbox_url:
            return None
        return cls(settings.sandbox_url, settings.sandbox_token, settings.sandbox_timeout)

    async def close(self) -> None:
        await self.http.aclose()

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None
                    ) -> Any:
        try:
            r = await self.http.request(method, path, json=body)
        except httpx.TimeoutException:
            raise
        except httpx.HTTPError as exc:
            raise _NotRun(f"the sandbox service at {self.http.base_url} could not be "
                          f"reached ({exc.__class__.__name__})") from None
        if r.status_code >= 300:
            detail = ""
            with contextlib.suppress(ValueError, AttributeError):
                detail = f": {_head(str(r.json().get('detail', '')))}"
            raise _NotRun(f"the sandbox service answered {r.status_code}{detail}")
        try:
            return r.json()
        except ValueError:
            raise _NotRun("the sandbox service answered something other than JSON") from None

    async def _run(self, code: str) -> dict[str, Any]:
        created = await self._call("POST", "/v1/sessions")
        sid = created.get("id") if isinstance(created, dict) else None
        if not isinstance(sid, str):
            raise _NotRun("the sandbox service answered without a session id")
        try:
            out = await self._call("POST", f"/v1/sessions/{sid}/execute", {"code": code})
        finally:
            # Ending the session stops its interpreter, also one still running the
            # example past our time; a failure here is the reaper's to clean up.
            with contextlib.suppress(httpx.HTTPError):
                await asyncio.shield(self.http.delete(f"/v1/sessions/{sid}", timeout=5.0))
        if not isinstance(out, dict):
            raise _NotRun("the sandbox service answered an unexpected body")
        return out

    async def run(self, name: str, source: str, example: dict[str, Any]) -> tc.Check:
        """Run the example; the check's outcome (never raises for the sandbox's sake)."""
        start = time.monotonic()
        try:
            async with asyncio.timeout(self.timeout):
                async with self._turns:
                    out = await self._run(tc.example_code(name, source, example))
        except (TimeoutError, httpx.TimeoutException):
            return tc.Check(tc.EXAMPLE_CHECK, False, f"the example did not finish within "
                            f"{self.timeout:g} s in a sandbox session")
        except _NotRun as exc:
            log.warning("the example of tool %s was not run: %s", name, exc)
            return tc.Check(tc.EXAMPLE_CHECK, None, f"not run: {exc}")
        took = out.get("duration_ms")
        took_text = f" in {took:.0f} ms" if isinstance(took, int | float) else ""
        error = out.get("error")
        if error:
            return tc.Check(tc.EXAMPLE_CHECK, False,
                            f"the example raised in a sandbox session: {_tail(str(error))}")
        result = out.get("result")
        shown = _head(str(result)) if result is not None else "None"
        log.debug("the example of tool %s ran in %.3f s", name, time.monotonic() - start)
        return tc.Check(tc.EXAMPLE_CHECK, True, f"the example ran in a fresh sandbox "
                        f"session{took_text} and returned {shown}")


async def example_check(runner: ExampleRunner | None, name: str, source: str,
                        example: dict[str, Any] | None,
                        checks: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``example_runs`` check of a proposal whose other checks are ``checks``."""
    if runner is None:
        return tc.Check(tc.EXAMPLE_CHECK, None, tc.NOT_RUN).body()
    if example is None:
        return tc.Check(tc.EXAMPLE_CHECK, None, "not run: the proposal has no example "
                        "(give one with \"example\": {arguments})").body()
    if not any(c["name"] == "defines_function" and c["ok"] for c in checks):
        return tc.Check(tc.EXAMPLE_CHECK, None, "not run: the source does not define "
                        "exactly the named function").body()
    return (await runner.run(name, source, example)).body()
