"""The ``moldeployments.mol.dev`` CustomResourceDefinition, generated from the models.

One source of truth: the spec schema is ``mol_platform.contract.spec.MoLDeploymentSpec``'s
JSON schema and the status schema is :class:`mol_operator.status.MoLDeploymentStatus`'s,
rewritten into the structural OpenAPI v3 subset Kubernetes accepts (references
inlined, ``X | None`` as ``nullable``, no titles, numeric ``exclusiveMinimum`` as
``minimum`` + boolean). The models carry what the API server checks at ``kubectl
apply`` (patterns, bounds, list-map keys, CEL rules: ``mol_platform.contract.spec_rules``)
and every field's description (their docstrings, for ``kubectl explain``).
``mol operator crd > deploy/crds/moldeployments.mol.dev.yaml`` regenerates the file; a
test fails when the committed copy is stale.
"""

from __future__ import annotations

from typing import Any

import yaml

from mol_operator.status import MoLDeploymentStatus
from mol_platform.contract.spec import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAME,
    MoLDeploymentSpec,
)
from mol_platform.contract.spec_rules import METADATA_NAME_RULE

VERSION = API_VERSION.split("/", 1)[1]
CRD_FILE = "deploy/crds/moldeployments.mol.dev.yaml"
_DROP = {"title", "$defs", "discriminator"}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[1]]
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return _inline({**target, **extra}, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            out[key] = {name: _inline(sub, defs) for name, sub in value.items()}
        else:
            out[key] = _inline(value, defs)
    return out


def _structural(node: Any) -> Any:
    """Rewrite pydantic's JSON schema into a Kubernetes structural schema."""
    if isinstance(node, list):
        return [_structural(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if isinstance(node.get("description"), str):  # docstrings -> one plain line
        node["description"] = " ".join(node["description"].replace("``", "").split())
    any_of = node.get("anyOf")
    if isinstance(any_of, list):
        kinds = [s for s in any_of if s.get("type") != "null"]
        if len(kinds) == 1 and len(any_of) == 2:
            del node["anyOf"]
            node = {**kinds[0], **node, "nullable": True}
            if node.get("default", 0) is None:
                del node["default"]
    if isinstance(node.get("exclusiveMinimum"), int | float) and not isinstance(
        node.get("exclusiveMinimum"), bool
    ):
        node["minimum"] = node.pop("exclusiveMinimum")
        node["exclusiveMinimum"] = True
    extra = node.pop("additionalProperties", None)
    if extra is True or (node.get("type") == "object" and "properties" not in node
                         and extra is None):
        node["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(extra, dict):
        node["additionalProperties"] = _structural(extra)
    for key in ("properties",):
        if key in node:
            node[key] = {k: _structural(v) for k, v in node[key].items()}
    if "items" in node:
        node["items"] = _structural(node["items"])
    return node


def openapi_schema(model: type[Any]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True)
    inlined = _inline(raw, raw.get("$defs", {}))
    result: dict[str, Any] = _structural(inlined)
    return result


def crd_manifest() -> dict[str, Any]:
    spec_schema = openapi_schema(MoLDeploymentSpec)
    status_schema = openapi_schema(MoLDeploymentStatus)
    spec_schema.pop("additionalProperties", None)
    ready = '.status.conditions[?(@.type=="Ready")]'
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "mol-platform"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": [SHORT_NAME],
                "categories": ["mol"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Ready", "type": "string", "jsonPath": f"{ready}.status"},
                        {"name": "Reason", "type": "string", "jsonPath": f"{ready}.reason"},
                        {"name": "Replicas", "type": "integer",
                         "jsonPath": ".status.readyReplicas"},
                        {"name": "Experts", "type": "integer",
                         "jsonPath": ".status.expertCount"},
                        {"name": "Canary", "type": "string", "jsonPath": ".status.canary"},
                        {"name": "URL", "type": "string", "jsonPath": ".status.endpoint"},
                        {"name": "Age", "type": "date",
                         "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A Mixture-of-LoRA deployment: a base model on vLLM,"
                            " LoRA experts from the catalog and a router.",
                            "required": ["spec"],
                            "x-kubernetes-validations": [METADATA_NAME_RULE],
                            "properties": {
                                "apiVersion": {"type": "string", "description": (
                                    "The versioned schema of this object: mol.dev/v1alpha1.")},
                                "kind": {"type": "string",
                                         "description": "The kind: MoLDeployment."},
                                "metadata": {"type": "object", "description": (
                                    "Standard object metadata; the name is a DNS-1035 label "
                                    "of at most 63 characters.")},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated by `mol operator crd` from mol_platform.contract.spec: do not edit.\n"
    return header + yaml.safe_dump(crd_manifest(), sort_keys=False, width=100)
