"""Catalog read tokens leave no live credential behind: an operator that dies between
minting a token and writing its Secret (the Secret write fails, then the operator is
stopped) leaks nothing once it is back, whether the deployment lives on or was deleted
meanwhile; the normal path mints once; tokens of deployments that are gone are swept at
startup. Real catalog, the emulator, the operator's kopf handlers."""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import kmock
import pytest

from mol_operator.tokens import owner_prefix, token_name
from mol_testkit.kube_client import KubeClient

WAIT = 30.0
SECRETS = kmock.resource(group="", version="v1", plural="secrets")


def _tokens(catalog: Any, prefix: str, *, active: bool) -> list[int]:
    with catalog.client() as admin:
        return [t.id for t in admin.list_tokens(prefix, active=active)]


def _until(check: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _secret_token_id(kube_client: KubeClient, name: str) -> int:
    secret = kube_client.get("Secret", f"{name}-catalog")
    return int(secret["metadata"]["annotations"]["mol.dev/catalog-token-id"])


def _crash_before_secret(kube: Any, kube_client: KubeClient, catalog: Any, run_operator: Any,
                         manifest: dict[str, Any]) -> tuple[str, threading.Event]:
    """Create the deployment with every Secret write failing, wait for a minted token,
    stop the operator: a token is live and no Secret holds it. -> (uid, the fault)."""
    fault = threading.Event()
    fault.set()
    kube.call(lambda: kube.emulator["patch", SECRETS, fault] << 500)
    runner = run_operator()
    uid = kube_client.create(manifest)["metadata"]["uid"]
    _until(lambda: len(_tokens(catalog, owner_prefix(uid), active=False)) >= 2,
           "a second mint after the failed Secret write")
    runner.stop()
    live = _tokens(catalog, owner_prefix(uid), active=True)
    assert len(live) == 1  # each retry revoked the previous unbound token before minting
    assert kube_client.find("Secret", f"{manifest['metadata']['name']}-catalog") is None
    fault.clear()
    return uid, fault


def test_crash_between_mint_and_secret_then_delete_leaves_no_token(
        kube: Any, kube_client: KubeClient, catalog: Any, run_operator: Any,
        make_manifest: Any) -> None:
    uid, _ = _crash_before_secret(kube, kube_client, catalog, run_operator,
                                  make_manifest("leaky"))
    kube_client.delete("MoLDeployment", "leaky")  # while the operator is down
    runner = run_operator()
    kube_client.wait_gone("MoLDeployment", "leaky", timeout=WAIT)
    assert _tokens(catalog, owner_prefix(uid), active=True) == []
    runner.stop()


def test_crash_between_mint_and_secret_then_recover_keeps_only_the_secrets_token(
        kube: Any, kube_client: KubeClient, catalog: Any, run_operator: Any,
        make_manifest: Any) -> None:
    uid, _ = _crash_before_secret(kube, kube_client, catalog, run_operator,
                                  make_manifest("recovers"))
    runner = run_operator()
    kube_client.wait_for("MoLDeployment", "recovers",
                         lambda o: (o.get("status") or {}).get("catalogToken") is not None,
                         timeout=WAIT)
    held = _secret_token_id(kube_client, "recovers")
    assert _tokens(catalog, owner_prefix(uid), active=True) == [held]
    kube_client.delete("MoLDeployment", "recovers")
    kube_client.wait_gone("MoLDeployment", "recovers", timeout=WAIT)
    assert _tokens(catalog, owner_prefix(uid), active=True) == []
    runner.stop()


def test_normal_path_mints_once(kube_client: KubeClient, catalog: Any, run_operator: Any,
                                make_manifest: Any) -> None:
    runner = run_operator()
    uid = kube_client.create(make_manifest("once"))["metadata"]["uid"]
    def at(generation: int) -> Callable[[dict[str, Any]], bool]:
        return lambda o: (o.get("status") or {}).get("observedGeneration") == generation

    kube_client.wait_for("MoLDeployment", "once", at(1), timeout=WAIT)
    kube_client.patch("MoLDeployment", "once", {"spec": {"replicas": 3}})
    obj = kube_client.wait_for("MoLDeployment", "once", at(2), timeout=WAIT)
    minted = _tokens(catalog, owner_prefix(uid), active=False)
    assert minted == [obj["status"]["catalogToken"]["id"]] == [
        _secret_token_id(kube_client, "once")]
    secret = kube_client.get("Secret", "once-catalog")
    assert base64.b64decode(secret["data"]["token"]).decode().startswith("mol_")
    with catalog.client() as admin:
        names = {t.name for t in admin.list_tokens(owner_prefix(uid))}
    assert names == {token_name(uid, "default", "once")}
    kube_client.delete("MoLDeployment", "once")
    kube_client.wait_gone("MoLDeployment", "once", timeout=WAIT)
    assert _tokens(catalog, owner_prefix(uid), active=True) == []
    runner.stop()


@pytest.mark.parametrize("namespaced", [False, True])
def test_startup_sweeps_tokens_of_deployments_that_are_gone(
        kube_client: KubeClient, catalog: Any, run_operator: Any, make_manifest: Any,
        namespaced: bool) -> None:
    runner = run_operator()
    uid = kube_client.create(make_manifest("alive"))["metadata"]["uid"]
    kube_client.wait_for("MoLDeployment", "alive",
                         lambda o: (o.get("status") or {}).get("catalogToken") is not None,
                         timeout=WAIT)
    runner.stop()
    with catalog.client() as admin:
        ghost = admin.create_token(token_name(str(uuid.uuid4()), "default", "ghost"),
                                   ["read:demo"]).id
        older = admin.create_token("mol-operator/default/ghost", ["read:demo"]).id
        kept_older = admin.create_token("mol-operator/default/alive", ["read:demo"]).id
        elsewhere = admin.create_token(token_name(str(uuid.uuid4()), "other", "x"),
                                       ["read:demo"]).id
        human = admin.create_token("ci-demo", ["read:demo"]).id
    runner = run_operator(namespaces=["default"] if namespaced else [])

    def swept() -> bool:
        live = set(_tokens(catalog, "", active=True))
        return ghost not in live and older not in live

    _until(swept, "the startup sweep")
    live = set(_tokens(catalog, "", active=True))
    assert {kept_older, human, _secret_token_id(kube_client, "alive")} <= live
    assert (elsewhere in live) is namespaced  # a namespaced operator leaves others' alone
    assert len(_tokens(catalog, owner_prefix(uid), active=True)) == 1
    runner.stop()
