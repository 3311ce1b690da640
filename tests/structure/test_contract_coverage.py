"""Every package of every component sits in an import contract that orders it.

A new folder is a new room; a room no contract names can import anything, and the
layering quietly stops meaning what the docs say. A package counts as covered when an
import-linter contract in ``pyproject.toml`` constrains it by name (it is a layer of a
``layers`` contract, in a container or at the top; a container whose children are
layered; or a source module of a ``forbidden`` contract, wildcards as import-linter
reads them), or when every module in it is named so. The root packages' own
contracts ("components are independent", "no import cycles", "never imports the test
rigs") do not count: they say nothing about the rooms inside, so each component's own
modules must be named one by one or as a container's layers.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = {"platform": "mol_platform", "catalog": "mol_catalog",
              "operator": "mol_operator", "router": "mol_router"}


def packages() -> dict[str, list[str]]:
    """Every package (a folder with ``__init__.py``) below each component's root, with
    the modules directly in it."""
    found = {}
    for folder, root in COMPONENTS.items():
        base = ROOT / folder
        for init in sorted((base / root).rglob("__init__.py")):
            rel = init.parent.relative_to(base)
            if "node_modules" in rel.parts:
                continue
            name = ".".join(rel.parts)
            found[name] = sorted(f"{name}.{m.stem}" for m in init.parent.glob("*.py")
                                 if m.stem not in ("__init__", "__main__"))
    return found


def _layer_names(layer: str) -> Iterator[str]:
    """The modules one layer entry names: ``a | b`` (independent) or ``a : b``."""
    for part in re.split(r"[|:]", layer):
        name = part.strip().strip("()")
        if name:
            yield name


def covered_patterns(config: dict[str, Any]) -> set[str]:
    """Every module name (or import-linter wildcard) a contract orders."""
    names: set[str] = set()
    for contract in config["tool"]["importlinter"]["contracts"]:
        kind = contract["type"]
        if kind == "layers":
            containers = contract.get("containers") or [""]
            for container in containers:
                if container:
                    names.add(container)
                for layer in contract["layers"]:
                    for name in _layer_names(layer):
                        names.add(f"{container}.{name}" if container else name)
        elif kind == "forbidden":
            names.update(contract["source_modules"])
    return names


def _matches(pattern: str, module: str) -> bool:
    """import-linter's wildcards: ``*`` one segment, ``**`` any number."""
    regex = re.escape(pattern).replace(r"\*\*", "§").replace(r"\*", r"[^.]+")
    regex = regex.replace("§", r"[^.]+(\.[^.]+)*")
    return re.fullmatch(regex, module) is not None


def uncovered(config: dict[str, Any], found: dict[str, list[str]]) -> list[str]:
    patterns = covered_patterns(config)

    def named(module: str) -> bool:
        return any(_matches(pat, module) for pat in patterns)

    roots = set(COMPONENTS.values())  # named whole only by contracts that order nothing
    return [p for p, modules in found.items()
            if not (p not in roots and named(p)) and not all(named(m) for m in modules)]


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_is_ordered_by_a_contract(config: dict[str, Any]) -> None:
    found = packages()
    assert "mol_router.auto.heads" in found
    assert "mol_catalog.webhooks" in found
    assert uncovered(config, found) == []


def test_a_new_folder_nobody_ordered_is_reported(config: dict[str, Any]) -> None:
    """The check bites: a package no contract names is listed."""
    found = {**packages(), "mol_router.newroom": ["mol_router.newroom.room"],
             "mol_catalog.newdomain": ["mol_catalog.newdomain.endpoints",
                                       "mol_catalog.newdomain.service"]}
    assert uncovered(config, found) == ["mol_router.newroom", "mol_catalog.newdomain"]


def test_a_package_with_one_module_nobody_ordered_is_reported(
        config: dict[str, Any]) -> None:
    """Naming most of a package's modules is not enough: the one left out can import
    anything. (A module added to a catalog domain folder breaks that contract itself: it
    is exhaustive, tests/structure/test_layers.py.)"""
    found = packages()
    modules = found["mol_catalog.blobs"]
    found = {"mol_catalog.blobs": [*modules, "mol_catalog.blobs.newmodule"]}
    assert uncovered(config, found) == ["mol_catalog.blobs"]


@pytest.mark.parametrize(("pattern", "module", "hit"), [
    ("mol_catalog.*.endpoints", "mol_catalog.adapters.endpoints", True),
    ("mol_catalog.*.endpoints", "mol_catalog.adapters", False),
    ("mol_router.**.model", "mol_router.auto.heads.model", True),
    ("mol_router.auto", "mol_router.auto.heads", False),
])
def test_wildcards_match_as_import_linter_reads_them(pattern: str, module: str,
                                                     hit: bool) -> None:
    assert _matches(pattern, module) is hit
