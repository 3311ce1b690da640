"""The operator's watch cache of its children against the emulator: list, watch, resume,
re-list after 410 Gone, a fresh start over existing objects, APIs installed later."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from mol_operator.informer import ChildCache, _Kind
from mol_platform.clients.kube import KubeApi
from mol_testkit.kube import KubeServer
from mol_testkit.kube_client import KubeClient, ResourceSpec

CM = ("v1", "configmaps")
OURS = {"app.kubernetes.io/managed-by": "mol-operator"}
pytestmark = pytest.mark.timeout(60)


def _cm(name: str, value: str = "1", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default",
                         "labels": OURS if labels is None else labels},
            "data": {"v": value}}


async def _until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "the cache did not catch up"
        await asyncio.sleep(0.02)


@pytest.fixture
async def api(kube: KubeServer) -> AsyncIterator[KubeApi]:
    client = KubeApi.connect(kube.url)
    yield client
    await client.aclose()


async def test_lists_watches_resumes_and_relists_after_gone(
        kube: KubeServer, kube_client: KubeClient, api: KubeApi) -> None:
    for manifest in (_cm("a"), _cm("b"), _cm("theirs", labels={})):
        kube_client.create(manifest)
    cache = ChildCache(api, [CM])
    cache.start()
    try:
        assert await cache.wait_synced(10)
        assert cache.get(*CM, "default", "a")["data"] == {"v": "1"}  # type: ignore[index]
        assert cache.get(*CM, "default", "theirs") is None  # not ours: not cached

        kube_client.patch("ConfigMap", "a", {"data": {"v": "2"}})
        kube_client.delete("ConfigMap", "b")
        await _until(lambda: (cache.get(*CM, "default", "a") or {}).get("data") == {"v": "2"}
                     and cache.get(*CM, "default", "b") is None)
        assert cache.relists == 0

        # the server compacts its history: the watch ends with 410 Gone, the cache lists
        # again and keeps following changes
        kube.call(kube.emulator.expire_watches)
        await _until(lambda: cache.relists == 1)
        kube_client.create(_cm("c"))
        await _until(lambda: cache.get(*CM, "default", "c") is not None)
        assert cache.relists == 1
    finally:
        await cache.stop()
    assert api.calls == 4  # two lists and two watches: no GET of any single object


async def test_fresh_start_and_an_api_installed_later(
        kube: KubeServer, kube_client: KubeClient, api: KubeApi) -> None:
    kube_client.create(_cm("kept"))
    isvc = ResourceSpec("serving.kserve.io", "v1alpha2", "llminferenceservices",
                        "LLMInferenceService")
    kinds = [CM, (isvc.api_version, isvc.plural)]
    cache = ChildCache(api, kinds, namespaces=["default"])
    cache.start()
    try:
        assert await cache.wait_synced(10)
        assert cache.get(*CM, "default", "kept") is not None  # what existed before the start
        calls = api.calls
        # not served and not needed: no discovery call
        assert not await cache.served(*kinds[1], needed=False, seconds=5)
        assert api.calls == calls
        kube.register(isvc)
        kube_client.create({"apiVersion": isvc.api_version, "kind": isvc.kind,
                            "metadata": {"name": "m", "namespace": "default", "labels": OURS},
                            "spec": {}})
        assert await cache.served(*kinds[1], needed=True, seconds=10)
        assert cache.get(*kinds[1], "default", "m") is not None
    finally:
        await cache.stop()


def _obj(name: str, rv: int, value: str = "x") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv),
                         "managedFields": [{"manager": "kubectl"}]}, "data": {"v": value}}


def test_an_older_version_never_replaces_a_newer_one() -> None:
    kind = _Kind("v1", "configmaps")
    kind.put(_obj("a", 5, "ours"))  # the answer to our own write
    kind.put(_obj("a", 4, "older event"))
    assert '"ours"' in kind.objects[("ns", "a")][1]
    assert "managedFields" not in kind.objects[("ns", "a")][1]
    kind.drop("ns", "a", version=3)  # a stale DELETED event
    assert ("ns", "a") in kind.objects
    # a list at version 6 lacks "a": it was deleted meanwhile; "b" (written at 7) stays
    kind.put(_obj("b", 7))
    kind.replace("ns", [_obj("c", 6)], "6")
    assert sorted(kind.objects) == [("ns", "b"), ("ns", "c")]


async def test_a_forbidden_optional_api_is_absent_until_granted(
        kube: KubeServer, kube_client: KubeClient, api: KubeApi) -> None:
    so = ("keda.sh/v1alpha1", "scaledobjects")
    kube.call(lambda: kube.emulator.rbac.forbid("keda.sh", "scaledobjects"))
    required = ChildCache(api, [CM, so])  # not declared optional: the 403 is retried
    required.start()
    try:
        assert not await required.wait_synced(1.5)
    finally:
        await required.stop()

    cache = ChildCache(api, [CM, so], optional=[so[0]])
    cache.start()
    try:
        assert await cache.wait_synced(10)  # the 403 does not hold the other kinds back
        assert not await cache.served(*so, needed=True, seconds=5)
        assert "forbidden" in (cache.forbidden(so[0]) or "")
        assert cache.forbidden("v1") is None
        # a Role granted later: the next list (here woken at once) finds it readable
        kube.call(lambda: kube.emulator.rbac.allow("keda.sh", "scaledobjects"))
        cache.kinds[so].wake.set()
        await _until(lambda: cache.kinds[so].served is True)
        assert cache.forbidden(so[0]) is None
    finally:
        await cache.stop()
