"""Where the engines are: a static list, or a Service's EndpointSlices.

In a cluster the router lists and then watches the EndpointSlices of the engine
Service (label ``kubernetes.io/service-name``) through the Kubernetes API, and hands
the tracker every ready address on the named port. A dropped watch is resumed from
the last resourceVersion; a 410 (too old) or any error starts over with a fresh list.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp
import orjson

from mol_platform.contract.router_config import EndpointSliceSelector, RouterConfig
from mol_router.settings import RouterSettings

log = logging.getLogger("mol.router.discovery")
SetEndpoints = Callable[[list[str]], None]


class EndpointSource(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class StaticEndpoints:
    def __init__(self, urls: list[str], sink: SetEndpoints) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.sink = sink

    async def start(self) -> None:
        self.sink(self.urls)

    async def stop(self) -> None:
        return None


def slice_urls(slices: dict[str, dict[str, Any]], port_name: str) -> list[str]:
    """Ready addresses of every slice on the named port, as ``http://host:port``."""
    urls: list[str] = []
    for s in slices.values():
        ports = [p for p in s.get("ports") or () if p.get("name") == port_name]
        if not ports or not isinstance(ports[0].get("port"), int):
            continue
        port = ports[0]["port"]
        for ep in s.get("endpoints") or ():
            if (ep.get("conditions") or {}).get("ready") is False:
                continue
            for addr in ep.get("addresses") or ():
                host = f"[{addr}]" if ":" in addr else addr
                urls.append(f"http://{host}:{port}")
    return sorted(set(urls))


class EndpointSliceWatcher:
    """List + watch the EndpointSlices of one Service."""

    def __init__(self, selector: EndpointSliceSelector, settings: RouterSettings,
                 api_url: str, sink: SetEndpoints) -> None:
        self.selector = selector
        self.settings = settings
        self.api_url = api_url
        self.sink = sink
        self._task: asyncio.Task[None] | None = None
        self._slices: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()

    @property
    def path(self) -> str:
        return f"/apis/discovery.k8s.io/v1/namespaces/{self.selector.namespace}/endpointslices"

    def _headers(self) -> dict[str, str]:
        try:
            token = self.settings.kube_token_file.read_text().strip()
        except OSError:
            return {}
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self.api_url.startswith("https://"):
            return False
        ca = self.settings.kube_ca_file
        return ssl.create_default_context(cafile=str(ca)) if ca.is_file() else True

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="mol-endpointslices")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.synced.wait(), 5.0)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _publish(self) -> None:
        self.sink(slice_urls(self._slices, self.selector.port_name))

    async def _run(self) -> None:
        params = {"labelSelector": f"kubernetes.io/service-name={self.selector.service_name}"}
        connector = aiohttp.TCPConnector(ssl=self._ssl())
        async with aiohttp.ClientSession(self.api_url, connector=connector) as http:
            while True:
                try:
                    version: str | None = await self._list(http, params)
                    while version is not None:
                        version = await self._watch(http, params, version)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("EndpointSlice watch failed (%s); retrying", exc)
                    await asyncio.sleep(1.0)

    async def _list(self, http: aiohttp.ClientSession, params: dict[str, str]) -> str:
        async with http.get(self.path, params=params, headers=self._headers()) as resp:
            resp.raise_for_status()
            body = orjson.loads(await resp.read())
        self._slices = {i["metadata"]["name"]: i for i in body.get("items") or ()}
        self._publish()
        self.synced.set()
        return str(body.get("metadata", {}).get("resourceVersion", ""))

    async def _watch(self, http: aiohttp.ClientSession, params: dict[str, str],
                     since: str) -> str | None:
        """Follow one watch; the version to resume from, or None to list again."""
        version: str = since
        query = {**params, "watch": "true", "resourceVersion": since,
                 "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=330)
        async with http.get(self.path, params=query, headers=self._headers(),
                            timeout=timeout) as resp:
            if resp.status == 410:
                return None
            resp.raise_for_status()
            async for line in resp.content:
                if not line.strip():
                    continue
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return None  # e.g. 410 Gone inside the stream
                meta = obj.get("metadata") or {}
                version = str(meta.get("resourceVersion", version))
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    self._slices.pop(meta.get("name", ""), None)
                else:
                    self._slices[meta.get("name", "")] = obj
                self._publish()
        return version


def make_endpoint_source(cfg: RouterConfig, settings: RouterSettings,
                         sink: SetEndpoints) -> EndpointSource:
    if cfg.endpoint_slice is not None:
        url = settings.kube_url()
        if url is None:
            raise ValueError("endpointSlice needs the Kubernetes API: run in a pod or set "
                             "MOL_ROUTER_KUBE_API_URL")
        return EndpointSliceWatcher(cfg.endpoint_slice, settings, url, sink)
    return StaticEndpoints(cfg.endpoints, sink)
