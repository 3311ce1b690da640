"""The emulator collects garbage as a real cluster does: deleting an owner deletes its
dependents down the tree (background), waits for them (foreground) or leaves them
(orphan); a dependent with another live owner only loses the reference; finalizers of
dependents are honoured."""

from __future__ import annotations

from typing import Any

import pytest

from mol_testkit.kube_client import KubeApiError, KubeClient


def cm(name: str, *owners: dict[str, Any], **meta: Any) -> dict[str, Any]:
    refs = [{"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"],
             "uid": o["metadata"]["uid"]} for o in owners]
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": name, "namespace": "default", **meta}}
    if refs:
        body["metadata"]["ownerReferences"] = refs
    return body


def names(kube_client: KubeClient) -> set[str]:
    return {o["metadata"]["name"] for o in kube_client.list("ConfigMap", "default")}


def test_background_deletes_the_tree_and_keeps_the_rest(kube_client: KubeClient) -> None:
    owner = kube_client.create(cm("owner"))
    child = kube_client.create(cm("child", owner))
    kube_client.create(cm("grandchild", child))
    kube_client.create(cm("bystander"))
    secret = kube_client.create({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "owned-secret", "namespace": "default", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
             "uid": owner["metadata"]["uid"]}]}})
    assert secret["metadata"]["ownerReferences"]
    kube_client.delete("ConfigMap", "owner")
    assert names(kube_client) == {"bystander"}
    assert kube_client.find("Secret", "owned-secret") is None


def test_a_second_live_owner_keeps_the_dependent(kube_client: KubeClient) -> None:
    first, second = kube_client.create(cm("first")), kube_client.create(cm("second"))
    kube_client.create(cm("shared", first, second))
    kube_client.delete("ConfigMap", "first")
    refs = kube_client.get("ConfigMap", "shared")["metadata"]["ownerReferences"]
    assert [r["name"] for r in refs] == ["second"]
    kube_client.delete("ConfigMap", "second")
    assert kube_client.find("ConfigMap", "shared") is None


def test_a_dependents_finalizer_holds_it(kube_client: KubeClient) -> None:
    owner = kube_client.create(cm("owner"))
    kube_client.create(cm("held", owner, finalizers=["example.com/hold"]))
    kube_client.delete("ConfigMap", "owner")
    held = kube_client.get("ConfigMap", "held")
    assert held["metadata"]["deletionTimestamp"]
    kube_client.patch("ConfigMap", "held", {"metadata": {"finalizers": None}})
    assert kube_client.find("ConfigMap", "held") is None


def test_orphan_keeps_dependents_without_the_reference(kube_client: KubeClient) -> None:
    owner = kube_client.create(cm("owner"))
    kube_client.create(cm("child", owner))
    kube_client.delete("ConfigMap", "owner", propagation="Orphan")
    assert names(kube_client) == {"child"}
    assert "ownerReferences" not in kube_client.get("ConfigMap", "child")["metadata"]


def test_foreground_waits_for_the_dependents(kube_client: KubeClient) -> None:
    owner = kube_client.create(cm("owner"))
    kube_client.create(cm("slow", owner, finalizers=["example.com/hold"]))
    kube_client.create(cm("quick", owner))
    marked = kube_client.delete("ConfigMap", "owner", propagation="Foreground")
    assert "foregroundDeletion" in marked["metadata"]["finalizers"]
    assert names(kube_client) == {"owner", "slow"}
    assert kube_client.get("ConfigMap", "owner")["metadata"]["deletionTimestamp"]
    kube_client.patch("ConfigMap", "slow", {"metadata": {"finalizers": None}})
    assert names(kube_client) == set()


def test_foreground_without_dependents_deletes_at_once(kube_client: KubeClient) -> None:
    kube_client.create(cm("alone"))
    kube_client.delete("ConfigMap", "alone", propagation="Foreground")
    assert kube_client.find("ConfigMap", "alone") is None


def test_an_unknown_policy_is_refused(kube_client: KubeClient) -> None:
    kube_client.create(cm("owner"))
    with pytest.raises(KubeApiError) as err:
        kube_client.delete("ConfigMap", "owner", propagation="Sideways")
    assert err.value.status == 400
    assert kube_client.find("ConfigMap", "owner") is not None
