"""Acceptance: catalog, real vLLM engine with the resolver plugin, and router, together.

One stack for the module, started by the code ``mol up`` runs (``start_stack``) from a
MoLDeployment written here: ``--max-loras 2 --max-cpu-loras 3``, prefix caching on,
a 50% canary on ``coding``. Adapters reach the engine only through the plugin, by
immutable name; temperature-0 references come from the same adapter files loaded
under another name with vLLM's own ``/v1/load_lora_adapter``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mol_platform.apps.demo.adapters import DEMO_ADAPTERS, AdapterRecipe, write_adapter
from mol_platform.apps.demo.model import DemoModelConfig
from mol_platform.apps.up.stack import Ports, start_stack
from mol_platform.apps.up.supervisor import Supervisor
from mol_platform.clients.catalog import CatalogClient
from mol_testkit.net import free_port

pytestmark = pytest.mark.e2e

PROMPT = "The router sends each request to"
CHAT = DEMO_ADAPTERS[0]
WIDE = AdapterRecipe("wide", 32, ("q_proj", "v_proj"))  # rank 32 > the profile's 16


@dataclass
class Stack:
    sup: Supervisor
    data_dir: Path
    catalog: str
    engine: str
    router: str
    base: Path  # the demo base model folder the engine serves

    def adapter(self, tmp: Path, name: str, seed: int, recipe: AdapterRecipe = CHAT) -> Path:
        return write_adapter(tmp / name, recipe, DemoModelConfig(), base_model=str(self.base),
                             seed=seed)

    def publish(self, folder: Path, adapter: str, alias: str | None = None) -> int:
        with CatalogClient(self.catalog) as client:
            return client.publish(folder, adapter, alias=alias).version


def spec_yaml(base_uri: str) -> dict[str, Any]:
    return {
        "apiVersion": "mol.dev/v1alpha1", "kind": "MoLDeployment",
        "metadata": {"name": "e2e", "namespace": "default"},
        "spec": {
            "baseModel": {"name": "tiny-llama", "uri": base_uri},
            "engine": {"maxLoras": 2, "maxLoraRank": 16, "maxCpuLoras": 3, "maxModelLen": 512,
                       "extraArgs": ["--enable-prefix-caching"]},
            "adapterNamespaces": ["demo", "e2e"],
            "experts": [
                {"name": "chat", "adapter": "demo/chat@stable"},
                {"name": "coding", "adapter": "demo/coding@stable",
                 "canary": {"adapter": "demo/coding@candidate", "steps": [50, 100]}},
            ],
            "router": {"mode": "explicit", "default": "chat"},
        },
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, engine_venv: Path) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("stack")
    spec_file = data_dir / "e2e.yaml"
    spec_file.write_text(yaml.safe_dump(spec_yaml(str(data_dir / "demo" / "tiny-llama"))))
    (data_dir / "logs").mkdir()
    ports = Ports(catalog=free_port(), engine=free_port(), router=free_port())
    sup = Supervisor()
    try:
        start_stack(sup, file=spec_file, host="127.0.0.1", ports=ports, data_dir=data_dir,
                    engine_venv=engine_venv)
        yield Stack(sup, data_dir, f"http://127.0.0.1:{ports.catalog}",
                    f"http://127.0.0.1:{ports.engine}", f"http://127.0.0.1:{ports.router}",
                    data_dir / "demo" / "tiny-llama")
    finally:
        sup.stop()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=120) as c:
        yield c


def complete(client: httpx.Client, url: str, model: str, *, user: str | None = None,
             max_tokens: int = 12) -> httpx.Response:
    body: dict[str, Any] = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                            "temperature": 0}
    if user is not None:
        body["user"] = user
    return client.post(f"{url}/v1/completions", json=body)


def text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["text"])


def reference(client: httpx.Client, stack: Stack, folder: Path) -> str:
    """The adapter's temperature-0 output, loaded by path without the plugin."""
    name = f"ref-{folder.name}"
    loaded = client.post(f"{stack.engine}/v1/load_lora_adapter",
                         json={"lora_name": name, "lora_path": str(folder)})
    assert loaded.status_code == 200, loaded.text
    try:
        return text(complete(client, stack.engine, name))
    finally:
        client.post(f"{stack.engine}/v1/unload_lora_adapter", json={"lora_name": name})


