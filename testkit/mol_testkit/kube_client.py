"""Small sync and async Kubernetes clients for tests (httpx), bound to the emulator.

Resources are named the way ``kubectl`` names them (kind, plural, short name,
``apiVersion/Kind``); namespaced calls default to ``default``. API errors raise
:class:`KubeApiError` with the server's status and message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

Body = dict[str, Any]
PatchType = Literal["merge", "json", "strategic", "apply"]
_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


@dataclass(frozen=True)
class ResourceSpec:
    """One API resource: where it lives, what it is called, what it serves.

    Clients build their paths from it; :class:`~mol_testkit.kube.KubeServer`
    registers it to serve the resource.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresources: tuple[str, ...] = ("status",)
    shortnames: tuple[str, ...] = field(default=())

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


class KubeApiError(RuntimeError):
    def __init__(self, status: int, body: Any) -> None:
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"Kubernetes API {status}: {message}")
        self.status = status
        self.body = body


class _Requests:
    """Builds (method, path, params, headers, content) for each call."""

    def __init__(self, resolve: Callable[[str], ResourceSpec]) -> None:
        self.resolve = resolve

    def spec(self, ref: str | ResourceSpec) -> ResourceSpec:
        return self.resolve(ref) if isinstance(ref, str) else ref

    def _ns(self, spec: ResourceSpec, namespace: str | None) -> str | None:
        return (namespace or "default") if spec.namespaced else None

    def create(self, manifest: Mapping[str, Any]) -> tuple[str, str, Any, Any]:
        spec = self.resolve(f"{manifest['apiVersion']}/{manifest['kind']}")
        ns = self._ns(spec, manifest.get("metadata", {}).get("namespace"))
        return "POST", spec.path(ns), None, {"json": dict(manifest)}

    def replace(self, manifest: Mapping[str, Any],
                subresource: str | None = None) -> tuple[str, str, Any, Any]:
        spec = self.resolve(f"{manifest['apiVersion']}/{manifest['kind']}")
        meta = manifest["metadata"]
        path = spec.path(self._ns(spec, meta.get("namespace")), meta["name"], subresource)
        return "PUT", path, None, {"json": dict(manifest)}

    def get(self, ref: str | ResourceSpec, name: str, namespace: str | None,
            subresource: str | None = None) -> tuple[str, str, Any, Any]:
        spec = self.spec(ref)
        return "GET", spec.path(self._ns(spec, namespace), name, subresource), None, {}

    def list(self, ref: str | ResourceSpec, namespace: str | None,
             labels: str | None, fields: str | None) -> tuple[str, str, Any, Any]:
        spec = self.spec(ref)
        params = {k: v for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v}
        return "GET", spec.path(namespace if spec.namespaced else None), params, {}

    def patch(self, ref: str | ResourceSpec, name: str, patch: Any, namespace: str | None,
              subresource: str | None, patch_type: PatchType) -> tuple[str, str, Any, Any]:
        spec = self.spec(ref)
        path = spec.path(self._ns(spec, namespace), name, subresource)
        headers = {"Content-Type": _CONTENT_TYPES[patch_type]}
        params = {"fieldManager": "mol-test", "force": "true"} if patch_type == "apply" else None
        return "PATCH", path, params, {"json": patch, "headers": headers}

    def delete(self, ref: str | ResourceSpec, name: str, namespace: str | None,
               propagation: str | None = None) -> tuple[str, str, Any, Any]:
        spec = self.spec(ref)
        params = {"propagationPolicy": propagation} if propagation else {}
        return "DELETE", spec.path(self._ns(spec, namespace), name), params or None, {}


def _result(rsp: httpx.Response) -> Any:
    try:
        body = rsp.json()
    except ValueError:
        body = rsp.text
    if rsp.status_code >= 400:
        raise KubeApiError(rsp.status_code, body)
    return body


