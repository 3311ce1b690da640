"""Clients for the catalog's REST API (``/v1``): sync here, async in ``catalog_client_async``.

:class:`CatalogClient` serves the ``mol catalog`` verbs, ``mol up`` and scripts;
``catalog_client_async.AsyncCatalogClient`` serves long-running processes (router,
operator, the vLLM resolver plugin). Every non-2xx answer raises :class:`CatalogError`
carrying the server's ``error``, ``detail`` and (for 422) ``reasons``; an unreachable
catalog raises it too, with status 0. A call the server cut off on a kept-alive
connection before answering is sent once more when it is idempotent. Settings come from
``MOL_CATALOG_URL`` and ``MOL_CATALOG_TOKEN`` unless given explicitly.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from mol_platform.contract import catalog_models as m
from mol_platform.contract.model_folder import (
    MultipartBody,
    Progress,
    adapter_files,
    read_base_model_folder,
)
from mol_platform.contract.refs import (
    AdapterRef,
    check_alias,
    check_name,
    check_namespace,
    check_scope,
    check_tag,
)

DEFAULT_URL = "http://127.0.0.1:8080"
# Calls sent again once when a kept-alive connection turns out closed by the server
# (``RemoteProtocolError`` before any answer): repeating them changes nothing.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})


class ClientSettings(BaseSettings):
    """Where the catalog is and how to authenticate (env ``MOL_CATALOG_URL``/``_TOKEN``)."""

    model_config = SettingsConfigDict(env_prefix="MOL_CATALOG_", extra="ignore")

    url: str = DEFAULT_URL
    token: str | None = None


class CatalogError(Exception):
    """A catalog call failed: HTTP status (0 = unreachable), error type, detail, reasons."""

    def __init__(self, status: int, error: str, detail: str,
                 reasons: list[dict[str, Any]] | None = None) -> None:
        self.status = status
        self.error = error
        self.detail = detail
        self.reasons = reasons or []
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"{self.detail} ({self.error}, HTTP {self.status})" if self.status else self.detail
        lines = [head]
        for reason in self.reasons:
            lines.append(f"  - [{reason.get('code', '?')}] {reason.get('message', reason)}")
        return "\n".join(lines)


def _error_from(response: httpx.Response) -> CatalogError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        detail = body.get("detail")
        if not isinstance(detail, str):  # FastAPI validation errors: a list
            detail = json.dumps(detail) if detail is not None else response.reason_phrase
        reasons = body.get("reasons")
        return CatalogError(response.status_code, str(body.get("error") or "HTTPError"), detail,
                            reasons if isinstance(reasons, list) else None)
    text = response.text.strip()[:500] or response.reason_phrase
    return CatalogError(response.status_code, "HTTPError", text)


M = TypeVar("M", bound=BaseModel)


def typed(model: type[M], body: Any) -> M:
    """A JSON answer as its model. An answer of another shape is a CatalogError with
    status 502, as a proxy would report a bad upstream answer: not 0 (unreachable),
    so callers do not fall back to what they cached as if the catalog were down."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise CatalogError(502, "MalformedAnswer",
                           f"unexpected answer from the catalog for {model.__name__}: "
                           f"{exc.errors(include_url=False)[:3]}") from None


def split_adapter(adapter: str) -> tuple[str, str]:
    """``ns/name`` -> (ns, name), both checked."""
    namespace, sep, name = adapter.partition("/")
    if not sep:
        raise ValueError(f"invalid adapter name {adapter!r}: expected namespace/name")
    return check_namespace(namespace), check_name(name, "adapter name")


def join_url(catalog_url: str, url: str) -> str:
    """A download URL as the catalog gave it (absolute with PUBLIC_URL or S3, else a path
    such as ``/v1/blobs/sha256/<hex>``), made absolute against the catalog URL."""
    if urlsplit(url).scheme:
        return url
    return catalog_url.rstrip("/") + "/" + url.lstrip("/")


