"""The planner: desired children vs what the cluster holds -> the writes to make. Pure.

An object is up to date when everything the operator sets is already there
(``desired`` is a subset of ``observed``): fields the API server or other controllers
add (defaults, status, KEDA's replica count) never cause a write, so a resync of an
unchanged MoLDeployment writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# The optional APIs a child may need, and who provides them.
OPTIONAL_APIS = {
    "keda.sh/v1alpha1": "KEDA",
    "monitoring.coreos.com/v1": "the Prometheus operator",
    "serving.kserve.io/v1alpha2": "KServe",
    # Not "missing" when absent: the code harness falls back to plain session pods.
    "extensions.agents.x-k8s.io/v1beta1": "agent-sandbox",
}


@dataclass(frozen=True, order=True)
class Key:
    api_version: str
    kind: str
    name: str

    @classmethod
    def of(cls, manifest: Mapping[str, Any]) -> Key:
        return cls(manifest["apiVersion"], manifest["kind"], manifest["metadata"]["name"])

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Action:
    verb: Literal["create", "update", "delete"]
    key: Key
    manifest: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Plan:
    actions: list[Action] = field(default_factory=list)
    # children whose API is not installed: (key, provider)
    missing: list[tuple[Key, str]] = field(default_factory=list)
    # objects with our name that another owner holds: never overwritten
    conflicts: list[Key] = field(default_factory=list)

    @property
    def writes(self) -> int:
        return len(self.actions)


def is_subset(desired: Any, observed: Any) -> bool:
    """Everything in ``desired`` is in ``observed`` (dicts by key, lists by position)."""
    if isinstance(desired, Mapping):
        if not isinstance(observed, Mapping):
            return False
        return all(k in observed and is_subset(v, observed[k]) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(observed, list) or len(desired) != len(observed):
            return False
        return all(is_subset(d, o) for d, o in zip(desired, observed, strict=True))
    return bool(desired == observed)


def owned_by(observed: Mapping[str, Any], uid: str) -> bool:
    refs = observed.get("metadata", {}).get("ownerReferences") or []
    return any(r.get("uid") == uid for r in refs)


def plan(
    desired: Iterable[Mapping[str, Any]],
    observed: Mapping[Key, Mapping[str, Any] | None],
    *,
    owner_uid: str,
    available: Mapping[str, bool] | None = None,
) -> Plan:
    """What to write so the cluster holds ``desired``.

    ``observed`` maps every child slot the operator looked at to the object found
    (None: absent); an owned object in a slot no longer desired is deleted.
    ``available`` says per apiVersion whether its API is served (default: all are).
    """
    avail = available or {}
    result = Plan()
    wanted: set[Key] = set()
    for manifest in desired:
        key = Key.of(manifest)
        wanted.add(key)
        if not avail.get(key.api_version, True):
            result.missing.append((key, OPTIONAL_APIS.get(key.api_version, key.api_version)))
            continue
        current = observed.get(key)
        if current is None:
            result.actions.append(Action("create", key, manifest))
        elif not owned_by(current, owner_uid):
            result.conflicts.append(key)
        elif not is_subset(manifest, current):
            result.actions.append(Action("update", key, manifest))
    for key, current in sorted(observed.items()):
        if key not in wanted and current is not None and owned_by(current, owner_uid):
            result.actions.append(Action("delete", key))
    return result
