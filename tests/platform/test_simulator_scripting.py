"""Scripted tool calls, texts and failures, from Python and over HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig, parse_sse

HANDOFF_TOOL = {
    "type": "function",
    "function": {
        "name": "handoff",
        "parameters": {
            "type": "object",
            "properties": {"expert": {"type": "string"}, "summary": {"type": "string"}},
        },
    },
}
ARGS = {"expert": "coding", "summary": "user wants a parser"}


def chat_body(model: str, *, stream: bool = False, tools: bool = True,
              text: str = "hi") -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": text}]}
    if tools:
        body["tools"] = [HANDOFF_TOOL]
    if stream:
        body["stream"] = True
    return body


@pytest.fixture
async def sim() -> AsyncIterator[AsyncSimulatorCluster]:
    config = SimConfig(model="tiny", dynamic_loras=True, output_tokens=5)
    async with AsyncSimulatorCluster(config=config) as cluster:
        yield cluster


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def chat(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        if body.get("stream") and resp.status == 200:
            return resp.status, parse_sse(await resp.text())
        return resp.status, await resp.json()


async def test_whole_response_tool_call(sim, http):
    sim.script_tool_call("ns/chat@v1", "handoff", ARGS, call_id="call-1")
    status, body = await chat(http, sim.urls[0], chat_body("ns/chat@v1"))
    assert status == 200
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["id"] == "call-1"
    assert call["type"] == "function"
    assert call["function"]["name"] == "handoff"
    assert json.loads(call["function"]["arguments"]) == ARGS
    assert body["usage"]["completion_tokens"] > 0


async def test_streamed_tool_call_deltas(sim, http):
    sim.script_tool_call("ns/chat@v1", "handoff", ARGS)
    status, events = await chat(http, sim.urls[0], chat_body("ns/chat@v1", stream=True))
    assert status == 200
    assert events[-1] == "[DONE]"
    deltas = [e["choices"][0]["delta"] for e in events[:-1]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert all(d["content"] is None for d in deltas[1:-1])  # set explicitly, as vLLM does
    head = deltas[1]["tool_calls"][0]
    assert head["index"] == 0
    assert head["type"] == "function"
    assert head["id"].startswith("chatcmpl-tool-")
    assert head["function"] == {"name": "handoff"}
    pieces = [d["tool_calls"][0] for d in deltas[2:] if "tool_calls" in d]
    assert len(pieces) > 1  # arguments arrive in fragments
    assert all(set(p) == {"index", "function"} for p in pieces)
    assert json.loads("".join(p["function"]["arguments"] for p in pieces)) == ARGS
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"


async def test_tool_call_needs_the_tool_offered_and_times_are_counted(sim, http):
    sim.script_tool_call(None, "handoff", ARGS, times=1)
    _, plain = await chat(http, sim.urls[0], chat_body("ns/chat@v1", tools=False))
    assert plain["choices"][0]["finish_reason"] == "stop"  # not offered: ordinary text
    _, called = await chat(http, sim.urls[0], chat_body("ns/chat@v1"))
    assert called["choices"][0]["finish_reason"] == "tool_calls"
    _, after = await chat(http, sim.urls[0], chat_body("ns/chat@v1"))
    assert after["choices"][0]["finish_reason"] == "stop"  # used up


async def test_rules_match_on_model_and_prompt(sim, http):
    sim.script_text("ns/classifier@v1", "coding", when_prompt_contains="parser")
    _, hit = await chat(http, sim.urls[0], chat_body("ns/classifier@v1", text="write a parser"))
    assert hit["choices"][0]["message"]["content"] == "coding"
    _, miss = await chat(http, sim.urls[0], chat_body("ns/classifier@v1", text="hello"))
    assert miss["choices"][0]["message"]["content"] != "coding"
    _, other = await chat(http, sim.urls[0], chat_body("ns/other@v1", text="write a parser"))
    assert other["choices"][0]["message"]["content"] != "coding"


async def test_scripting_over_http(sim, http):
    url = sim.urls[0]
    rule = {"model": "ns/chat@v1", "tool_call": {"name": "handoff", "arguments": ARGS}}
    async with http.post(url + "/sim/script", json=rule) as resp:
        assert resp.status == 201
        assert (await resp.json())["id"] >= 1
    async with http.get(url + "/sim/script") as resp:
        assert (await resp.json())["rules"][0]["tool_call"]["name"] == "handoff"
    _, body = await chat(http, url, chat_body("ns/chat@v1"))
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "handoff"
    async with http.delete(url + "/sim/script") as resp:
        assert resp.status == 200
    _, body = await chat(http, url, chat_body("ns/chat@v1"))
    assert body["choices"][0]["finish_reason"] == "stop"
    bad = {"model": "x", "text": "a", "failure": {"status": 500}}
    async with http.post(url + "/sim/script", json=bad) as resp:
        assert resp.status == 400
        assert "exactly one of" in (await resp.json())["error"]["message"]
    async with http.post(url + "/sim/script", json={"failure": {"status": 299}}) as resp:
        assert resp.status == 400


async def test_scripted_error_status(sim, http):
    sim.script_failure("ns/chat@v1", status=500, times=1)
    status, body = await chat(http, sim.urls[0], chat_body("ns/chat@v1"))
    assert status == 500
    assert body["error"]["type"] == "InternalServerError"
    assert body["error"]["code"] == 500
    status, _ = await chat(http, sim.urls[0], chat_body("ns/chat@v1"))
    assert status == 200


async def test_scripted_disconnect_before_answer(sim, http):
    sim.script_failure("ns/chat@v1", disconnect=True)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await chat(http, sim.urls[0], chat_body("ns/chat@v1"))
    status, _ = await chat(http, sim.urls[0], chat_body("ns/other@v1"))
    assert status == 200


async def test_scripted_disconnect_mid_stream(sim, http):
    sim.script_failure("ns/chat@v1", disconnect=True, after_tokens=2)
    url = sim.urls[0] + "/v1/chat/completions"
    received: list[bytes] = []

    async def read_stream() -> None:
        async with http.post(url, json=chat_body("ns/chat@v1", stream=True)) as resp:
            assert resp.status == 200
            async for chunk in resp.content.iter_any():
                received.append(chunk)

    with pytest.raises(aiohttp.ClientPayloadError):
        await read_stream()
    events = parse_sse(b"".join(received).decode())
    assert len(events) == 3  # role chunk and two tokens, then the connection closed
    assert "[DONE]" not in events
    assert sim.state().finished_by_reason == {"abort": 1}
