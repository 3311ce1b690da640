"""``mol up`` and the code harness: the sandbox service starts on loopback for a spec
whose experts set harness, with the spec's limits, the router's keys as its tokens when
auth is on, and the router's config pointing at it. The service is the real one
(``mol sandbox serve`` as a process, sessions under bubblewrap)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from mol_platform.apps.up.auth import router_keys
from mol_platform.apps.up.sandbox import (
    check_sandbox,
    sandbox_address,
    sandbox_env,
    start_sandbox,
)
from mol_platform.apps.up.stack import start_catalog
from mol_platform.apps.up.supervisor import Service, Supervisor, UpError
from mol_platform.contract.router_config import router_config_from_spec
from mol_platform.contract.sandbox_limits import quantity
from mol_platform.contract.spec import MoLDeployment
from mol_sandbox.settings import SandboxSettings
from mol_testkit.net import free_port

ROOT = Path(__file__).resolve().parents[2]


def _spec(harness: bool = True, section: dict[str, object] | None = None) -> MoLDeployment:
    data = yaml.safe_load((ROOT / "deploy/examples/macaron-local.yaml").read_text())
    data["spec"]["experts"][0]["harness"] = harness
    if section is not None:
        data["spec"]["harness"] = section
    return MoLDeployment.model_validate(data)


@pytest.fixture
def sup() -> Iterator[Supervisor]:
    supervisor = Supervisor()
    try:
        yield supervisor
    finally:
        supervisor.stop()


@pytest.mark.parametrize(("text", "value"), [
    ("500m", 0.5), ("2", 2.0), ("1.5", 1.5), ("512Mi", 512 * 2**20), ("1G", 1e9)])
def test_quantities(text: str, value: float) -> None:
    assert quantity(text) == value


def test_the_specs_limits_become_the_services_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    obj = _spec(section={"maxSessions": 9, "limits": {
        "timeoutSeconds": 12, "cpu": "500m", "memory": "1Gi", "pids": 32,
        "outputBytes": 4096, "diskBytes": 8 * 2**20, "idleTTLSeconds": 600}})
    for name, value in sandbox_env(obj.spec).items():
        monkeypatch.setenv(name, value)
    s = SandboxSettings()
    assert (s.call_timeout, s.cpus, s.memory_mib, s.max_processes) == (12, 0.5, 1024, 32)
    assert (s.output_bytes, s.disk_mib, s.idle_ttl, s.max_sessions) == (4096, 8, 600, 9)


def test_without_harness_nothing_is_checked_or_started(sup: Supervisor, tmp_path: Path) -> None:
    spec = _spec(harness=False).spec
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        check_sandbox(spec, busy.getsockname()[1])
    assert start_sandbox(sup, spec, free_port(), tmp_path, None) is None
    assert sup.services == []


def test_a_busy_sandbox_port_names_the_option() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(UpError, match="--sandbox-port"):
            check_sandbox(_spec().spec, busy.getsockname()[1])


def test_the_router_config_points_at_the_started_sandbox(sup: Supervisor,
                                                         tmp_path: Path) -> None:
    obj = _spec()
    (tmp_path / "logs").mkdir()
    url = start_sandbox(sup, obj.spec, free_port(), tmp_path, None)
    assert url is not None
    assert url.startswith("http://127.0.0.1:")
    config = router_config_from_spec(obj, endpoints=["http://127.0.0.1:1"],
                                     catalog_url="http://127.0.0.1:2",
                                     embeddings_url="http://127.0.0.1:3", sandbox_url=url)
    assert config.harness is not None
    assert config.harness.sandbox_url == url
    with httpx.Client(base_url=url, timeout=60) as client:  # no tokens: the local tenant
        sid = client.post("/v1/sessions").json()["id"]
        client.post(f"/v1/sessions/{sid}/execute", json={"code": "x = 6 * 7"})
        out = client.post(f"/v1/sessions/{sid}/execute", json={"code": "print(x)"}).json()
        assert out["stdout"] == "42\n"


def test_with_auth_the_routers_keys_are_the_sandboxs_tokens(sup: Supervisor,
                                                            tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    keys = router_keys(tmp_path)
    url = start_sandbox(sup, _spec().spec, free_port(), tmp_path, keys)
    assert url is not None
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.post("/v1/sessions").status_code == 401
        mine = {"Authorization": f"Bearer {keys.local}"}
        theirs = {"Authorization": f"Bearer {keys.console}"}
        sid = client.post("/v1/sessions", headers=mine).json()["id"]
        assert client.get(f"/v1/sessions/{sid}", headers=mine).status_code == 200
        assert client.get(f"/v1/sessions/{sid}", headers=theirs).status_code == 404


def test_the_catalog_is_pointed_at_the_sandbox(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalog starts first, so it gets the sandbox's address before the sandbox is
    up (and, with auth, the console's key, which the sandbox's tokens file holds)."""
    started: list[Service] = []
    monkeypatch.setattr(Supervisor, "start", lambda self, service, **_: started.append(service))
    port = free_port()
    url = sandbox_address(_spec().spec, port)
    assert url == f"http://127.0.0.1:{port}"
    assert sandbox_address(_spec(harness=False).spec, port) is None
    keys = router_keys(tmp_path)
    start_catalog(Supervisor(), "127.0.0.1", free_port(), tmp_path, auth=True,
                  router_key=keys.console, sandbox_url=url)
    start_catalog(Supervisor(), "127.0.0.1", free_port(), tmp_path)
    with_sandbox, without = (s.env or {} for s in started)
    assert with_sandbox["MOL_CATALOG_SANDBOX_URL"] == url
    assert with_sandbox["MOL_CATALOG_SANDBOX_TOKEN"] == keys.console
    assert not {k for k in without if k.startswith("MOL_CATALOG_SANDBOX")}
