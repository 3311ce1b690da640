"""``mol up`` without the engine: catalog-only mode, reuse, signals, auth beyond
loopback, and clear messages for missing prerequisites."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mol_testkit.net import free_port
from mol_testkit.up import MolUp


def mol_up(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mol_platform", "up", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def runs() -> Iterator[list[MolUp]]:
    started: list[MolUp] = []
    yield started
    for run in started:
        if run.proc.poll() is None:
            run.kill()


def test_catalog_only_demo_then_reuse_and_sigterm(tmp_path: Path, runs: list[MolUp]) -> None:
    port = free_port()
    args = ["--catalog-only", "--demo", "--data-dir", "data", "--catalog-port", str(port)]
    first = MolUp(args, cwd=tmp_path)
    runs.append(first)
    banner = first.wait_ready(120)
    assert "demo/coding@candidate -> v2" in banner
    assert httpx.get(f"http://127.0.0.1:{port}/v1/adapters").status_code == 200
    # the console, printed in the banner, serves the seeded adapters (auth off on loopback)
    console = f"http://127.0.0.1:{port}/ui"
    assert f"console: {console}" in banner
    page = httpx.get(f"{console}/adapters?namespace=demo")
    assert page.status_code == 200
    assert "demo/coding" in page.text
    # the printed `mol` command runs as printed, activated virtual environment or not
    line = re.search(r"MOL_CATALOG_URL=(\S+) (.+) catalog ls", banner)
    assert line is not None, banner
    listed = subprocess.run(f"{line[2]} catalog ls", shell=True, capture_output=True,
                            text=True, timeout=60, env={**os.environ, "MOL_CATALOG_URL": line[1],
                                                        "PATH": "/usr/bin:/bin"})
    assert listed.returncode == 0, listed.stderr
    assert "demo/coding" in listed.stdout
    weights = tmp_path / "data" / "demo" / "adapters" / "chat" / "adapter_model.safetensors"
    built = weights.stat().st_mtime_ns
    assert first.stop(signal.SIGTERM) == []
    assert first.started  # the catalog (and its workers) were there to stop
    assert first.proc.returncode == 0
    assert "mol up: stopping catalog ...\nmol up: stopped." in first.stderr
    second = MolUp(args, cwd=tmp_path)  # same data dir: nothing rebuilt or republished
    runs.append(second)
    again = second.wait_ready(120)
    assert re.findall(r"demo/\S+ -> v\d+", again) == re.findall(r"demo/\S+ -> v\d+", banner)
    assert weights.stat().st_mtime_ns == built
    assert second.stop(signal.SIGINT) == []


def test_beyond_loopback_the_catalog_needs_the_printed_admin_token(
        tmp_path: Path, runs: list[MolUp]) -> None:
    port = free_port()
    run = MolUp(["--catalog-only", "--host", "0.0.0.0", "--data-dir", "data",
                 "--catalog-port", str(port)], cwd=tmp_path)
    runs.append(run)
    banner = run.wait_ready(120)
    token = re.search(r"admin token \(kept in \S+\): (\S+)", banner)
    assert token is not None, banner
    url = f"http://127.0.0.1:{port}/v1/tokens"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {token[1]}"}).status_code == 200
    assert (tmp_path / "data" / "admin-token").stat().st_mode & 0o077 == 0
    assert run.stop() == []


def test_a_port_in_use_names_the_option(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = mol_up("--catalog-only", "--catalog-port", str(port), cwd=tmp_path)
    assert done.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr
    assert "--catalog-port N" in done.stderr


def test_missing_engine_venv_names_the_fix(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "deploy" / "examples" / "macaron-local.yaml"
    done = mol_up("-f", str(example), "--engine-venv", str(tmp_path / "nope"), cwd=tmp_path)
    assert done.returncode == 1
    assert "has no bin/python" in done.stderr
    assert "make engine" in done.stderr


def test_missing_manifest_names_the_fix(tmp_path: Path) -> None:
    done = mol_up(cwd=tmp_path)  # the default example is not in an empty folder
    assert done.returncode == 1
    assert "cannot read deploy/examples/macaron-local.yaml" in done.stderr
    assert "-f FILE" in done.stderr


def test_an_invalid_manifest_says_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: mol.dev/v1alpha1\nkind: MoLDeployment\nmetadata: {name: x}\n"
                   "spec: {baseModel: {name: tiny-llama, uri: /m}, experts: [],\n"
                   "       engine: {maxLoraRank: 12}}\n")
    done = mol_up("-f", str(bad), cwd=tmp_path)
    assert done.returncode == 1
    assert f"{bad} is not a valid MoLDeployment" in done.stderr
    assert "maxLoraRank" in done.stderr or "max_lora_rank" in done.stderr
    assert "Traceback" not in done.stderr
