"""Validate rendered manifests where the emulator cannot (it does no validation).

Built-in kinds (Deployment, Service, ConfigMap, PodDisruptionBudget, ...) go through
``kubernetes_validate`` in strict mode (unknown fields are errors). Custom resources
go through ``jsonschema`` against their CRD's ``openAPIV3Schema``, found in the CRD
folders (``$MOL_CRD_DIRS``, ``os.pathsep``-separated; else the third-party CRDs vendored
in ``mol_testkit/crds`` (sources, versions and licence in its README) and the chart's
``charts/mol-platform/files/crds``). Nothing outside the repository is read.
CRD schemas are made strict the way an API server with ``fieldValidation=Strict``
behaves: an object schema with ``properties`` rejects unknown fields unless it says
``x-kubernetes-preserve-unknown-fields``; ``nullable`` allows null.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
THIRD_PARTY_CRDS = Path(__file__).resolve().parent / "crds"
CHART_CRDS = REPO_ROOT / "charts" / "mol-platform" / "files" / "crds"


class ManifestError(ValueError):
    """A manifest its schema rejects; the message lists every problem with its path."""


def crd_dirs() -> list[Path]:
    env = os.environ.get("MOL_CRD_DIRS")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [THIRD_PARTY_CRDS, CHART_CRDS]


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _crd_schemas(path: Path, mtime: float) -> dict[tuple[str, str, str], dict[str, Any]]:
    """{(group, version, kind): openAPIV3Schema} of the CRDs in one YAML file."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for doc in yaml.load_all(path.read_text(), Loader=_Loader):
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        for version in spec.get("versions", []):
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if schema is not None:
                found[(spec["group"], version["name"], spec["names"]["kind"])] = schema
    return found


def find_crd_schema(
    group: str, version: str, kind: str, dirs: Iterable[Path] | None = None
) -> dict[str, Any] | None:
    """The openAPIV3Schema of group/version kind from the CRD YAML files in dirs (default
    :func:`crd_dirs`); files that do not mention the kind are not parsed (some are MBs)."""
    for folder in dirs if dirs is not None else crd_dirs():
        for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
            with path.open() as fh:
                text = fh.read()
            if f"kind: {kind}" not in text or group not in text:
                continue
            schema = _crd_schemas(path, path.stat().st_mtime).get((group, version, kind))
            if schema is not None:
                return schema
    return None


def strict_schema(schema: Any) -> Any:
    """The openAPIV3Schema as a strict JSON Schema (see the module docstring)."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k == "properties" else strict_schema(v) for k, v in schema.items()}
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    preserve = out.get("x-kubernetes-preserve-unknown-fields", False)
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    if isinstance(out.get("properties"), dict):  # names in here are not keywords
        out["properties"] = {name: strict_schema(s) for name, s in out["properties"].items()}
    return out


def custom_resource_errors(
    manifest: Mapping[str, Any], schema: Mapping[str, Any] | None = None
) -> list[str]:
    """Every schema violation of a custom resource as ``path: message`` (empty: valid)."""
    api_version = str(manifest.get("apiVersion", ""))
    kind = str(manifest.get("kind", ""))
    group, _, version = api_version.rpartition("/")
    if schema is None:
        dirs = crd_dirs()
        schema = find_crd_schema(group, version, kind, dirs)
        if schema is None:
            raise LookupError(
                f"no CRD schema for {api_version} {kind} in {[str(d) for d in dirs]}"
                " (set MOL_CRD_DIRS to the folders holding the CRD YAML files)"
            )
    validator = jsonschema.Draft4Validator(strict_schema(dict(schema)))
    errors = sorted(validator.iter_errors(dict(manifest)), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


def validate_custom_resource(
    manifest: Mapping[str, Any], schema: Mapping[str, Any] | None = None
) -> None:
    """Raise ManifestError listing every violation; LookupError when no CRD is known."""
    errors = custom_resource_errors(manifest, schema)
    if errors:
        name = manifest.get("metadata", {}).get("name")
        listing = "\n  ".join(errors)
        raise ManifestError(f"{manifest.get('kind')} {name!r} is invalid:\n  {listing}")


def validate_builtin(manifest: Mapping[str, Any], version: str | None = None) -> None:
    """Strict kubernetes-validate of a built-in kind against Kubernetes ``version``
    (default: the newest schemas it ships); ManifestError on failure."""
    target = version or kubernetes_validate.latest_version()
    try:
        kubernetes_validate.validate(dict(manifest), target, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(map(str, exc.absolute_path)) or "<root>"
        raise ManifestError(
            f"{manifest.get('kind')} {manifest.get('metadata', {}).get('name')!r} is invalid"
            f" for Kubernetes {target}: {path}: {exc.message}"
        ) from exc
    except kubernetes_validate.SchemaNotFoundError as exc:
        raise LookupError(exc.message) from exc


def validate_manifest(manifest: Mapping[str, Any], version: str | None = None) -> None:
    """Built-in kinds via kubernetes-validate, anything else via its CRD schema."""
    try:
        validate_builtin(manifest, version)
    except LookupError:
        validate_custom_resource(manifest)
