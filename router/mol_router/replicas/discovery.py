"""Where the engines are: a static list, or a Service's EndpointSlices.

In a cluster the router lists and then watches the EndpointSlices of the engine
Service (label ``kubernetes.io/service-name``) through the Kubernetes API, and hands
the tracker every ready address on the named port. The loop is the platform's
(``mol_platform.clients.kube.list_watch``, the operator's informer runs it too): a
dropped watch is resumed from the last resourceVersion; a 410 (too old) or any error
starts over with a fresh list.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from mol_platform.clients.kube import KubeApi, KubeError, list_watch
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
    """List + watch the EndpointSlices of one Service (a Reflector of ``list_watch``)."""

    def __init__(self, selector: EndpointSliceSelector, kube: KubeApi,
                 sink: SetEndpoints) -> None:
        self.selector = selector
        self.kube = kube
        self.sink = sink
        self._task: asyncio.Task[None] | None = None
        self._slices: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="mol-endpointslices")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.synced.wait(), 5.0)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.kube.aclose()

    async def _run(self) -> None:
        labels = {"kubernetes.io/service-name": self.selector.service_name}
        await list_watch(self.kube, "discovery.k8s.io/v1", "endpointslices",
                         self.selector.namespace, labels, self)

    def _publish(self) -> None:
        self.sink(slice_urls(self._slices, self.selector.port_name))

    def listed(self, items: list[dict[str, Any]], version: str) -> None:
        self._slices = {i["metadata"]["name"]: i for i in items}
        self._publish()
        self.synced.set()

    def changed(self, kind: str, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        if kind == "DELETED":
            self._slices.pop(name, None)
        else:
            self._slices[name] = obj
        self._publish()

    async def absent(self, refusal: KubeError | None) -> None:
        """The EndpointSlice API is served by every supported cluster: wait and retry."""
        log.warning("the Kubernetes API does not serve EndpointSlices; retrying")
        await asyncio.sleep(5.0)


def make_endpoint_source(cfg: RouterConfig, settings: RouterSettings,
                         sink: SetEndpoints) -> EndpointSource:
    if cfg.endpoint_slice is not None:
        url = settings.kube_url()
        if url is None:
            raise ValueError("endpointSlice needs the Kubernetes API: run in a pod or set "
                             "MOL_ROUTER_KUBE_API_URL")
        kube = KubeApi.connect(url, field_manager="mol-router",
                               token_file=settings.kube_token_file,
                               ca_file=settings.kube_ca_file)
        return EndpointSliceWatcher(cfg.endpoint_slice, kube, sink)
    return StaticEndpoints(cfg.endpoints, sink)
