"""The simulator's OpenAI-compatible surface: shapes as vLLM 0.32 sends them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from mol_testkit.simulator import (
    REPLICA_HEADER,
    AsyncSimulatorCluster,
    SimConfig,
    chat_prompt,
    parse_sse,
    reply_text,
)

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
CONFIG = SimConfig(
    model="tiny",
    check_adapter_paths=False,
    lora_modules={"ns/a@v1": "/adapters/a"},
    output_tokens=6,
)


@pytest.fixture
async def sim() -> AsyncIterator[AsyncSimulatorCluster]:
    async with AsyncSimulatorCluster(config=CONFIG) as cluster:
        yield cluster


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post(http: aiohttp.ClientSession, url: str, body: object) -> tuple[int, Any]:
    async with http.post(url, json=body) as resp:
        if resp.content_type == "application/json":
            return resp.status, await resp.json()
        return resp.status, await resp.text()


async def test_chat_whole_response_says_which_adapter_answered(sim, http):
    url = sim.urls[0] + "/v1/chat/completions"
    async with http.post(url, json={"model": "ns/a@v1", "messages": MESSAGES}) as resp:
        assert resp.status == 200
        assert resp.headers[REPLICA_HEADER] == "sim-0"
        body = await resp.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "ns/a@v1"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == reply_text("ns/a@v1", chat_prompt(MESSAGES), 6)
    assert "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "stop"
    assert body["usage"] == {
        "prompt_tokens": 6,  # words of "system: be brief\nuser: hello there"
        "completion_tokens": 6,
        "total_tokens": 12,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
    _, base = await post(http, url, {"model": "tiny", "messages": MESSAGES})
    assert base["model"] == "tiny"
    assert base["choices"][0]["message"]["content"] != choice["message"]["content"]
    _, again = await post(http, url, {"model": "ns/a@v1", "messages": MESSAGES})
    assert again["choices"][0]["message"]["content"] == choice["message"]["content"]


async def test_model_defaults_to_base_model(sim, http):
    status, body = await post(http, sim.urls[0] + "/v1/chat/completions", {"messages": MESSAGES})
    assert status == 200
    assert body["model"] == "tiny"


async def test_completions_whole_and_max_tokens(sim, http):
    url = sim.urls[0] + "/v1/completions"
    status, body = await post(http, url, {"model": "ns/a@v1", "prompt": "one two three"})
    assert status == 200
    assert body["object"] == "text_completion"
    assert body["id"].startswith("cmpl-")
    assert body["choices"][0]["text"] == reply_text("ns/a@v1", "one two three", 6)
    assert body["usage"]["prompt_tokens"] == 3
    _, short = await post(
        http, url, {"model": "ns/a@v1", "prompt": "one two three", "max_tokens": 2}
    )
    assert short["choices"][0]["text"] == reply_text("ns/a@v1", "one two three", 2)
    assert short["choices"][0]["finish_reason"] == "length"
    assert short["usage"]["completion_tokens"] == 2


async def test_chat_stream_has_vllm_chunk_shapes(sim, http):
    url = sim.urls[0] + "/v1/chat/completions"
    body = {
        "model": "ns/a@v1",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with http.post(url, json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = parse_sse(await resp.text())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "ns/a@v1" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    usage = chunks[-1]
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 6, "completion_tokens": 6, "total_tokens": 12}
    content = chunks[1:-1]
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 5 + ["stop"]
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    assert text == reply_text("ns/a@v1", chat_prompt(MESSAGES), 6)


async def test_completions_stream_without_usage(sim, http):
    url = sim.urls[0] + "/v1/completions"
    body = {"model": "tiny", "prompt": "abc", "stream": True, "max_tokens": 3}
    async with http.post(url, json=body) as resp:
        events = parse_sse(await resp.text())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all("usage" not in c for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "length"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == reply_text("tiny", "abc", 3)


async def test_unknown_model_is_404_with_vllm_error_shape(sim, http):
    url = sim.urls[0] + "/v1/chat/completions"
    status, body = await post(http, url, {"model": "ns/nope@v1", "messages": MESSAGES})
    assert status == 404
    assert body == {
        "error": {
            "message": "The model `ns/nope@v1` does not exist. Valid aliases: tiny.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }


async def test_dynamic_loras_accepts_any_name_and_lists_it(http):
    async with AsyncSimulatorCluster(config=SimConfig(model="tiny", dynamic_loras=True)) as sim:
        url = sim.urls[0]
        status, body = await post(
            http, url + "/v1/chat/completions", {"model": "ns/x@v3", "messages": MESSAGES}
        )
        assert status == 200
        assert body["model"] == "ns/x@v3"
        async with http.get(url + "/v1/models") as resp:
            models = await resp.json()
    ids = {m["id"]: m for m in models["data"]}
    assert ids["ns/x@v3"]["parent"] == "tiny"
    assert sim.state().registered == {"ns/x@v3": "/sim/lora-cache/ns/x@v3"}


async def test_models_lists_base_then_adapters_with_parent(sim, http):
    async with http.get(sim.urls[0] + "/v1/models") as resp:
        body = await resp.json()
    assert body["object"] == "list"
    base, adapter = body["data"]
    assert (base["id"], base["parent"], base["root"], base["max_model_len"]) == (
        "tiny", None, "tiny", 2048,
    )  # fmt: skip
    assert (adapter["id"], adapter["parent"], adapter["root"]) == ("ns/a@v1", "tiny", "/adapters/a")
    assert adapter["owned_by"] == "vllm"


async def test_load_and_unload_adapter_status_codes(sim, http):
    url = sim.urls[0]
    load, unload = url + "/v1/load_lora_adapter", url + "/v1/unload_lora_adapter"
    status, text = await post(http, load, {"lora_name": "ns/b@v1", "lora_path": "/b"})
    assert (status, text) == (200, "Success: LoRA adapter 'ns/b@v1' added successfully.")
    status, err = await post(http, load, {"lora_name": "ns/b@v1", "lora_path": "/b2"})
    assert status == 400
    assert err["error"]["type"] == "InvalidUserInput"
    assert "load_inplace" in err["error"]["message"]
    status, _ = await post(
        http, load, {"lora_name": "ns/b@v1", "lora_path": "/b2", "load_inplace": True}
    )
    assert status == 200
    assert sim.state().registered["ns/b@v1"] == "/b2"
    status, err = await post(http, load, {"lora_name": "tiny", "lora_path": "/x"})
    assert status == 400
    assert "conflicts with a served base model" in err["error"]["message"]
    status, err = await post(http, load, {"lora_name": "ns/c@v1"})
    assert status == 400
    assert (err["error"]["type"], err["error"]["param"]) == ("Bad Request", "body.lora_path")
    assert "Field required" in err["error"]["message"]
    status, err = await post(http, load, {"lora_name": "ns/c@v1", "lora_path": ""})
    assert status == 400
    assert err["error"]["message"] == "Both 'lora_name' and 'lora_path' must be provided."
    status, text = await post(http, unload, {"lora_name": "ns/b@v1"})
    assert (status, text) == (200, "Success: LoRA adapter 'ns/b@v1' removed successfully.")
    status, err = await post(http, unload, {"lora_name": "ns/b@v1"})
    assert status == 404
    assert err["error"] == {
        "message": "The lora adapter 'ns/b@v1' cannot be found.",
        "type": "NotFoundError",
        "param": None,
        "code": 404,
    }
    status, _ = await post(
        http, url + "/v1/chat/completions", {"model": "ns/b@v1", "messages": MESSAGES}
    )
    assert status == 404


async def test_bad_requests_get_400_with_a_reason(sim, http):
    url = sim.urls[0] + "/v1/chat/completions"
    async with http.post(url, data=b"{not json", headers={"Content-Type": "application/json"}) as r:
        assert r.status == 400
        error = (await r.json())["error"]
        assert (error["type"], error["param"]) == ("Bad Request", "body.1")
        assert "JSON decode error" in error["message"]
    status, body = await post(http, url, {"model": "tiny", "messages": "hi"})
    assert status == 400
    assert (body["error"]["type"], body["error"]["param"]) == ("Bad Request", "body.messages")
    assert "Input should be a valid list" in body["error"]["message"]
    status, body = await post(http, url, {"messages": MESSAGES, "max_tokens": 0})
    assert status == 400
    assert body["error"]["param"] == "max_tokens"
    status, body = await post(http, sim.urls[0] + "/v1/completions", {"prompt": ["a", "b"]})
    assert status == 400
    assert "one prompt per request" in body["error"]["message"]


async def test_structured_output_choice_answers_one_of_the_choices(sim, http):
    url = sim.urls[0] + "/v1/chat/completions"
    choices = ["chat", "agent", "coding", "ui"]
    answers = set()
    for i in range(12):
        body = {
            "model": "ns/a@v1",
            "messages": [{"role": "user", "content": f"question {i}"}],
            "structured_outputs": {"choice": choices},
        }
        _, resp = await post(http, url, body)
        answers.add(resp["choices"][0]["message"]["content"])
    assert answers <= set(choices)
    assert len(answers) > 1  # deterministic per prompt, but not constant


async def test_health_and_request_records(sim, http):
    async with http.get(sim.urls[0] + "/health") as resp:
        assert resp.status == 200
    async with http.post(
        sim.urls[0] + "/v1/chat/completions",
        json={"model": "ns/a@v1", "messages": MESSAGES, "user": "u1"},
        headers={"x-request-id": "req-7"},
    ) as resp:
        assert resp.status == 200
    state = sim.state()
    assert state.requests_by_model == {"ns/a@v1": 1}
    (received,) = state.received
    assert received.path == "/v1/chat/completions"
    assert received.body["user"] == "u1"
    assert received.headers["x-request-id"] == "req-7"


async def test_embeddings_are_deterministic_unit_vectors_of_the_words() -> None:
    from mol_testkit.simulator.embeddings import DIMS, vector
    async with AsyncSimulatorCluster(replicas=1) as sims, aiohttp.ClientSession() as http:
        async with http.post(sims.urls[0] + "/v1/embeddings", json={
                "model": "any", "input": ["fix the code", "Fix THE code!", ""]}) as r:
            assert r.status == 200
            data = (await r.json())["data"]
        async with http.post(sims.urls[0] + "/v1/embeddings",
                             json={"model": "any", "input": [3]}) as bad:
            assert bad.status == 400
    a, b, empty = (d["embedding"] for d in data)
    assert a == b == vector("fix the code")  # words, case-insensitive
    assert len(a) == DIMS
    assert abs(sum(v * v for v in a) - 1.0) < 1e-9
    assert empty[0] == 1.0


async def test_embeddings_answer_base64_float32_when_asked() -> None:
    """``encoding_format: base64`` (what the router asks for) is the same vector as
    little-endian float32 bytes; another encoding is a 400."""
    import base64
    import struct

    from mol_testkit.simulator.embeddings import DIMS, vector
    async with AsyncSimulatorCluster(replicas=1) as sims, aiohttp.ClientSession() as http:
        async with http.post(sims.urls[0] + "/v1/embeddings", json={
                "model": "any", "input": "fix the code", "encoding_format": "base64"}) as r:
            assert r.status == 200
            (item,) = (await r.json())["data"]
        async with http.post(sims.urls[0] + "/v1/embeddings", json={
                "model": "any", "input": "x", "encoding_format": "int8"}) as bad:
            assert bad.status == 400
    got = struct.unpack(f"<{DIMS}f", base64.b64decode(item["embedding"]))
    assert [round(v, 6) for v in got] == [round(v, 6) for v in vector("fix the code")]
