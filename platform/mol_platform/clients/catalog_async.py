"""The catalog client for long-running async processes: router, operator, the vLLM plugin.

Same calls, request shapes and errors as :class:`mol_platform.clients.catalog.CatalogClient`
(``catalog_http`` builds the requests both send and reads their answers; this class
only awaits them); see docs/client.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from mol_platform.clients.catalog_http import (
    ClientSettings,
    DownloadFile,
    absolute_files,
    alias_path,
    auth_headers,
    checked,
    decoded,
    download_failed,
    download_request,
    evals_path,
    events_params,
    join_url,
    profile_body,
    quote_segment,
    resend,
    resolve_call,
    router_head_path,
    router_head_ref_path,
    router_head_version,
    token_body,
    typed,
    unreachable,
)
from mol_platform.clients.catalog_tools import AsyncToolCalls
from mol_platform.contract import catalog_models as m


class AsyncCatalogClient(AsyncToolCalls):
    """Async client for long-running processes (router, operator, the vLLM plugin).

    Same errors and request shapes as :class:`CatalogClient`; use it as an async context
    manager or call :meth:`aclose`. Not for the proxy's hot path: callers cache answers.
    The calls on tools are ``catalog_tools.AsyncToolCalls``'s.
    """

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 timeout: float = 10.0, max_connections: int = 16,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        """``max_connections``: calls in flight at once; more wait their turn here.

        httpx's pool scans every connection (and, for each idle one, every connection
        again) whenever it places or finishes a request, so a pool with many connections
        or a long queue costs more CPU than the calls: an operator with a thousand
        deployments spent a third of its time there. Waiting in a semaphore costs nothing.
        """
        settings = ClientSettings()
        self.url = (url or settings.url).rstrip("/")
        token = token if token is not None else settings.token
        self._slots = asyncio.Semaphore(max_connections)
        self._timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=auth_headers(token), transport=transport,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections))

    async def __aenter__(self) -> AsyncCatalogClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def absolute_url(self, url: str) -> str:
        """A download URL as the catalog gave it (absolute, or relative to the catalog)."""
        return join_url(self.url, url)

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call; raises CatalogError on a non-2xx answer or a transport failure."""
        try:
            async with self._slots:
                try:
                    response = await self._http.request(method, path, **kwargs)
                except httpx.RemoteProtocolError:
                    if not resend(method):
                        raise
                    response = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise unreachable("reach the catalog at", self.url, exc) from None
        return checked(response)

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return decoded(await self.request(method, path, **kwargs))

    async def resolve(self, ref: str, profile: str | None = None, *,
                      traceparent: str | None = None) -> m.Resolved:
        """``ns/name@alias|latest|vN|sha256:...`` -> version, digest, files, verdict;
        ``traceparent`` makes the catalog's span a child of the caller's."""
        path, params = resolve_call(ref, profile)
        headers = {"traceparent": traceparent} if traceparent is not None else None
        return absolute_files(typed(m.Resolved, await self._json(
            "GET", path, params=params, headers=headers)), self.url)

    async def events(self, after: int = 0, limit: int = 100, wait: float = 0.0
                     ) -> m.EventPage:
        """One page of the change feed: ``items`` after ``after``, and ``last``; with
        ``wait`` (at most 30 s) the catalog holds the call until an event comes or time
        runs out, and the call's own time limit grows by as much."""
        extra: dict[str, Any] = {}
        if wait:
            extra["timeout"] = httpx.Timeout(self._timeout + wait,
                                             connect=min(self._timeout, 5.0))
        return typed(m.EventPage, await self._json(
            "GET", "/v1/events", params=events_params(after, limit, wait), **extra))

    async def evals(self, adapter: str, version: int) -> list[m.EvalReport]:
        """The version's eval reports, by suite and suite version."""
        return typed(m.EvalList, await self._json("GET", evals_path(adapter, version))).items

    async def get_base(self, name: str) -> m.BaseDetail:
        path = f"/v1/base-models/{quote_segment(name)}"
        return typed(m.BaseDetail, await self._json("GET", path))

    async def set_profile(self, name: str, *, base_model: str, max_lora_rank: int,
                          max_loras: int, engine: str | None = None,
                          supported_modules: Sequence[str] | None = None,
                          require_signatures: bool = False) -> m.Profile:
        """Declare or change a serving profile."""
        body = profile_body(base_model, max_lora_rank, max_loras, engine, supported_modules,
                            require_signatures)
        path = f"/v1/serving-profiles/{quote_segment(name)}"
        return typed(m.Profile, await self._json("PUT", path, json=body))

    async def set_alias(self, adapter: str, alias: str, version: int) -> m.AliasSet:
        """Point ``alias`` at ``version`` (``previous``: where it pointed before)."""
        return typed(m.AliasSet, await self._json("PUT", alias_path(adapter, alias),
                                                  json={"version": int(version)}))

    async def create_token(self, name: str, scopes: Sequence[str]) -> m.TokenCreated:
        """Create a token; the answer's ``token`` is shown only this once."""
        return typed(m.TokenCreated, await self._json("POST", "/v1/tokens",
                                                      json=token_body(name, scopes)))

    async def list_tokens(self, prefix: str = "", *, active: bool = False) -> list[m.TokenInfo]:
        """Tokens whose name starts with ``prefix``; ``active``: only unrevoked ones."""
        params = {k: v for k, v in (("prefix", prefix), ("active", "true" if active else ""))
                  if v}
        return typed(m.TokenList, await self._json("GET", "/v1/tokens", params=params)).items

    async def revoke_token(self, token_id: str) -> None:
        await self.request("DELETE", f"/v1/tokens/{quote_segment(str(token_id))}")

    async def report_usage(self, batch: Mapping[str, Any]) -> m.UsageRecorded:
        """Post a usage batch (``{"batch_id", "entries": [...]}``); safe to retry: the
        catalog counts a batch id once."""
        return typed(m.UsageRecorded, await self._json("POST", "/v1/usage", json=dict(batch)))

    async def report_decisions(self, batch: Mapping[str, Any]) -> m.DecisionsRecorded:
        """Post a batch of routing decisions (``{"batch_id", "decisions": [...]}``); safe
        to retry: the catalog records a batch id once, and a request id once per
        namespace."""
        return typed(m.DecisionsRecorded, await self._json("POST", "/v1/routing/decisions",
                                                           json=dict(batch)))

    async def router_head(self, namespace: str, name: str,
                          ref: int | str) -> m.RouterHeadVersion:
        """A router head version (``ref`` an int) or the version an alias names (``ref`` a
        str: a ``RouterHeadAlias``); what a router resolves at start and on alias moves."""
        model = m.RouterHeadVersion if isinstance(ref, int) else m.RouterHeadAlias
        return typed(model, await self._json("GET", router_head_ref_path(namespace, name, ref)))

    async def router_head_document(self, namespace: str, name: str, version: int) -> bytes:
        """The version's stored document, byte for byte: check its sha256 against the
        digest :meth:`router_head` gave before loading it."""
        return (await self.request("GET", router_head_path(
            namespace, name, "versions", router_head_version(version), "document"))).content

    async def download(self, url: str, dest: Path, *, chunk: int = 1 << 20) -> str:
        """Stream one file to ``dest`` (absolute or catalog-relative URL); its sha256 hex.

        The caller verifies the digest and moves the file into place: ``dest`` may hold
        a partial file when this raises.
        """
        request = download_request(self._http, self.url, url)
        out = DownloadFile(dest)
        try:
            async with self._slots:
                response = await self._http.send(request, stream=True)
                try:
                    if response.is_error:
                        await response.aread()
                    checked(response)
                    with out:
                        async for block in response.aiter_bytes(chunk):
                            out.write(block)
                finally:
                    await response.aclose()
        except httpx.TransportError as exc:
            raise download_failed(url, self.url, exc) from None
        return out.hexdigest
