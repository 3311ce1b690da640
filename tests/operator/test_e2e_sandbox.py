"""The code harness through a real reconcile (kopf, the emulator, the catalog): with
kubernetes-sigs/agent-sandbox's CRDs served, sessions come from a SandboxTemplate and a
SandboxWarmPool; without them, from a Pod manifest in a ConfigMap. Either way the
sessions' deny-all-egress NetworkPolicy and the sandbox service are there."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from mol_testkit.kube_client import KubeClient

WAIT = 30.0
API = "extensions.agents.x-k8s.io/v1beta1"
CRDS = Path(__file__).resolve().parents[2] / "testkit" / "mol_testkit" / "crds"


def _at(generation: int) -> Callable[[dict[str, Any]], bool]:
    return lambda o: o.get("status", {}).get("observedGeneration") == generation


def _harness_manifest(make_manifest: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = make_manifest()
    manifest["spec"]["experts"][0]["harness"] = True
    manifest["spec"]["harness"] = {"runtimeClassName": "gvisor", "warmPool": 3}
    return manifest


def test_without_agent_sandbox_sessions_are_plain_pods(
        kube_client: KubeClient, run_operator: Any, make_manifest: Any) -> None:
    run_operator()
    kube_client.create(_harness_manifest(make_manifest))
    obj = kube_client.wait_for("MoLDeployment", "macaron", _at(1), timeout=WAIT)
    pod = json.loads(kube_client.get("ConfigMap", "macaron-sandbox-session")["data"]["pod.json"])
    assert pod["spec"]["runtimeClassName"] == "gvisor"
    assert kube_client.get("Deployment", "macaron-sandbox")["spec"]["replicas"] == 1
    policy = kube_client.get("NetworkPolicy", "macaron-sandbox-session")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    # the fallback is no missing API: nothing is reported skipped
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    assert "agent-sandbox" not in conditions["OptionalApisAvailable"].get("message", "")


def test_with_agent_sandbox_sessions_come_from_its_template(
        kube: Any, kube_client: KubeClient, run_operator: Any, make_manifest: Any) -> None:
    for name in ("sandboxtemplates", "sandboxwarmpools"):
        kube.register_crd(yaml.safe_load(
            (CRDS / f"extensions.agents.x-k8s.io_{name}.yaml").read_text()))
    run_operator()
    kube_client.create(_harness_manifest(make_manifest))
    kube_client.wait_for("MoLDeployment", "macaron", _at(1), timeout=WAIT)
    template = kube_client.get(f"{API}/SandboxTemplate", "macaron-sandbox-session")
    assert template["spec"]["podTemplate"]["spec"]["runtimeClassName"] == "gvisor"
    assert template["spec"]["networkPolicyManagement"] == "Unmanaged"
    pool = kube_client.get(f"{API}/SandboxWarmPool", "macaron-sandbox-session")
    assert pool["spec"] == {"replicas": 3,
                            "sandboxTemplateRef": {"name": "macaron-sandbox-session"}}
    assert kube_client.find("ConfigMap", "macaron-sandbox-session") is None
    assert kube_client.find("NetworkPolicy", "macaron-sandbox-session") is not None


def test_no_harness_renders_no_sandbox(kube_client: KubeClient, run_operator: Any,
                                       make_manifest: Any) -> None:
    run_operator()
    manifest = make_manifest()
    manifest["spec"]["harness"] = {"warmPool": 3}
    kube_client.create(manifest)
    kube_client.wait_for("MoLDeployment", "macaron", _at(1), timeout=WAIT)
    assert kube_client.find("Deployment", "macaron-sandbox") is None
    assert kube_client.find("ConfigMap", "macaron-sandbox-session") is None


def test_the_routers_sandbox_token_is_made_once_and_kept(
        kube_client: KubeClient, run_operator: Any, make_manifest: Any) -> None:
    run_operator()
    kube_client.create(_harness_manifest(make_manifest))
    kube_client.wait_for("MoLDeployment", "macaron", _at(1), timeout=WAIT)
    first = kube_client.get("Secret", "macaron-sandbox-token")["data"]
    assert len(base64.b64decode(first["token"])) >= 32
    (router,) = kube_client.get("Deployment", "macaron-router")["spec"]["template"]["spec"][
        "containers"]
    env = {e["name"]: e for e in router["env"]}
    assert env["MOL_ROUTER_SANDBOX_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == (
        "macaron-sandbox-token")
    sandbox = kube_client.get("Deployment", "macaron-sandbox")["spec"]["template"]["spec"]
    assert "--tokens-file" in sandbox["containers"][0]["args"]
    kube_client.patch("MoLDeployment", "macaron", {"spec": {"harness": {"warmPool": 4}}})
    kube_client.wait_for("MoLDeployment", "macaron", _at(2), timeout=WAIT)
    assert kube_client.get("Secret", "macaron-sandbox-token")["data"] == first
