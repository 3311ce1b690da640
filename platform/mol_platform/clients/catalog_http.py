"""What both catalog clients share: settings, request building, error mapping, the
resend decision and answer decoding; no I/O.

:class:`~mol_platform.clients.catalog.CatalogClient` (``httpx.Client``) and
:class:`~mol_platform.clients.catalog_async.AsyncCatalogClient` (``httpx.AsyncClient``)
keep only the calls that wait on the network, the way httpx's ``Client`` and
``AsyncClient`` share ``BaseClient``: a path, a body shape, an error or a retry rule is
written once here and both clients follow it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from mol_platform.contract import catalog_models as m
from mol_platform.contract import evals
from mol_platform.contract import router_heads as rh
from mol_platform.contract import routing_feedback as rf
from mol_platform.contract.refs import (
    MAX_VERSION,
    AdapterRef,
    check_alias,
    check_name,
    check_namespace,
    check_scope,
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


def error_from(response: httpx.Response) -> CatalogError:
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


def origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def quote_segment(value: str) -> str:
    """One path segment, every reserved character escaped."""
    return quote(value, safe="")


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def resolve_call(ref: str, profile: str | None) -> tuple[str, dict[str, str] | None]:
    parsed = AdapterRef.parse(ref)
    params = {"profile": profile} if profile else None
    return f"/v1/resolve/{parsed.namespace}/{parsed.name}@{parsed.ref}", params


def profile_body(base_model: str, max_lora_rank: int, max_loras: int, engine: str | None,
                 supported_modules: Sequence[str] | None,
                 require_signatures: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"base_model": base_model, "max_lora_rank": max_lora_rank,
                            "max_loras": max_loras, "require_signatures": require_signatures}
    if engine is not None:
        body["engine"] = engine
    if supported_modules is not None:
        body["supported_modules"] = list(supported_modules)
    return body


def absolute_files(resolved: m.Resolved, catalog_url: str) -> m.Resolved:
    """A resolve answer with every file URL made absolute (see ``join_url``)."""
    for f in resolved.files:
        f.url = join_url(catalog_url, f.url)
    return resolved


def token_body(name: str, scopes: Sequence[str]) -> dict[str, Any]:
    for scope in scopes:
        check_scope(scope)
    return {"name": name, "scopes": list(scopes)}


def download_request(http: httpx.Client | httpx.AsyncClient, catalog_url: str,
                      url: str) -> httpx.Request:
    """A GET of a file URL the catalog gave; a presigned object-store URL (another
    origin) goes without the catalog's token, which is not for that host."""
    target = join_url(catalog_url, url)
    request = http.build_request("GET", target)
    if origin(target) != origin(catalog_url):
        request.headers.pop("Authorization", None)
    return request


def evals_path(adapter: str, version: int) -> str:
    namespace, name = split_adapter(adapter)
    return f"/v1/adapters/{namespace}/{name}/versions/{int(version)}/evals"


def eval_body(suite: str, metrics: Mapping[str, float], suite_version: str,
              dataset_digest: str | None, judge_model: str | None,
              report: str | None) -> dict[str, Any]:
    """The body of an eval attach, checked here first (the catalog checks it again)."""
    body: dict[str, Any] = {"suite": evals.check_suite(suite),
                            "suite_version": evals.check_suite_version(suite_version),
                            "metrics": evals.check_metrics(metrics)}
    for key, value in (("dataset_digest", dataset_digest), ("judge_model", judge_model),
                       ("report", report)):
        if value is not None:
            body[key] = value
    return body


_REQUEST_ID_RE = re.compile(rf.REQUEST_ID_PATTERN)


def routing_path(namespace: str, what: str, request_id: str | None = None) -> str:
    """``/v1/namespaces/{ns}/routing/{what}[/{request_id}]``, both names checked here (a
    request id with a newline or a slash never reaches the URL)."""
    path = f"/v1/namespaces/{check_namespace(namespace)}/routing/{what}"
    if request_id is None:
        return path
    if _REQUEST_ID_RE.fullmatch(request_id) is None:
        raise ValueError(f"invalid request id {request_id[:80]!r}: 1-128 of A-Z a-z 0-9 . _ : - "
                         "(the x-request-id the router answered with)")
    return f"{path}/{quote_segment(request_id)}"


def label_body(expert: str, source: str, note: str | None) -> dict[str, Any]:
    """The body of a routing label, checked by the contract's model first."""
    try:
        body = rf.LabelIn(expert=expert, source=source, note=note)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                             for e in exc.errors(include_url=False))
        raise ValueError(f"invalid label: {problems}") from None
    return body.model_dump(mode="json")


