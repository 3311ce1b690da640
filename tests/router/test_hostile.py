"""Bad and hostile input: OpenAI-style error bodies with the right status, never a
500; oversized bodies counted while they stream in; slow clients timed out without
holding up others."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3)
OK = b'{"messages": [{"role": "user", "content": "hi"}]}'


@pytest.mark.parametrize(("body", "status", "code"), [
    (b"{not json", 400, "invalid_json"),
    (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "invalid_json"),
    (b"[1, 2]", 400, "invalid_json"),
    (b'"text"', 400, "invalid_json"),
    (b"", 400, "invalid_json"),
    (b'{"messages": "hi"}', 400, "invalid_type"),
    (b'{"messages": []}', 400, "invalid_type"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "model": 5}', 400, "invalid_type"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}', 400,
     "invalid_type"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "router": ["x"]}', 400,
     "invalid_type"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": true}', 400,
     "invalid_type"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "router": "ghost"}', 404,
     "model_not_found"),
])
async def test_bad_bodies(body: bytes, status: int, code: str, router_config: Any,
                          start_router: Any) -> None:
    cfg = router_config(["http://127.0.0.1:9"])
    async with start_router(cfg) as router, aiohttp.ClientSession() as http, http.post(
            router.url + "/v1/chat/completions", data=body,
            headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == status
        err = (await resp.json())["error"]
    assert err["code"] == code
    assert err["message"]
    assert set(err) >= {"message", "type", "code"}


async def test_routes_and_methods(router_config: Any, start_router: Any) -> None:
    async with start_router(router_config(["http://127.0.0.1:9"])) as router, \
            aiohttp.ClientSession() as http:
        async with http.get(router.url + "/v1/chat/completions") as resp:
            assert resp.status == 405
            assert (await resp.json())["error"]["code"] == "method_not_allowed"
        async with http.post(router.url + "/v1/embeddings", data=OK) as resp:
            assert resp.status == 404
            assert "/v1/chat/completions" in (await resp.json())["error"]["message"]
        async with http.post(router.url + "/v1/completions", json={"prompt": 3}) as resp:
            assert resp.status == 400


async def test_body_limit_while_streaming_in(router_config: Any, start_router: Any) -> None:
    cfg = router_config(["http://127.0.0.1:9"], body_limit_bytes=4096)
    async with start_router(cfg) as router, aiohttp.ClientSession() as http:
        async with http.post(router.url + "/v1/chat/completions",
                             data=b"x" * 5000) as resp:  # Content-Length over the limit
            assert resp.status == 413

        async def chunked() -> Any:
            for _ in range(10):
                yield b" " * 1000

        async with http.post(router.url + "/v1/chat/completions", data=chunked()) as resp:
            assert resp.status == 413
            assert (await resp.json())["error"]["code"] == "body_too_large"
        metrics = await (await http.get(router.url + "/metrics")).text()
    assert 'mol_router_rejections_total{deployment="demo",reason="too_large"} 2.0' in metrics


async def _raw(port: int, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def test_slow_clients_are_cut_off_without_hurting_others(
        router_config: Any, start_router: Any, ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims:
        cfg = router_config(sims.urls, timeouts={"headerRead": 0.5, "bodyRead": 0.5})
        async with start_router(cfg) as router, aiohttp.ClientSession() as http:
            await ready(router)
            # Headers trickled and never finished; a body promised and never sent.
            slow_headers = [await _raw(router.port, b"POST /v1/chat/completions HTTP/1.1\r\n"
                                       b"Host: x\r\n") for _ in range(20)]
            slow_body = await _raw(router.port, b"POST /v1/chat/completions HTTP/1.1\r\n"
                                   b"Host: x\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: 500\r\n\r\n{\"mess")
            async with http.post(router.url + "/v1/chat/completions", data=OK) as resp:
                assert resp.status == 200  # others are served meanwhile
            answer = await asyncio.wait_for(slow_body[0].read(), 5.0)
            assert answer.startswith(b"HTTP/1.1 408")
            assert b"body_timeout" in answer
            for reader, _ in slow_headers:
                assert await asyncio.wait_for(reader.read(), 5.0) == b""  # closed
            for _, writer in [*slow_headers, slow_body]:
                writer.close()


async def test_many_concurrent_connections(router_config: Any, start_router: Any,
                                           ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=2, config=SIM) as sims, \
            start_router(router_config(sims.urls)) as router:
        await ready(router, 2)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:

            async def one(i: int) -> int:
                async with http.post(router.url + "/v1/chat/completions",
                                     data=OK if i % 3 else b"{bad") as resp:
                    await resp.read()
                    return resp.status

            statuses = await asyncio.gather(*(one(i) for i in range(300)))
    assert statuses.count(200) == 200, sorted(set(statuses))
    assert statuses.count(400) == 100
