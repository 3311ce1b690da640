"""The sync client for the catalog's REST API (``/v1``); the async one is in
``catalog_async``, and what both share (request shapes, errors, the resend rule) in
``catalog_http``.

:class:`CatalogClient` serves the ``mol catalog`` verbs, ``mol up`` and scripts;
``catalog_async.AsyncCatalogClient`` serves long-running processes (router, operator,
the vLLM resolver plugin). Every non-2xx answer raises :class:`CatalogError` carrying
the server's ``error``, ``detail`` and (for 422) ``reasons``; an unreachable catalog
raises it too, with status 0. A call the server cut off on a kept-alive connection
before answering is sent once more when it is idempotent. Settings come from
``MOL_CATALOG_URL`` and ``MOL_CATALOG_TOKEN`` unless given explicitly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from mol_platform.clients.catalog_http import (
    DEFAULT_URL,
    CatalogError,
    ClientSettings,
    DownloadFile,
    M,
    absolute_files,
    alias_path,
    auth_headers,
    checked,
    decoded,
    download_failed,
    download_request,
    eval_body,
    evals_path,
    events_params,
    join_url,
    label_body,
    labels_params,
    page_query,
    profile_body,
    quote_segment,
    resend,
    resolve_call,
    router_head_path,
    router_head_ref_path,
    router_head_version,
    routing_path,
    split_adapter,
    token_body,
    typed,
    unreachable,
)
from mol_platform.clients.catalog_tools import ToolCalls
from mol_platform.contract import catalog_models as m
from mol_platform.contract.model_folder import (
    MultipartBody,
    Progress,
    adapter_files,
    read_base_model_folder,
)
from mol_platform.contract.refs import check_alias, check_name, check_tag

# The client's public names, wherever they are defined.
__all__ = ["DEFAULT_URL", "CatalogClient", "CatalogError", "ClientSettings", "join_url",
           "split_adapter", "typed"]


class CatalogClient(ToolCalls):
    """Sync client; use as a context manager (it owns an ``httpx.Client``). The calls on
    tools are ``catalog_tools.ToolCalls``'s."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 timeout: float = 60.0, transport: httpx.BaseTransport | None = None) -> None:
        settings = ClientSettings()
        self.url = (url or settings.url).rstrip("/")
        token = token if token is not None else settings.token
        self._http = httpx.Client(base_url=self.url, headers=auth_headers(token),
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
                if not resend(method):
                    raise
                response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise unreachable("reach the catalog at", self.url, exc) from None
        return checked(response)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return decoded(self.request(method, path, **kwargs))

    def _pages(self, path: str, params: Mapping[str, Any], limit: int | None,
               page_size: int, model: type[M]) -> Iterator[M]:
        cursor: str | None = None
        seen = 0
        while True:
            size = page_size if limit is None else max(1, min(page_size, limit - seen))
            page = self._json("GET", path, params=page_query(params, size, cursor))
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
        return typed(m.BaseDetail, self._json("GET", f"/v1/base-models/{quote_segment(name)}"))

    def set_profile(self, name: str, *, base_model: str, max_lora_rank: int, max_loras: int,
                    engine: str | None = None,
                    supported_modules: Sequence[str] | None = None,
                    require_signatures: bool = False) -> m.Profile:
        """Declare or change a serving profile."""
        body = profile_body(base_model, max_lora_rank, max_loras, engine, supported_modules,
                            require_signatures)
        return typed(m.Profile, self._json("PUT", f"/v1/serving-profiles/{quote_segment(name)}",
                                           json=body))

    def list_profiles(self) -> list[m.Profile]:
        return typed(m.ProfileList, self._json("GET", "/v1/serving-profiles")).items

    def get_profile(self, name: str) -> m.Profile:
        return typed(m.Profile, self._json("GET", f"/v1/serving-profiles/{quote_segment(name)}"))

    # --- adapters ---------------------------------------------------------------------

    def publish(self, folder: Path, adapter: str, *, base: str | None = None,
                alias: str | None = None, tags: Sequence[str] = (), parent: int | None = None,
                source: str | None = None, labels: Mapping[str, str] | None = None,
                progress: Progress | None = None, force: bool = False,
                signature: str | None = None) -> m.Published:
        """Publish a PEFT folder as a new version (or get the identical existing one).

        The multipart body is streamed from disk; ``progress(sent, total)`` sees each chunk.
        ``signature``: a model-signing signature (Sigstore bundle JSON) over the two files.
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
                           ("labels", json.dumps(dict(labels)) if labels else None),
                           ("force", "true" if force else None),
                           ("signature", signature)):
            if value is not None:
                fields.append((key, value))
        body = MultipartBody(fields, files, progress)
        headers = {"Content-Type": body.content_type, "Content-Length": str(len(body))}
        return typed(m.Published, self._json(
            "POST", f"/v1/adapters/{namespace}/{name}/versions", content=iter(body),
            headers=headers))

    def resolve(self, ref: str, profile: str | None = None) -> m.Resolved:
        """``ns/name@alias|latest|vN|sha256:...`` -> version, digest, files, verdict."""
        path, params = resolve_call(ref, profile)
        return absolute_files(typed(m.Resolved, self._json("GET", path, params=params)),
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

    def set_alias(self, adapter: str, alias: str, version: int,
                  force: bool = False) -> m.AliasSet:
        """Point ``alias`` at ``version`` (``previous``: where it pointed before); a
        refused move of a protected alias is a CatalogError 409 with its reasons, unless an
        admin ``force``s it."""
        body: dict[str, Any] = {"version": int(version)}
        if force:
            body["force"] = True
        return typed(m.AliasSet, self._json("PUT", alias_path(adapter, alias), json=body))

    # --- namespaces: protected aliases, webhooks ----------------------------------------

    def protected_aliases(self, namespace: str) -> m.ProtectedAliases:
        return typed(m.ProtectedAliases, self._json(
            "GET", f"/v1/namespaces/{quote_segment(namespace)}/protected-aliases"))

    def set_protected_aliases(self, namespace: str, aliases: Sequence[str],
                              required_evals: Sequence[str] = ()) -> m.ProtectedAliases:
        """Replace the namespace's protected aliases and the eval suites their targets
        must have reports of (admin)."""
        return typed(m.ProtectedAliases, self._json(
            "PUT", f"/v1/namespaces/{quote_segment(namespace)}/protected-aliases",
            json={"protected_aliases": list(aliases),
                  "required_evals": list(required_evals)}))

    def create_webhook(self, namespace: str, url: str, secret: str,
                       events: Sequence[str]) -> m.Webhook:
        return typed(m.Webhook, self._json(
            "POST", f"/v1/namespaces/{quote_segment(namespace)}/webhooks",
            json={"url": url, "secret": secret, "events": list(events)}))

    def list_webhooks(self, namespace: str) -> list[m.Webhook]:
        return typed(m.WebhookList, self._json(
            "GET", f"/v1/namespaces/{quote_segment(namespace)}/webhooks")).items

    def delete_webhook(self, namespace: str, webhook_id: int) -> None:
        self.request("DELETE",
                     f"/v1/namespaces/{quote_segment(namespace)}/webhooks/{int(webhook_id)}")

    def webhook_deliveries(self, namespace: str, webhook_id: int,
                           limit: int = 50) -> list[m.WebhookDelivery]:
        return typed(m.WebhookDeliveryList, self._json(
            "GET", f"/v1/namespaces/{quote_segment(namespace)}/webhooks/{int(webhook_id)}"
            "/deliveries", params={"limit": limit})).items

    def alias_history(self, adapter: str, alias: str) -> list[m.AliasMove]:
        """Every move of the alias, newest first."""
        return typed(m.AliasHistory, self._json("GET", alias_path(adapter, alias)
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

    def attach_eval(self, adapter: str, version: int, suite: str,
                    metrics: Mapping[str, float], *, suite_version: str = "1",
                    dataset_digest: str | None = None, judge_model: str | None = None,
                    report: str | None = None) -> m.EvalAttached:
        """Attach an eval report to a version (the same suite version again replaces it)."""
        body = eval_body(suite, metrics, suite_version, dataset_digest, judge_model, report)
        return typed(m.EvalAttached, self._json("POST", evals_path(adapter, version),
                                                json=body))

    def evals(self, adapter: str, version: int) -> list[m.EvalReport]:
        """The version's eval reports, by suite and suite version."""
        return typed(m.EvalList, self._json("GET", evals_path(adapter, version))).items

    def eval_report_text(self, adapter: str, version: int, suite: str,
                         suite_version: str) -> str:
        """The free-form report attached with a suite version's results."""
        path = (f"{evals_path(adapter, version)}/{quote_segment(suite)}/"
                f"{quote_segment(suite_version)}/report")
        return self.request("GET", path).text

    def download(self, url: str, dest: Path, *, progress: Callable[[int], None] | None = None,
                 chunk: int = 1 << 20) -> str:
        """Stream one file to ``dest`` (absolute or catalog-relative URL); its sha256 hex.

        ``progress(n)`` sees each block's size. The caller verifies the digest and moves
        the file into place: ``dest`` may hold a partial file when this raises.
        """
        request = download_request(self._http, self.url, url)
        out = DownloadFile(dest, progress)
        try:
            response = self._http.send(request, stream=True)
            try:
                if response.is_error:
                    response.read()
                checked(response)
                with out:
                    for block in response.iter_bytes(chunk):
                        out.write(block)
            finally:
                response.close()
        except httpx.TransportError as exc:
            raise download_failed(url, self.url, exc) from None
        return out.hexdigest

    # --- tokens, gc, events -------------------------------------------------------------

    def create_token(self, name: str, scopes: Sequence[str]) -> m.TokenCreated:
        """Create a token; the answer's ``token`` is shown only this once."""
        return typed(m.TokenCreated, self._json("POST", "/v1/tokens",
                                                json=token_body(name, scopes)))

    def list_tokens(self, prefix: str = "", *, active: bool = False) -> list[m.TokenInfo]:
        """Tokens whose name starts with ``prefix``; ``active``: only unrevoked ones."""
        params = {k: v for k, v in (("prefix", prefix), ("active", "true" if active else ""))
                  if v}
        return typed(m.TokenList, self._json("GET", "/v1/tokens", params=params)).items

    def revoke_token(self, token_id: str) -> None:
        self.request("DELETE", f"/v1/tokens/{quote_segment(str(token_id))}")

    def add_key(self, namespace: str, name: str, public_key: str) -> m.SigningKey:
        """Register a PEM public key that may sign the namespace's adapters."""
        return typed(m.SigningKey, self._json(
            "POST", f"/v1/namespaces/{quote_segment(namespace)}/keys",
            json={"name": name, "public_key": public_key}))

    def list_keys(self, namespace: str) -> list[m.SigningKey]:
        return typed(m.SigningKeyList, self._json(
            "GET", f"/v1/namespaces/{quote_segment(namespace)}/keys")).items

    def revoke_key(self, namespace: str, key_id: str) -> m.SigningKey:
        return typed(m.SigningKey, self._json(
            "POST", f"/v1/namespaces/{quote_segment(namespace)}/keys/"
            f"{quote_segment(key_id)}/revoke"))

    def signature_policy(self, namespace: str) -> m.SignaturePolicy:
        return typed(m.SignaturePolicy, self._json(
            "GET", f"/v1/namespaces/{quote_segment(namespace)}/signature-policy"))

    def set_signature_policy(self, namespace: str, *, require: bool,
                             keys: Sequence[str] | None = None) -> m.SignaturePolicy:
        """Require (or not) signatures on the namespace's publishes, by ``keys`` only
        when given (else by any of its active keys)."""
        body = {"require_signatures": require, "keys": None if keys is None else list(keys)}
        return typed(m.SignaturePolicy, self._json(
            "PUT", f"/v1/namespaces/{quote_segment(namespace)}/signature-policy", json=body))

    def gc(self, grace_seconds: int = 3600) -> m.GcReport:
        """Delete blobs no version references, older than the grace period."""
        return typed(m.GcReport, self._json("POST", "/v1/admin/gc",
                                            params={"grace_seconds": grace_seconds}))

    def usage(self, *, days: int = 30, unused: bool = False, group: str = "version",
              sort: str = "name", namespace: str | None = None, limit: int = 100
              ) -> Iterator[m.UsageItem]:
        """Versions (``group="adapter"``: adapters) with their use in the last ``days``
        days; ``unused``: only those with none; ``sort="usage"``: most requests first."""
        params: dict[str, Any] = {"days": days, "unused": "true" if unused else "false",
                                  "group": group, "sort": sort}
        if namespace is not None:
            params["namespace"] = namespace
        offset: int | None = 0
        left = limit
        while offset is not None and left > 0:
            page = typed(m.UsagePage, self._json("GET", "/v1/usage", params={
                **params, "limit": min(left, 1000), "offset": offset}))
            yield from page.items[:left]
            left -= len(page.items)
            offset = page.next_offset

    def adapter_usage(self, adapter: str, days: int = 30) -> m.AdapterUsage:
        """One adapter's use in the last ``days`` days, per version and per day."""
        ns, name = split_adapter(adapter)
        return typed(m.AdapterUsage, self._json(
            "GET", f"/v1/adapters/{quote_segment(ns)}/{quote_segment(name)}/usage",
            params={"days": days}))

    def report_usage(self, batch: Mapping[str, Any]) -> m.UsageRecorded:
        """Post a usage batch (``{"batch_id", "entries": [...]}``); safe to retry."""
        return typed(m.UsageRecorded, self._json("POST", "/v1/usage", json=dict(batch)))

    # --- routing feedback ----------------------------------------------------------

    def report_decisions(self, batch: Mapping[str, Any]) -> m.DecisionsRecorded:
        """Post a batch of routing decisions (``{"batch_id", "decisions": [...]}``); safe
        to retry: the catalog records a batch id once."""
        return typed(m.DecisionsRecorded, self._json("POST", "/v1/routing/decisions",
                                                     json=dict(batch)))

    def put_routing_label(self, namespace: str, request_id: str, expert: str,
                          source: str = "reviewer", note: str | None = None) -> m.Label:
        """Say which expert was right for a recorded decision (``publish:<ns>``); a new
        label replaces the last."""
        return typed(m.Label, self._json("PUT", routing_path(namespace, "labels", request_id),
                                         json=label_body(expert, source, note)))

    def routing_decision(self, namespace: str, request_id: str) -> m.RoutingDecision:
        """One recorded decision and its label, if any."""
        return typed(m.RoutingDecision, self._json(
            "GET", routing_path(namespace, "decisions", request_id)))

    def routing_labels(self, namespace: str, deployment: str | None = None,
                       since: datetime | str | None = None) -> str:
        """The namespace's labels as JSON lines (the text ``mol router train --prompts``
        reads), oldest label first; ``deployment`` and ``since`` narrow them."""
        return self.request("GET", routing_path(namespace, "labels"),
                            params=labels_params(deployment, since)).text

    def routing_accuracy(self, namespace: str, deployment: str | None = None,
                         since: datetime | str | None = None) -> m.RoutingAccuracy:
        """Each trained head's picks against the labels (the serving head's and a canary's
        candidate picks), in all and per right expert."""
        return typed(m.RoutingAccuracy, self._json(
            "GET", routing_path(namespace, "accuracy"),
            params=labels_params(deployment, since)))

    # --- router heads ---------------------------------------------------------------

    def publish_router_head(self, namespace: str, name: str,
                            document: bytes) -> m.RouterHeadVersion:
        """Publish a trained head (the JSON file ``mol router train`` wrote) as the
        name's next version; the same document again answers with its version."""
        return typed(m.RouterHeadVersion, self._json(
            "POST", router_head_path(namespace, name, "versions"), content=document,
            headers={"Content-Type": "application/json"}))

    def router_heads(self, namespace: str) -> list[m.RouterHeadItem]:
        """The namespace's heads by name, each with its latest version and aliases."""
        return typed(m.RouterHeadList, self._json("GET", router_head_path(namespace))).items

    def router_head_versions(self, namespace: str, name: str) -> list[m.RouterHeadVersion]:
        """The head's versions, newest first."""
        return typed(m.RouterHeadVersionList, self._json(
            "GET", router_head_path(namespace, name, "versions"))).items

    def router_head(self, namespace: str, name: str, ref: int | str) -> m.RouterHeadVersion:
        """A version (``ref`` an int) or the version an alias names (``ref`` a str; the
        answer is then a ``RouterHeadAlias``, with ``alias``)."""
        model = m.RouterHeadVersion if isinstance(ref, int) else m.RouterHeadAlias
        return typed(model, self._json("GET", router_head_ref_path(namespace, name, ref)))

    def router_head_document(self, namespace: str, name: str, version: int) -> bytes:
        """The version's stored document, byte for byte (its sha256 is the digest)."""
        return self.request("GET", router_head_path(
            namespace, name, "versions", router_head_version(version), "document")).content

    def router_head_aliases(self, namespace: str, name: str) -> list[m.RouterHeadAliasItem]:
        return typed(m.RouterHeadAliasList, self._json(
            "GET", router_head_path(namespace, name, "aliases"))).items

    def set_router_head_alias(self, namespace: str, name: str, alias: str,
                              version: int) -> m.RouterHeadAliasSet:
        """Point ``alias`` at ``version`` (``previous``: where it pointed before)."""
        return typed(m.RouterHeadAliasSet, self._json(
            "PUT", router_head_ref_path(namespace, name, alias),
            json={"version": router_head_version(version)}))

    def delete_router_head_alias(self, namespace: str, name: str,
                                 alias: str) -> m.RouterHeadAliasDeleted:
        return typed(m.RouterHeadAliasDeleted, self._json(
            "DELETE", router_head_ref_path(namespace, name, alias)))

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
        return typed(m.EventPage, self._json("GET", "/v1/events",
                                             params=events_params(after, limit, wait)))
