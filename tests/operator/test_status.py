"""Status bookkeeping and the small pure helpers of the reconcile."""

from __future__ import annotations

from typing import Any

import pytest

from mol_operator.catalog import Retry, engine_label, token_scopes
from mol_operator.reconcile import Invalid, failure_status, parse
from mol_operator.status import condition, merge_conditions, status_patch
from mol_operator.warmup_plan import apply_results, model_names
from mol_platform.contract.spec import MoLDeployment, MoLDeploymentSpec


def test_transition_time_moves_only_on_flips() -> None:
    first = merge_conditions([], [condition("Ready", False, "NotReady")], 1, now="t1")
    same = merge_conditions(first, [condition("Ready", False, "NotReady", "x")], 2, now="t2")
    flipped = merge_conditions(same, [condition("Ready", True, "Ready")], 2, now="t3")
    assert first[0]["lastTransitionTime"] == "t1"
    assert same[0]["lastTransitionTime"] == "t1"
    assert same[0]["observedGeneration"] == 2
    assert flipped[0]["lastTransitionTime"] == "t3"


def test_status_patch_is_empty_when_unchanged_and_removes_dropped_keys() -> None:
    old = {"replicas": 2, "canary": "coding v2", "kopf": {"x": 1}}
    assert status_patch(old, {"replicas": 2, "canary": "coding v2"}) == {}
    assert status_patch(old, {"replicas": 3}) == {"replicas": 3, "canary": None}


def test_same_failure_twice_gives_the_same_status() -> None:
    error = Retry("CatalogUnreachable", "cannot reach the catalog", 5.0)
    once = failure_status({}, 1, error)
    twice = failure_status(once, 1, error)
    assert once == twice
    by_type = {c["type"]: c for c in once["conditions"]}
    assert by_type["AdaptersResolved"]["reason"] == "CatalogUnreachable"
    assert by_type["Ready"]["status"] == "False"


def test_failure_keeps_other_conditions() -> None:
    old = {"conditions": merge_conditions([], [condition("Compatible", True, "Compatible")], 1),
           "replicas": 2}
    new = failure_status(old, 1, Invalid("InvalidSpec", "bad"))
    assert new["replicas"] == 2
    assert {c["type"] for c in new["conditions"]} == {"Compatible", "Ready"}


@pytest.mark.parametrize(("image", "label"), [
    ("vllm/vllm-openai:v0.11.0", "vllm==0.11.0"),
    ("registry.local:5000/vllm:0.32.0+cpu", "vllm==0.32.0+cpu"),
    ("vllm/vllm-openai:latest", "vllm (vllm/vllm-openai:latest)"),
    ("registry.local:5000/vllm", "vllm (registry.local:5000/vllm)"),
])
def test_engine_label(image: str, label: str) -> None:
    assert engine_label(image) == label


def _obj(**spec: Any) -> MoLDeployment:
    body: dict[str, Any] = {
        "baseModel": {"name": "b", "uri": "/m"}, "adapterNamespaces": ["zeta"],
        "experts": [{"name": "a", "adapter": "acme/a@stable",
                     "canary": {"adapter": "beta/a@v2"}}]}
    body.update(spec)
    return MoLDeployment.model_validate({"metadata": {"name": "d"}, "spec": body})


def test_token_scopes_cover_every_namespace_once() -> None:
    assert token_scopes(_obj()) == (
        "read:acme", "read:beta", "read:zeta", "usage:acme", "usage:beta", "usage:zeta")


def test_parse_names_every_field_to_fix() -> None:
    with pytest.raises(Invalid) as err:
        parse({"metadata": {"name": "d"}, "spec": {"baseModel": {"name": "b", "uri": "/m"},
                                                   "experts": [], "replicas": -1}})
    assert "spec.experts" in err.value.message
    assert "spec.replicas" in err.value.message


def test_parse_refuses_names_no_service_can_carry() -> None:
    spec = {"baseModel": {"name": "b", "uri": "/m"},
            "experts": [{"name": "a", "adapter": "n/a@v1"}]}
    assert parse({"metadata": {"name": "x" * 63}, "spec": spec}).metadata.name == "x" * 63
    for bad in ("x" * 64, "9lives"):
        with pytest.raises(Invalid, match=r"metadata\.name must be a DNS-1035 label"):
            parse({"metadata": {"name": bad}, "spec": spec})


def test_warmup_results_per_pod() -> None:
    spec = MoLDeploymentSpec.model_validate({
        "baseModel": {"name": "b", "uri": "/m"},
        "experts": [{"name": "a", "adapter": "n/a@stable", "canary": {"adapter": "n/a@next"}},
                    {"name": "b", "adapter": "n/b@stable"}]})
    experts: list[dict[str, Any]] = [
        {"name": "a", "adapter": "n/a@stable", "version": 1, "canary": {"version": 2}},
        {"name": "b", "adapter": "n/b@stable", "version": 4}]
    names = model_names(spec, {"experts": experts})
    assert names == {"n/a@v1": "a", "n/a@v2": "a", "n/b@v4": "b"}
    failed = apply_results(experts, "pod-1", names,
                           {"n/a@v1": None, "n/a@v2": None, "n/b@v4": "HTTP 404: gone"})
    assert [e["serving"] for e in failed] == [True, False]
    assert failed[1]["warmupErrors"] == ["pod-1: n/b@v4: HTTP 404: gone"]
    other = apply_results(failed, "pod-2", names, {"n/b@v4": None})
    assert other[1]["warmupErrors"] == ["pod-1: n/b@v4: HTTP 404: gone"]
    healed = apply_results(other, "pod-1", names, {"n/b@v4": None})
    assert healed[1]["serving"] is True
    assert "warmupErrors" not in healed[1]
