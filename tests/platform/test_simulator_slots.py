"""The simulator's engine model: LoRA slots, load time, batch capacity, vLLM metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mol_testkit.simulator import (
    AsyncSimulatorCluster,
    SimConfig,
    newest_lora_info,
)
from mol_testkit.simulator.model import SlotEngine


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def until(condition: Callable[[], bool], limit_s: float = 3.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)


async def chat(http: aiohttp.ClientSession, url: str, model: str) -> float:
    """Send one chat request; return the time it completed."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        await resp.read()
    return time.monotonic()


async def metrics(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url + "/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    wanted = {"model_name": "tiny", "engine": "0", **labels}
    return samples(text)[(name, frozenset(wanted.items()))]


async def test_second_adapter_waits_for_the_only_slot(http):
    config = SimConfig(
        model="tiny", check_adapter_paths=False, lora_modules={"a": "/a", "b": "/b"},
        max_loras=1, itl_s=0.02, output_tokens=8,
    )  # fmt: skip
    async with AsyncSimulatorCluster(config=config) as sim:
        url = sim.urls[0]
        first = asyncio.create_task(chat(http, url, "a"))
        await until(lambda: sim.state().running == 1)
        second = asyncio.create_task(chat(http, url, "b"))
        await until(lambda: sim.state().waiting == 1)
        busy = await metrics(http, url)
        assert value(busy, "vllm:num_requests_running") == 1
        assert value(busy, "vllm:num_requests_waiting") == 1
        assert value(busy, "vllm:num_requests_waiting_by_reason", reason="deferred") == 1
        assert newest_lora_info(busy) == {  # like vLLM: "b" waits, so only "a" is listed
            "max_lora": "1",
            "running_lora_adapters": "a",
            "waiting_lora_adapters": "a",
        }
        assert sim.state().waiting_deferred == 1
        done_a, done_b = await asyncio.gather(first, second)
        assert done_b - done_a >= 0.1  # b ran only after a left the slot
        idle = await metrics(http, url)
        state = sim.state()
    assert newest_lora_info(idle) == {
        "max_lora": "1", "running_lora_adapters": "", "waiting_lora_adapters": "",
    }  # fmt: skip
    stale = {
        dict(k[1])["running_lora_adapters"]
        for k in samples(idle) if k[0] == "vllm:lora_requests_info"
    }  # fmt: skip
    assert {"a", "b", ""} <= stale  # earlier label sets stay, like vLLM's gauge
    assert value(idle, "vllm:num_requests_waiting") == 0
    assert state.gpu_slots == ["b"]
    assert state.slot_loads == {"a": 1, "b": 1}
    assert state.finished_by_reason == {"stop": 2}


async def test_adapter_load_time_is_paid_once_per_slot_entry(http):
    config = SimConfig(
        model="tiny", check_adapter_paths=False, lora_modules={"a": "/a"}, lora_load_s=0.3
    )
    async with AsyncSimulatorCluster(config=config) as sim:
        url = sim.urls[0]
        start = time.monotonic()
        ends = await asyncio.gather(chat(http, url, "a"), chat(http, url, "a"))
        assert min(ends) - start >= 0.3  # both waited for the same load
        start = time.monotonic()
        await chat(http, url, "a")
        assert time.monotonic() - start < 0.2  # already in its slot
        base_start = time.monotonic()
        await chat(http, url, "tiny")
        assert time.monotonic() - base_start < 0.2
        assert sim.state().slot_loads == {"a": 1}


async def test_least_recently_used_idle_adapter_is_evicted(http):
    config = SimConfig(
        model="tiny",
        check_adapter_paths=False,
        lora_modules={n: f"/{n}" for n in "abc"},
        max_loras=2,
    )
    async with AsyncSimulatorCluster(config=config) as sim:
        url = sim.urls[0]
        for model in ["a", "b", "a", "c"]:
            await chat(http, url, model)
        assert sim.state().gpu_slots == ["a", "c"]
        await chat(http, url, "b")
        state = sim.state()
    assert state.gpu_slots == ["c", "b"]
    assert state.slot_loads == {"a": 1, "b": 2, "c": 1}


async def test_batch_capacity_makes_requests_wait(http):
    config = SimConfig(
        model="tiny", max_num_seqs=2, itl_s=0.02, output_tokens=6, block_size=4,
        kv_cache_blocks=11,
    )  # fmt: skip
    async with AsyncSimulatorCluster(config=config) as sim:
        url = sim.urls[0]
        tasks = [asyncio.create_task(chat(http, url, "tiny")) for _ in range(3)]
        await until(lambda: sim.state().waiting == 1)
        text = await metrics(http, url)
        assert value(text, "vllm:num_requests_running") == 2
        assert value(text, "vllm:num_requests_waiting_by_reason", reason="capacity") == 1
        # Two running requests of 2 + 6 tokens hold 1 or 2 of the 10 usable blocks each.
        assert 0.2 <= value(text, "vllm:kv_cache_usage_perc") <= 0.4
        await asyncio.gather(*tasks)
        info = newest_lora_info(await metrics(http, url))
        assert info is not None
        assert info["running_lora_adapters"] == ""


async def test_metric_names_and_labels_match_vllm(http):
    config = SimConfig(
        model="tiny",
        check_adapter_paths=False,
        lora_modules={"a": "/a"},
        max_loras=3,
        output_tokens=4,
    )
    async with AsyncSimulatorCluster(config=config) as sim:
        before = await metrics(http, sim.urls[0])
        await chat(http, sim.urls[0], "a")
        after = await metrics(http, sim.urls[0])
    assert newest_lora_info(before) is None  # vLLM writes it from the first request on
    families = {f.name: f for f in text_string_to_metric_families(after)}
    per_engine = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
    }
    for name, kind in per_engine.items():
        assert families[name].type == kind, name
        for sample in families[name].samples:
            assert sample.labels.get("model_name") == "tiny", name
            assert sample.labels.get("engine") == "0", name
    lora = families["vllm:lora_requests_info"]
    assert lora.type == "gauge"
    for sample in lora.samples:
        assert set(sample.labels) == {"max_lora", "waiting_lora_adapters", "running_lora_adapters"}
        assert sample.labels["max_lora"] == "3"
        assert abs(sample.value - time.time()) < 60  # a timestamp
    assert value(after, "vllm:generation_tokens_total") == 4
    assert value(after, "vllm:prompt_tokens_total") == 2
    assert value(after, "vllm:request_success_total", finished_reason="stop") == 1
    assert value(after, "vllm:time_to_first_token_seconds_count") == 1


