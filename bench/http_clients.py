"""CPU per call of the HTTP clients the platform uses, against one loopback server.

One command (`python bench/http_clients.py`): a small aiohttp server in its own process
answers every call with the same 200 (a JSON body of ~200 bytes, keep-alive), and this
process makes ``--calls`` calls one after another with each client: httpx sync
(`httpx.Client`), httpx async (`httpx.AsyncClient`), aiohttp (`aiohttp.ClientSession`)
and the router's own engine pool (`mol_router.replicas.pool.EnginePool`, on httptools), GET and
a 1 KiB JSON POST each. CPU is this process's user + system time (the server's is not
counted) divided by the calls, after a warm-up; the best of ``--rounds`` rounds is
reported, which keeps a shared machine's noise out. The figures back the choice of
client per role in docs/design.md ("Clients by role"); they land in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import multiprocessing
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
import aiohttp.web
import httpx

from _machine import machine_info
from _report import write_section
from mol_router.replicas.pool import EnginePool
from mol_testkit.net import free_port

ROOT = Path(__file__).resolve().parent.parent
ANSWER = json.dumps({"object": "list", "data": [{"id": f"demo/expert-{i}@v1"}
                                                for i in range(6)]}).encode()
PAYLOAD = json.dumps({"model": "demo/chat@stable", "prompt": "x" * 960}).encode()
HEADERS = {"Content-Type": "application/json"}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=3000, help="calls per client and method")
    p.add_argument("--rounds", type=int, default=3, help="rounds; the best is reported")
    p.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    return p.parse_args(argv)


def _serve(port: int) -> None:
    async def answer(request: aiohttp.web.Request) -> aiohttp.web.Response:
        await request.read()
        return aiohttp.web.Response(body=ANSWER, content_type="application/json")

    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    aiohttp.web.run_app(app, host="127.0.0.1", port=port, print=None,
                        handle_signals=True, access_log=None)


def _wait(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _cpu() -> float:
    return time.process_time()


def _httpx_sync(url: str, calls: int, post: bool) -> float:
    with httpx.Client(base_url=url) as http:
        for _ in range(100):
            http.get("/v1/models").read()
        start = _cpu()
        for _ in range(calls):
            if post:
                http.post("/v1/completions", content=PAYLOAD, headers=HEADERS).read()
            else:
                http.get("/v1/models").read()
        return _cpu() - start


async def _timed(calls: int, one: Callable[[], Awaitable[None]]) -> float:
    for _ in range(100):
        await one()
    start = _cpu()
    for _ in range(calls):
        await one()
    return _cpu() - start


async def _httpx_async(url: str, calls: int, post: bool) -> float:
    async with httpx.AsyncClient(base_url=url) as http:
        async def one() -> None:
            if post:
                await (await http.post("/v1/completions", content=PAYLOAD,
                                       headers=HEADERS)).aread()
            else:
                await (await http.get("/v1/models")).aread()
        return await _timed(calls, one)


async def _aiohttp(url: str, calls: int, post: bool) -> float:
    async with aiohttp.ClientSession(url) as http:
        async def one() -> None:
            if post:
                async with http.post("/v1/completions", data=PAYLOAD,
                                     headers=HEADERS) as resp:
                    await resp.read()
            else:
                async with http.get("/v1/models") as resp:
                    await resp.read()
        return await _timed(calls, one)


async def _engine_pool(url: str, calls: int, post: bool) -> float | None:
    if not post:
        return None  # the router's pool only POSTs (it proxies completions)
    pool = EnginePool()
    try:
        async def one() -> None:
            resp = await pool.post(url, "/v1/completions", PAYLOAD, HEADERS, limit=10.0,
                                   connect=5.0)
            await resp.read()
            resp.release()
        return await _timed(calls, one)
    finally:
        await pool.close()


CLIENTS = ("httpx sync", "httpx async", "aiohttp", "router engine pool (httptools)")


def measure(url: str, calls: int, rounds: int) -> dict[tuple[str, str], float | None]:
    """Best CPU microseconds per call for every (client, method)."""
    best: dict[tuple[str, str], float | None] = {}
    for _ in range(rounds):
        for method in ("GET", "POST"):
            post = method == "POST"
            took: dict[str, float | None] = {
                CLIENTS[0]: _httpx_sync(url, calls, post),
                CLIENTS[1]: asyncio.run(_httpx_async(url, calls, post)),
                CLIENTS[2]: asyncio.run(_aiohttp(url, calls, post)),
                CLIENTS[3]: asyncio.run(_engine_pool(url, calls, post)),
            }
            for name, seconds in took.items():
                if seconds is None:
                    best[(name, method)] = None
                    continue
                micros = seconds / calls * 1e6
                held = best.get((name, method))
                best[(name, method)] = micros if held is None else min(held, micros)
    return best


def render(best: dict[tuple[str, str], float | None], args: argparse.Namespace) -> str:
    info = machine_info()
    lines = [
        f"Measured {dt.date.today().isoformat()} on {info.markdown()} with "
        f"`python bench/http_clients.py --calls {args.calls} --rounds {args.rounds}`: "
        f"{args.calls} sequential calls per client and method against a loopback aiohttp "
        "server in another process (keep-alive, ~200-byte JSON answer; POST sends 1 KiB "
        f"of JSON); CPU of the calling process only, best of {args.rounds} rounds.",
        "",
        "| client | GET: CPU per call | POST: CPU per call |",
        "|---|---:|---:|",
    ]
    for name in CLIENTS:
        cells = []
        for method in ("GET", "POST"):
            value = best.get((name, method))
            cells.append("-" if value is None else f"{value:.0f} µs")
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    port = free_port()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(port,),
                                                          daemon=True)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url + "/healthz", 30.0)
        body = render(measure(url, args.calls, args.rounds), args)
    finally:
        server.terminate()
        server.join(10)
    print(body)
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", "http-clients", body)


if __name__ == "__main__":
    main()