def labels_params(deployment: str | None, since: datetime | str | None) -> dict[str, str]:
    """The export's filters as query parameters (a datetime in ISO form)."""
    params: dict[str, str] = {}
    if deployment is not None:
        params["deployment"] = deployment
    if since is not None:
        params["since"] = since.isoformat() if isinstance(since, datetime) else since
    return params


def router_head_path(namespace: str, name: str | None = None, *rest: str | int) -> str:
    """``/v1/namespaces/{ns}/router-heads[/{name}[/...]]``, the names checked here (a head
    name is a DNS label); ``rest``: more segments, each escaped."""
    path = f"/v1/namespaces/{check_namespace(namespace)}/router-heads"
    if name is None:
        return path
    path += "/" + rh.check_head_name(name)
    return "".join([path, *(f"/{quote_segment(str(part))}" for part in rest)])


def router_head_ref_path(namespace: str, name: str, ref: int | str) -> str:
    """The path of a head version (``ref`` an int) or an alias (``ref`` a str)."""
    if isinstance(ref, bool) or not isinstance(ref, int | str):
        raise ValueError(f"a router head ref is a version (int) or an alias (str), not {ref!r}")
    if isinstance(ref, int):
        return router_head_path(namespace, name, "versions", router_head_version(ref))
    return router_head_path(namespace, name, "aliases", check_alias(ref))


def router_head_version(version: int) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or not (
            1 <= version <= MAX_VERSION):
        raise ValueError(f"invalid router head version {version!r}: an integer from 1 to "
                         f"{MAX_VERSION}")
    return version


def alias_path(adapter: str, alias: str) -> str:
    namespace, name = split_adapter(adapter)
    check_alias(alias)
    return f"/v1/adapters/{namespace}/{name}/aliases/{quote_segment(alias)}"


def resend(method: str) -> bool:
    """Whether a call the server cut off before answering (``RemoteProtocolError`` on a
    kept-alive connection it had closed) is sent once more: only when repeating it
    changes nothing."""
    return method in IDEMPOTENT


def unreachable(what: str, catalog_url: str, exc: httpx.TransportError) -> CatalogError:
    """A transport failure as a CatalogError with status 0 (callers fall back on it)."""
    return CatalogError(0, "ConnectionError", f"cannot {what} {catalog_url}: {exc}")


def download_failed(url: str, catalog_url: str, exc: Exception) -> CatalogError:
    """A download that could not connect. A presigned URL's query is its credential (the
    signature), so it is left out; the message says the URL came from the catalog, which
    answered, so the store it names is what failed."""
    target = join_url(catalog_url, url)
    parts = urlsplit(target)
    shown = parts._replace(query="<signature redacted>" if parts.query else "",
                           fragment="").geturl()
    where = ("the catalog" if origin(target) == origin(catalog_url)
             else "the blob store the catalog's download URL names")
    return CatalogError(0, "ConnectionError",
                        f"cannot download {shown} (a download URL given by the catalog at "
                        f"{catalog_url}): {where} is unreachable: {exc}")


def checked(response: httpx.Response) -> httpx.Response:
    """The response, or its CatalogError when it is not 2xx (its body already read)."""
    if response.is_error:
        raise error_from(response)
    return response


def decoded(response: httpx.Response) -> Any:
    """A checked answer's JSON body; None when it has none (204)."""
    return response.json() if response.content else None


def page_query(params: Mapping[str, Any], size: int, cursor: str | None) -> dict[str, Any]:
    """The query of one page of a listing: the filters that are set, limit, cursor."""
    query = {k: v for k, v in params.items() if v is not None}
    query["limit"] = size
    if cursor:
        query["cursor"] = cursor
    return query


def events_params(after: int, limit: int, wait: float = 0.0) -> dict[str, Any]:
    params: dict[str, Any] = {"after": after, "limit": limit}
    if wait:
        params["wait"] = wait
    return params


class DownloadFile:
    """Where a download's blocks go: ``dest``, hashed on the way (``hexdigest``).

    The caller verifies the digest and moves the file into place: ``dest`` may hold a
    partial file when a download fails."""

    def __init__(self, dest: Path, progress: Callable[[int], None] | None = None) -> None:
        self.dest = dest
        self._progress = progress
        self._sha = hashlib.sha256()
        self._out: IO[bytes] | None = None

    def __enter__(self) -> DownloadFile:
        self._out = self.dest.open("wb")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._out is not None:
            self._out.close()

    def write(self, block: bytes) -> None:
        assert self._out is not None, "use DownloadFile as a context manager"
        self._sha.update(block)
        self._out.write(block)
        if self._progress is not None:
            self._progress(len(block))

    @property
    def hexdigest(self) -> str:
        return self._sha.hexdigest()
