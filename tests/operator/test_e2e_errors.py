"""kopf end to end on the unhappy paths: bad specs, a catalog that goes down, optional
APIs that are not installed. Nothing is half-written: a failing reconcile writes no child."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from mol_testkit.kube import KubeServer
from mol_testkit.kube_client import KubeClient

WAIT = 30.0
pytestmark = pytest.mark.timeout(120)


def _cond_is(type_: str, status: str, reason: str | None = None
             ) -> Callable[[dict[str, Any]], bool]:
    def check(obj: dict[str, Any]) -> bool:
        for c in obj.get("status", {}).get("conditions", []):
            if c["type"] == type_ and c["status"] == status:
                return reason is None or c["reason"] == reason
        return False
    return check


def _cond(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def _has_event(kube_client: KubeClient, reason: str, name: str) -> bool:
    """Events are posted by kopf in the background: poll for one."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any(e.get("reason") == reason and e["involvedObject"]["name"] == name
               for e in kube_client.list("Event")):
            return True
        time.sleep(0.2)
    return False


def _children(write_log: Any) -> list[tuple[str, str, str | None]]:
    return [w for w in write_log.since()
            if w[1] not in ("moldeployments", "moldeployments/status", "events")]


@pytest.mark.parametrize(("change", "reason", "words"), [
    ({"experts": [{"name": "chat", "adapter": "demo/chat@stable"},
                  {"name": "chat", "adapter": "demo/ui@stable"}]},
     "InvalidSpec", "expert names must be unique; repeated: chat"),
    ({"router": {"mode": "explicit", "default": "nobody"}},
     "InvalidSpec", "router.default must name one of spec.experts: 'nobody' is not one"),
    ({"experts": [{"name": "chat", "adapter": "demo/chat"}], "router": {}},
     "InvalidSpec", "invalid adapter reference 'demo/chat'"),
    ({"experts": [{"name": "chat", "adapter": "demo/missing@stable"}], "router": {}},
     "AdapterNotFound", "spec.experts[0].adapter: demo/missing@stable is not in the catalog"),
])
def test_bad_spec_leaves_no_child(kube_client: KubeClient, run_operator: Any, write_log: Any,
                                  make_manifest: Any, change: dict[str, Any], reason: str,
                                  words: str) -> None:
    run_operator()
    write_log.mark()
    kube_client.create(make_manifest("broken", **change))
    obj = kube_client.wait_for("MoLDeployment", "broken", _cond_is("Ready", "False", reason),
                               timeout=WAIT)
    assert words in _cond(obj, "Ready")["message"]
    assert _children(write_log) == []
    assert _has_event(kube_client, reason, "broken")


def test_catalog_down_then_recovers(own_catalog: Any, kube_client: KubeClient,
                                    run_operator: Any, write_log: Any,
                                    make_manifest: Any) -> None:
    catalog = own_catalog
    catalog.stop()
    run_operator(catalog_url=catalog.url)
    write_log.mark()
    kube_client.create(make_manifest())
    obj = kube_client.wait_for("MoLDeployment", "macaron",
                               _cond_is("AdaptersResolved", "False", "CatalogUnreachable"),
                               timeout=WAIT)
    message = _cond(obj, "AdaptersResolved")["message"]
    assert f"cannot reach the catalog at {catalog.url}" in message
    assert "retrying" in message
    assert _children(write_log) == []
    catalog.start()
    obj = kube_client.wait_for("MoLDeployment", "macaron",
                               _cond_is("AdaptersResolved", "True"), timeout=WAIT)
    assert obj["status"]["observedGeneration"] == 1
    assert kube_client.find("Deployment", "macaron-engine") is not None


def test_missing_optional_apis_are_reported_not_fatal(kube: KubeServer, kube_client: KubeClient,
                                                      run_operator: Any,
                                                      make_manifest: Any) -> None:
    def drop() -> None:
        kube.emulator.resources.pop("monitoring.coreos.com/v1/servicemonitors", None)

    kube.call(drop)
    run_operator()
    kube_client.create(make_manifest())
    obj = kube_client.wait_for("MoLDeployment", "macaron",
                               _cond_is("OptionalApisAvailable", "False"), timeout=WAIT)
    message = _cond(obj, "OptionalApisAvailable")["message"]
    assert "ServiceMonitor macaron-engine skipped: the Prometheus operator" in message
    assert kube_client.find("Deployment", "macaron-engine") is not None
    assert _has_event(kube_client, "Missing", "macaron")


def test_optional_apis_served_but_forbidden_count_as_absent(
        kube: KubeServer, kube_client: KubeClient, run_operator: Any,
        make_manifest: Any) -> None:
    """KEDA's and the Prometheus operator's CRDs installed, no RBAC for them (the chart's
    defaults): the 403 on their list marks them absent instead of holding every
    reconcile at CacheNotSynced."""
    def forbid() -> None:
        kube.emulator.rbac.forbid("keda.sh", "scaledobjects")
        kube.emulator.rbac.forbid("monitoring.coreos.com", "servicemonitors")

    kube.call(forbid)
    run_operator()
    kube_client.create(make_manifest())
    obj = kube_client.wait_for("MoLDeployment", "macaron",
                               _cond_is("OptionalApisAvailable", "False", "Forbidden"),
                               timeout=WAIT)
    message = _cond(obj, "OptionalApisAvailable")["message"]
    assert "ServiceMonitor macaron-engine skipped: the Prometheus operator" in message
    assert "may not read it" in message
    assert "forbidden" in message
    assert "ScaledObject" not in message  # not needed without autoscaling: not mentioned
    assert kube_client.find("Deployment", "macaron-engine") is not None
    assert kube_client.find("Deployment", "macaron-router") is not None
    assert _has_event(kube_client, "Forbidden", "macaron")


def test_forbidden_resource_is_refused_by_the_emulator(kube: KubeServer,
                                                       kube_client: KubeClient) -> None:
    kube.call(lambda: kube.emulator.rbac.forbid("keda.sh", "scaledobjects", ["list"]))
    with pytest.raises(Exception, match=r"403|[Ff]orbidden"):
        kube_client.list("ScaledObject")
    kube.call(lambda: kube.emulator.rbac.allow("keda.sh", "scaledobjects"))
    assert kube_client.list("ScaledObject") == []
    with pytest.raises(ValueError, match="unknown verbs"):
        kube.emulator.rbac.forbid("keda.sh", "scaledobjects", ["escalate"])


def test_kserve_mode_creates_an_llminferenceservice(kube: KubeServer, kube_client: KubeClient,
                                                    run_operator: Any, llmisvc: Any,
                                                    make_manifest: Any) -> None:
    run_operator()
    kube_client.create(make_manifest("plain", serving={"mode": "kserve"}))
    obj = kube_client.wait_for("MoLDeployment", "plain", _cond_is("Ready", "False",
                                                                  "KServeNotInstalled"),
                               timeout=WAIT)
    assert "KServe" in _cond(obj, "Ready")["message"]
    kube.register(llmisvc)
    kube_client.create(make_manifest("served", serving={"mode": "kserve"}))
    kube_client.wait_for("MoLDeployment", "served",
                         lambda o: o.get("status", {}).get("observedGeneration") == 1,
                         timeout=WAIT)
    isvc = kube_client.get("serving.kserve.io/v1alpha2/LLMInferenceService", "served")
    assert isvc["spec"]["model"]["lora"]["maxRank"] == 16
    assert kube_client.find("Deployment", "served-engine") is None
    assert kube_client.find("Deployment", "served-router") is not None
