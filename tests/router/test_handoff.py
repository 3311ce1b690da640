"""Handoff: the expert calls the ``handoff`` tool (scripted on the simulator), the
router continues the same request with the target expert; one response, streamed or
whole; maxHops enforced; counted in mol_router_handoffs_total."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig, parse_sse

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=5)
ASK = {"messages": [{"role": "user", "content": "please write a parser"}], "model": "chat"}
TO_CODING = {"expert": "coding", "summary": "wants a parser in Python"}


def _offered_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    for tool in body.get("tools") or ():
        if tool["function"]["name"] == "handoff":
            return dict(tool["function"])
    return None


@pytest.mark.parametrize("stream", [False, True])
async def test_handoff_continues_with_the_target_expert(
        stream: bool, router_config: Any, start_router: Any, ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(sims.urls, handoff_enabled=True, handoff_max_hops=2)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            sims.script_tool_call("demo/chat@v1", "handoff", TO_CODING, times=1)
            body = {**ASK, "stream": stream}
            if stream:
                body["stream_options"] = {"include_usage": True}
            async with http.post(router.url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                raw = await resp.text()
                headers = resp.headers
            metrics = await (await http.get(router.url + "/metrics")).text()
        received = sims.state(0).received
    first: dict[str, Any] = received[0].body
    second: dict[str, Any] = received[1].body
    assert first["model"] == "demo/chat@v1"
    tool = _offered_tool(first)
    assert tool is not None
    assert tool["parameters"]["properties"]["expert"]["enum"] == ["coding"]
    assert second["model"] == "demo/coding@v1"
    assert "wants a parser in Python" in second["messages"][0]["content"]
    assert second["messages"][0]["role"] == "system"
    assert 'mol_router_handoffs_total{deployment="demo",from="chat",to="coding"} 1.0' in metrics
    if stream:
        events = parse_sse(raw)
        assert events[-1] == "[DONE]"
        chunks = [e for e in events if e != "[DONE]"]
        # One continuous response: one id, no tool call shown, the coder's text.
        assert len({c["id"] for c in chunks}) == 1
        assert not any(c["choices"] and c["choices"][0]["delta"].get("tool_calls")
                       for c in chunks)
        assert [c["choices"][0]["finish_reason"] for c in chunks
                if c["choices"] and c["choices"][0]["finish_reason"]] == ["stop"]
        assert chunks[-1]["usage"]["completion_tokens"] > 0  # merged over both hops
        assert ": mol-handoff chat>coding" in raw
        assert headers["x-mol-expert"] == "chat"  # headers left before the hop
    else:
        import json

        answer = json.loads(raw)
        assert answer["model"] == "demo/coding@v1"
        assert answer["choices"][0]["message"]["content"]
        assert not answer["choices"][0]["message"].get("tool_calls")
        assert headers["x-mol-expert"] == "coding"
        assert headers["x-mol-handoffs"] == "chat>coding"


async def test_max_hops_stops_offering_the_tool(router_config: Any, start_router: Any,
                                               ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(sims.urls, handoff_enabled=True, handoff_max_hops=1)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            sims.script_tool_call("demo/chat@v1", "handoff", TO_CODING)
            sims.script_tool_call("demo/coding@v1", "handoff",
                                  {"expert": "chat", "summary": "back"})
            async with http.post(router.url + "/v1/chat/completions", json=ASK) as resp:
                assert resp.status == 200
                answer = await resp.json()
        received = sims.state(0).received
    assert len(received) == 2  # chat -> coding, then no more offers
    assert _offered_tool(received[1].body) is None
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["model"] == "demo/coding@v1"


async def test_invalid_handoff_is_shown_to_the_client(router_config: Any, start_router: Any,
                                                     ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(sims.urls, handoff_enabled=True)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            sims.script_tool_call("demo/chat@v1", "handoff", {"expert": "nobody"}, times=1)
            async with http.post(router.url + "/v1/chat/completions",
                                 json={**ASK, "stream": True}) as resp:
                events = parse_sse(await resp.text())
        assert len(sims.state(0).received) == 1
    calls = [c for e in events if e != "[DONE]" and e["choices"]
             for c in e["choices"][0]["delta"].get("tool_calls") or ()]
    assert calls
    assert calls[0]["function"]["name"] == "handoff"
    assert events[-1] == "[DONE]"
