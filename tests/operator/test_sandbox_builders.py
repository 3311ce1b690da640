"""The code harness's manifests, built as pure functions: the sandbox service, the
session pods' spec (agent-sandbox's SandboxTemplate and SandboxWarmPool, or a Pod in a
ConfigMap), and the sessions' deny-all-egress NetworkPolicy; validated against the real
schemas (the vendored agent-sandbox CRDs, the built-in kinds)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from mol_operator.builders import Defaults, Facts, build_all
from mol_operator.tokens import sandbox_token
from mol_platform.contract.router_config import ApiKeysFile
from mol_platform.contract.sandbox_limits import ENV_PREFIX
from mol_platform.contract.spec import MoLDeployment
from mol_platform.contract.spec_sandbox import DENIED_NETWORKS
from mol_sandbox.auth import Tenants
from mol_sandbox.settings import SandboxSettings
from mol_testkit.kube_validate import validate_builtin, validate_custom_resource
from mol_testkit.pod_security import restricted_violations

ROOT = Path(__file__).resolve().parents[2]
CHART_DEFAULTS = Defaults(prometheus_url="http://prometheus:9090", network_policy=True,
                          operator_namespace="mol-system")


def _objects(harness: dict[str, Any] | None = None, *, agent: bool,
             on: bool = True) -> dict[tuple[str, str], dict[str, Any]]:
    data = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    data["spec"]["experts"][0]["harness"] = on
    if harness is not None:
        data["spec"]["harness"] = harness
    facts = Facts(obj=MoLDeployment.model_validate(data), uid="0f4e2c1a-uid", token="t",
                  token_id=1, defaults=CHART_DEFAULTS, agent_sandbox=agent)
    return {(o["kind"], o["metadata"]["name"]): o for o in build_all(facts)}


def _session_pod(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    template = objects.get(("SandboxTemplate", "macaron-sandbox-session"))
    if template is not None:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "session"},
                "spec": template["spec"]["podTemplate"]["spec"]}
    pod: dict[str, Any] = json.loads(
        objects[("ConfigMap", "macaron-sandbox-session")]["data"]["pod.json"])
    return pod


# (harness section, agent-sandbox served, kinds expected, kinds not expected)
CASES: dict[str, tuple[dict[str, Any] | None, bool, set[str], set[str]]] = {
    "plain-pods-defaults": (None, False, {"ConfigMap"}, {"SandboxTemplate", "SandboxWarmPool"}),
    "agent-sandbox-defaults": (None, True, {"SandboxTemplate", "SandboxWarmPool"}, set()),
    "gvisor-with-allowlist": ({"runtimeClassName": "gvisor", "warmPool": 5,
                               "egress": {"allow": ["0.0.0.0/0", "2001:db8::/32"]},
                               "limits": {"timeoutSeconds": 10, "memory": "1Gi",
                                          "diskBytes": 2097152}},
                              True, {"SandboxTemplate", "SandboxWarmPool"}, set()),
    "kata-plain-pods": ({"runtimeClassName": "kata"}, False, {"ConfigMap"},
                        {"SandboxTemplate"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_harness_manifests_validate_against_the_real_schemas(case: str) -> None:
    harness, agent, wanted, unwanted = CASES[case]
    objects = _objects(harness, agent=agent)
    kinds = {kind for kind, name in objects if name.startswith("macaron-sandbox")}
    assert {"ServiceAccount", "Role", "RoleBinding", "Deployment", "Service",
            "NetworkPolicy"} | wanted <= kinds
    assert not kinds & unwanted
    for (kind, _), manifest in objects.items():
        if kind.startswith("Sandbox"):
            validate_custom_resource(manifest)
        elif kind not in {"ScaledObject", "ServiceMonitor", "LLMInferenceService"}:
            validate_builtin(manifest)
    validate_builtin(_session_pod(objects))


@pytest.mark.parametrize("agent", [False, True])
def test_session_pods_are_restricted_limited_and_tokenless(agent: bool) -> None:
    pod = _session_pod(_objects({"runtimeClassName": "gvisor",
                                 "limits": {"cpu": "500m", "memory": "1Gi",
                                            "diskBytes": 8 * 1024**2}}, agent=agent))
    spec = pod["spec"]
    assert restricted_violations(spec) == []
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    (c,) = spec["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert c["resources"]["limits"]["cpu"] == "500m"
    assert c["resources"]["limits"]["memory"] == "1Gi"
    (scratch,) = spec["volumes"]
    assert scratch["emptyDir"] == {"medium": "Memory", "sizeLimit": str(8 * 1024**2)}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["MOL_SANDBOX_MAX_SESSIONS"] == "1"
    assert "MOL_CATALOG_TOKEN" not in env


def test_session_labels_keep_the_catalog_closed() -> None:
    """The catalog's NetworkPolicy admits pods by mol.dev/component: sessions have none."""
    pod = _session_pod(_objects(agent=False))
    assert "mol.dev/component" not in pod["metadata"]["labels"]


