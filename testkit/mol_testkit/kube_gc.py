"""Deletion for the Kubernetes emulator: finalizers, and garbage collection by
``metadata.ownerReferences`` as the real garbage collector does it.

- An object with finalizers gets a ``deletionTimestamp`` and stays until they are gone.

- **Background** (the default): once an owner is gone, each dependent that names it
  loses that reference; a dependent left with no owner that still exists is deleted
  (honouring its finalizers: ``deletionTimestamp`` first), and so on down the tree.
- **Foreground** (``propagationPolicy=Foreground``): the owner gets the
  ``foregroundDeletion`` finalizer and a ``deletionTimestamp``, its dependents are
  deleted, and the owner goes once no dependent is left.
- **Orphan**: the owner's dependents lose their reference to it and stay.

The real collector works asynchronously; here the cascade runs within the write that
removed the owner, so tests need not wait for it (a client still sees the owner's
DELETED event before its dependents').
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import kmock

if TYPE_CHECKING:
    from mol_testkit.kube_emulator import KubeEmulator

Body = dict[str, Any]
FOREGROUND = "foregroundDeletion"
POLICIES = ("Background", "Foreground", "Orphan")


class PolicyError(ValueError):
    """A ``propagationPolicy`` the API server does not know."""


def policy_of(params: Any, body: Any) -> str:
    """The delete's propagation policy: query parameter, else DeleteOptions body."""
    policy = params.get("propagationPolicy") if params is not None else None
    if policy is None and isinstance(body, dict):
        policy = body.get("propagationPolicy")
    policy = policy or "Background"
    if policy not in POLICIES:
        raise PolicyError(f"propagationPolicy {policy!r} is not one of {', '.join(POLICIES)}")
    return str(policy)


def _live(emulator: KubeEmulator) -> Iterator[tuple[kmock.resource, Body]]:
    for (res, _ns, _name), obj in list(emulator.objects.items()):
        if not obj.deleted:
            yield res, obj.raw


def _refs(obj: Body) -> list[Body]:
    return list((obj.get("metadata") or {}).get("ownerReferences") or [])


def dependents(emulator: KubeEmulator, uid: str) -> list[tuple[kmock.resource, Body]]:
    """Every live object with an ownerReference to ``uid``."""
    return [(res, obj) for res, obj in _live(emulator)
            if any(r.get("uid") == uid for r in _refs(obj))]


def _exists(emulator: KubeEmulator, uid: str) -> bool:
    return any(obj["metadata"].get("uid") == uid for _, obj in _live(emulator))


def _save(emulator: KubeEmulator, res: kmock.resource, obj: Body) -> None:
    """Store a changed object; one being deleted whose finalizers are gone is removed."""
    meta = obj["metadata"]
    gone = bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")
    emulator._store(res, "DELETED" if gone else "MODIFIED", obj)


def _without_ref(emulator: KubeEmulator, res: kmock.resource, obj: Body, uid: str) -> None:
    changed = copy.deepcopy(obj)
    kept = [r for r in _refs(changed) if r.get("uid") != uid]
    if kept:
        changed["metadata"]["ownerReferences"] = kept
    else:
        changed["metadata"].pop("ownerReferences", None)
    _save(emulator, res, changed)


def collect(emulator: KubeEmulator, gone: Body) -> None:
    """What the collector does once ``gone`` was removed from the store."""
    uid = gone["metadata"].get("uid")
    if uid:
        for res, obj in dependents(emulator, uid):
            if any(r.get("uid") != uid and _exists(emulator, str(r.get("uid")))
                   for r in _refs(obj)):
                _without_ref(emulator, res, obj, uid)  # another owner keeps it
            else:
                delete(emulator, res, copy.deepcopy(obj), "Background")
    _release_foreground_owners(emulator, gone)


def _release_foreground_owners(emulator: KubeEmulator, gone: Body) -> None:
    """An owner waiting in foreground deletion goes once its last dependent did."""
    for ref in _refs(gone):
        for res, owner in _live(emulator):
            meta = owner["metadata"]
            if (meta.get("uid") == ref.get("uid") and FOREGROUND in (meta.get("finalizers") or [])
                    and not dependents(emulator, str(meta["uid"]))):
                released = copy.deepcopy(owner)
                released["metadata"]["finalizers"] = [
                    f for f in meta["finalizers"] if f != FOREGROUND]
                if not released["metadata"]["finalizers"]:
                    del released["metadata"]["finalizers"]
                _save(emulator, res, released)


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def delete(emulator: KubeEmulator, res: kmock.resource, current: Body, policy: str) -> Body:
    """Delete as the API server does: finalizers hold the object (deletionTimestamp
    first); ``policy`` says what becomes of its dependents."""
    meta = current["metadata"]
    if policy == "Orphan":
        orphan(emulator, current)
    elif policy == "Foreground" and not meta.get("deletionTimestamp"):
        return foreground(emulator, res, current)
    if meta.get("finalizers"):
        if meta.get("deletionTimestamp"):
            return current
        meta["deletionTimestamp"] = _now()
        meta["deletionGracePeriodSeconds"] = 0
        return emulator._store(res, "MODIFIED", current)
    return emulator._store(res, "DELETED", current)


def orphan(emulator: KubeEmulator, owner: Body) -> None:
    """Drop every reference to ``owner`` from its dependents (they stay)."""
    uid = str(owner["metadata"].get("uid"))
    for res, obj in dependents(emulator, uid):
        _without_ref(emulator, res, obj, uid)


def foreground(emulator: KubeEmulator, res: kmock.resource, owner: Body) -> Body:
    """Mark ``owner`` for foreground deletion and delete its dependents; the owner goes
    when the last of them has (at once when it has none)."""
    uid = str(owner["metadata"].get("uid"))
    found = dependents(emulator, uid)
    if not found:
        return delete(emulator, res, owner, "Background")
    meta = owner["metadata"]
    if FOREGROUND not in (meta.get("finalizers") or []):
        meta["finalizers"] = [*(meta.get("finalizers") or []), FOREGROUND]
    meta.setdefault("deletionTimestamp", _now())
    meta.setdefault("deletionGracePeriodSeconds", 0)
    marked = emulator._store(res, "MODIFIED", owner)
    for dep_res, obj in found:
        delete(emulator, dep_res, copy.deepcopy(obj), "Foreground")
    current = emulator._current(res, meta.get("namespace"), meta["name"])
    return current if current is not None else marked
