"""A Kubernetes API emulator with the semantics kopf and our operator depend on.

``kmock.KubernetesEmulator`` (kmock 0.8) serves discovery and an in-memory object
store over real HTTP, but lacks what a controller relies on. This subclass replaces
its object store logic (it touches kmock internals: keep kmock pinned):

- ``metadata.uid/resourceVersion/generation/creationTimestamp`` on create; every
  write bumps one cluster-wide resourceVersion; generation only when the spec (the
  body outside metadata and status) changes; a write that changes nothing is a no-op;
- a ``resourceVersion`` in a PATCH/PUT body is a precondition (409 when stale);
- merge, strategic-merge (treated as merge), JSON (RFC 6902, ``test`` included) and
  apply patches; PUT replaces; the ``status`` subresource is isolated (writes to the
  main endpoint keep status, writes to ``/status`` change status only);
- DELETE honours finalizers (``deletionTimestamp`` first, removal once they are gone);
- watches resume from ``?resourceVersion=`` (no full replay), honour label/field
  selectors and ``timeoutSeconds``; lists carry the current resourceVersion;
  ``expire_watches()`` ends every watch with 410 Gone, as after a compaction;
- ``/api/v1/namespaces[/name]`` and ``GET /version/`` work; objects in a namespace
  that does not exist are refused (404), as a real server does.

- garbage collection by ``metadata.ownerReferences`` (background, foreground and
  orphan propagation; :mod:`mol_testkit.kube_gc`).

A resource can be forbidden to the client (403, :mod:`mol_testkit.kube_rbac`).

Not emulated: defaulting, admission, validation (use :mod:`mol_testkit.kube_validate`),
pagination, field managers.
kmock's DSL still works on top: ``emulator["patch", kmock.resource(...)] << 500``
injects a failure before the store sees the request.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import copy
import datetime
import json
import re
import secrets
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml

# Not in kmock's __all__ (0.8, pinned); the reaction loop _handle reimplements raises it.
from kmock._internal.rendering import ReactionMismatchError

from mol_testkit import kube_gc
from mol_testkit.kube_patch import (
    PatchError,
    json_patch,
    match_fields,
    match_labels,
    merge_patch,
)
from mol_testkit.kube_rbac import Rbac

Body = dict[str, Any]
_NS_PATH = re.compile(r"^/api/v1/namespaces(?:/([^/]+)(?:/(status|finalize))?)?/?$")
NAMESPACES = kmock.resource(group="", version="v1", plural="namespaces")
SERVER_VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-mol-emulator"}


def _error(status: int, reason: str, message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=status, reason=reason, message=message, details={})


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _apply_body(text: str) -> Any:
    """An apply patch's body: YAML, of which JSON (what most clients send) is a subset;
    JSON is parsed as such first, since pure-Python YAML parsing dominated the emulator."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise _error(400, "BadRequest", f"the apply patch is not YAML: {exc}") from None


_GONE = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                     "code": 410, "reason": "Expired",
                                     "message": "too old resource version"}}


def _copy(obj: Any) -> Any:
    """A deep copy of a JSON object (several times faster than copy.deepcopy)."""
    try:
        return json.loads(json.dumps(obj))
    except TypeError:  # YAML gave something JSON has not (a date): copy it the slow way
        return copy.deepcopy(obj)


_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the API server's alphabet for generateName


def _generated_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_NAME_CHARS) for _ in range(5))


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _namespace_action(method: kmock.method, name: str | None,
                      watch: bool) -> kmock.action | None:
    """The Kubernetes verb of a namespaces request, as kmock names it for other resources."""
    if method == kmock.method.GET:
        return kmock.action.WATCH if watch else (
            kmock.action.LIST if name is None else kmock.action.FETCH)
    if name is None:
        return kmock.action.CREATE if method == kmock.method.POST else None
    return {kmock.method.PATCH: kmock.action.UPDATE,
            kmock.method.DELETE: kmock.action.DELETE}.get(method)


@attrs.define(frozen=True)
class _Event:
    rv: int
    resource: kmock.resource
    type: str
    obj: Body