def _state(request: Any) -> str:
    """Read afresh: a comparison would otherwise narrow the attribute for mypy."""
    return str(request.state)


async def test_scheduler_lets_requests_on_running_adapters_overtake():
    engine = SlotEngine(
        SimConfig(
            model="tiny",
            check_adapter_paths=False,
            lora_modules={"a": "/a", "b": "/b"},
            max_loras=1,
        )
    )
    first = engine.submit("a", "a")
    blocked = engine.submit("b", "b")
    overtaking = engine.submit("a", "a")
    assert (first.state, blocked.state, overtaking.state) == ("running", "waiting", "running")
    assert engine.snapshot().active_adapters == []  # none has produced a token yet
    engine.token(overtaking)
    engine.token(first)
    assert engine.snapshot().active_adapters == ["a"]
    engine.finish(first, "stop")
    assert _state(blocked) == "waiting"  # "a" still runs
    engine.finish(overtaking, "stop")
    assert _state(blocked) == "running"
    await blocked.admitted
    engine.finish(blocked, "stop")
    assert engine.snapshot().active_adapters == []


async def test_cpu_cache_evicts_and_reloads_adapters():
    adapters = {n: f"/{n}" for n in "abc"}
    engine = SlotEngine(
        SimConfig(
            model="tiny",
            check_adapter_paths=False,
            lora_modules=adapters,
            max_loras=1,
            max_cpu_loras=2,
        )
    )
    assert engine.snapshot().cpu_adapters == ["b", "c"]  # "a" evicted while registering
    request = engine.submit("a", "a")
    engine.finish(request, "stop")
    state = engine.snapshot()
    assert state.cpu_loads["a"] == 2
    assert "a" in state.cpu_adapters
    assert len(state.cpu_adapters) == 2


def test_config_rejects_impossible_settings():
    with pytest.raises(ValueError, match="max_loras must be >= 1"):
        SimConfig(max_loras=0)
    with pytest.raises(ValueError, match=r"max_cpu_loras \(1\) must be >= max_loras \(2\)"):
        SimConfig(max_loras=2, max_cpu_loras=1)
    with pytest.raises(ValueError, match="conflicts with the base model"):
        SimConfig(model="m", check_adapter_paths=False, lora_modules={"m": "/m"})


async def test_client_disconnect_aborts_and_frees_the_slot(http):
    config = SimConfig(
        model="tiny",
        check_adapter_paths=False,
        lora_modules={"a": "/a"},
        itl_s=0.05,
        output_tokens=20,
    )
    async with AsyncSimulatorCluster(config=config) as sim:
        body = {"model": "a", "prompt": "p", "stream": True}
        async with http.post(sim.urls[0] + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            await resp.content.readuntil(b"\n\n")  # first token, then hang up
            resp.close()
        await until(lambda: sim.state().finished_by_reason == {"abort": 1})
        state = sim.state()
        assert (state.running, state.waiting, state.active_adapters) == (0, 0, [])
        text = await metrics(http, sim.urls[0])
    assert value(text, "vllm:request_success_total", finished_reason="abort") == 1
    info = newest_lora_info(text)
    assert info is not None
    assert info["running_lora_adapters"] == ""


async def test_kv_cache_blocks_fill_with_tokens_and_bound_admission():
    engine = SlotEngine(SimConfig(model="tiny", block_size=4, kv_cache_blocks=5))
    first = engine.submit("tiny", None, prompt_tokens=5, planned_tokens=3)
    assert first.state == "running"
    assert engine.kv_cache_usage() == 2 / 4  # 5 prompt tokens: 2 blocks of 4 usable
    for _ in range(3):
        engine.token(first)
    assert engine.kv_blocks_used() == 2  # 8 tokens still fit in 2 blocks
    second = engine.submit("tiny", None, prompt_tokens=8, planned_tokens=4)
    third = engine.submit("tiny", None, prompt_tokens=1, planned_tokens=1)
    # As vLLM: blocks for the prompt only, nothing reserved for the reply.
    assert (second.state, third.state) == ("running", "waiting")  # no block left for it
    assert engine.kv_cache_usage() == 4 / 4
    assert engine.snapshot().waiting_deferred == 0  # waits for capacity, not a LoRA slot
    engine.finish(first, "stop")
    assert third.state == "running"
    assert engine.kv_cache_usage() == 3 / 4
    engine.finish(second, "stop")
    engine.finish(third, "stop")
    assert engine.kv_cache_usage() == 0
