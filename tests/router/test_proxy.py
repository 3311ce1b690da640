"""The proxy against simulated engines: whole and streamed answers, headers, model
names, retries, mid-stream failures, client disconnects."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import orjson

from mol_router.replicas.policy.prefix import prefix_keys
from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig, parse_sse, reply_text

SIM = SimConfig(model="tiny", dynamic_loras=True, max_loras=4, output_tokens=6)


def chat(text: str = "hello there", **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


async def test_whole_and_streamed_chat_name_the_adapter(router_config: Any, start_router: Any,
                                                         ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=2, config=SIM) as sims:
        cfg = router_config(sims.urls)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router, 2)
            async with http.post(router.url + "/v1/chat/completions",
                                 json=chat(model="coding"),
                                 headers={"x-request-id": "req-1"}) as resp:
                assert resp.status == 200, await resp.text()
                body = await resp.json()
                assert resp.headers["x-mol-expert"] == "coding"
                assert resp.headers["x-mol-adapter-version"] == "demo/coding@v1"
                assert resp.headers["x-mol-route"] == "model"  # named by the request
                assert resp.headers["x-request-id"] == "req-1"
            assert body["model"] == "demo/coding@v1"
            async with http.post(router.url + "/v1/chat/completions",
                                 json=chat(stream=True)) as resp:
                assert resp.status == 200
                assert resp.headers["content-type"].startswith("text/event-stream")
                assert resp.headers["x-mol-expert"] == "chat"
                assert resp.headers["x-mol-route"] == "default"  # no model: explicit mode
                events = parse_sse(await resp.text())
            assert events[-1] == "[DONE]"
            chunks = [e for e in events if e != "[DONE]"]
            assert all(c["model"] == "demo/chat@v1" for c in chunks)
            # The router asked for usage on the client's behalf and kept it to itself.
            assert all(c["choices"] for c in chunks)
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
            assert text.strip()
        received = [r for s in sims.states() for r in s.received]
        assert {r.body["model"] for r in received} == {"demo/coding@v1", "demo/chat@v1"}
        assert all("router" not in r.body for r in received)
        assert any(r.headers.get("x-request-id") == "req-1" for r in received)


async def test_completions_and_usage_when_asked(router_config: Any, start_router: Any,
                                                 ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        async with start_router(router_config(sims.urls)) as router, \
                aiohttp.ClientSession() as http:
            await ready(router)
            body = {"model": "chat", "prompt": "say hi", "max_tokens": 3, "stream": True,
                    "stream_options": {"include_usage": True}}
            async with http.post(router.url + "/v1/completions", json=body) as resp:
                events = parse_sse(await resp.text())
            usage = [e for e in events if e != "[DONE]" and not e["choices"]]
            assert len(usage) == 1
            assert usage[0]["usage"]["completion_tokens"] == 3
            text = "".join(e["choices"][0]["text"] for e in events
                           if e != "[DONE]" and e["choices"])
            assert text == reply_text("demo/chat@v1", "say hi", 3)
            metrics = await (await http.get(router.url + "/metrics")).text()
        assert ('mol_router_tokens_total{deployment="demo",expert="chat",kind="completion",'
                'tenant="anonymous"} 3.0') in metrics
        assert ('mol_router_route_decisions_total{deployment="demo",'
                'expert="chat",mode="model",signal="request"} 1.0') in metrics


async def test_connect_error_and_5xx_retry_on_another_replica(router_config: Any,
                                                             start_router: Any,
                                                             ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=2, config=SIM) as sims:
        cfg = router_config(sims.urls, policy="round-robin", eject_after_failures=50)
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router, 2)
            sims.script_failure("demo/chat@v1", replica=0, status=500)
            for _ in range(4):
                async with http.post(router.url + "/v1/chat/completions",
                                     json=chat(model="chat")) as resp:
                    assert resp.status == 200, await resp.text()
            await sims.stop_replica(0)
            for stream in (False, True):
                async with http.post(router.url + "/v1/chat/completions",
                                     json=chat(model="chat", stream=stream)) as resp:
                    assert resp.status == 200, await resp.text()
            metrics = await (await http.get(router.url + "/metrics")).text()
        assert 'reason="status"' in metrics
        assert 'reason="connect"' in metrics


async def test_mid_stream_failure_ends_the_stream_with_an_error_event(
        router_config: Any, start_router: Any, ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        async with start_router(router_config(sims.urls)) as router, \
                aiohttp.ClientSession() as http:
            await ready(router)
            sims.script_failure("demo/chat@v1", disconnect=True, after_tokens=2)
            async with http.post(router.url + "/v1/chat/completions",
                                 json=chat(stream=True)) as resp:
                assert resp.status == 200
                events = parse_sse(await resp.text())
            assert events[-1] == "[DONE]"
            assert events[-2]["error"]["code"] == "upstream_error"
            assert any(e != "[DONE]" and "choices" in e for e in events)  # tokens got through
            metrics = await (await http.get(router.url + "/metrics")).text()
        assert 'mol_router_upstream_errors_total{deployment="demo",reason="stream"} 1.0' in metrics
        assert 'code="502"' in metrics


async def test_client_disconnect_cancels_the_upstream_request(
        router_config: Any, start_router: Any, ready: Any) -> None:
    slow = SimConfig(model="tiny", dynamic_loras=True, output_tokens=400, itl_s=0.02)
    async with AsyncSimulatorCluster(replicas=1, config=slow) as sims, \
            start_router(router_config(sims.urls)) as router:
        await ready(router)
        async with aiohttp.ClientSession() as http:
            resp = await http.post(router.url + "/v1/chat/completions", json=chat(stream=True))
            await resp.content.readany()  # streaming has begun
            assert sims.state(0).running == 1
            resp.close()  # hang up mid-stream
        for _ in range(100):
            if sims.state(0).finished_by_reason.get("abort") == 1:
                break
            await asyncio.sleep(0.05)
        state = sims.state(0)
        assert state.finished_by_reason.get("abort") == 1
        assert state.running == 0
        tracker = router.runtime.tracker
        assert tracker is not None
        assert all(s.inflight == 0 for s in tracker.snapshot().values())


async def test_upstream_timeout_is_504_and_not_retried(router_config: Any, start_router: Any,
                                                        ready: Any) -> None:
    slow = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3, ttft_s=2.0)
    async with AsyncSimulatorCluster(replicas=2, config=slow) as sims:
        cfg = router_config(sims.urls, timeouts={"upstream": 0.3})
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router, 2)
            async with http.post(router.url + "/v1/chat/completions", json=chat()) as resp:
                assert resp.status == 504
                assert (await resp.json())["error"]["code"] == "upstream_timeout"
        assert sum(len(s.received) for s in sims.states()) == 1


async def test_whole_request_disconnect_cancels_upstream(router_config: Any, start_router: Any,
                                                         ready: Any) -> None:
    slow = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3, ttft_s=5.0)
    async with AsyncSimulatorCluster(replicas=1, config=slow) as sims, \
            start_router(router_config(sims.urls)) as router:
        await ready(router)
        async with aiohttp.ClientSession() as http:
            with contextlib.suppress(TimeoutError):
                await http.post(router.url + "/v1/chat/completions", json=chat(),
                                timeout=aiohttp.ClientTimeout(total=0.5))
        for _ in range(100):
            if sims.state(0).finished_by_reason.get("abort") == 1:
                break
            await asyncio.sleep(0.05)
        assert sims.state(0).finished_by_reason.get("abort") == 1


async def test_the_prompt_reaches_the_engine_as_sent_and_its_prefixes_are_indexed(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """The prompt is serialised once for the body and its prefix keys: the engine gets
    the client's fields in the client's order, the prompt intact (escapes, non-ASCII),
    and the index holds the keys of exactly that prompt, chat and completions alike."""
    system = 'Rules: "quote" \\ back\\slash, tab\t, newline\n, é, 漢字, 🙂. ' * 80
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": "hello there", "name": None}]
    async with AsyncSimulatorCluster(replicas=2, config=SIM) as sims, \
            start_router(router_config(sims.urls)) as router, aiohttp.ClientSession() as http:
        await ready(router, 2)
        for path, body in (
            ("/v1/chat/completions", {"temperature": 0.5, "messages": messages,
                                      "max_tokens": 3, "metadata": {"messages": 1}}),
            ("/v1/completions", {"prompt": system, "model": "chat", "max_tokens": 2}),
        ):
            async with http.post(router.url + path, json=body) as resp:
                assert resp.status == 200, await resp.text()
            got = [r for s in sims.states() for r in s.received if r.path == path]
            assert len(got) == 1
            sent = got[0].body
            assert list(sent)[: len(body)] == list(body)  # the client's order
            field = "messages" if "messages" in body else "prompt"
            assert sent[field] == body[field]
            assert sent["model"] == "demo/chat@v1"
            keys = prefix_keys(orjson.dumps(body[field]), "demo/chat@v1")
            assert len(keys) > 16  # past the fine blocks
            depth = router.runtime.tracker.prefix.matches(keys, sims.urls)
            assert max(depth.values()) == len(keys)
