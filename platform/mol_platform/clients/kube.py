"""The platform's one Kubernetes API client: get, list, watch, server-side apply,
delete, create/replace (the operator's leader-election Lease), discovery, the in-cluster
credentials, and the list-then-watch loop (:func:`list_watch`) that the operator's
informer and the router's EndpointSlice discovery both run.

Server-side apply with a field manager (the operator's ``mol-operator``) is the only
way children are written, so a field someone else owns (KEDA's replica count, an
admission webhook's sidecar) is never fought over. Credentials: an explicit URL (tests,
a local proxy), the in-cluster service account (:func:`in_cluster`), or the kubeconfig.

Built on aiohttp (kopf's own HTTP library, and the router's): at a thousand
deployments, httpx's connection pool scanned every connection for each request it
placed and cost more CPU than everything else the operator did (docs/benchmarks.md,
"Operator"). aiohttp is not in the base install: the operator and router extras bring it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

import aiohttp

from mol_platform import __version__

log = logging.getLogger("mol.kube")
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DISCOVERY_TTL = 60.0
POOL = 64  # connections for requests; watches have their own, unbounded
WATCH_SECONDS = 300  # the server ends a watch after this; it is resumed, not re-listed
BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0)  # seconds before listing again after the n-th error


class KubeError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"HTTP {status}: {message}" if status else message)


@dataclass(frozen=True)
class InCluster:
    """The service account's API address and credential files, as the kubelet mounts them."""

    url: str
    token_file: Path
    ca_file: Path

    def tls(self) -> ssl.SSLContext | bool:
        """The API server's CA when the mount has it, else the system's."""
        if self.ca_file.is_file():
            return ssl.create_default_context(cafile=str(self.ca_file))
        return True


