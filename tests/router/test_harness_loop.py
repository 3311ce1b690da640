"""The code interpreter through the router: the simulator's model calls ``python``
(scripted), the real sandbox service (bubblewrap, on loopback) runs it, and the router
carries the session across requests, per tenant, within its limits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mol_sandbox.settings import SandboxSettings
from mol_testkit.net import free_port
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig, parse_sse
from tests.sandbox.conftest import AUTH_A, AUTH_B, Sandbox, running, tokens_file

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=4)
CHAT = "demo/chat@v1"
ASK: dict[str, Any] = {"model": "chat", "tools": [{"type": "code_interpreter"}],
                       "messages": [{"role": "user", "content": "what is 6 * 7?"}]}
URL = "/v1/chat/completions"


def _settings(tmp_path: Path, idle_ttl: float = 300.0) -> SandboxSettings:
    return SandboxSettings(port=free_port(), tokens_file=tokens_file(tmp_path),
                           call_timeout=10.0, idle_ttl=idle_ttl, reap_interval=0.1)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    with running(_settings(tmp_path)) as sb:
        yield sb


def _config(router_config: Any, urls: list[str], tmp_path: Path, sandbox_url: str,
            **harness: Any) -> Any:
    """chat has the harness, coding not; the router's keys file is the sandbox's."""
    cfg = router_config(urls, api_keys_file=str(tokens_file(tmp_path)),
                        harness={"sandbox_url": sandbox_url, **harness})
    experts = [e.model_copy(update={"harness": e.name == "chat"}) for e in cfg.experts]
    return cfg.model_copy(update={"experts": experts})


def _script(sims: AsyncSimulatorCluster, *codes: str) -> None:
    """The model's python calls, in the order it makes them (rules match newest first)."""
    for code in reversed(codes):
        sims.script_tool_call(CHAT, "python", {"code": code}, times=1)


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any],
                headers: dict[str, str]) -> tuple[int, Any, Any]:
    async with http.post(url + URL, json=body, headers=headers) as resp:
        raw = await resp.text()
        return resp.status, raw, resp.headers


async def test_state_follows_the_session_across_requests_and_tenants(
        sandbox: Sandbox, router_config: Any, start_router: Any, ready: Any,
        tmp_path: Path) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = _config(router_config, sims.urls, tmp_path, sandbox.url)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            _script(sims, "x = 41")
            status, raw, headers = await _post(http, router.url, ASK, AUTH_A)
            assert status == 200, raw
            first = json.loads(raw)
            session = headers["x-mol-session"]
            assert [s["outcome"] for s in first["mol_steps"]] == ["ok"]
            assert first["mol_steps"][0]["session"] == session
            assert first["choices"][0]["finish_reason"] == "stop"
            assert first["usage"]["completion_tokens"] > 4  # both hops counted

            _script(sims, "y = 1", "z = 2", "print(x + y)")
            status, raw, headers = await _post(http, router.url, ASK,
                                               {**AUTH_A, "x-mol-session": session})
            assert status == 200, raw
            steps = json.loads(raw)["mol_steps"]
            assert [s["code"] for s in steps] == ["y = 1", "z = 2", "print(x + y)"]
            assert steps[2]["stdout"] == "42\n"
            assert headers["x-mol-session"] == session

            # another tenant holding the id: unknown, before any engine call
            sent = len(sims.state(0).received)
            status, raw, _ = await _post(http, router.url, ASK,
                                         {**AUTH_B, "x-mol-session": session})
            assert status == 404, raw
            assert json.loads(raw)["error"]["code"] == "session_not_found"
            assert len(sims.state(0).received) == sent

            for headers, body, code in (
                    ({**AUTH_A, "x-mol-session": session + "!"}, ASK, "invalid_session"),
                    ({**AUTH_A, "x-mol-session": "a" * 200}, ASK, "invalid_session"),
                    (AUTH_A, {**ASK, "model": "coding"}, "harness_unavailable")):
                status, raw, _ = await _post(http, router.url, body, headers)
                assert status == 400, raw
                assert json.loads(raw)["error"]["code"] == code
            metrics = await (await http.get(router.url + "/metrics")).text()
        received = sims.state(0).received
    second_hop: dict[str, Any] = received[1].body
    assert [t["function"]["name"] for t in second_hop["tools"]] == ["python"]
    assert second_hop["messages"][-2]["tool_calls"][0]["function"]["name"] == "python"
    assert second_hop["messages"][-1]["role"] == "tool"
    assert ('mol_router_harness_steps_total{deployment="demo",expert="chat",outcome="ok"} '
            '4.0') in metrics
    assert 'mol_router_harness_step_duration_seconds_count{deployment="demo",expert="chat"}' \
        in metrics