def test_moving_stable_serves_the_new_version_without_restart(
        stack: Stack, client: httpx.Client, tmp_path: Path) -> None:
    v1_dir, v2_dir = stack.adapter(tmp_path, "v1", 10), stack.adapter(tmp_path, "v2", 11)
    assert stack.publish(v1_dir, "e2e/flip", alias="stable") == 1
    first = complete(client, stack.router, "e2e/flip@stable")
    assert first.headers["x-mol-adapter-version"] == "e2e/flip@v1"
    v1_text = text(first)
    assert v1_text == reference(client, stack, v1_dir)
    assert stack.publish(v2_dir, "e2e/flip") == 2
    v2_ref = reference(client, stack, v2_dir)
    assert v2_ref != v1_text
    with CatalogClient(stack.catalog) as catalog:
        catalog.set_alias("e2e/flip", "stable", 2)
    deadline = time.monotonic() + 10
    while True:  # the router learns of the move from the catalog's event feed
        moved = complete(client, stack.router, "e2e/flip@stable")
        if moved.headers.get("x-mol-adapter-version") == "e2e/flip@v2":
            break
        assert time.monotonic() < deadline, "the router kept serving v1 after the alias moved"
        time.sleep(0.2)
    assert text(moved) == v2_ref  # same prompt, prefix caching on: nothing stale from v1


def test_canary_splits_half_of_the_traffic_sticky_per_user(
        stack: Stack, client: httpx.Client) -> None:
    seen: dict[str, str] = {}
    for i in range(40):
        r = complete(client, stack.router, "coding", user=f"user-{i}", max_tokens=1)
        assert r.status_code == 200, r.text
        seen[f"user-{i}"] = r.headers["x-mol-adapter-version"]
    versions = list(seen.values())
    assert set(versions) == {"demo/coding@v1", "demo/coding@v2"}
    assert 8 <= versions.count("demo/coding@v2") <= 32, versions  # ~50% of 40
    for user, version in list(seen.items())[:10]:  # the same user, the same side
        r = complete(client, stack.router, "coding", user=user, max_tokens=1)
        assert r.headers["x-mol-adapter-version"] == version


def test_incompatible_adapter_is_refused_and_others_keep_serving(
        stack: Stack, client: httpx.Client, tmp_path: Path) -> None:
    wide = stack.adapter(tmp_path, "wide", 12, WIDE)
    # ``candidate``: ``stable`` is protected and would not move to an incompatible version.
    assert stack.publish(wide, "e2e/wide", alias="candidate") == 1
    refused = complete(client, stack.router, "e2e/wide@candidate")
    assert refused.status_code == 422, refused.text
    assert "rank" in refused.text
    # Straight at the engine the plugin refuses it too (vLLM answers 404) and logs why.
    direct = complete(client, stack.engine, "e2e/wide@v1")
    assert direct.status_code == 404, direct.text
    log = (stack.data_dir / "logs" / "engine.log").read_text()
    assert "not serving 'e2e/wide@v1': incompatible with serving profile" in log
    assert text(complete(client, stack.router, "chat"))


def test_more_adapters_than_cpu_slots_all_answer_their_reference(
        stack: Stack, client: httpx.Client, tmp_path: Path) -> None:
    folders = {f"e2e/many-{i}": stack.adapter(tmp_path, f"many-{i}", 20 + i) for i in range(4)}
    refs = {name: reference(client, stack, folder) for name, folder in folders.items()}
    for name, folder in folders.items():
        stack.publish(folder, name, alias="stable")
    base = text(complete(client, stack.engine, "tiny-llama"))
    assert len(set(refs.values())) == 4
    assert base not in refs.values()
    for _round in range(2):  # 4 adapters over --max-cpu-loras 3: evicted and reloaded
        for name in folders:
            r = complete(client, stack.router, f"{name}@stable")
            assert r.headers["x-mol-adapter-version"] == f"{name}@v1"
            assert text(r) == refs[name], name


def test_restarted_engine_gets_adapters_back_on_first_use(
        stack: Stack, client: httpx.Client) -> None:
    before = text(complete(client, stack.router, "chat"))
    engine = next(s for s in stack.sup.services if s.name == "engine")
    assert engine.proc is not None
    os.killpg(engine.proc.pid, signal.SIGKILL)  # a crash: vLLM gets no chance to clean up
    stack.sup.restart("engine")
    listed = {m["id"] for m in client.get(f"{stack.engine}/v1/models").json()["data"]}
    assert "demo/chat@v1" not in listed  # a fresh engine knows no adapter
    deadline = time.monotonic() + 30
    while (r := complete(client, stack.router, "chat")).status_code != 200:
        assert time.monotonic() < deadline, r.text  # the router readmits the engine
        time.sleep(0.5)
    assert r.headers["x-mol-adapter-version"] == "demo/chat@v1"
    assert text(r) == before
