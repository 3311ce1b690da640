"""The admission harness behaves as the API server does, on a small CRD of its own."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mol_testkit.admission import Admission, AdmissionError

SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-validations": [{
        "rule": "oldSelf.hasValue() || self.metadata.name.size() <= 5",
        "message": "metadata.name: at most 5 characters", "optionalOldSelf": True}],
    "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "has(self.max) ? self.max >= self.min : true",
                 "message": "spec.max must be >= spec.min", "fieldPath": ".max"},
                {"rule": "self.min >= oldSelf.min", "message": "spec.min may only grow",
                 "reason": "FieldValueForbidden"}],
            "properties": {
                "min": {"type": "integer", "default": 1},
                "max": {"type": "integer", "nullable": True},
                "code": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"},
                "tags": {"type": "array", "maxItems": 4, "x-kubernetes-list-type": "set",
                         "items": {"type": "string", "maxLength": 8}},
                "items": {"type": "array", "maxItems": 4, "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "required": ["name"], "properties": {
                              "name": {"type": "string", "maxLength": 8},
                              "size": {"type": "integer", "default": 2, "maximum": 9},
                              "extra": {"type": "object", "default": {}, "properties": {
                                  "on": {"type": "boolean", "default": True}}}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
    },
}
CRD: dict[str, Any] = {"spec": {"group": "t.dev", "names": {"kind": "Thing"}, "versions": [
    {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": SCHEMA}}]}}
GATE = Admission(CRD)


def _thing(name: str = "one", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "t.dev/v1", "kind": "Thing", "metadata": {"name": name},
            "spec": spec}


def _errors(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    return GATE.errors(obj, old)


def test_defaults_fill_nested_objects_and_list_items() -> None:
    stored = GATE.admit(_thing(items=[{"name": "a"}]))
    assert stored["spec"]["min"] == 1
    assert stored["spec"]["items"] == [{"name": "a", "size": 2, "extra": {"on": True}}]


def test_nulls_of_non_nullable_fields_are_pruned_then_defaulted() -> None:
    stored = GATE.admit(_thing(min=None, code=None, max=None))
    assert stored["spec"] == {"min": 1, "max": None}


def test_null_fields_are_absent_to_cel() -> None:
    assert _errors(_thing(min=5, max=None)) == []
    assert _errors(_thing(min=5, max=4)) == [
        "spec.max: Invalid value: spec.max must be >= spec.min"]


def test_unknown_fields_are_errors_unless_preserved() -> None:
    assert _errors(_thing(free={"any": {"thing": 1}})) == []
    [error] = _errors(_thing(surprise=1))
    assert error.startswith("spec: ")
    assert "'surprise' was unexpected" in error


def test_patterns_are_searched_as_go_does() -> None:
    """RE2's $ is the end of the text: a trailing newline does not pass (Python's would)."""
    assert _errors(_thing(code="abc")) == []
    assert _errors(_thing(code="abc\n"))[0].startswith("spec.code: Invalid value")


def test_list_map_keys_and_set_items_are_unique() -> None:
    assert _errors(_thing(items=[{"name": "a"}, {"name": "a", "size": 3}])) == [
        'spec.items[1]: Duplicate value: {"name": "a"}']
    assert _errors(_thing(tags=["x", "y", "x"])) == ['spec.tags[2]: Duplicate value: "x"']


def test_names_are_object_names_and_immutable() -> None:
    assert "subdomain" in _errors(_thing(name="Not_A_Name"))[0]
    assert _errors(_thing(name="two"), old=_thing(name="one")) == [
        "metadata.name: Invalid value: field is immutable"]


def test_optional_old_self_runs_on_create_only() -> None:
    assert _errors(_thing(name="toolong")) == [
        "<root>: Invalid value: metadata.name: at most 5 characters"]
    old = _thing(name="toolong")
    assert _errors(_thing(name="toolong", min=2), old=old) == []


def test_transition_rules_run_on_updates_with_the_old_value() -> None:
    assert _errors(_thing(min=3)) == []
    assert _errors(_thing(min=2), old=_thing(min=3)) == [
        "spec: Forbidden: spec.min may only grow"]
    assert _errors(_thing(min=4), old=_thing(min=3)) == []


def test_updates_ratchet_unchanged_values() -> None:
    """A value stored before a rule refused it stays; a changed value is judged."""
    old = _thing(code="TOOLONGCODE", items=[{"name": "a", "size": 10}])
    new = copy.deepcopy(old)
    new["spec"]["tags"] = ["t"]
    assert _errors(new, old=old) == []
    new["spec"]["items"].insert(0, {"name": "b", "size": 10})  # list-map: correlated by key
    assert _errors(new, old=old) == [
        "spec.items[0].size: Invalid value: 10 is greater than the maximum of 9"]
    assert len(_errors(new)) == 4  # on create: code (length, pattern), both sizes


def test_rule_evaluation_errors_refuse() -> None:
    crd = copy.deepcopy(CRD)
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "x-kubernetes-validations"] = [{"rule": "self.max > 0", "message": "m"}]
    [error] = Admission(crd).errors(_thing())
    assert error.startswith("spec: Invalid value: rule evaluation error")


def test_admit_raises_with_every_error() -> None:
    with pytest.raises(AdmissionError) as refused:
        GATE.admit(_thing(code="ABC", tags=["x", "x"], min=3, max=2))
    assert [e.split(":")[0] for e in refused.value.errors] == ["spec.code", "spec.tags[1]"]
    # CEL rules judge objects the schema accepts: spec.max waits for the fix
    assert [e.split(":")[0] for e in GATE.errors(_thing(min=3, max=2))] == ["spec.max"]


def test_only_served_versions() -> None:
    with pytest.raises(LookupError, match="no version 'v2'"):
        Admission(CRD, "v2")
    assert "expected apiVersion t.dev/v1" in _errors({**_thing(), "apiVersion": "t.dev/v2"})[0]
