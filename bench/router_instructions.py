"""CPU instructions a router spends per proxied request, counted by valgrind (callgrind).

One command (`python bench/router_instructions.py`): the near-free upstream of
`bench/router_overhead.py`, ours (`mol router serve`, every feature on: API keys, canary,
handoff) and the bare aiohttp proxy, each run under `valgrind --tool=callgrind` with
counting off; after a warm-up, counting is switched on, a fixed number of requests is
sent (JSON, then SSE), and the count is dumped. Instruction counts do not depend on
what else the machine is doing, so this is the figure to compare changes by on a
shared machine where `router_overhead.py`'s CPU times are noisy. Needs valgrind
(Debian: valgrind).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
import orjson

from _machine import Proc, callgrind_total, machine_info, wait_http
from _report import write_section
from mol_testkit.net import free_port
from router_overhead import API_KEY, HERE, ROOT, TRACED, TRACING_RATIO, mol_router_config

TARGETS = ("mol-router", TRACED, "aiohttp proxy")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=500, help="requests counted per mode")
    p.add_argument("--warmup", type=int, default=300, help="requests sent before counting")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    p.add_argument("--settle", type=float, default=7.0,
                   help="seconds idle between warm-up and counting, so one-time work the "
                        "warm-up started (the tracer's first export: its imports and "
                        "connection) is done before counting")
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated subset")
    p.add_argument("--tracing-ratio", type=float, default=TRACING_RATIO,
                   help=f"sample ratio of the '{TRACED}' target (default {TRACING_RATIO}; "
                        "0 measures the unsampled path alone)")
    p.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    args = p.parse_args(argv)
    unknown = set(args.targets.split(",")) - set(TARGETS)
    if unknown:
        p.error(f"unknown targets {sorted(unknown)}; choose from {', '.join(TARGETS)}")
    if not 1 <= args.requests <= 100_000 or not 0 <= args.warmup <= 100_000:
        p.error("--requests must be in 1..100000 and --warmup in 0..100000")
    if not 0.0 <= args.tracing_ratio <= 1.0:
        p.error("--tracing-ratio must be within 0..1")
    if not 0 <= args.settle <= 600:
        p.error("--settle must be in 0..600 seconds")
    if not 1 <= args.concurrency <= 256:
        p.error("--concurrency must be in 1..256")
    return args


async def send(url: str, count: int, concurrency: int, stream: bool) -> None:
    body = orjson.dumps({"model": "chat", "max_tokens": 8, "stream": stream,
                         "messages": [{"role": "user", "content": "Say hello in five words."}]})
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    left = count

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            async with http.post(f"{url}/v1/chat/completions", data=body,
                                 headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    raise SystemExit(f"{url} answered {resp.status}: {await resp.text()}")

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def count(name: str, upstream: str, workdir: Path, args: argparse.Namespace
          ) -> dict[bool, float]:
    """Instructions per request of one router, JSON (False) and SSE (True)."""
    port = free_port()
    env: dict[str, str] | None = None
    sink: Proc | None = None
    if name in ("mol-router", TRACED):
        argv = [str(Path(sys.executable).parent / "mol"), "router", "serve", "--config",
                str(mol_router_config(workdir, upstream)), "--host", "127.0.0.1",
                "--port", str(port)]  # fmt: skip
        ready = f"http://127.0.0.1:{port}/readyz"
        if name == TRACED:  # OTLP/HTTP to a receiver, 1% of requests sampled
            otlp = free_port()
            sink = Proc("otlp", [sys.executable, "-m", "mol_testkit.otlp", "--port",
                                 str(otlp)], log=workdir / "otlp.log")
            env = {**os.environ, "MOL_ROUTER_TRACING_ENDPOINT": f"http://127.0.0.1:{otlp}",
                   "MOL_ROUTER_TRACING_SAMPLE_RATIO": str(args.tracing_ratio)}
    else:
        argv = [sys.executable, str(HERE / "_bare_proxy.py"), "--port", str(port),
                "--upstream", upstream]  # fmt: skip
        ready = f"http://127.0.0.1:{port}/health"
    url = f"http://127.0.0.1:{port}"
    per: dict[bool, float] = {}
    for stream in (False, True):
        slug = name.replace(" ", "-").replace("%", "pct")  # callgrind expands %p, %q
        out = workdir / f"callgrind-{slug}-{int(stream)}.out"
        proc = Proc(name, ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                           f"--callgrind-out-file={out}", *argv],
                    log=workdir / f"{out.stem}.log", env=env)  # fmt: skip
        try:
            wait_http(ready, proc, timeout=180)
            asyncio.run(send(url, args.warmup, args.concurrency, stream))
            time.sleep(args.settle)
            _control("-i", "on", str(proc.popen.pid))
            asyncio.run(send(url, args.requests, args.concurrency, stream))
            _control("-d", str(proc.popen.pid))
        finally:
            proc.stop()
        per[stream] = callgrind_total(out) / args.requests
        if sink is not None and stream:
            sink.stop()
        print(f"{name:14s} {'SSE ' if stream else 'JSON'} {per[stream]:>12,.0f} "
              "instructions/request", flush=True)
    return per


def report(results: dict[str, dict[bool, float]], command: str, ratio: float) -> str:
    lines = [
        "## Router CPU instructions per request (`bench/router_instructions.py`)",
        "",
        f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {machine_info().markdown()}; "
        f"`{command}`. Counted by callgrind after a warm-up, the same fixed request "
        "count per mode; independent of other load on the machine.",
        "",
        "| router | JSON instructions/request | SSE instructions/request |",
        "|---|---:|---:|",
    ]
    for name, per in results.items():
        label = name if name != TRACED else f"mol-router tracing {ratio:g}"
        lines.append(f"| {label} | {per[False]:,.0f} | {per[True]:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: valgrind)")
    workdir = Path(tempfile.mkdtemp(prefix="mol-instructions-"))
    port = free_port()
    up = Proc("upstream", [sys.executable, str(HERE / "_fast_upstream.py"), "--port",
                           str(port)], log=workdir / "upstream.log")  # fmt: skip
    upstream = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    results: dict[str, dict[bool, float]] = {}
    try:
        wait_http(f"{upstream}/health", up, timeout=30)
        for name in [t for t in TARGETS if t in args.targets.split(",")]:
            results[name] = count(name, upstream, workdir, args)
    finally:
        up.stop()
    text = report(results, "python bench/router_instructions.py " + " ".join(argv),
                  args.tracing_ratio)
    print(text)
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    if args.write:
        write_section(ROOT / "docs/benchmarks.md", "router-instructions", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