class KubeClient:
    """Sync client: ``create``, ``get``, ``find``, ``list``, ``patch``, ``patch_status``,
    ``replace``, ``apply``, ``delete``, ``wait_for``, ``wait_gone``."""

    def __init__(self, base_url: str, resolve: Callable[[str], ResourceSpec]) -> None:
        self._http = httpx.Client(base_url=base_url, timeout=10.0)
        self._req = _Requests(resolve)

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, req: tuple[str, str, Any, Any]) -> Any:
        method, path, params, kw = req
        return _result(self._http.request(method, path, params=params, **kw))

    def create(self, manifest: Mapping[str, Any]) -> Body:
        result: Body = self._call(self._req.create(manifest))
        return result

    def replace(self, manifest: Mapping[str, Any], subresource: str | None = None) -> Body:
        result: Body = self._call(self._req.replace(manifest, subresource))
        return result

    def get(self, ref: str | ResourceSpec, name: str, namespace: str | None = None) -> Body:
        result: Body = self._call(self._req.get(ref, name, namespace))
        return result

    def find(self, ref: str | ResourceSpec, name: str, namespace: str | None = None) -> Body | None:
        """Like ``get`` but None when absent."""
        try:
            return self.get(ref, name, namespace)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, ref: str | ResourceSpec, namespace: str | None = None,
             labels: str | None = None, fields: str | None = None) -> list[Body]:
        """Objects of a resource (all namespaces unless ``namespace``), by selectors."""
        items: list[Body] = self._call(self._req.list(ref, namespace, labels, fields))["items"]
        return items

    def patch(self, ref: str | ResourceSpec, name: str, patch: Any, namespace: str | None = None,
              subresource: str | None = None, patch_type: PatchType = "merge") -> Body:
        req = self._req.patch(ref, name, patch, namespace, subresource, patch_type)
        result: Body = self._call(req)
        return result

    def patch_status(self, ref: str | ResourceSpec, name: str, status: Mapping[str, Any],
                     namespace: str | None = None) -> Body:
        return self.patch(ref, name, {"status": dict(status)}, namespace, "status")

    def apply(self, manifest: Mapping[str, Any]) -> Body:
        """Server-side-apply style: create, or merge into the existing object."""
        meta = manifest["metadata"]
        ref = f"{manifest['apiVersion']}/{manifest['kind']}"
        return self.patch(ref, meta["name"], dict(manifest), meta.get("namespace"),
                          patch_type="apply")

    def delete(self, ref: str | ResourceSpec, name: str, namespace: str | None = None,
               propagation: str | None = None) -> Body:
        """DELETE; ``propagation``: Background (the server's default), Foreground, Orphan."""
        result: Body = self._call(self._req.delete(ref, name, namespace, propagation))
        return result

    def wait_for(self, ref: str | ResourceSpec, name: str, predicate: Callable[[Body], bool],
                 namespace: str | None = None, timeout: float = 15.0) -> Body:
        """Poll until the object exists and ``predicate(obj)`` holds; TimeoutError with
        the last state otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            obj = self.find(ref, name, namespace)
            if obj is not None and predicate(obj):
                return obj
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{ref} {name!r}: not as expected after {timeout}s: {obj!r}")
            time.sleep(0.05)

    def wait_gone(self, ref: str | ResourceSpec, name: str, namespace: str | None = None,
                  timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while (obj := self.find(ref, name, namespace)) is not None:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{ref} {name!r} still exists after {timeout}s: {obj!r}")
            time.sleep(0.05)


class AsyncKubeClient:
    """The async twin of :class:`KubeClient` (same methods, awaited)."""

    def __init__(self, base_url: str, resolve: Callable[[str], ResourceSpec]) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, timeout=10.0)
        self._req = _Requests(resolve)

    async def __aenter__(self) -> AsyncKubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, req: tuple[str, str, Any, Any]) -> Any:
        method, path, params, kw = req
        return _result(await self._http.request(method, path, params=params, **kw))

    async def create(self, manifest: Mapping[str, Any]) -> Body:
        result: Body = await self._call(self._req.create(manifest))
        return result

    async def replace(self, manifest: Mapping[str, Any], subresource: str | None = None) -> Body:
        result: Body = await self._call(self._req.replace(manifest, subresource))
        return result

    async def get(self, ref: str | ResourceSpec, name: str, namespace: str | None = None) -> Body:
        result: Body = await self._call(self._req.get(ref, name, namespace))
        return result

    async def find(self, ref: str | ResourceSpec, name: str,
                   namespace: str | None = None) -> Body | None:
        try:
            return await self.get(ref, name, namespace)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, ref: str | ResourceSpec, namespace: str | None = None,
                   labels: str | None = None, fields: str | None = None) -> list[Body]:
        body = await self._call(self._req.list(ref, namespace, labels, fields))
        items: list[Body] = body["items"]
        return items

    async def patch(self, ref: str | ResourceSpec, name: str, patch: Any,
                    namespace: str | None = None, subresource: str | None = None,
                    patch_type: PatchType = "merge") -> Body:
        req = self._req.patch(ref, name, patch, namespace, subresource, patch_type)
        result: Body = await self._call(req)
        return result

    async def patch_status(self, ref: str | ResourceSpec, name: str, status: Mapping[str, Any],
                           namespace: str | None = None) -> Body:
        return await self.patch(ref, name, {"status": dict(status)}, namespace, "status")

    async def apply(self, manifest: Mapping[str, Any]) -> Body:
        meta = manifest["metadata"]
        ref = f"{manifest['apiVersion']}/{manifest['kind']}"
        return await self.patch(ref, meta["name"], dict(manifest), meta.get("namespace"),
                                patch_type="apply")

    async def delete(self, ref: str | ResourceSpec, name: str, namespace: str | None = None,
                     propagation: str | None = None) -> Body:
        result: Body = await self._call(self._req.delete(ref, name, namespace, propagation))
        return result

    async def wait_for(self, ref: str | ResourceSpec, name: str,
                       predicate: Callable[[Body], bool], namespace: str | None = None,
                       timeout: float = 15.0) -> Body:  # noqa: ASYNC109 - a polling deadline
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            obj = await self.find(ref, name, namespace)
            if obj is not None and predicate(obj):
                return obj
            if loop.time() >= deadline:
                raise TimeoutError(f"{ref} {name!r}: not as expected after {timeout}s: {obj!r}")
            await asyncio.sleep(0.05)

    async def wait_gone(self, ref: str | ResourceSpec, name: str, namespace: str | None = None,
                        timeout: float = 15.0) -> None:  # noqa: ASYNC109 - a polling deadline
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (obj := await self.find(ref, name, namespace)) is not None:
            if loop.time() >= deadline:
                raise TimeoutError(f"{ref} {name!r} still exists after {timeout}s: {obj!r}")
            await asyncio.sleep(0.05)
