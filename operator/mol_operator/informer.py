"""A watch cache of the operator's children (an informer), so a reconcile reads them from
memory instead of GETting each child slot.

For every child kind (and each watched namespace, or the whole cluster) one task lists
the objects labelled ``app.kubernetes.io/managed-by=mol-operator`` and then watches from
the list's resourceVersion (``mol_platform.clients.kube.list_watch``, the loop the
router's discovery runs too): a watch the server ends is resumed; 410 Gone, a broken
stream or any other error leads to a fresh list, which also drops what was deleted
meanwhile.
A restarted operator starts from a list, so reconciles wait until every kind has been
listed once (``wait_synced``) and never plan against an empty cache.

Objects are held as compact JSON (``managedFields`` dropped) and decoded per read: a
thousand deployments' children cost a few tens of MB instead of a few hundred. What the
operator writes itself goes into the cache from the API server's answer (``remember``,
``forget``), so the next reconcile sees its own writes even before the watch event
arrives; an older event never replaces a newer object.

An optional API (KEDA, Prometheus operator, KServe) that is not served is listed again
every minute, and at once when a reconcile needs it and discovery says it is now served.
One that is served but that the operator may not read (403 Forbidden: the CRDs are
installed, the chart grants no RBAC for them) counts as absent, with the reason kept
(``forbidden``), so it never holds back the rest; it is listed again every minute, so a
Role granted later is picked up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mol_operator.builders.common import MANAGER
from mol_platform.clients.kube import KubeApi, KubeError, list_watch

log = logging.getLogger(__name__)
SELECTOR = {"app.kubernetes.io/managed-by": MANAGER}
UNSERVED_RELIST = 60.0  # how often an API that is not served is looked for again


def _version(obj: Mapping[str, Any]) -> int | None:
    """resourceVersion as a number where it is one (etcd's revision), else None."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or "")
    except ValueError:
        return None


def _newer(new: int | None, old: int | None) -> bool:
    return new is None or old is None or new >= old


@dataclass
class _Kind:
    """One child kind: its objects by (namespace, name) and whether its API is served."""

    api_version: str
    plural: str
    objects: dict[tuple[str | None, str], tuple[int | None, str]] = field(default_factory=dict)
    served: bool | None = None
    forbidden: str | None = None  # the API server's 403 message while we may not read it
    synced: dict[str | None, asyncio.Event] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def put(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace"), str(meta.get("name")))
        version = _version(obj)
        held = self.objects.get(key)
        if held is not None and not _newer(version, held[0]):
            return
        slim = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
        self.objects[key] = (version, json.dumps(slim, separators=(",", ":")))

    def drop(self, namespace: str | None, name: str, version: int | None = None) -> None:
        held = self.objects.get((namespace, name))
        if held is not None and _newer(version, held[0]):
            del self.objects[(namespace, name)]

    def replace(self, scope: str | None, items: list[dict[str, Any]], version: str) -> None:
        """A fresh list of ``scope`` (a namespace, None: all): what it lacks is gone."""
        listed = {((i.get("metadata") or {}).get("namespace"), str(i["metadata"]["name"]))
                  for i in items}
        at = _version({"metadata": {"resourceVersion": version}})
        for key in [k for k in self.objects if scope is None or k[0] == scope]:
            if key not in listed:
                self.drop(*key, version=at)
        for item in items:
            self.put(item)


class ChildCache:
    """The informer over every child kind; ``start()`` in the operator's loop, ``stop()``."""

    def __init__(self, kube: KubeApi, kinds: Iterable[tuple[str, str]],
                 namespaces: Sequence[str] = (), optional: Collection[str] = ()) -> None:
        """``optional``: the apiVersions a 403 marks absent; a 403 elsewhere is retried."""
        self.kube = kube
        self.optional = frozenset(optional)
        self.scopes: list[str | None] = list(namespaces) or [None]
        self.kinds = {(api, plural): _Kind(api, plural) for api, plural in kinds}
        self._tasks: list[asyncio.Task[None]] = []
        self.relists = 0  # lists after the first ones: watch errors, 410 Gone

    def start(self) -> None:
        for kind in self.kinds.values():
            for scope in self.scopes:
                kind.synced[scope] = asyncio.Event()
                self._tasks.append(asyncio.create_task(
                    self._reflect(kind, scope), name=f"informer {kind.plural} {scope or '*'}"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def wait_synced(self, seconds: float) -> bool:
        """Whether every kind was listed (or found not served) within ``seconds``."""
        events = [e for kind in self.kinds.values() for e in kind.synced.values()]
        try:
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), seconds)
        except TimeoutError:
            return False
        return True

    def get(self, api_version: str, plural: str, namespace: str | None,
            name: str) -> dict[str, Any] | None:
        held = self.kinds[(api_version, plural)].objects.get((namespace, name))
        if held is None:
            return None
        out: dict[str, Any] = json.loads(held[1])
        return out

    def remember(self, api_version: str, plural: str, obj: Mapping[str, Any]) -> None:
        """What the API server answered to our own write."""
        self.kinds[(api_version, plural)].put(obj)

    def forget(self, api_version: str, plural: str, namespace: str | None, name: str) -> None:
        """An object we deleted (the DELETED event may still come; it changes nothing)."""
        self.kinds[(api_version, plural)].drop(namespace, name)

    async def served(self, api_version: str, plural: str, *, needed: bool,
                     seconds: float) -> bool:
        """Whether the API is served. One the cache found missing is asked of discovery
        only when ``needed`` (a desired object lives there); if it is served now, its
        watch is started and awaited (a minute's wait otherwise)."""
        kind = self.kinds[(api_version, plural)]
        if kind.served or not needed or kind.forbidden is not None:
            return bool(kind.served)
        if not await self.kube.served(api_version, plural):
            return False
        for event in kind.synced.values():
            event.clear()
        kind.wake.set()
        if not await self.wait_synced(seconds):
            return False
        return bool(kind.served)

    def forbidden(self, api_version: str) -> str | None:
        """Why the operator may not read an optional API it found served, else None."""
        return next((k.forbidden for k in self.kinds.values()
                     if k.api_version == api_version and k.forbidden is not None), None)

    async def _reflect(self, kind: _Kind, scope: str | None) -> None:
        await list_watch(self.kube, kind.api_version, kind.plural, scope, SELECTOR,
                         _Scope(self, kind, scope),
                         forbidden_is_absent=kind.api_version in self.optional)


@dataclass
class _Scope:
    """The list/watch of one kind in one scope, applied to the cache (a Reflector)."""

    cache: ChildCache
    kind: _Kind
    scope: str | None
    lists: int = 0

    def listed(self, items: list[dict[str, Any]], version: str) -> None:
        self.cache.relists += int(self.lists > 0)
        self.lists += 1
        self.kind.served = True
        self.kind.forbidden = None
        self.kind.replace(self.scope, items, version)
        self.kind.synced[self.scope].set()

    def changed(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            meta = obj.get("metadata") or {}
            self.kind.drop(meta.get("namespace"), str(meta.get("name")), _version(obj))
        elif kind in ("ADDED", "MODIFIED"):
            self.kind.put(obj)

    async def absent(self, refusal: KubeError | None) -> None:
        """Not served, or (an optional API) not readable: empty until listed again."""
        kind = self.kind
        if refusal is not None and kind.forbidden is None:
            log.warning("%s is served but the operator may not read it (%s); treating it as "
                        "absent until RBAC allows it", kind.plural, refusal.message)
        kind.forbidden = refusal.message if refusal is not None else None
        kind.served = False
        kind.replace(self.scope, [], "")
        kind.synced[self.scope].set()
        kind.wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(kind.wake.wait(), UNSERVED_RELIST)