def in_cluster(token_file: Path = SA_DIR / "token",
               ca_file: Path = SA_DIR / "ca.crt") -> InCluster | None:
    """The in-cluster API (``KUBERNETES_SERVICE_HOST``/``_PORT``), or None outside a pod."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if not host:
        return None
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    return InCluster(f"https://{host}:{port}", token_file, ca_file)


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def path_for(api_version: str, plural: str, namespace: str | None,
             name: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespace is not None:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return base if name is None else f"{base}/{name}"


class KubeApi:
    """Async client; counts its calls (``calls``, ``writes``) for metrics and benchmarks.

    Its HTTP sessions are made on first use, inside the loop that uses them."""

    def __init__(self, base_url: str, *, headers: Mapping[str, str] | None = None,
                 tls: ssl.SSLContext | bool = True, token_file: Path | None = None,
                 timeout: float = 30.0, field_manager: str = "mol") -> None:
        """``field_manager``: who server-side applies (and the User-Agent's product)."""
        self.base_url = base_url.rstrip("/")
        self.field_manager = field_manager
        self._headers = {"User-Agent": f"{field_manager}/{__version__}", **(headers or {})}
        self._tls: ssl.SSLContext | bool = tls
        self._token_file = token_file
        self._timeout = timeout
        self._http: aiohttp.ClientSession | None = None
        self._watches: aiohttp.ClientSession | None = None
        self._served: dict[str, tuple[float, set[str]]] = {}
        self.calls = 0
        self.writes = 0

    @classmethod
    def connect(cls, url: str | None = None, *, kubeconfig: str | None = None,
                timeout: float = 30.0, field_manager: str = "mol",
                token_file: Path | None = None, ca_file: Path = SA_DIR / "ca.crt") -> KubeApi:
        """Explicit URL (with ``token_file``, ``ca_file`` when they exist), else in-cluster,
        else kubeconfig (``$KUBECONFIG``, ~/.kube/config; needs the ``kubernetes``
        package, which the operator extra brings)."""
        if url:
            pod = InCluster(url, token_file or SA_DIR / "token", ca_file)
            return cls(url, timeout=timeout, field_manager=field_manager,
                       token_file=token_file,
                       tls=pod.tls() if url.startswith("https://") else False)
        found = in_cluster(token_file or SA_DIR / "token", ca_file)
        if found is not None and found.token_file.exists() and kubeconfig is None:
            return cls(found.url, tls=found.tls(), token_file=found.token_file,
                       timeout=timeout, field_manager=field_manager)
        from kubernetes import config as kconfig
        from kubernetes.client import Configuration

        cfg = Configuration()
        kconfig.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=cfg)
        headers = {}
        token = (cfg.api_key or {}).get("authorization")
        if token:
            headers["Authorization"] = token
        tls: ssl.SSLContext | bool = bool(cfg.verify_ssl)
        if cfg.verify_ssl:
            tls = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
            if cfg.cert_file:
                tls.load_cert_chain(cfg.cert_file, cfg.key_file)
        return cls(cfg.host, headers=headers, tls=tls, timeout=timeout,
                   field_manager=field_manager)

    def _session(self, watch: bool = False) -> aiohttp.ClientSession:
        if self._http is None or self._watches is None:
            ssl_arg: ssl.SSLContext | bool = self._tls
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=POOL, ssl=ssl_arg),
                timeout=aiohttp.ClientTimeout(total=self._timeout))
            self._watches = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True, ssl=ssl_arg))
        return self._watches if watch else self._http

    def _request_headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = {**self._headers, **(extra or {})}
        if self._token_file is not None:  # re-read per request: the kubelet rotates it
            try:
                token = self._token_file.read_text().strip()
            except OSError:
                token = ""  # not mounted (a local run): the server decides
            if token:
                headers["Authorization"] = f"Bearer {token}"
        return headers

    async def aclose(self) -> None:
        for session in (self._http, self._watches):
            if session is not None:
                await session.close()
        self._http = self._watches = None

    async def _call(self, method: str, path: str, *, write: bool = False,
                    params: Mapping[str, str] | None = None, body: str | None = None,
                    content_type: str | None = None) -> _Answer:
        self.calls += 1
        self.writes += int(write)
        headers = self._request_headers({"Content-Type": content_type} if content_type else None)
        try:
            async with self._session().request(method, self.base_url + path, params=params,
                                               data=body, headers=headers) as response:
                answer = _Answer(response.status, await response.read())
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise KubeError(0, f"cannot reach the Kubernetes API: {exc!r}") from None
        if answer.status >= 400 and answer.status != 404:
            raise KubeError(answer.status, _message(answer))
        return answer

    async def get(self, api_version: str, plural: str, namespace: str | None,
                  name: str) -> dict[str, Any] | None:
        answer = await self._call("GET", path_for(api_version, plural, namespace, name))
        if answer.status == 404:
            return None
        out: dict[str, Any] = answer.json()
        return out

    async def list(self, api_version: str, plural: str, namespace: str | None,
                   labels: Mapping[str, str] | None = None
                   ) -> tuple[list[dict[str, Any]], str] | None:
        """(items, the list's resourceVersion), or None when the API is not served."""
        answer = await self._call("GET", path_for(api_version, plural, namespace),
                                  params=_selector(labels))
        if answer.status == 404:
            return None
        body = answer.json()
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
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30.0,
                                        sock_read=timeout_seconds + 30.0)
        try:
            async with self._session(watch=True).get(
                    self.base_url + path_for(api_version, plural, namespace), params=params,
                    headers=self._request_headers(), timeout=timeout) as response:
                if response.status >= 400:
                    answer = _Answer(response.status, await response.read())
                    raise KubeError(answer.status, _message(answer))
                pending = b""
                # Events are JSON lines of any size (a big object is one line).
                async for chunk in response.content.iter_any():
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            event: dict[str, Any] = json.loads(line)
                            yield event
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise KubeError(0, f"the watch of {plural} broke: {exc!r}") from None

    async def apply(self, manifest: Mapping[str, Any], plural: str) -> dict[str, Any]:
        """Server-side apply as ``field_manager`` (force: the operator owns its children)."""
        meta = manifest["metadata"]
        answer = await self._call(
            "PATCH", path_for(manifest["apiVersion"], plural, meta.get("namespace"), meta["name"]),
            write=True, body=json.dumps(manifest),
            params={"fieldManager": self.field_manager, "force": "true"},
            content_type="application/apply-patch+yaml",
        )
        if answer.status == 404:
            raise KubeError(404, f"{manifest['kind']} API {manifest['apiVersion']} is not served")
        out: dict[str, Any] = answer.json()
        return out

    async def create(self, manifest: Mapping[str, Any], plural: str) -> dict[str, Any]:
        """POST; ``KubeError`` 409 when the name is taken (a Lease another replica made)."""
        meta = manifest["metadata"]
        answer = await self._call("POST", path_for(manifest["apiVersion"], plural,
                                                   meta.get("namespace")),
                                  write=True, body=json.dumps(manifest),
                                  content_type="application/json")
        if answer.status == 404:
            raise KubeError(404, f"{manifest['kind']} API {manifest['apiVersion']} is not served")
        out: dict[str, Any] = answer.json()
        return out

    async def replace(self, manifest: Mapping[str, Any], plural: str) -> dict[str, Any]:
        """PUT with the manifest's resourceVersion: ``KubeError`` 409 when the object
        changed since it was read (optimistic concurrency, as leader election needs)."""
        meta = manifest["metadata"]
        answer = await self._call("PUT", path_for(manifest["apiVersion"], plural,
                                                  meta.get("namespace"), meta["name"]),
                                  write=True, body=json.dumps(manifest),
                                  content_type="application/json")
        if answer.status == 404:
            raise KubeError(404, f"{manifest['kind']} {meta['name']} is gone")
        out: dict[str, Any] = answer.json()
        return out

    async def delete(self, api_version: str, plural: str, namespace: str | None,
                     name: str) -> bool:
        answer = await self._call("DELETE", path_for(api_version, plural, namespace, name),
                                  write=True, params={"propagationPolicy": "Background"})
        return answer.status != 404

    async def patch_status(self, api_version: str, plural: str, namespace: str | None,
                           name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the status subresource (the warm-up results of a deployment)."""
        await self._call("PATCH", path_for(api_version, plural, namespace, name) + "/status",
                         write=True, body=json.dumps({"status": dict(status)}),
                         content_type="application/merge-patch+json")

    async def served(self, api_version: str, plural: str) -> bool:
        """Whether the API server serves ``plural`` in ``api_version``.

        A served API is remembered for a minute; a missing one is asked again each time,
        so installing KEDA or KServe is noticed at the next reconcile."""
        now = time.monotonic()
        cached = self._served.get(api_version)
        if cached is None or now - cached[0] > DISCOVERY_TTL or plural not in cached[1]:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            answer = await self._call("GET", path)
            names: set[str] = set()
            if answer.status != 404:
                names = {r.get("name", "") for r in answer.json().get("resources") or []}
            cached = (now, names)
            self._served[api_version] = cached
        return plural in cached[1]


class Reflector(Protocol):
    """What :func:`list_watch` tells about one resource in one scope."""

    def listed(self, items: list[dict[str, Any]], version: str) -> None:
        """A fresh list: what it lacks is gone."""

    def changed(self, kind: str, obj: dict[str, Any]) -> None:
        """A watch event: ADDED, MODIFIED or DELETED (bookmarks only move the version)."""

    async def absent(self, refusal: KubeError | None) -> None:
        """The API is not served (None) or may not be read (its 403); returns when it
        is worth listing again."""


async def list_watch(api: KubeApi, api_version: str, plural: str, namespace: str | None,
                     labels: Mapping[str, str] | None, reflector: Reflector, *,
                     forbidden_is_absent: bool = False,
                     backoff: Sequence[float] = BACKOFF) -> NoReturn:
    """List, then watch from the list's resourceVersion, forever.

    A watch the server ends is resumed from the last version seen (bookmarks included);
    a version it no longer has (410 Gone) lists again at once; a broken stream or any
    other error lists again after a backoff that grows with each failure in a row. A
    list that finds the API not served, or (``forbidden_is_absent``) refused with 403,
    goes to ``reflector.absent``. Cancel the task to stop it.
    """
    failures = 0
    while True:
        try:
            listed = await api.list(api_version, plural, namespace, labels)
            if listed is None:
                await reflector.absent(None)
                continue
            items, version = listed
            reflector.listed(items, version)
            while True:  # resume after each normal end of a watch
                async for event in api.watch(api_version, plural, namespace, labels,
                                             version, WATCH_SECONDS):
                    obj = event.get("object") or {}
                    kind = str(event.get("type"))
                    if kind == "ERROR":
                        raise KubeError(int(obj.get("code") or 500),
                                        str(obj.get("message") or obj.get("reason") or obj))
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if kind != "BOOKMARK":
                        reflector.changed(kind, obj)
                failures = 0
        except KubeError as exc:
            if exc.status == 403 and forbidden_is_absent:
                await reflector.absent(exc)
                continue
            if exc.status == 410:  # the version is compacted away: list again now
                continue
            log.warning("list/watch of %s failed: %s; listing again", plural, exc)
            await asyncio.sleep(backoff[min(failures, len(backoff) - 1)])
            failures += 1


def _selector(labels: Mapping[str, str] | None) -> dict[str, str]:
    selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items())
    return {"labelSelector": selector} if selector else {}


def _message(answer: _Answer) -> str:
    text = answer.body.decode("utf-8", "replace")
    try:
        body = json.loads(answer.body)
    except ValueError:
        return text[:300] or f"HTTP {answer.status}"
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return text[:300]
