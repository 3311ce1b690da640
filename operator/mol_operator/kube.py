"""A small async Kubernetes API client: get, list, watch, server-side apply, delete,
discovery.

Server-side apply with field manager ``mol-operator`` is the only way the operator
writes children, so a field someone else owns (KEDA's replica count, an admission
webhook's sidecar) is never fought over. Credentials: an explicit URL (tests, a local
proxy), the in-cluster service account, or the kubeconfig.
"""

from __future__ import annotations

import json
import os
import ssl
import time
from collections.abc import AsyncIterator, Generator, Mapping
from pathlib import Path
from typing import Any

import httpx

from mol_operator.builders.common import MANAGER
from mol_platform import __version__

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DISCOVERY_TTL = 60.0
USER_AGENT = {"User-Agent": f"{MANAGER}/{__version__}"}


class KubeError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"HTTP {status}: {message}" if status else message)


class _FileToken(httpx.Auth):
    """The service-account token, re-read per request (the kubelet rotates it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.path.read_text().strip()}"
        yield request


def path_for(api_version: str, plural: str, namespace: str | None,
             name: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespace is not None:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return base if name is None else f"{base}/{name}"


class KubeApi:
    """Async client; counts its calls (``calls``, ``writes``) for metrics and benchmarks."""

    def __init__(self, **options: Any) -> None:
        """``options`` for ``httpx.AsyncClient``. Requests share a bounded pool; watches
        (long-lived streams) get their own, so httpx's per-request scan of the pool does
        not walk past every open watch."""
        self._http = httpx.AsyncClient(**options, limits=httpx.Limits(
            max_connections=64, max_keepalive_connections=32))
        self._watches = httpx.AsyncClient(**options, limits=httpx.Limits(
            max_connections=None, max_keepalive_connections=0))
        self._served: dict[str, tuple[float, set[str]]] = {}
        self.calls = 0
        self.writes = 0

    @classmethod
    def connect(cls, url: str | None = None, *, kubeconfig: str | None = None,
                timeout: float = 30.0) -> KubeApi:
        """Explicit URL, else in-cluster, else kubeconfig (``$KUBECONFIG``, ~/.kube/config)."""
        if url:
            return cls(headers=USER_AGENT, base_url=url, timeout=timeout)
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        if host and (SA_DIR / "token").exists() and kubeconfig is None:
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            ca = ssl.create_default_context(cafile=str(SA_DIR / "ca.crt"))
            return cls(headers=USER_AGENT, base_url=f"https://{host}:{port}", verify=ca,
                       auth=_FileToken(SA_DIR / "token"), timeout=timeout)
        from kubernetes import config as kconfig
        from kubernetes.client import Configuration

        cfg = Configuration()
        kconfig.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=cfg)
        headers = {}
        token = (cfg.api_key or {}).get("authorization")
        if token:
            headers["Authorization"] = token
        verify: ssl.SSLContext | bool = bool(cfg.verify_ssl)
        if cfg.verify_ssl:
            verify = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
            if cfg.cert_file:
                verify.load_cert_chain(cfg.cert_file, cfg.key_file)
        return cls(base_url=cfg.host, headers={**USER_AGENT, **headers}, verify=verify,
                   timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()
        await self._watches.aclose()

    async def _call(self, method: str, path: str, *, write: bool = False,
                    **kw: Any) -> httpx.Response:
        self.calls += 1
        self.writes += int(write)
        try:
            response = await self._http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise KubeError(0, f"cannot reach the Kubernetes API: {exc}") from None
        if response.is_error and response.status_code != 404:
            raise KubeError(response.status_code, _message(response))
        return response

    async def get(self, api_version: str, plural: str, namespace: str | None,
                  name: str) -> dict[str, Any] | None:
        response = await self._call("GET", path_for(api_version, plural, namespace, name))
        if response.status_code == 404:
            return None
        out: dict[str, Any] = response.json()
        return out

    async def list(self, api_version: str, plural: str, namespace: str | None,
                   labels: Mapping[str, str] | None = None
                   ) -> tuple[list[dict[str, Any]], str] | None:
        """(items, the list's resourceVersion), or None when the API is not served."""
        response = await self._call("GET", path_for(api_version, plural, namespace),
                                    params=_selector(labels))
        if response.status_code == 404:
            return None
        body = response.json()
        items: list[dict[str, Any]] = body.get("items") or []
        return items, str((body.get("metadata") or {}).get("resourceVersion") or "")

    async def watch(self, api_version: str, plural: str, namespace: str | None,
                    labels: Mapping[str, str] | None, resource_version: str,
                    timeout_seconds: int) -> AsyncIterator[dict[str, Any]]:
        """The watch events after ``resource_version`` (bookmarks included) until the
        server ends the stream; ``KubeError`` 410 when that version is too old."""
        params = {**_selector(labels), "watch": "true", "resourceVersion": resource_version,
                  "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)}
        self.calls += 1
        try:
            async with self._watches.stream(
                    "GET", path_for(api_version, plural, namespace), params=params,
                    timeout=httpx.Timeout(30.0, read=timeout_seconds + 30.0)) as response:
                if response.is_error:
                    await response.aread()
                    raise KubeError(response.status_code, _message(response))
                async for line in response.aiter_lines():
                    if line.strip():
                        event: dict[str, Any] = json.loads(line)
                        yield event
        except httpx.TransportError as exc:
            raise KubeError(0, f"the watch of {plural} broke: {exc}") from None

    async def apply(self, manifest: Mapping[str, Any], plural: str) -> dict[str, Any]:
        """Server-side apply as ``mol-operator`` (force: the operator owns its children)."""
        meta = manifest["metadata"]
        response = await self._call(
            "PATCH", path_for(manifest["apiVersion"], plural, meta.get("namespace"), meta["name"]),
            write=True, content=json.dumps(manifest),
            params={"fieldManager": MANAGER, "force": "true"},
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        if response.status_code == 404:
            raise KubeError(404, f"{manifest['kind']} API {manifest['apiVersion']} is not served")
        out: dict[str, Any] = response.json()
        return out

    async def delete(self, api_version: str, plural: str, namespace: str | None,
                     name: str) -> bool:
        response = await self._call("DELETE", path_for(api_version, plural, namespace, name),
                                    write=True, params={"propagationPolicy": "Background"})
        return response.status_code != 404

    async def patch_status(self, api_version: str, plural: str, namespace: str | None,
                           name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the status subresource (the warm-up results of a deployment)."""
        await self._call("PATCH", path_for(api_version, plural, namespace, name) + "/status",
                         write=True, content=json.dumps({"status": dict(status)}),
                         headers={"Content-Type": "application/merge-patch+json"})

    async def served(self, api_version: str, plural: str) -> bool:
        """Whether the API server serves ``plural`` in ``api_version``.

        A served API is remembered for a minute; a missing one is asked again each time,
        so installing KEDA or KServe is noticed at the next reconcile."""
        now = time.monotonic()
        cached = self._served.get(api_version)
        if cached is None or now - cached[0] > DISCOVERY_TTL or plural not in cached[1]:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            response = await self._call("GET", path)
            names: set[str] = set()
            if response.status_code != 404:
                names = {r.get("name", "") for r in response.json().get("resources") or []}
            cached = (now, names)
            self._served[api_version] = cached
        return plural in cached[1]


def _selector(labels: Mapping[str, str] | None) -> dict[str, str]:
    selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items())
    return {"labelSelector": selector} if selector else {}


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return response.text[:300]