def download_failed(url: str, catalog_url: str, exc: Exception) -> CatalogError:
    """A download that could not connect. A presigned URL's query is its credential (the
    signature), so it is left out; the message says the URL came from the catalog, which
    answered, so the store it names is what failed."""
    target = join_url(catalog_url, url)
    parts = urlsplit(target)
    shown = parts._replace(query="<signature redacted>" if parts.query else "",
                           fragment="").geturl()
    where = ("the catalog" if _origin(target) == _origin(catalog_url)
             else "the blob store the catalog's download URL names")
    return CatalogError(0, "ConnectionError",
                        f"cannot download {shown} (a download URL given by the catalog at "
                        f"{catalog_url}): {where} is unreachable: {exc}")


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def _q(value: str) -> str:
    return quote(value, safe="")


def _auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _resolve_call(ref: str, profile: str | None) -> tuple[str, dict[str, str] | None]:
    parsed = AdapterRef.parse(ref)
    params = {"profile": profile} if profile else None
    return f"/v1/resolve/{parsed.namespace}/{parsed.name}@{parsed.ref}", params


def _profile_body(base_model: str, max_lora_rank: int, max_loras: int, engine: str | None,
                  supported_modules: Sequence[str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"base_model": base_model, "max_lora_rank": max_lora_rank,
                            "max_loras": max_loras}
    if engine is not None:
        body["engine"] = engine
    if supported_modules is not None:
        body["supported_modules"] = list(supported_modules)
    return body


def _absolute_files(resolved: m.Resolved, catalog_url: str) -> m.Resolved:
    """A resolve answer with every file URL made absolute (see ``join_url``)."""
    for f in resolved.files:
        f.url = join_url(catalog_url, f.url)
    return resolved


def _token_body(name: str, scopes: Sequence[str]) -> dict[str, Any]:
    for scope in scopes:
        check_scope(scope)
    return {"name": name, "scopes": list(scopes)}


def _download_request(http: httpx.Client | httpx.AsyncClient, catalog_url: str,
                      url: str) -> httpx.Request:
    """A GET of a file URL the catalog gave; a presigned object-store URL (another
    origin) goes without the catalog's token, which is not for that host."""
    target = join_url(catalog_url, url)
    request = http.build_request("GET", target)
    if _origin(target) != _origin(catalog_url):
        request.headers.pop("Authorization", None)
    return request


def _alias_path(adapter: str, alias: str) -> str:
    namespace, name = split_adapter(adapter)
    check_alias(alias)
    return f"/v1/adapters/{namespace}/{name}/aliases/{_q(alias)}"


class CatalogClient:
    """Sync client; use as a context manager (it owns an ``httpx.Client``)."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 timeout: float = 60.0, transport: httpx.BaseTransport | None = None) -> None:
        settings = ClientSettings()
        self.url = (url or settings.url).rstrip("/")
        token = token if token is not None else settings.token
        self._http = httpx.Client(base_url=self.url, headers=_auth_headers(token),
                                  transport=transport,
                                  timeout=httpx.Timeout(timeout, connect=10.0))

    def __enter__(self) -> CatalogClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call; raises CatalogError on a non-2xx answer or a transport failure."""
        try:
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.RemoteProtocolError:
                if method not in IDEMPOTENT:
                    raise
                response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise CatalogError(0, "ConnectionError",
                               f"cannot reach the catalog at {self.url}: {exc}") from None
        if response.is_error:
            raise _error_from(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        return response.json() if response.content else None

    def _pages(self, path: str, params: Mapping[str, Any], limit: int | None,
               page_size: int, model: type[M]) -> Iterator[M]:
        cursor: str | None = None
        seen = 0
        while True:
            size = page_size if limit is None else max(1, min(page_size, limit - seen))
            query = {k: v for k, v in params.items() if v is not None}
            query["limit"] = size
            if cursor:
                query["cursor"] = cursor
            page = self._json("GET", path, params=query)
            for item in page.get("items", []):
                yield typed(model, item)
                seen += 1
                if limit is not None and seen >= limit:
                    return
            cursor = page.get("next_cursor")
            if not cursor:
                return

    # --- base models and profiles ---------------------------------------------------

    def register_base(self, folder: Path, name: str,
                      revision: str | None = None) -> m.BaseRegistered:
        """Register a base model revision from a local folder (shapes only, no weights)."""
        check_name(name, "base model name")
        payload = read_base_model_folder(folder).payload(name, revision)
        return typed(m.BaseRegistered, self._json("POST", "/v1/base-models", json=payload))

    def get_base(self, name: str) -> m.BaseDetail:
        return typed(m.BaseDetail, self._json("GET", f"/v1/base-models/{_q(name)}"))

    def set_profile(self, name: str, *, base_model: str, max_lora_rank: int, max_loras: int,
                    engine: str | None = None,
                    supported_modules: Sequence[str] | None = None) -> m.Profile:
        """Declare or change a serving profile."""
        body = _profile_body(base_model, max_lora_rank, max_loras, engine, supported_modules)
        return typed(m.Profile, self._json("PUT", f"/v1/serving-profiles/{_q(name)}",
                                           json=body))

    def list_profiles(self) -> list[m.Profile]:
        return typed(m.ProfileList, self._json("GET", "/v1/serving-profiles")).items

    def get_profile(self, name: str) -> m.Profile:
        return typed(m.Profile, self._json("GET", f"/v1/serving-profiles/{_q(name)}"))

    # --- adapters ---------------------------------------------------------------------

    def publish(self, folder: Path, adapter: str, *, base: str | None = None,
                alias: str | None = None, tags: Sequence[str] = (), parent: int | None = None,
                source: str | None = None, labels: Mapping[str, str] | None = None,
                progress: Progress | None = None) -> m.Published:
        """Publish a PEFT folder as a new version (or get the identical existing one).

        The multipart body is streamed from disk; ``progress(sent, total)`` sees each chunk.
        """
        namespace, name = split_adapter(adapter)
        if alias is not None:
            check_alias(alias)
        for tag in tags:
            check_tag(tag)
        files = adapter_files(folder)
        fields: list[tuple[str, str]] = []
        for key, value in (("base", base), ("alias", alias), ("source", source),
                           ("parent", None if parent is None else str(parent)),
                           ("tags", ",".join(tags) if tags else None),
                           ("labels", json.dumps(dict(labels)) if labels else None)):
            if value is not None:
                fields.append((key, value))
        body = MultipartBody(fields, files, progress)
        headers = {"Content-Type": body.content_type, "Content-Length": str(len(body))}
        return typed(m.Published, self._json(
            "POST", f"/v1/adapters/{namespace}/{name}/versions", content=iter(body),
            headers=headers))

    def resolve(self, ref: str, profile: str | None = None) -> m.Resolved:
        """``ns/name@alias|latest|vN|sha256:...`` -> version, digest, files, verdict."""
        path, params = _resolve_call(ref, profile)
        return _absolute_files(typed(m.Resolved, self._json("GET", path, params=params)),
                               self.url)

    def list_adapters(self, *, base: str | None = None, tag: str | None = None,
                      q: str | None = None, namespace: str | None = None,
                      limit: int | None = None, page_size: int = 100,
                      ) -> Iterator[m.AdapterItem]:
        """Every matching adapter (up to ``limit``), following the cursor page by page."""
        return self._pages("/v1/adapters", {"base": base, "tag": tag, "q": q,
                                            "namespace": namespace}, limit, page_size,
                           m.AdapterItem)

    def get_adapter(self, adapter: str) -> m.AdapterDetail:
        namespace, name = split_adapter(adapter)
        return typed(m.AdapterDetail, self._json("GET", f"/v1/adapters/{namespace}/{name}"))

    def versions(self, adapter: str, *, limit: int | None = None,
                 page_size: int = 100) -> Iterator[m.VersionItem]:
        """The adapter's versions, newest first."""
        namespace, name = split_adapter(adapter)
        return self._pages(f"/v1/adapters/{namespace}/{name}/versions", {}, limit, page_size,
                           m.VersionItem)

    def get_version(self, adapter: str, version: int) -> m.VersionDetail:
        namespace, name = split_adapter(adapter)
        return typed(m.VersionDetail, self._json(
            "GET", f"/v1/adapters/{namespace}/{name}/versions/{int(version)}"))

    def set_alias(self, adapter: str, alias: str, version: int) -> m.AliasSet:
        """Point ``alias`` at ``version`` (``previous``: where it pointed before)."""
        return typed(m.AliasSet, self._json("PUT", _alias_path(adapter, alias),
                                            json={"version": int(version)}))

    def alias_history(self, adapter: str, alias: str) -> list[m.AliasMove]:
        """Every move of the alias, newest first."""
        return typed(m.AliasHistory, self._json("GET", _alias_path(adapter, alias)
                                                + "/history")).items

    def yank(self, adapter: str, version: int, reason: str) -> m.Yanked:
        namespace, name = split_adapter(adapter)
        return typed(m.Yanked, self._json(
            "POST", f"/v1/adapters/{namespace}/{name}/versions/{int(version)}/yank",
            json={"reason": reason}))

    def delete_version(self, adapter: str, version: int) -> m.Deleted:
        """Delete one version for good (admin): its aliases go, its blobs at the next gc."""
        namespace, name = split_adapter(adapter)
        return typed(m.Deleted, self._json(
            "DELETE", f"/v1/adapters/{namespace}/{name}/versions/{int(version)}"))

    def download(self, url: str, dest: Path, *, progress: Callable[[int], None] | None = None,
                 chunk: int = 1 << 20) -> str:
        """Stream one file to ``dest`` (absolute or catalog-relative URL); its sha256 hex.

        ``progress(n)`` sees each block's size. The caller verifies the digest and moves
        the file into place: ``dest`` may hold a partial file when this raises.
        """
        digest = hashlib.sha256()
        request = _download_request(self._http, self.url, url)
        try:
            response = self._http.send(request, stream=True)
            try:
                if response.is_error:
                    response.read()
                    raise _error_from(response)
                with dest.open("wb") as out:
                    for block in response.iter_bytes(chunk):
                        digest.update(block)
                        out.write(block)
                        if progress is not None:
                            progress(len(block))
            finally:
                response.close()
        except httpx.TransportError as exc:
            raise download_failed(url, self.url, exc) from None
        return digest.hexdigest()

    # --- tokens, gc, events -------------------------------------------------------------

    def create_token(self, name: str, scopes: Sequence[str]) -> m.TokenCreated:
        """Create a token; the answer's ``token`` is shown only this once."""
        return typed(m.TokenCreated, self._json("POST", "/v1/tokens",
                                                json=_token_body(name, scopes)))

    def list_tokens(self) -> list[m.TokenInfo]:
        return typed(m.TokenList, self._json("GET", "/v1/tokens")).items

    def revoke_token(self, token_id: str) -> None:
        self.request("DELETE", f"/v1/tokens/{_q(str(token_id))}")

    def gc(self, grace_seconds: int = 3600) -> m.GcReport:
        """Delete blobs no version references, older than the grace period."""
        return typed(m.GcReport, self._json("POST", "/v1/admin/gc",
                                            params={"grace_seconds": grace_seconds}))

    def verify(self, sample: int | None = None, content: bool = True) -> m.VerifyReport:
        """Check that referenced blobs are stored whole (admin): ``{"referenced",
        "checked", "ok", "missing", "corrupt"}``; ``sample`` checks that many at random."""
        params: dict[str, Any] = {"content": "true" if content else "false"}
        if sample is not None:
            params["sample"] = sample
        return typed(m.VerifyReport, self._json("POST", "/v1/admin/verify", params=params))

    def events(self, after: int = 0, limit: int = 100, wait: float = 0.0) -> m.EventPage:
        """One page of the change feed: ``{"items": [...], "last": N}``; with ``wait``
        (at most 30 s) the catalog holds the call until an event comes or time runs out."""
        params: dict[str, Any] = {"after": after, "limit": limit}
        if wait:
            params["wait"] = wait
        return typed(m.EventPage, self._json("GET", "/v1/events", params=params))
