"""The Helm chart: lint, render, schemas of what it renders, values validation, and
that it runs only real `mol` verbs with real flags and settings."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from mol_catalog.settings import CatalogSettings
from mol_operator.crd import crd_yaml
from mol_operator.settings import OperatorSettings
from mol_testkit.kube_validate import (
    validate_builtin,
    validate_custom_resource,
)
from mol_testkit.pod_security import restricted_violations

from .conftest import CHART, FULL, VALUE_SETS, render

# Custom resources validated against their CRD schema; built-ins via kubernetes-validate.
CUSTOM = {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ScaledObject"}
# Gateway API objects: no schema beside the repo; their fields are checked below.
UNCHECKED = {"HTTPRoute"}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_strict_lint_passes(name: str) -> None:
    report = helm.lint(str(CHART), VALUE_SETS[name], strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [], report
    assert problems == [], report


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_rendered_object_matches_its_schema(chart: helm.Chart, name: str) -> None:
    objects = render(chart, VALUE_SETS[name])
    assert objects
    for obj in objects:
        if obj["kind"] in CUSTOM:
            validate_custom_resource(obj)
        elif obj["kind"] not in UNCHECKED:
            validate_builtin(obj)


def test_full_values_render_what_they_ask_for(chart: helm.Chart) -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in render(chart, FULL)}
    assert ("PrometheusRule", "mol-mol-platform") in kinds
    assert ("Ingress", "macaron-router") in kinds
    assert ("HTTPRoute", "macaron-router") in kinds
    assert ("Job", "mol-mol-platform-catalog-migrate-1") in kinds
    # Namespaced RBAC only, one Role per watched namespace (and the Lease's own).
    roles = [o for o in render(chart, FULL) if o["kind"] in ("Role", "ClusterRole")
             and not o["metadata"]["name"].endswith("-leader-election")]
    assert {(r["kind"], r["metadata"].get("namespace")) for r in roles} == {
        ("Role", "team-a"), ("Role", "team-b")}
    # Secrets are referenced, never rendered from values.
    assert not [o for o in render(chart, FULL) if o["kind"] == "Secret"]


def test_defaults_generate_an_admin_token_and_keep_crd_on_uninstall(chart: helm.Chart) -> None:
    objects = render(chart, {})
    secret = next(o for o in objects if o["kind"] == "Secret")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    crd = next(o for o in objects if o["kind"] == "CustomResourceDefinition")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_chart_crd_is_the_operators(chart: helm.Chart) -> None:
    shipped = (CHART / "files" / "crds" / "moldeployments.mol.dev.yaml").read_text()
    assert yaml.safe_load(shipped) == yaml.safe_load(crd_yaml()), (
        "the CRD drifted: mol operator crd > deploy/crds/moldeployments.mol.dev.yaml "
        "(the chart links to that file)")
    rendered = next(o for o in render(chart, {}) if o["kind"] == "CustomResourceDefinition")
    assert rendered["spec"] == yaml.safe_load(shipped)["spec"]


def test_pods_are_locked_down(chart: helm.Chart) -> None:
    for obj in render(chart, FULL):
        if obj["kind"] not in ("Deployment", "Job"):
            continue
        pod = obj["spec"]["template"]["spec"]
        assert restricted_violations(pod) == [], obj["metadata"]["name"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, obj["metadata"]["name"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert c["resources"]["requests"], obj["metadata"]["name"]


def _operator_objects(chart: helm.Chart, values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in render(chart, values)
            if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component")
            == "operator" and o["kind"] in ("Deployment", "PodDisruptionBudget", "Role")}


def test_operator_runs_two_replicas_under_leader_election(chart: helm.Chart) -> None:
    objects = _operator_objects(chart, {})
    deployment = objects["Deployment"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MOL_OPERATOR_LEADER_ELECTION"]["value"] == "true"
    assert env["MOL_OPERATOR_LEASE_NAME"]["value"] == "mol-mol-platform-operator"
    assert env["MOL_OPERATOR_LEASE_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.namespace")
    assert env["MOL_OPERATOR_LEASE_IDENTITY"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.name")
    pdb = objects["PodDisruptionBudget"]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == (
        deployment["spec"]["selector"]["matchLabels"])
    lease_role = objects["Role"]
    assert lease_role["metadata"]["name"].endswith("-leader-election")
    assert lease_role["rules"] == [{"apiGroups": ["coordination.k8s.io"],
                                    "resources": ["leases"],
                                    "verbs": ["get", "create", "update"]}]


def test_a_single_operator_needs_no_lease(chart: helm.Chart) -> None:
    objects = _operator_objects(chart, {"operator": {
        "replicas": 1, "leaderElection": {"enabled": False}}})
    assert set(objects) == {"Deployment"}
    assert objects["Deployment"]["spec"]["strategy"] == {"type": "Recreate"}
    with pytest.raises(Exception, match="leaderElection"):
        render(chart, {"operator": {"replicas": 2, "leaderElection": {"enabled": False}}})


@pytest.mark.parametrize("bad", [
    # Values that did nothing or overrode what a MoLDeployment says no longer exist.
    {"router": {"replicas": 2}},
    {"engine": {"image": {"repository": "ghcr.io/mol-platform/vllm-mol", "tag": "0.32.0"}}},
    {"engine": {"resources": {"requests": {"cpu": "lots", "memory": "8Gi"}}}},
    {"catalog": {"serviceAccount": {"annotations": {"a": 1}}}},
    {"catalog": {"workers": "two"}},
    {"unknown": True},
    {"catalog": {"database": {"password": "x"}}},
    {"operator": {"watchNamespaces": ["Not_A_Namespace"]}},
    {"operator": {"leaderElection": {"leaseDurationSeconds": 1}}},
    {"catalog": {"blobs": {"url": "gs://bucket"}}},
    {"monitoring": {"serviceMonitors": {"interval": "often"}}},
])
def test_values_schema_refuses_bad_values(chart: helm.Chart, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(bad)


def test_values_schema_covers_every_default_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(values: dict[str, Any], node: dict[str, Any], path: str) -> None:
        assert node.get("additionalProperties") is False, f"{path or '<root>'} is open"
        for key, value in values.items():
            assert key in node["properties"], f"{path}.{key} has no schema"
            sub = node["properties"][key]
            if isinstance(value, dict) and sub.get("additionalProperties") is False:
                walk(value, sub, f"{path}.{key}")

    walk(defaults, schema, "")


def _mol_commands(objects: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for obj in objects:
        if obj["kind"] in ("Deployment", "Job"):
            for c in obj["spec"]["template"]["spec"]["containers"]:
                out.append([str(a) for a in c["args"]])
    return out


def test_every_command_is_a_real_mol_verb_with_real_flags(chart: helm.Chart) -> None:
    seen = set()
    for name in VALUE_SETS:
        for args in _mol_commands(render(chart, VALUE_SETS[name])):
            verb = [a for a in args if not a.startswith("-")][:2]
            if tuple(verb) in seen:
                continue
            seen.add(tuple(verb))
            helped = subprocess.run([sys.executable, "-m", "mol_platform", *verb, "--help"],
                                    capture_output=True, text=True, timeout=120)
            assert helped.returncode == 0, (verb, helped.stderr)
            for flag in (a for a in args if a.startswith("--")):
                assert re.search(rf"(^|\s){re.escape(flag)}\b", helped.stdout), (verb, flag)
    assert {("catalog", "serve"), ("catalog", "migrate"), ("operator", "run")} <= seen


def test_every_setting_the_chart_sets_exists(chart: helm.Chart) -> None:
    known = {f"MOL_CATALOG_{k.upper()}" for k in CatalogSettings.model_fields} | {
        f"MOL_OPERATOR_{k.upper()}" for k in OperatorSettings.model_fields}
    for name in VALUE_SETS:
        for obj in render(chart, VALUE_SETS[name]):
            if obj["kind"] not in ("Deployment", "Job"):
                continue
            for c in obj["spec"]["template"]["spec"]["containers"]:
                for env in c.get("env", []):
                    if env["name"].startswith("MOL_"):
                        assert env["name"] in known, (obj["metadata"]["name"], env["name"])


# What the operator reads besides what it renders: its own resource, pods to warm,
# EndpointSlices it grants routers, events, and (cluster scope only) namespaces and
# CRDs, which kopf watches.
READ_OR_EVENTS = {("mol.dev", "moldeployments"), ("mol.dev", "moldeployments/status"),
                  ("mol.dev", "moldeployments/finalizers"), ("", "pods"),
                  ("discovery.k8s.io", "endpointslices"), ("", "events"),
                  ("events.k8s.io", "events"), ("", "namespaces"),
                  ("apiextensions.k8s.io", "customresourcedefinitions")}
WRITE_VERBS = {"get", "list", "watch", "create", "patch", "delete"}
READ_VERBS = {"get", "list", "watch"}
Kind = tuple[str, str]


def _rendered() -> tuple[set[Kind], dict[Kind, set[str]]]:
    """What the operator's builders render, all variants (the code harness with and
    without agent-sandbox included): the (API group, plural) of every object, and what
    the Roles among them grant, which the operator must hold itself (the API server
    refuses a Role granting more than its creator has)."""
    from mol_operator.builders import Defaults, Facts, build_all
    from mol_platform.contract.spec import MoLDeployment

    defaults = Defaults(prometheus_url="http://prometheus:9090", network_policy=True,
                        operator_namespace="mol-system", operator_pod_labels={"a": "b"})
    base = yaml.safe_load((Path(__file__).resolve().parents[2]
                           / "deploy/examples/macaron.yaml").read_text())
    plurals = {"Deployment": "deployments", "Service": "services", "ConfigMap": "configmaps",
               "Secret": "secrets", "ServiceAccount": "serviceaccounts", "Role": "roles",
               "RoleBinding": "rolebindings", "PodDisruptionBudget": "poddisruptionbudgets",
               "ScaledObject": "scaledobjects", "ServiceMonitor": "servicemonitors",
               "LLMInferenceService": "llminferenceservices",
               "NetworkPolicy": "networkpolicies", "SandboxTemplate": "sandboxtemplates",
               "SandboxWarmPool": "sandboxwarmpools"}
    harness = [{**e, "harness": e["name"] == "agent"} for e in base["spec"]["experts"]]
    kinds: set[Kind] = set()
    delegated: dict[Kind, set[str]] = {}
    for extra, agent_sandbox in (
            ({}, False), ({"replicas": None, "autoscaling": {"minReplicas": 0,
                                                            "maxReplicas": 2}}, False),
            ({"serving": {"mode": "kserve"}}, False),
            ({"experts": harness}, False), ({"experts": harness}, True)):
        data = {**base, "spec": {**base["spec"], **extra}}
        facts = Facts(obj=MoLDeployment.model_validate(data), uid="u", token="t", token_id=1,
                      token_scopes=("read:demo",), defaults=defaults,
                      agent_sandbox=agent_sandbox)
        for o in build_all(facts):
            group = o["apiVersion"].rpartition("/")[0]
            kinds.add((group, plurals[o["kind"]]))
            for rule in o.get("rules", []) if o["kind"] == "Role" else []:
                for g in rule["apiGroups"]:
                    for res in rule["resources"]:
                        delegated.setdefault((g, res), set()).update(rule["verbs"])
    return kinds, delegated


def test_the_rendered_variants_include_the_code_harness() -> None:
    kinds, delegated = _rendered()
    assert {("extensions.agents.x-k8s.io", "sandboxtemplates"),
            ("extensions.agents.x-k8s.io", "sandboxwarmpools")} <= kinds
    assert delegated[("", "pods")] >= {"create", "delete"}
    assert ("extensions.agents.x-k8s.io", "sandboxclaims") in delegated


def test_operator_rbac_is_what_it_renders_and_nothing_more(chart: helm.Chart) -> None:
    role = next(o for o in render(chart, {"keda": {"enabled": True},
                                          "kserve": {"enabled": True}})
                if o["kind"] == "ClusterRole")
    granted: dict[Kind, set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                granted.setdefault((group, res), set()).update(rule["verbs"])
    rendered, delegated = _rendered()
    for kind in rendered:
        assert granted.get(kind, set()) >= WRITE_VERBS, f"the operator cannot write {kind}"
    for kind, verbs in delegated.items():
        assert granted.get(kind, set()) >= verbs, (
            f"a Role the operator renders grants {sorted(verbs)} on {kind}: it must hold them")
    extra = set(granted) - rendered - set(delegated) - READ_OR_EVENTS
    assert not extra, f"granted but never rendered or read: {sorted(extra)}"
    for kind, verbs in granted.items():
        if kind in rendered or kind in {("mol.dev", "moldeployments"),
                                        ("mol.dev", "moldeployments/status")}:
            continue
        allowed = delegated.get(kind, set()) | READ_VERBS
        if kind[1] == "events":
            allowed |= {"create", "patch"}
        elif kind == ("mol.dev", "moldeployments/finalizers"):
            allowed = {"update"}
        assert verbs <= allowed, (kind, verbs - allowed)


# Cluster-scoped resources: a Role granting them grants nothing.
CLUSTER_SCOPED = {("", "namespaces"), ("apiextensions.k8s.io", "customresourcedefinitions")}


def test_namespaced_mode_grants_roles_only_in_the_watched_namespaces(chart: helm.Chart) -> None:
    objects = render(chart, FULL)
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    roles = [o for o in objects if o["kind"] == "Role"
             and o["metadata"]["name"].endswith("-operator")]
    bindings = [o for o in objects if o["kind"] == "RoleBinding"
                and o["metadata"]["name"].endswith("-operator")]
    watched = ["team-a", "team-b"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == watched
    assert sorted(b["metadata"]["namespace"] for b in bindings) == watched
    for role in roles:
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for res in rule["resources"]:
                    assert (group, res) not in CLUSTER_SCOPED, (group, res)
    operator = next(o for o in objects if o["kind"] == "Deployment"
                    and o["metadata"]["name"].endswith("-operator"))
    env = {e["name"]: e.get("value") for e in
           operator["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env["MOL_OPERATOR_NAMESPACES"]) == watched
    # Cluster mode: kopf's namespace and CRD watches need the ClusterRole's rules.
    cluster = next(o for o in render(chart, {}) if o["kind"] == "ClusterRole")
    granted = {(g, r) for rule in cluster["rules"] for g in rule["apiGroups"]
               for r in rule["resources"]}
    assert granted >= CLUSTER_SCOPED


def _env_of(chart: helm.Chart, values: dict[str, Any], component: str) -> dict[str, str]:
    (deployment,) = [o for o in render(chart, values) if o["kind"] == "Deployment" and (
        o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == component]
    return {e["name"]: e.get("value", "") for e in
            deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_tracing_values_reach_the_catalog_and_the_operator(chart: helm.Chart) -> None:
    catalog, operator = (_env_of(chart, FULL, c) for c in ("catalog", "operator"))
    assert catalog["MOL_CATALOG_TRACING_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert catalog["MOL_CATALOG_TRACING_SAMPLE_RATIO"] == "0.05"
    assert catalog["MOL_CATALOG_TRACING_TRUST_PARENT"] == "true"
    assert operator["MOL_OPERATOR_TRACING_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert operator["MOL_OPERATOR_TRACING_SAMPLE_RATIO"] == "0.05"
    assert CatalogSettings(tracing_sample_ratio=catalog["MOL_CATALOG_TRACING_SAMPLE_RATIO"]
                           ).tracing_sample_ratio == 0.05
    for component in ("catalog", "operator"):
        assert not any("TRACING" in k for k in _env_of(chart, {}, component))


def test_the_webhook_allowlist_reaches_the_catalog(chart: helm.Chart) -> None:
    catalog = _env_of(chart, FULL, "catalog")
    allow = catalog["MOL_CATALOG_WEBHOOK_ALLOW"]
    assert allow == "10.20.0.0/16,*.ci.svc.cluster.local"
    assert CatalogSettings(webhook_allow=allow).webhook_allowlist.allows_host(
        "runner.ci.svc.cluster.local")
    assert "MOL_CATALOG_WEBHOOK_ALLOW" not in _env_of(chart, {}, "catalog")
