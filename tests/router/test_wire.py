"""The router's own HTTP/1.1 layer on raw sockets: pipelining, framing errors, HTTP/1.0,
``Expect: 100-continue``; and its engine pool against scripted upstreams that close
kept-alive connections, answer with ``Connection: close`` or break mid-answer."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from mol_testkit.simulator import AsyncSimulatorCluster, SimConfig

SIM = SimConfig(model="tiny", dynamic_loras=True, output_tokens=3)
CHAT = b'{"model": "chat", "messages": [{"role": "user", "content": "hi"}]}'


async def _exchange(port: int, data: bytes, *, within: float = 5.0) -> bytes:
    """Send ``data`` and read until the router closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), within)
    finally:
        writer.close()


def _post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _statuses(raw: bytes) -> list[int]:
    """Status codes of the responses in ``raw`` (bodies here never hold a status line)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]


async def test_pipelined_requests_are_answered_in_order(router_config: Any,
                                                        start_router: Any) -> None:
    async with start_router(router_config(["http://127.0.0.1:9"])) as router:
        raw = await _exchange(router.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                              + _post("/v1/chat/completions", b"{bad")
                              + b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
                              + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert _statuses(raw) == [200, 400, 404, 200]
    assert raw.count(b"invalid_json") == 1
    assert raw.endswith(b"ok")  # the last answer is whole, then the router closed


async def test_framing_errors_are_answered_then_the_connection_closes(
        router_config: Any, start_router: Any) -> None:
    async with start_router(router_config(["http://127.0.0.1:9"])) as router:
        garbage = await _exchange(router.port, b"HELLO THERE\r\n\r\n")
        assert _statuses(garbage) == [400]
        assert b'"code":"invalid_request"' in garbage
        huge = await _exchange(router.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
                               + b"a" * 70_000 + b"\r\n\r\n")
        assert _statuses(huge) == [431]
        assert b"headers_too_large" in huge
        # An upgrade (h2c, websocket) is refused before it is served: one answer.
        upgrade = await _exchange(router.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                  b"Connection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
        assert _statuses(upgrade) == [400]
        assert b"Upgrade" in upgrade
        # A bad request after a good one on the same connection: both answered.
        both = await _exchange(router.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                               b"GET / HTTP/1.1\r\nContent-Length: nope\r\n\r\n")
        assert _statuses(both) == [200, 400]


async def test_a_client_that_never_hangs_up_is_let_go(router_config: Any,
                                                     start_router: Any) -> None:
    """After ``Connection: close`` the router half-closes and waits for the client to
    hang up, but not for ever (the linger time, 2 s)."""
    async with start_router(router_config(["http://127.0.0.1:9"])) as router:
        reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert _statuses(await asyncio.wait_for(reader.read(), 5.0)) == [200]
        connections = router._listener.connections
        for _ in range(80):
            if not connections:
                break
            await asyncio.sleep(0.05)
        assert not connections
        writer.close()


async def test_http10_and_expect_continue(router_config: Any, start_router: Any) -> None:
    async with start_router(router_config(["http://127.0.0.1:9"])) as router:
        old = await _exchange(router.port, b"GET /healthz HTTP/1.0\r\n\r\n")
        assert _statuses(old) == [200]
        assert b"Connection: close" in old
        reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
        body = b"[1]"
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue"
                     b"\r\nContent-Length: 3\r\n\r\n")
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        writer.write(body + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        rest = await asyncio.wait_for(reader.read(), 5.0)
        writer.close()
    assert _statuses(rest) == [400, 200]


Script = Callable[[int, asyncio.StreamReader, asyncio.StreamWriter], Any]


@asynccontextmanager
async def scripted_engine(answer: Script) -> AsyncIterator[str]:
    """An engine on loopback: ``/health`` and ``/metrics`` answer idle; each POST
    is answered by ``answer(n, reader, writer)`` (n counts POSTs)."""
    posts = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal posts
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                if head.startswith(b"POST"):
                    posts += 1
                    if await answer(posts, reader, writer) is False:
                        break
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


COMPLETION = b'{"choices": [{"message": {"role": "assistant", "content": "hey"}}]}'
STREAM_CHAT = CHAT[:-1] + b', "stream": true}'


@asynccontextmanager
async def routed(answer: Script, start_router: Any, router_config: Any, ready: Any,
                 **settings: Any) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """A router (its URL) in front of one scripted engine, once it is ready, and a
    client session."""
    async with scripted_engine(answer) as url, \
            start_router(router_config([url]), **settings) as router, \
            aiohttp.ClientSession() as http:
        await ready(router)
        yield router.url, http


async def test_engine_closing_kept_alive_connections(router_config: Any, start_router: Any,
                                                     ready: Any) -> None:
    async def answer(n: int, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        # Odd answers say Connection: close; even ones just hang up afterwards.
        close = b"Connection: close\r\n" if n % 2 else b""
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + close
                     + b"Content-Length: %d\r\n\r\n" % len(COMPLETION) + COMPLETION)
        await writer.drain()
        return False

    async with routed(answer, start_router, router_config, ready) as (url, http):
        for _ in range(6):
            async with http.post(url + "/v1/chat/completions", data=CHAT) as resp:
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["choices"][0]["message"]["content"] == "hey"


async def test_engine_breaking_a_whole_answer_is_502(router_config: Any, start_router: Any,
                                                     ready: Any) -> None:
    async def answer(n: int, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        status = b"200 OK" if n == 1 else b"400 Bad Request"  # then a refused stream
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 500\r\n\r\n{\"choices\"")
        await writer.drain()
        return False

    async with routed(answer, start_router, router_config, ready) as (url, http):
        for body in (CHAT, STREAM_CHAT):
            async with http.post(url + "/v1/chat/completions", data=body) as resp:
                assert resp.status == 502
                assert (await resp.json())["error"]["code"] == "upstream_error"


async def test_chunked_and_sized_streams_pass_event_by_event(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """Events the engine sends apart arrive apart (nothing waits for the end)."""
    release = asyncio.Event()
    event = b'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n'

    async def answer(n: int, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%b\r\n" % (len(event), event))
        await writer.drain()
        await release.wait()
        done = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(done), done))

    async with routed(answer, start_router, router_config, ready) as (url, http):
        body = STREAM_CHAT
        async with http.post(url + "/v1/chat/completions", data=body) as resp:
            assert resp.status == 200
            first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5.0)
            assert b'"content":"a"' in first.replace(b" ", b"")
            release.set()
            rest = await resp.read()
        assert rest.endswith(b"data: [DONE]\n\n")


async def test_sim_engines_keep_their_connections(router_config: Any, start_router: Any,
                                                  ready: Any) -> None:
    async with AsyncSimulatorCluster(replicas=1, config=SIM) as sims, \
            start_router(router_config(sims.urls)) as router, aiohttp.ClientSession() as http:
        await ready(router)
        for body in (CHAT, STREAM_CHAT, CHAT, STREAM_CHAT):
            async with http.post(router.url + "/v1/chat/completions", data=body) as resp:
                assert resp.status == 200
                await resp.read()
        pool = router.runtime.pool
        assert pool.idle_connections(sims.urls[0]) == 1  # one connection, reused


async def test_connections_per_engine_are_bounded(router_config: Any, start_router: Any,
                                                  ready: Any) -> None:
    busy = peak = 0

    async def answer(n: int, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal busy, peak
        busy += 1
        peak = max(peak, busy)
        await asyncio.sleep(0.05)
        busy -= 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(COMPLETION)
                     + COMPLETION)

    async with routed(answer, start_router, router_config, ready,
                      max_connections_per_engine=2) as (url, http):

        async def one() -> int:
            async with http.post(url + "/v1/chat/completions", data=CHAT) as resp:
                await resp.read()
                return resp.status

        assert await asyncio.gather(*(one() for _ in range(8))) == [200] * 8
    assert peak == 2


async def test_a_slow_reader_gets_every_byte_of_a_large_stream(
        router_config: Any, start_router: Any, ready: Any) -> None:
    """Backpressure both ways: the router stops reading the engine while the client
    does not read, and nothing is lost or reordered."""
    events = [b'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "%06d%s"}}]}'
              b"\n\n" % (i, b"y" * 2000) for i in range(3000)]  # ~6 MB

    async def answer(n: int, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Content-Length: %d\r\n\r\n" % sum(map(len, events)))
        for event in events:
            writer.write(event)
            await writer.drain()

    async with routed(answer, start_router, router_config, ready) as (url, http):
        body = STREAM_CHAT
        async with http.post(url + "/v1/chat/completions", data=body) as resp:
            assert resp.status == 200
            await asyncio.sleep(0.5)  # the client does not read: buffers fill up
            data = await resp.read()
    assert data == b"".join(events)  # no [DONE] from this engine, so none added