def _egress_policy(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    policy: dict[str, Any] = objects[("NetworkPolicy", "macaron-sandbox-session")]
    return policy


@pytest.mark.parametrize("agent", [False, True])
def test_no_egress_by_default(agent: bool) -> None:
    objects = _objects(agent=agent)
    spec = _egress_policy(objects)["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"] == []
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "mol-sandbox-session"
    (rule,) = spec["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "mol-sandbox", "app.kubernetes.io/instance": "macaron"}}}]
    if agent:  # agent-sandbox's own policy (internet allowed) is not made
        template = objects[("SandboxTemplate", "macaron-sandbox-session")]
        assert template["spec"]["networkPolicyManagement"] == "Unmanaged"


@pytest.mark.parametrize(("allow", "blocks"), [
    (["203.0.113.7"], [{"ipBlock": {"cidr": "203.0.113.7/32"}}]),
    (["8.8.8.8/8"], [{"ipBlock": {"cidr": "8.0.0.0/8"}}]),
    (["0.0.0.0/0"], [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [
        d for d in DENIED_NETWORKS if "." in d]}}]),
    (["::/0"], [{"ipBlock": {"cidr": "::/0", "except": [
        d for d in DENIED_NETWORKS if ":" in d]}}]),
    (["10.0.0.0/7"], [{"ipBlock": {"cidr": "10.0.0.0/7", "except": ["10.0.0.0/8"]}}]),
])
def test_allowlist_entries_except_the_denied_networks(
        allow: list[str], blocks: list[dict[str, Any]]) -> None:
    spec = _egress_policy(_objects({"egress": {"allow": allow}}, agent=False))["spec"]
    assert spec["egress"] == [{"to": blocks}]


