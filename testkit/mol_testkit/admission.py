"""What a kube-apiserver decides about a custom resource at ``kubectl apply``, from its CRD.

No API server runs here, so this stands for one, in the order it works: strict field
validation (unknown fields are errors, as ``kubectl apply`` asks by default), nulls of
non-nullable fields pruned, defaults applied (a defaulted object is defaulted inside
too), the structural schema (``jsonschema``; patterns searched with RE2, as Go does),
list-type ``map`` keys and ``set`` items unique, then every ``x-kubernetes-validations``
rule evaluated with ``cel-python`` (null fields are absent to CEL; ``oldSelf`` on
updates, correlated through list-map keys; ``optionalOldSelf`` as an optional value
with ``hasValue()``/``value()``, the only Kubernetes CEL functions the rules use).

On an update, validation ratchets as Kubernetes 1.30+ does: an error at a place whose
value did not change (schema errors and CEL rules without ``oldSelf``) is not reported,
so objects stored before a rule existed stay updatable.

Errors read like the API server's: ``spec.experts[1].name: Invalid value: ...``.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
import jsonschema
import re2
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from jsonschema import validators

from mol_testkit.kube_validate import strict_schema

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_REASONS = {"FieldValueInvalid": "Invalid value", "FieldValueForbidden": "Forbidden",
            "FieldValueRequired": "Required value", "FieldValueDuplicate": "Duplicate value"}
_MISSING = object()


class AdmissionError(ValueError):
    """A request the API server refuses; ``errors`` lists each field's problem."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("\n".join(errors))


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and re2.search(pattern, instance) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft4Validator, {"pattern": _pattern})


def _path(parts: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "<root>"


class _Optional:
    """CEL's ``optional`` for ``optionalOldSelf`` rules (cel-python has none)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _has_value(opt: _Optional) -> celtypes.BoolType:
    return celtypes.BoolType(opt.value is not None)


def _value(opt: _Optional) -> Any:
    if opt.value is None:
        raise ValueError("optional.none() has no value")
    return opt.value


_FUNCTIONS = {"hasValue": _has_value, "value": _value}


@functools.cache
def _environment() -> celpy.Environment:
    return celpy.Environment()  # builds a parser: once


@functools.cache
def _program(rule: str) -> Any:
    env = _environment()
    return env.program(env.compile(rule), functions=_FUNCTIONS)


def _cel_value(value: Any) -> Any:
    """JSON -> CEL, null-valued fields left out (CEL sees them as absent)."""
    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v
    return json_to_cel(strip(value))


def _nullable_null(value: Any, schema: Mapping[str, Any]) -> bool:
    return value is None and not schema.get("nullable", False)


def _default(value: Any, schema: Mapping[str, Any]) -> Any:
    """Prune nulls of non-nullable fields, then fill defaults, the way the API server's
    structural defaulting walks (defaults of a defaulted object apply too)."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key in [k for k, v in value.items() if k in props and _nullable_null(v, props[k])]:
            del value[key]
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        for key, item in value.items():
            if key in props:
                value[key] = _default(item, props[key])
            elif isinstance(schema.get("additionalProperties"), dict):
                value[key] = _default(item, schema["additionalProperties"])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_default(item, schema["items"]) for item in value]
    return value


def _map_key(item: Any, keys: list[str]) -> tuple[Any, ...] | None:
    return tuple(item.get(k) for k in keys) if isinstance(item, dict) else None


def _child(old: Any, key: str | int, schema: Mapping[str, Any], new_list: Any = None) -> Any:
    """The old value correlated with ``new[key]``: same property, same list-map key;
    items of other lists have none (Kubernetes does not correlate them)."""
    if old is _MISSING:
        return _MISSING
    if isinstance(key, str):
        return old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list):
        return _MISSING
    keys = schema.get("x-kubernetes-list-map-keys", [])
    wanted = _map_key(new_list[key], keys)
    return next((o for o in old if _map_key(o, keys) == wanted), _MISSING)


@dataclass(frozen=True)
class _Node:
    path: tuple[Any, ...]
    value: Any
    old: Any
    schema: Mapping[str, Any]


