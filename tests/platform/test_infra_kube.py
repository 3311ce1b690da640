"""The Kubernetes API emulator behaves like an API server where controllers need it,
and a kopf operator runs create/update/delete end to end against it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import kopf
import pytest

from mol_testkit.kube import MOLDEPLOYMENT, KubeServer
from mol_testkit.kube_client import KubeApiError, KubeClient

MOLD = "MoLDeployment"


def mold(name: str, replicas: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "mol.dev/v1alpha1",
        "kind": MOLD,
        "metadata": {"name": name, **meta},
        "spec": {"baseModel": {"name": "tiny"}, "replicas": replicas},
    }


def test_create_assigns_metadata_and_ignores_status(kube_client: KubeClient) -> None:
    obj = kube_client.create({**mold("a"), "status": {"phase": "Fake"}})
    meta = obj["metadata"]
    assert meta["namespace"] == "default"
    assert meta["generation"] == 1
    assert meta["uid"]
    assert meta["creationTimestamp"].endswith("Z")
    assert "status" not in obj
    with pytest.raises(KubeApiError) as exc:
        kube_client.create(mold("a"))
    assert exc.value.status == 409


def test_generation_bumps_on_spec_only(kube_client: KubeClient) -> None:
    rv0 = kube_client.create(mold("a"))["metadata"]["resourceVersion"]
    labelled = kube_client.patch(MOLD, "a", {"metadata": {"labels": {"x": "y"}}})
    assert labelled["metadata"]["generation"] == 1
    assert int(labelled["metadata"]["resourceVersion"]) > int(rv0)
    scaled = kube_client.patch(MOLD, "a", {"spec": {"replicas": 3}})
    assert scaled["metadata"]["generation"] == 2
    same = kube_client.patch(MOLD, "a", {"spec": {"replicas": 3}})
    assert same["metadata"]["resourceVersion"] == scaled["metadata"]["resourceVersion"]


def test_status_subresource_is_isolated(kube_client: KubeClient) -> None:
    kube_client.create(mold("a"))
    kube_client.patch(MOLD, "a", {"status": {"phase": "Ignored"}})
    assert "status" not in kube_client.get(MOLD, "a")
    obj = kube_client.patch(MOLD, "a", {"status": {"phase": "Ready"}, "spec": {"replicas": 9}},
                            subresource="status")
    assert obj["status"] == {"phase": "Ready"}
    assert obj["spec"]["replicas"] == 1
    assert obj["metadata"]["generation"] == 1


def test_json_patch_test_op_and_stale_resource_version(kube_client: KubeClient) -> None:
    rv = kube_client.create(mold("a"))["metadata"]["resourceVersion"]
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
           {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]
    assert kube_client.patch(MOLD, "a", ops, patch_type="json")["metadata"]["finalizers"] == ["f"]
    with pytest.raises(KubeApiError) as exc:
        kube_client.patch(MOLD, "a", ops, patch_type="json")
    assert exc.value.status == 422
    obj = kube_client.get(MOLD, "a")
    obj["metadata"]["resourceVersion"] = rv
    with pytest.raises(KubeApiError) as conflict:
        kube_client.replace(obj)
    assert conflict.value.status == 409


def test_finalizers_hold_deletion(kube_client: KubeClient) -> None:
    kube_client.create(mold("a", finalizers=["mol.dev/test"]))
    marked = kube_client.delete(MOLD, "a")
    assert marked["metadata"]["deletionTimestamp"]
    assert kube_client.find(MOLD, "a") is not None
    kube_client.patch(MOLD, "a", {"metadata": {"finalizers": None}})
    assert kube_client.find(MOLD, "a") is None


def test_namespaces_and_version(kube: KubeServer, kube_client: KubeClient) -> None:
    assert [n["metadata"]["name"] for n in kube_client.list("Namespace")] == ["default"]
    with pytest.raises(KubeApiError) as exc:
        kube_client.create(mold("a", namespace="acme"))
    assert exc.value.status == 404
    kube_client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "acme"}})
    kube_client.create(mold("a", namespace="acme", labels={"team": "x"}))
    kube_client.create(mold("b"))
    assert [o["metadata"]["name"] for o in kube_client.list(MOLD, labels="team=x")] == ["a"]
    assert len(kube_client.list(MOLD)) == 2
    assert len(kube_client.list(MOLD, namespace="default")) == 1
    with httpx.Client(base_url=kube.url) as http:
        assert http.get("/version/").json()["major"] == "1"
        assert http.get("/api/v1/namespaces/acme").json()["metadata"]["name"] == "acme"


def test_watch_resumes_from_resource_version(kube: KubeServer, kube_client: KubeClient) -> None:
    kube_client.create(mold("a"))
    rv = kube_client.patch(MOLD, "a", {"spec": {"replicas": 2}})["metadata"]["resourceVersion"]
    kube_client.patch(MOLD, "a", {"spec": {"replicas": 3}})
    kube_client.create(mold("b"))
    params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "1"}
    with httpx.Client(base_url=kube.url) as http:
        text = http.get(MOLDEPLOYMENT.path("default"), params=params, timeout=10).text
    events = [httpx.Response(200, content=line).json() for line in text.splitlines() if line]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "a"), ("ADDED", "b")
    ]


def test_unknown_resource_is_refused(kube: KubeServer, kube_client: KubeClient) -> None:
    with pytest.raises(KeyError, match="register"):
        kube_client.create({"apiVersion": "example.com/v1", "kind": "Widget",
                            "metadata": {"name": "w"}})
    crd = {"spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"kind": "Widget", "plural": "widgets"},
                    "versions": [{"name": "v1", "served": True, "subresources": {}}]}}
    kube.register_crd(crd)
    widget = kube_client.create({"apiVersion": "example.com/v1", "kind": "Widget",
                                 "metadata": {"name": "w"}, "spec": {"size": 1}})
    assert widget["metadata"]["generation"] == 1


async def test_async_client(kube: KubeServer) -> None:
    async with kube.async_client() as client:
        await client.create(mold("a"))
        await client.patch_status(MOLD, "a", {"phase": "Ready"})
        obj = await client.wait_for(MOLD, "a", lambda o: "status" in o)
        assert obj["status"]["phase"] == "Ready"
        await client.delete(MOLD, "a")
        await client.wait_gone(MOLD, "a")


def toy_operator() -> tuple[kopf.OperatorRegistry, list[tuple[str, Any]]]:
    """Create/update/delete handlers for MoLDeployment that record what they saw."""
    registry = kopf.OperatorRegistry()
    seen: list[tuple[str, Any]] = []

    @kopf.on.create("mol.dev", "v1alpha1", "moldeployments", registry=registry)
    def created(spec: Any, meta: Any, patch: Any, **_: Any) -> None:
        seen.append(("create", meta["generation"]))
        patch.status["phase"] = "Created"
        patch.status["observedGeneration"] = meta["generation"]

    @kopf.on.update("mol.dev", "v1alpha1", "moldeployments", field="spec", registry=registry)
    def updated(new: Any, meta: Any, patch: Any, **_: Any) -> None:
        seen.append(("update", (meta["generation"], new["replicas"])))
        patch.status["phase"] = "Updated"
        patch.status["observedGeneration"] = meta["generation"]

    @kopf.on.delete("mol.dev", "v1alpha1", "moldeployments", registry=registry)
    async def deleted(name: Any, **_: Any) -> None:
        await asyncio.sleep(0)
        seen.append(("delete", name))

    return registry, seen


def test_kopf_operator_end_to_end(kube_client: KubeClient, kopf_runner: Any) -> None:
    registry, seen = toy_operator()
    kopf_runner(registry=registry)

    kube_client.create(mold("m1"))
    obj = kube_client.wait_for(MOLD, "m1", lambda o: o.get("status", {}).get("phase") == "Created")
    assert obj["status"]["observedGeneration"] == 1
    assert obj["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]

    kube_client.patch(MOLD, "m1", {"spec": {"replicas": 4}})
    obj = kube_client.wait_for(MOLD, "m1", lambda o: o.get("status", {}).get("phase") == "Updated")
    assert obj["status"]["observedGeneration"] == 2

    kube_client.delete(MOLD, "m1")
    kube_client.wait_gone(MOLD, "m1")
    assert seen == [("create", 1), ("update", (2, 4)), ("delete", "m1")]


def test_kopf_namespaced(kube_client: KubeClient, kopf_runner: Any) -> None:
    registry, seen = toy_operator()
    kube_client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "acme"}})
    kopf_runner(registry=registry, namespaces=["acme"])
    kube_client.create(mold("other"))  # in default: not served
    kube_client.create(mold("mine", namespace="acme"))
    kube_client.wait_for(MOLD, "mine", lambda o: "status" in o, namespace="acme")
    assert seen == [("create", 1)]
    assert "status" not in kube_client.get(MOLD, "other")


def test_a_taken_generated_name_is_drawn_again(kube_client: KubeClient,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from mol_testkit import kube_emulator

    drawn = iter(["ev-bbbbb", "ev-bbbbb", "ev-ccccc"])
    monkeypatch.setattr(kube_emulator, "_generated_name", lambda prefix: next(drawn))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "ev-"}}
    assert kube_client.create(cm)["metadata"]["name"] == "ev-bbbbb"
    assert kube_client.create(cm)["metadata"]["name"] == "ev-ccccc"