async def test_step_limit_stops_a_model_that_always_calls_python(
        sandbox: Sandbox, router_config: Any, start_router: Any, ready: Any,
        tmp_path: Path) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = _config(router_config, sims.urls, tmp_path, sandbox.url, max_steps=2)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            sims.script_tool_call(CHAT, "python", {"code": "print('again')"})
            status, raw, _ = await _post(http, router.url, ASK, AUTH_A)
            metrics = await (await http.get(router.url + "/metrics")).text()
        assert len(sims.state(0).received) == 3
    assert status == 200, raw
    answer = json.loads(raw)
    assert [s["outcome"] for s in answer["mol_steps"]] == ["ok", "ok", "limit"]
    assert answer["mol_stop"] == "step_limit"
    assert "limit of 2 steps" in answer["choices"][0]["message"]["content"]
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert 'outcome="limit"} 1.0' in metrics


async def test_a_stream_shows_the_code_and_what_it_printed(
        sandbox: Sandbox, router_config: Any, start_router: Any, ready: Any,
        tmp_path: Path) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = _config(router_config, sims.urls, tmp_path, sandbox.url)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            _script(sims, "print(6 * 7)", "print('second')")
            body = {**ASK, "stream": True, "stream_options": {"include_usage": True}}
            status, raw, _ = await _post(http, router.url, body, AUTH_A)
    assert status == 200, raw
    events = parse_sse(raw)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if e != "[DONE]"]
    assert len({c["id"] for c in chunks}) == 1
    calls = [tc for c in chunks if c["choices"]
             for tc in c["choices"][0]["delta"].get("tool_calls") or ()]
    assert {tc["index"] for tc in calls} == {0, 1}  # each step its own call
    code = "".join(tc["function"].get("arguments", "") for tc in calls if tc["index"] == 0)
    assert json.loads(code) == {"code": "print(6 * 7)"}
    tools = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("role") == "tool"]
    assert [t["choices"][0]["delta"]["content"] for t in tools] == ["42", "second"]
    assert tools[0]["mol_step"]["stdout"] == "42\n"
    assert tools[0]["mol_step"]["session"] == tools[1]["mol_step"]["session"]
    assert [c["choices"][0]["finish_reason"] for c in chunks
            if c["choices"] and c["choices"][0]["finish_reason"]] == ["stop"]
    assert chunks[-1]["usage"]["completion_tokens"] > 0


async def test_a_reaped_session_is_made_anew_and_said(
        router_config: Any, start_router: Any, ready: Any, tmp_path: Path) -> None:
    with running(_settings(tmp_path, idle_ttl=1.0)) as sandbox:
        async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
            cfg = _config(router_config, sims.urls, tmp_path, sandbox.url)
            async with start_router(cfg) as router, aiohttp.ClientSession() as http:
                await ready(router)
                _script(sims, "x = 1")
                _, _, headers = await _post(http, router.url, ASK, AUTH_A)
                old = headers["x-mol-session"]
                await asyncio.sleep(1.6)  # idle past the sandbox's 1 s time-to-live
                _script(sims, "'x' in globals()")
                status, raw, headers = await _post(http, router.url, ASK,
                                                   {**AUTH_A, "x-mol-session": old})
    assert status == 200, raw
    step = json.loads(raw)["mol_steps"][0]
    assert step["result"] == "False"
    assert "expired" in step["notice"]
    assert step["session"] != old
    assert headers["x-mol-session"] == step["session"]


async def test_an_unreachable_sandbox_is_a_step_the_model_reads(
        router_config: Any, start_router: Any, ready: Any, tmp_path: Path) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = _config(router_config, sims.urls, tmp_path, f"http://127.0.0.1:{free_port()}")
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            _script(sims, "1 + 1")
            status, raw, headers = await _post(http, router.url, ASK, AUTH_A)
            metrics = await (await http.get(router.url + "/metrics")).text()
        sent: dict[str, Any] = sims.state(0).received[1].body
    tool_message = sent["messages"][-1]
    assert status == 200, raw
    answer = json.loads(raw)
    assert answer["mol_steps"][0]["outcome"] == "sandbox_unavailable"
    assert answer["choices"][0]["message"]["content"]
    assert "x-mol-session" not in headers
    assert "sandbox is unavailable" in tool_message["content"]
    assert 'outcome="sandbox_unavailable"} 1.0' in metrics