@attrs.define(kw_only=True)
class KubeEmulator(kmock.KubernetesEmulator):
    """The emulator; serve it with :class:`mol_testkit.kube.KubeServer`."""

    _rv: int = attrs.field(default=0, init=False)
    _events: list[_Event] = attrs.field(factory=list, init=False)
    # one wake-up per resource: a write wakes only the watches of its own resource
    _ticks: dict[kmock.resource, asyncio.Event] = attrs.field(factory=dict, init=False)
    _ranked: tuple[tuple[Any, ...], list[Any]] = attrs.field(factory=lambda: ((), []),
                                                            init=False)
    _closing: bool = attrs.field(default=False, init=False)
    _expired_at: int = attrs.field(default=0, init=False)
    _expiries: int = attrs.field(default=0, init=False)
    rbac: Rbac = attrs.field(factory=Rbac)  # forbidden resources: mol_testkit.kube_rbac

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.fallback[kmock.method.PUT] << self._serve_put
        self.fallback["get /version/"] << SERVER_VERSION

    # -- request parsing ---------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kmock 0.8 cannot parse /api/v1/namespaces (500): give it a pre-parsed request.
        match = _NS_PATH.match(raw_request.path)
        if match is None:
            return await super().__call__(raw_request)
        try:
            request = await self._parse_namespace_request(raw_request, match)
            self._requests.append(request)
            return await self._handle(request)
        except Exception as exc:
            return await self._render_error(exc)

    async def _parse_namespace_request(
        self, raw: aiohttp.web.BaseRequest, match: re.Match[str]
    ) -> kmock.Request:
        body = await raw.read()
        data: Any = None
        if body:
            try:
                data = await raw.json()
            except ValueError:
                data = None
        name, sub = match.group(1), match.group(2)
        method = kmock.method(raw.method)
        return kmock.Request(
            id=len(self._requests),
            raw_request=raw,
            url=raw.url,
            method=raw.method,
            params=dict(raw.query),
            headers=dict(raw.headers),
            cookies=dict(raw.cookies),
            data=data,
            body=body,
            text=body.decode(errors="replace"),
            action=_namespace_action(method, name, raw.query.get("watch") == "true"),
            resource=NAMESPACES,
            namespace=None,
            name=name,
            subresource=sub,
        )

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        # Skip KubernetesEmulator._handle (its own store logic); the fallbacks below do it.
        # kmock's RawHandler._handle asks `request in payload._source` for each reaction,
        # which replays the whole request log through the filters: quadratic in the number
        # of requests (seconds per request after a few thousand). Plain filter chains are
        # decided on this request alone; anything else (slices, groups) goes the slow way.
        refusal = self.rbac.refusal(request)
        if refusal is not None:
            return await self._render_error(refusal)
        for payload in self._ranked_payloads():
            seen = self._sees(payload._source, request)
            if seen is None:
                seen = request in payload._source
            if seen and not payload._disabled.is_set():
                try:
                    response: aiohttp.web.StreamResponse = await payload(request)
                    return response
                except ReactionMismatchError:
                    payload._disabled.set()
                except NotImplementedError:
                    pass
        raise NotImplementedError("no reaction matches the request")

    def _ranked_payloads(self) -> list[Any]:
        """The reactions by priority, ranked again only when a reaction was added."""
        key, ranked = self._ranked
        current = tuple(self._payloads)
        if len(key) != len(current) or any(a is not b for a, b in zip(key, current, strict=True)):
            width = max((len(p.priorities) for p in current), default=0)
            ranked = sorted(current, key=lambda p: tuple(
                -x for x in (*p.priorities, *(0,) * (width - len(p.priorities)))))
            self._ranked = (current, ranked)
        return ranked

    def _sees(self, view: Any, request: kmock.Request) -> bool | None:
        """Whether a chain of plain filters (and priorities) over this root admits the
        request; None when the chain holds anything else."""
        while True:
            if view is self:
                return True
            if type(view) is kmock.Filter:
                if not view.criteria(request):
                    return False
            elif type(view) is not kmock.Priority:
                return None
            view = view._source

    # -- store helpers -----------------------------------------------------------

    def _info(self, request: kmock.Request) -> kmock.ResourceInfo:
        res = request.resource
        for known, info in self.resources.items():
            if known == res and isinstance(info, kmock.ResourceInfo):
                return info
        raise _error(
            404, "NotFound",
            f"the server could not find the requested resource {res}: register it first",
        )

    def _namespaced(self, request: kmock.Request) -> bool:
        return self._info(request).namespaced is not False

    def _has_status(self, request: kmock.Request) -> bool:
        return "status" in self._info(request).subresources

    def _current(self, res: kmock.resource, ns: str | None, name: str) -> Body | None:
        key = (res, ns, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        found: Body = _copy(self.objects[key].raw)
        return found

    def _require(self, request: kmock.Request) -> Body:
        assert request.resource is not None
        assert request.name is not None
        ns = request.namespace if self._namespaced(request) else None
        current = self._current(request.resource, ns, request.name)
        if current is None:
            raise _error(404, "NotFound", f"{request.resource.plural} {request.name!r} not found")
        return current

    def _notify(self, res: kmock.resource, kind: str, obj: Body) -> None:
        self._events.append(_Event(self._rv, res, kind, _copy(obj)))
        tick = self._ticks.pop(res, None)
        if tick is not None:
            tick.set()

    def _store(self, res: kmock.resource, kind: str, obj: Body) -> Body:
        """Assign the next resourceVersion, persist (or remove for DELETED) and notify."""
        self._rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._rv)
        key = (res, meta.get("namespace"), meta["name"])
        if kind == "DELETED":
            self.objects[key].delete()
        elif key in self.objects:
            self.objects[key].history.append(_copy(obj))
        else:
            self.objects[key] = _copy(obj)
        self._notify(res, kind, obj)
        if kind == "DELETED":
            kube_gc.collect(self, obj)
        return obj

    def _fill_type(self, request: kmock.Request, obj: Body) -> None:
        assert request.resource is not None
        res, info = request.resource, self._info(request)
        api_version = f"{res.group}/{res.version}" if res.group else str(res.version)
        obj.setdefault("apiVersion", api_version)
        if info.kind:
            obj.setdefault("kind", info.kind)

    def _spec_changed(self, request: kmock.Request, old: Body, new: Body) -> bool:
        skip = {"metadata", "status"} if self._has_status(request) else {"metadata"}
        return {k: v for k, v in old.items() if k not in skip} != {
            k: v for k, v in new.items() if k not in skip
        }

    # -- writes ------------------------------------------------------------------

    async def _serve_create(self, request: kmock.Request) -> kmock.Payload:
        obj = request.data
        if not isinstance(obj, dict):
            raise _error(400, "BadRequest", "the body must be a JSON object")
        return self._create(request, _copy(obj))

    def _create(self, request: kmock.Request, obj: Body) -> Body:
        assert request.resource is not None
        meta = obj.setdefault("metadata", {})
        generated = not meta.get("name") and meta.get("generateName")
        if generated:
            meta["name"] = _generated_name(meta["generateName"])
        if not meta.get("name"):
            raise _error(422, "Invalid", "metadata.name: Required value")
        if self._namespaced(request):
            ns = request.namespace or meta.get("namespace")
            if not ns:
                raise _error(400, "BadRequest", "a namespaced object needs a namespace")
            if meta.get("namespace", ns) != ns:
                raise _error(400, "BadRequest", "metadata.namespace does not match the URL")
            if self._current(NAMESPACES, None, ns) is None:
                raise _error(404, "NotFound", f'namespaces "{ns}" not found')
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        for _ in range(8 if generated else 0):  # a taken generated name is drawn again
            if self._current(request.resource, meta.get("namespace"), meta["name"]) is None:
                break
            meta["name"] = _generated_name(meta["generateName"])
        if self._current(request.resource, meta.get("namespace"), meta["name"]) is not None:
            raise _error(409, "AlreadyExists", f"{request.resource.plural} {meta['name']!r} exists")
        if self._has_status(request):
            obj.pop("status", None)
        self._fill_type(request, obj)
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        meta.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=_now())
        return self._store(request.resource, "ADDED", obj)

    async def _serve_update(self, request: kmock.Request) -> kmock.Payload:
        assert request.resource is not None
        ctype = request.headers.get("Content-Type", "application/merge-patch+json").split(";")[0]
        data: Any = request.data
        if ctype == "application/apply-patch+yaml":
            data = _apply_body(request.text or "{}")
            ns = request.namespace if self._namespaced(request) else None
            if self._current(request.resource, ns, str(request.name)) is None:
                return self._create(request, data)
        current = self._require(request)
        try:
            if ctype == "application/json-patch+json":
                patched = json_patch(current, data)
            else:
                patched = merge_patch(current, data)
        except PatchError as exc:
            raise _error(exc.status, "Invalid", str(exc)) from exc
        return self._write(request, current, patched, data)

    async def _serve_put(self, request: kmock.Request) -> kmock.Payload:
        if request.resource is None or request.name is None:
            raise kmock.KubernetesEndpointNotFoundError()
        current = self._require(request)
        if not isinstance(request.data, dict):
            raise _error(400, "BadRequest", "the body must be a JSON object")
        new = _copy(request.data)
        meta = new.setdefault("metadata", {})
        if meta.get("name", request.name) != request.name:
            raise _error(400, "BadRequest", "metadata.name does not match the URL")
        return self._write(request, current, new, request.data)

    def _write(self, request: kmock.Request, current: Body, new: Body, sent: Any) -> Body:
        assert request.resource is not None
        sent_meta = sent.get("metadata", {}) if isinstance(sent, dict) else {}
        sent_rv = sent_meta.get("resourceVersion")
        if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
            raise _error(409, "Conflict", "the object has been modified; apply to the latest one")
        if request.subresource == "status" and self._has_status(request):
            result = _copy(current)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
        elif request.subresource is not None:
            raise _error(404, "NotFound", f"subresource {request.subresource!r} is not served")
        else:
            result = new
            if self._has_status(request):
                if "status" in current:
                    result["status"] = current["status"]
                else:
                    result.pop("status", None)
            meta, old_meta = result.setdefault("metadata", {}), current["metadata"]
            for key in ("uid", "creationTimestamp", "generation", "name", "namespace",
                        "deletionTimestamp", "resourceVersion"):
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
        self._fill_type(request, result)
        if result == current:
            return current
        if self._spec_changed(request, current, result):
            result["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
        meta = result["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._store(request.resource, "DELETED", result)
        return self._store(request.resource, "MODIFIED", result)

    async def _serve_delete(self, request: kmock.Request) -> kmock.Payload:
        assert request.resource is not None
        current = self._require(request)
        try:
            policy = kube_gc.policy_of(request.params, request.data)
        except kube_gc.PolicyError as exc:
            raise _error(400, "BadRequest", str(exc)) from None
        return kube_gc.delete(self, request.resource, current, policy)

    # -- reads -------------------------------------------------------------------

    def _matches(self, request: kmock.Request, obj: Body) -> bool:
        meta = obj.get("metadata", {})
        if request.namespace is not None and meta.get("namespace") != request.namespace:
            return False
        if request.name is not None and meta.get("name") != request.name:
            return False
        labels = request.params.get("labelSelector")
        if labels and not match_labels(meta.get("labels") or {}, labels):
            return False
        fields = request.params.get("fieldSelector")
        return not (fields and not match_fields(obj, fields))

    def _items(self, request: kmock.Request) -> list[Body]:
        found = []
        for (res, _ns, _name), obj in self.objects.items():
            if res == request.resource and not obj.deleted and self._matches(request, obj.raw):
                found.append(obj.raw)  # rendered at once, never changed in place
        return sorted(found, key=lambda o: (o["metadata"].get("namespace") or "",
                                            o["metadata"]["name"]))

    async def _serve_fetch(self, request: kmock.Request) -> kmock.Payload:
        return self._require(request)

    async def _serve_list(self, request: kmock.Request) -> kmock.Payload:
        info = self._info(request)
        assert request.resource is not None
        res = request.resource
        api_version = f"{res.group}/{res.version}" if res.group else str(res.version)
        return {
            "apiVersion": api_version,
            "kind": f"{info.kind or 'Object'}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": self._items(request),
        }

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[kmock.Payload]:
        self._info(request)
        yield b""  # send the headers now
        assert request.resource is not None
        loop = asyncio.get_running_loop()
        timeout = request.params.get("timeoutSeconds")
        deadline = loop.time() + float(timeout) if timeout else None
        since = request.params.get("resourceVersion", "")
        initial = request.params.get("sendInitialEvents") == "true"
        cursor = self._rv
        if since in ("", "0") or initial:
            for obj in self._items(request):
                yield {"type": "ADDED", "object": obj}
            if initial:
                yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(cursor)}}}
        else:
            try:
                cursor = int(since)
            except ValueError:
                cursor = -1
            if cursor < self._expired_at:
                yield _GONE
                return
        expiries = self._expiries
        while not self._closing:
            if self._expiries != expiries:
                yield _GONE
                return
            tick = self._ticks.setdefault(request.resource, asyncio.Event())
            start = bisect.bisect_right(self._events, cursor, key=lambda e: e.rv)
            for event in self._events[start:]:
                cursor = event.rv
                if event.resource == request.resource and self._matches(request, event.obj):
                    yield {"type": event.type, "object": event.obj}
            wait = None if deadline is None else deadline - loop.time()
            if wait is not None and wait <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tick.wait(), timeout=min(wait or 1.0, 1.0))

    def expire_watches(self) -> None:
        """What a server does after compacting its history: every open watch gets an
        ERROR 410 Gone event and ends, and a watch from an earlier resourceVersion is
        refused the same way; clients must list again."""
        self._expired_at = self._rv
        self._expiries += 1
        self._wake_all()

    def close_watches(self) -> None:
        """End every open watch stream (on shutdown); clients see a normal end."""
        self._closing = True
        self._wake_all()

    def _wake_all(self) -> None:
        ticks, self._ticks = self._ticks, {}
        for tick in ticks.values():
            tick.set()
