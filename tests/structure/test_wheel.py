"""The runtime wheel carries the runtime only: the test rigs are a distribution of their own.

Hatchling builds one wheel per ``pyproject.toml``, so the rigs (``testkit/``) have their
own project; these tests build both wheels the way a release does and read what is in
them, and check that the runtime images never install the rigs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_PACKAGES = {"mol_platform", "mol_catalog", "mol_operator", "mol_router", "mol_sandbox"}


def _build(project: Path, out: Path) -> set[str]:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(project)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


@pytest.fixture(scope="module")
def runtime_wheel(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    return _build(ROOT, tmp_path_factory.mktemp("runtime"))


def test_runtime_wheel_holds_no_test_rig(runtime_wheel: set[str]) -> None:
    tops = {n.split("/", 1)[0] for n in runtime_wheel if not n.split("/", 1)[0].endswith(
        (".dist-info", ".data"))}
    assert tops == RUNTIME_PACKAGES
    rigs = [n for n in runtime_wheel if re.search(r"(^|/)(mol_testkit|testing|tests)(/|$)", n)]
    assert rigs == []
    # The contract, clients and apps floors are all inside.
    for floor in ("contract", "clients", "apps"):
        assert f"mol_platform/{floor}/__init__.py" in runtime_wheel
    assert "mol_catalog/_migrations/env.py" in runtime_wheel


def test_runtime_wheel_ships_the_console_and_its_assets(runtime_wheel: set[str]) -> None:
    """Templates, scripts and the npm-built vendor files (git-ignored, hatch artifacts):
    the console and /docs work offline from the wheel alone."""
    for path in ("console/templates/base.html", "console/static/console.js",
                 "console/static/vendor/swagger-ui/swagger-ui-bundle.js",
                 "console/static/vendor/swagger-ui/swagger-ui.css",
                 "console/static/vendor/redoc/redoc.standalone.js"):
        assert f"mol_catalog/{path}" in runtime_wheel, path
    assert not [n for n in runtime_wheel if "node_modules" in n]


def test_testkit_wheel_holds_only_the_rigs(tmp_path: Path) -> None:
    names = _build(ROOT / "testkit", tmp_path)
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"mol_testkit"}
    assert "mol_testkit/simulator/__main__.py" in names


@pytest.mark.parametrize("dockerfile", sorted((ROOT / "deploy/images").glob("*.Dockerfile")),
                         ids=lambda p: p.name)
def test_runtime_images_install_no_test_rig(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    assert "testkit" not in text
    copies = re.findall(r"^COPY\s+(?!--from)(.+?)\s+\S+$", text, flags=re.M)
    sources = {s for line in copies for s in line.split()}
    assert sources, "no COPY lines read"
    assert sources <= {"pyproject.toml", "README.md", "platform", "catalog", "operator",
                       "router", "migrations", "catalog/web",
                       "scripts/console-assets.sh"}, sources
