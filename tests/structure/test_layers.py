"""The layer contracts bite: an import that crosses a layer fails ``lint-imports``.

Each case copies the packages and the import-linter configuration into a temporary
folder, adds one forbidden import to the copy, and runs ``lint-imports`` on the copy
(first on ``PYTHONPATH``, ahead of the editable install). The unchanged copy passes,
so a failure is the added import's doing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"platform": "mol_platform", "catalog": "mol_catalog", "operator": "mol_operator",
           "router": "mol_router", "testkit": "mol_testkit"}
LINT = Path(sys.executable).with_name("lint-imports")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    for folder, package in FOLDERS.items():
        shutil.copytree(ROOT / folder / package, root / folder / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(root / f) for f in FOLDERS))
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_unchanged_copy_passes(tree: Path) -> None:
    out = _lint(tree)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in ("platform layers: apps > clients > contract",
                 "router pure modules: no I/O module",
                 "operator pure modules: no API client, no executor"):
        assert f"{name} KEPT" in out.stdout


CASES = [
    ("operator/mol_operator/planner.py", "import mol_platform.clients.kube",
     "operator pure modules"),
    ("router/mol_router/replicas/policy/base.py", "import mol_router.replicas.pool",
     "router pure modules: no I/O module"),
    ("platform/mol_platform/contract/spec.py", "import mol_platform.clients.catalog",
     "platform layers: apps > clients > contract"),
    ("operator/mol_operator/builders/common.py", "import httpx",
     "operator pure modules"),
    ("operator/mol_operator/canary.py", "import aiohttp",
     "operator pure modules"),
    ("operator/mol_operator/adapter_health.py", "import mol_operator.adapter_probe",
     "operator layers: entry points > reconcile > executors > pure"),
    ("router/mol_router/routing/rules.py", "import mol_router.serving.proxy",
     "router pure modules: no I/O module"),
    ("catalog/mol_catalog/admin/endpoints.py", "import mol_catalog.blobs.repository",
     "catalog endpoints reach the database only through services"),
    ("catalog/mol_catalog/usage/repository.py", "import mol_catalog.usage.service",
     "catalog domains: endpoints > services > schemas > repositories"),
]


@pytest.mark.parametrize(("module", "line", "contract"), CASES, ids=[c[1] for c in CASES])
def test_a_crossing_import_fails(tree: Path, tmp_path: Path, module: str, line: str,
                                 contract: str) -> None:
    copy = tmp_path / "tree"
    shutil.copytree(tree, copy)
    target = copy / module
    text = target.read_text()
    head, sep, rest = text.partition("from __future__ import annotations\n")
    target.write_text(head + sep + line + "  # noqa\n" + rest)
    out = _lint(copy)
    assert out.returncode != 0
    assert contract in out.stdout
    broken = [ln for ln in out.stdout.splitlines() if ln.endswith("BROKEN")]
    assert any(contract in ln for ln in broken), out.stdout


def test_a_module_added_to_a_catalog_domain_must_be_placed(tree: Path, tmp_path: Path) -> None:
    """The domain contract is exhaustive: a new module in a domain folder, even one that
    imports nothing, breaks it until it is given a layer."""
    copy = tmp_path / "tree"
    shutil.copytree(tree, copy)
    (copy / "catalog/mol_catalog/routing/helpers.py").write_text('"""A new room."""\n')
    out = _lint(copy)
    assert out.returncode != 0
    assert "mol_catalog.routing.helpers" in out.stdout
    broken = [ln for ln in out.stdout.splitlines() if ln.endswith("BROKEN")]
    assert any("catalog domains" in ln for ln in broken), out.stdout
