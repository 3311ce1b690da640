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

from mol_platform.apps.up import banner
from mol_platform.apps.up.auth import router_keys
from mol_platform.contract.router_config import ApiKeysFile
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
    assert "mol up: building and publishing the demo adapters ..." in first.stderr
    second = MolUp(args, cwd=tmp_path)  # same data dir: nothing rebuilt or republished
    runs.append(second)
    again = second.wait_ready(120)
    assert "mol up: reusing the demo adapters in data/demo" in second.stderr
    assert "building" not in second.stderr
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


def test_auth_on_loopback_the_printed_token_logs_in_and_a_wrong_one_is_refused(
        tmp_path: Path, runs: list[MolUp]) -> None:
    port = free_port()
    run = MolUp(["--catalog-only", "--demo", "--auth", "--data-dir", "data",
                 "--catalog-port", str(port)], cwd=tmp_path)
    runs.append(run)
    banner = run.wait_ready(120)
    token = re.search(r"admin token \(kept in \S+\): (\S+)", banner)
    assert token is not None, banner
    url = f"http://127.0.0.1:{port}"
    # the API: 401 without a token and with a wrong one, 200 with the printed one
    assert httpx.get(f"{url}/v1/adapters").status_code == 401
    wrong = httpx.get(f"{url}/v1/tokens", headers={"Authorization": "Bearer wrong"})
    assert wrong.status_code == 401
    assert f"curl -H 'Authorization: Bearer wrong' {url}/v1/tokens" in banner
    admin = {"Authorization": f"Bearer {token[1]}"}
    assert httpx.get(f"{url}/v1/tokens", headers=admin).status_code == 200
    # the printed `mol ... catalog ls` carries the token
    line = re.search(r"MOL_CATALOG_URL=(\S+) MOL_CATALOG_TOKEN=(\S+) (.+) catalog ls", banner)
    assert line is not None, banner
    listed = subprocess.run(f"{line[3]} catalog ls", shell=True, capture_output=True, text=True,
                            timeout=60, env={**os.environ, "MOL_CATALOG_URL": line[1],
                                             "MOL_CATALOG_TOKEN": line[2]})
    assert listed.returncode == 0, listed.stderr
    assert "demo/coding" in listed.stdout
    # the console: a login page, refused with a wrong token, in with the printed one
    with httpx.Client(base_url=url) as browser:
        assert browser.get("/ui/adapters").status_code in (303, 307)
        form = browser.get("/ui/login")
        assert form.status_code == 200
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        bad = browser.post("/ui/login", data={"token": "mol_wrong", "csrf": csrf[1]})
        assert bad.status_code == 401
        good = browser.post("/ui/login", data={"token": token[1], "csrf": csrf[1]})
        assert good.status_code == 303
        page = browser.get("/ui/adapters?namespace=demo")
        assert page.status_code == 200
        assert "demo/coding" in page.text
    # scopes: a read token lists but may not publish or manage tokens
    created = httpx.post(f"{url}/v1/tokens", headers=admin,
                         json={"name": "reader", "scopes": ["read"]})
    assert created.status_code in (200, 201), created.text
    reader = {"Authorization": f"Bearer {created.json()['token']}"}
    assert httpx.get(f"{url}/v1/adapters", headers=reader).status_code == 200
    assert httpx.get(f"{url}/v1/tokens", headers=reader).status_code == 403
    assert (tmp_path / "data" / "admin-token").stat().st_mode & 0o077 == 0
    assert run.stop() == []


def test_a_restart_lists_the_aliases_published_since(tmp_path: Path, runs: list[MolUp]) -> None:
    port = free_port()
    args = ["--catalog-only", "--demo", "--data-dir", "data", "--catalog-port", str(port)]
    first = MolUp(args, cwd=tmp_path)
    runs.append(first)
    first.wait_ready(120)
    url = f"http://127.0.0.1:{port}"
    folder = tmp_path / "data" / "demo" / "adapters" / "chat"
    published = subprocess.run(
        [sys.executable, "-m", "mol_platform", "catalog", "publish", str(folder), "--name",
         "mine/helper", "--alias", "beta"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "MOL_CATALOG_URL": url}, check=False)
    assert published.returncode == 0, published.stderr
    moved = subprocess.run(
        [sys.executable, "-m", "mol_platform", "catalog", "alias", "set", "demo/coding@stable",
         "2"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "MOL_CATALOG_URL": url}, check=False)
    assert moved.returncode == 0, moved.stderr
    assert first.stop() == []
    second = MolUp(args, cwd=tmp_path)
    runs.append(second)
    again = second.wait_ready(120)
    aliases = re.findall(r"^ +(\S+@\S+) -> v(\d+)$", again, re.MULTILINE)
    assert ("mine/helper@beta", "1") in aliases, again
    assert ("demo/coding@stable", "2") in aliases  # where it is now, not where mol up put it
    assert [ref for ref, _ in aliases].index("mine/helper@beta") == len(aliases) - 1  # demo first
    assert second.stop() == []


def test_the_banner_says_how_to_put_mol_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    script = Path(sys.executable).parent / "mol"
    assert script.is_file()  # the dev venv's console script, beside this interpreter
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert banner.mol_command() == str(script)
    hint = banner.path_hint()
    assert hint == [f"          (`mol` is {script}; `source {script.parent / 'activate'}` "
                    "puts it on PATH)"]
    monkeypatch.setattr("shutil.which", lambda name: str(script))
    assert banner.mol_command() == "mol"
    assert banner.path_hint() == []
    assert "catalog ls" in banner.catalog_banner("http://h:1", Path("d"), None)


def test_router_keys_are_a_valid_keys_file_kept_across_starts(tmp_path: Path) -> None:
    first = router_keys(tmp_path)
    keys = ApiKeysFile.load(first.path)
    assert [(k.tenant, k.key) for k in keys.keys] == [("local", first.local),
                                                      ("console", first.console)]
    assert first.local != first.console
    for name in ("router-api-keys.yaml", "router-api-key", "router-console-key"):
        assert (tmp_path / name).stat().st_mode & 0o077 == 0, name
    again = router_keys(tmp_path)  # a restart prints the same key
    assert (again.local, again.console) == (first.local, first.console)


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
