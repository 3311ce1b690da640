"""The planner, table-driven: desired vs observed -> the writes (and only those)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mol_operator.planner import Key, is_subset, plan

UID = "owner-uid"


def _obj(kind: str, name: str, owner: str | None = UID, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if owner is not None:
        meta["ownerReferences"] = [{"uid": owner, "kind": "MoLDeployment", "name": "x"}]
    api = "keda.sh/v1alpha1" if kind == "ScaledObject" else "v1"
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}


def _served(obj: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """What an API server would hand back: our fields plus its own."""
    out = copy.deepcopy(obj)
    out["metadata"].update(uid="u", resourceVersion="7", managedFields=[])
    out["spec"].update(extra)
    out["status"] = {"observed": True}
    return out


SVC = _obj("Service", "a-engine", ports=[{"name": "http", "port": 8000}])
CM = _obj("ConfigMap", "a-router", data="x")
SO = _obj("ScaledObject", "a-engine", minReplicaCount=0)

CASES: list[tuple[str, list[dict[str, Any]], dict[Key, Any], dict[str, bool],
                  list[tuple[str, str]], list[str], list[str]]] = [
    # name, desired, observed, available, actions (verb, key), missing, conflicts
    ("absent -> create", [SVC], {Key.of(SVC): None}, {}, [("create", "Service a-engine")], [],
     []),
    ("same -> nothing", [SVC], {Key.of(SVC): _served(SVC)}, {}, [], [], []),
    ("server defaults are not drift", [SVC],
     {Key.of(SVC): _served(SVC, clusterIP="10.0.0.1", type="ClusterIP")}, {}, [], [], []),
    ("changed field -> update", [_obj("Service", "a-engine", ports=[{"name": "http",
                                                                     "port": 9000}])],
     {Key.of(SVC): _served(SVC)}, {}, [("update", "Service a-engine")], [], []),
    ("list shorter -> update", [_obj("Service", "a-engine", ports=[])],
     {Key.of(SVC): _served(SVC)}, {}, [("update", "Service a-engine")], [], []),
    ("owned but no longer desired -> delete", [SVC],
     {Key.of(SVC): _served(SVC), Key.of(SO): _served(SO)}, {},
     [("delete", "ScaledObject a-engine")], [], []),
    ("not ours, not desired -> left alone", [SVC],
     {Key.of(SVC): _served(SVC), Key.of(SO): _served(_obj("ScaledObject", "a-engine",
                                                          owner="someone"))},
     {}, [], [], []),
    ("not ours but desired -> conflict, no write", [CM],
     {Key.of(CM): _served(_obj("ConfigMap", "a-router", owner=None, data="x"))}, {}, [], [],
     ["ConfigMap a-router"]),
    ("API not served -> missing, no write", [SVC, SO], {Key.of(SVC): _served(SVC)},
     {"keda.sh/v1alpha1": False}, [], ["ScaledObject a-engine"], []),
    ("mixed", [SVC, CM], {Key.of(SVC): None, Key.of(CM): _served(_obj("ConfigMap", "a-router",
                                                                      data="old"))},
     {}, [("create", "Service a-engine"), ("update", "ConfigMap a-router")], [], []),
]


@pytest.mark.parametrize(("name", "desired", "observed", "available", "actions", "missing",
                          "conflicts"), CASES, ids=[c[0] for c in CASES])
def test_plan(name: str, desired: list[dict[str, Any]], observed: dict[Key, Any],
              available: dict[str, bool], actions: list[tuple[str, str]], missing: list[str],
              conflicts: list[str]) -> None:
    result = plan(desired, observed, owner_uid=UID, available=available)
    assert [(a.verb, str(a.key)) for a in result.actions] == actions
    assert [str(k) for k, _ in result.missing] == missing
    assert [str(k) for k in result.conflicts] == conflicts
    for action in result.actions:
        if action.verb != "delete":
            assert action.manifest in desired


def test_missing_api_names_its_provider() -> None:
    result = plan([SO], {}, owner_uid=UID, available={"keda.sh/v1alpha1": False})
    assert result.missing == [(Key.of(SO), "KEDA")]


@pytest.mark.parametrize(("desired", "observed", "expected"), [
    ({"a": 1}, {"a": 1, "b": 2}, True),
    ({"a": 1}, {"a": 2}, False),
    ({"a": {"b": [1, {"c": 2}]}}, {"a": {"b": [1, {"c": 2, "d": 3}]}}, True),
    ({"a": [1, 2]}, {"a": [1]}, False),
    ({"a": "1"}, {"a": 1}, False),
    ({"a": None}, {}, False),
])
def test_is_subset(desired: Any, observed: Any, expected: bool) -> None:
    assert is_subset(desired, observed) is expected