def _walk(value: Any, old: Any, schema: Mapping[str, Any],
          path: tuple[Any, ...] = ()) -> Iterator[_Node]:
    """Every (value, correlated old value, schema) of the object, outermost first."""
    yield _Node(path, value, old, schema)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None and item is not None:
                yield from _walk(item, _child(old, key, schema), sub, (*path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            if item is not None:
                yield from _walk(item, _child(old, i, schema, value), schema["items"],
                                 (*path, i))


def _at(value: Any, path: tuple[Any, ...], schema: Mapping[str, Any], old: Any) -> Any:
    """The old value correlated with the new one at ``path`` (for ratcheting)."""
    for part in path:
        if old is _MISSING:
            return _MISSING
        if isinstance(part, int):
            old = _child(old, part, schema, value)
            schema, value = schema.get("items") or {}, value[part]
        else:
            old = _child(old, part, schema)
            props = schema.get("properties") or {}
            extra = schema.get("additionalProperties")
            schema = props.get(part, extra if isinstance(extra, dict) else {})
            value = value[part]
    return old


def _unique(node: _Node) -> Iterator[str]:
    kind = node.schema.get("x-kubernetes-list-type")
    if kind not in ("map", "set") or not isinstance(node.value, list):
        return
    keys = node.schema.get("x-kubernetes-list-map-keys", [])
    seen: set[str] = set()
    for i, item in enumerate(node.value):
        ident = (json.dumps({k: item.get(k) for k in keys}, sort_keys=True)
                 if kind == "map" and isinstance(item, dict) else json.dumps(item, sort_keys=True))
        if ident in seen:
            yield f"{_path((*node.path, i))}: Duplicate value: {ident}"
        seen.add(ident)


class Admission:
    """One served version of a CRD, deciding create and update requests.

    ``admit(obj)`` (create) or ``admit(obj, old)`` (update) returns the object as it
    would be stored (defaults applied) or raises :class:`AdmissionError`."""

    def __init__(self, crd: Mapping[str, Any], version: str | None = None) -> None:
        spec = crd["spec"]
        served = [v for v in spec["versions"] if v.get("served")]
        chosen = next((v for v in served if v["name"] == version), None) if version else (
            next((v for v in served if v.get("storage")), None))
        if chosen is None:
            raise LookupError(f"{spec['names']['kind']} serves no version {version!r}")
        self.api_version = f"{spec['group']}/{chosen['name']}"
        self.kind: str = spec["names"]["kind"]
        self.schema: dict[str, Any] = chosen["schema"]["openAPIV3Schema"]
        self._validator = _Validator(strict_schema(self.schema))

    def admit(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None
              ) -> dict[str, Any]:
        errors, stored = self._decide(obj, old)
        if errors:
            raise AdmissionError(errors)
        return stored

    def errors(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None
               ) -> list[str]:
        return self._decide(obj, old)[0]

    def _decide(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None
                ) -> tuple[list[str], dict[str, Any]]:
        value: dict[str, Any] = copy.deepcopy(dict(obj))
        errors = self._meta_errors(value, old)
        if errors:
            return errors, value
        value = _default(value, self.schema)
        previous: Any = _MISSING if old is None else _default(copy.deepcopy(dict(old)),
                                                              self.schema)
        for error in sorted(self._validator.iter_errors(value),
                            key=lambda e: list(map(str, e.absolute_path))):
            place = tuple(error.absolute_path)
            if _ratcheted(value, place, self.schema, previous):
                continue
            errors.append(f"{_path(place)}: Invalid value: {error.message}")
        for node in _walk(value, previous, self.schema):
            errors += _unique(node)
        if not errors:  # CEL rules judge objects the schema accepts
            for node in _walk(value, previous, self.schema):
                errors += _rule_errors(node)
        return errors, value

    def _meta_errors(self, value: dict[str, Any], old: Mapping[str, Any] | None) -> list[str]:
        if value.get("apiVersion") != self.api_version or value.get("kind") != self.kind:
            return [f"<root>: Invalid value: expected apiVersion {self.api_version} kind "
                    f"{self.kind}, got {value.get('apiVersion')} {value.get('kind')}"]
        name = (value.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            return ["metadata.name: Required value: name is required"]
        if len(name) > 253 or _SUBDOMAIN.fullmatch(name) is None:
            return [f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain "
                    "must consist of lower case alphanumeric characters, '-' or '.'"]
        if old is not None and old.get("metadata", {}).get("name") != name:
            return ["metadata.name: Invalid value: field is immutable"]
        return []


def _ratcheted(value: Any, place: tuple[Any, ...], schema: Mapping[str, Any], old: Any) -> bool:
    if old is _MISSING:
        return False
    new = value
    for part in place:
        new = new[part]
    return bool(_at(value, place, schema, old) == new)


def _root_view(value: Any) -> Any:
    """What CEL sees of the root: apiVersion, kind, metadata.name/generateName, the rest."""
    meta = value.get("metadata") or {}
    return {**value, "metadata": {k: meta[k] for k in ("name", "generateName") if k in meta}}


@functools.lru_cache(maxsize=65536)
def _verdict(rule: str, optional: bool, value: str, old: str | None) -> str | None:
    """None when ``rule`` holds for the JSON ``value`` (and ``old``), else why not.
    Cached: cel-python interprets slowly, and tables repeat the same values."""
    activation: dict[str, Any] = {"self": _cel_value(json.loads(value))}
    if "oldSelf" in rule:
        previous = None if old is None else _cel_value(json.loads(old))
        activation["oldSelf"] = _Optional(previous) if optional else previous
    try:
        result = _program(rule).evaluate(activation)
    except CELEvalError as exc:
        return f"rule evaluation error: {exc}"
    if isinstance(result, CELEvalError):
        return f"rule evaluation error: {result}"
    return None if bool(result) else ""


def _rule_errors(node: _Node) -> Iterator[str]:
    for rule in node.schema.get("x-kubernetes-validations", []):
        text = rule["rule"]
        transition = "oldSelf" in text
        optional = bool(rule.get("optionalOldSelf"))
        if transition and not optional and node.old is _MISSING:
            continue  # transition rules run on updates of correlated values only
        if not transition and node.old is not _MISSING and node.old == node.value:
            continue  # ratcheting: an unchanged value is not judged again
        view = _root_view if not node.path else (lambda v: v)
        old = None if node.old is _MISSING or not transition else json.dumps(view(node.old))
        why = _verdict(text, optional, json.dumps(view(node.value)), old)
        if why is None:
            continue
        where = _path(node.path) + rule.get("fieldPath", "")
        if why:
            yield f"{where}: Invalid value: {why}"
        else:
            yield f"{where}: {_REASONS[rule.get('reason', 'FieldValueInvalid')]}: {rule['message']}"