def test_warm_pool_and_service_settings() -> None:
    objects = _objects({"warmPool": 7, "maxSessions": 40, "replicas": 2,
                        "limits": {"timeoutSeconds": 12, "idleTTLSeconds": 600}}, agent=True)
    pool = objects[("SandboxWarmPool", "macaron-sandbox-session")]
    assert pool["spec"] == {"replicas": 7, "sandboxTemplateRef": {
        "name": "macaron-sandbox-session"}}
    dep = objects[("Deployment", "macaron-sandbox")]
    assert dep["spec"]["replicas"] == 2
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["args"][:2] == ["sandbox", "serve"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["MOL_SANDBOX_CALL_TIMEOUT"] == "12.0"
    assert env["MOL_SANDBOX_IDLE_TTL"] == "600.0"
    assert env["MOL_SANDBOX_MAX_SESSIONS"] == "40"
    role = objects[("Role", "macaron-sandbox")]
    assert role["rules"][0]["resources"] == ["sandboxclaims"]


def _settings_of(container: dict[str, Any], monkeypatch: pytest.MonkeyPatch
                 ) -> SandboxSettings:
    """The service's settings as it reads them from the container's environment (every
    rendered ``MOL_SANDBOX_*`` must be one of its fields: it ignores unknown names)."""
    env = {e["name"]: e["value"] for e in container["env"]}
    fields = {f"{ENV_PREFIX}{name.upper()}" for name in SandboxSettings.model_fields}
    ours = {k for k in env if k.startswith(ENV_PREFIX)}
    assert ours <= fields, f"rendered names the service does not read: {ours - fields}"
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return SandboxSettings()


@pytest.mark.parametrize("agent", [False, True])
def test_the_rendered_env_is_what_the_service_reads(agent: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    objects = _objects({"maxSessions": 40, "limits": {
        "timeoutSeconds": 12, "cpu": "500m", "memory": "1536Mi", "pids": 32,
        "outputBytes": 16 * 1024**2, "diskBytes": 5 * 1024**3, "idleTTLSeconds": 600}},
        agent=agent)
    (service,) = objects[("Deployment", "macaron-sandbox")]["spec"]["template"]["spec"][
        "containers"]
    (session,) = _session_pod(objects)["spec"]["containers"]
    for container, sessions in ((service, 40), (session, 1)):
        s = _settings_of(container, monkeypatch)
        assert (s.call_timeout, s.cpus, s.memory_mib, s.max_processes) == (12, 0.5, 1536, 32)
        assert (s.output_bytes, s.disk_mib, s.idle_ttl) == (16 * 1024**2, 5 * 1024, 600)
        assert s.max_sessions == sessions
    # The defaults too: the service's defaults and the spec's agree.
    (plain,) = _objects(agent=agent)[("Deployment", "macaron-sandbox")]["spec"]["template"][
        "spec"]["containers"]
    defaults = _settings_of(plain, monkeypatch)
    assert (defaults.call_timeout, defaults.memory_mib, defaults.output_bytes) == (
        SandboxSettings.model_fields["call_timeout"].default, 512, 64 * 1024)


def test_no_harness_no_sandbox_objects() -> None:
    objects = _objects({"warmPool": 3}, agent=True, on=False)
    assert not [k for k in objects if "sandbox" in k[1]]


def _tokens_volume(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    spec = objects[("Deployment", "macaron-sandbox")]["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    i = c["args"].index("--tokens-file")
    mount = next(m for m in c["volumeMounts"] if m["name"] == "tokens")
    assert c["args"][i + 1] == f"{mount['mountPath']}/keys.yaml"
    assert mount["readOnly"] is True
    volume: dict[str, Any] = next(v for v in spec["volumes"] if v["name"] == "tokens")
    return volume


def _router_env(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    (c,) = objects[("Deployment", "macaron-router")]["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in c["env"]}


def test_without_api_keys_the_router_has_a_sandbox_token_of_its_own() -> None:
    """The service listens beyond loopback, so it needs a tokens file: here one token,
    the router's, which the service's pod holds only as a digest."""
    data = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    data["spec"]["experts"][0]["harness"] = True
    assert data["spec"]["router"].get("apiKeys") is None
    facts = Facts(obj=MoLDeployment.model_validate(data), uid="u", token="t", token_id=1,
                  sandbox_token="s3cret-token-of-the-router-0123456789",
                  defaults=CHART_DEFAULTS)
    objects = {(o["kind"], o["metadata"]["name"]): o for o in build_all(facts)}
    secret = objects[("Secret", "macaron-sandbox-token")]
    validate_builtin(secret)
    files = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert files["token"] == facts.sandbox_token
    assert facts.sandbox_token not in files["keys.yaml"]
    tenants = Tenants(ApiKeysFile.model_validate(yaml.safe_load(files["keys.yaml"])))
    assert tenants.tenant(f"Bearer {facts.sandbox_token}") == "router"
    assert _tokens_volume(objects)["secret"] == {
        "secretName": "macaron-sandbox-token", "items": [{"key": "keys.yaml",
                                                           "path": "keys.yaml"}]}
    env = _router_env(objects)["MOL_ROUTER_SANDBOX_TOKEN"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "macaron-sandbox-token",
                                                "key": "token"}


def test_with_api_keys_each_callers_key_is_its_sandbox_identity() -> None:
    data = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    data["spec"]["experts"][0]["harness"] = True
    data["spec"]["router"]["apiKeys"] = {"secretRef": "macaron-keys"}
    facts = Facts(obj=MoLDeployment.model_validate(data), uid="u", token="t", token_id=1,
                  defaults=CHART_DEFAULTS)
    objects = {(o["kind"], o["metadata"]["name"]): o for o in build_all(facts)}
    assert ("Secret", "macaron-sandbox-token") not in objects
    assert _tokens_volume(objects)["secret"]["secretName"] == "macaron-keys"
    assert "MOL_ROUTER_SANDBOX_TOKEN" not in _router_env(objects)


def test_no_harness_no_sandbox_token() -> None:
    objects = _objects(agent=False, on=False)
    assert ("Secret", "macaron-sandbox-token") not in objects
    assert "MOL_ROUTER_SANDBOX_TOKEN" not in _router_env(objects)


def test_the_executor_keeps_the_held_token_and_makes_one_only_when_needed() -> None:
    data = yaml.safe_load((ROOT / "deploy/examples/macaron.yaml").read_text())
    off = Facts(obj=MoLDeployment.model_validate(data), uid="u")
    data["spec"]["experts"][0]["harness"] = True
    on = Facts(obj=MoLDeployment.model_validate(data), uid="u")
    held = {"data": {"token": base64.b64encode(b"held-token").decode()}}
    assert sandbox_token(off, held) == ""
    assert sandbox_token(on, held) == "held-token"
    made = {sandbox_token(on, s) for s in (None, {}, {"data": None}, {"data": {"token": ""}})}
    assert len(made) == 4  # 256 random bits each
    assert all(len(t) >= 43 for t in made)
