"""CPU instructions a router spends per proxied request, counted by valgrind (callgrind).

One command (`python bench/router_instructions.py`): the near-free upstream of
`bench/router_overhead.py`, ours (`mol router serve`, every feature on: API keys, canary,
handoff), the vLLM project's Rust router (`vllm-router`, `round_robin` and
`cache_aware`: the Rust code runs under valgrind as well) and the bare aiohttp proxy,
each run under `valgrind --tool=callgrind` with counting off; after a warm-up,
counting is switched on, a fixed number of requests is sent (JSON, then SSE), and the
count is dumped. Then the same with chat prompts of realistic length
(`--prompt-tokens`, as in `router_overhead.py`: each request its own body, the routers
in front of two upstreams). Instruction counts do not depend on what else the machine
is doing, so this is the figure to compare changes by on a shared machine where
`router_overhead.py`'s CPU times are noisy. Needs valgrind (Debian: valgrind).
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

from _machine import Proc, callgrind_dumps, machine_info, wait_http
from _prompts import DEFAULT_TOKENS, chat_template, parse_tokens
from _report import write_section
from mol_testkit.net import free_port
from router_overhead import (
    API_KEY,
    HERE,
    ROOT,
    RUN_SPAN,
    TRACED,
    TRACING_RATIO,
    mol_router_config,
    start_upstream,
)

TARGETS = ("mol-router", TRACED, "vllm-router round_robin", "vllm-router cache_aware",
           "aiohttp proxy")  # fmt: skip


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
                   help=f"sample ratio of the '{TRACED.replace('%', '%%')}' target (default "
                        f"{TRACING_RATIO}; "
                        "0 measures the unsampled path alone)")
    p.add_argument(
        "--prompt-tokens",
        default=",".join(map(str, DEFAULT_TOKENS)),
        help="prompt lengths (tokens, comma-separated) of the long-prompt counts; 0: none",
    )
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
    try:
        args.prompt_tokens = parse_tokens(args.prompt_tokens)
    except ValueError as exc:
        p.error(f"--prompt-tokens: {exc}")
    return args


async def send(url: str, count: int, concurrency: int, stream: bool, tokens: int = 0,
               start: int = 0) -> None:  # fmt: skip
    """``count`` requests: the short one, or long prompts, each its own (numbered from
    ``start``, as wrk_post.lua numbers them)."""
    short = orjson.dumps({"model": "chat", "max_tokens": 8, "stream": stream,
                          "messages": [{"role": "user", "content": "Say hello in five words."}]})
    template = chat_template(tokens, stream) if tokens else None
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    left = count

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            body = template.fill(count - left - 1, start) if template else short
            async with http.post(f"{url}/v1/chat/completions", data=body,
                                 headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    raise SystemExit(f"{url} answered {resp.status}: {await resp.text()}")

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def count(name: str, upstreams: list[str], workdir: Path, args: argparse.Namespace,
          phases: tuple[int, ...] = (0,)) -> dict[tuple[int, bool], float]:  # fmt: skip
    """Instructions per request of one router, per (prompt tokens of the phase, 0 for
    the short request; SSE), JSON and SSE each in a process of its own; routers route
    over ``upstreams``, the bare proxy forwards to the first."""
    port = free_port()
    env: dict[str, str] | None = None
    sink: Proc | None = None
    if name in ("mol-router", TRACED):
        argv = [str(Path(sys.executable).parent / "mol"), "router", "serve", "--config",
                str(mol_router_config(workdir, *upstreams)), "--host", "127.0.0.1",
                "--port", str(port)]  # fmt: skip
        ready = f"http://127.0.0.1:{port}/readyz"
        if name == TRACED:  # OTLP/HTTP to a receiver, 1% of requests sampled
            otlp = free_port()
            sink = Proc("otlp", [sys.executable, "-m", "mol_testkit.otlp", "--port",
                                 str(otlp)], log=workdir / "otlp.log")
            env = {**os.environ, "MOL_ROUTER_TRACING_ENDPOINT": f"http://127.0.0.1:{otlp}",
                   "MOL_ROUTER_TRACING_SAMPLE_RATIO": str(args.tracing_ratio)}
    elif name.startswith("vllm-router"):
        import _vllm_router

        argv = _vllm_router.command(upstreams, name.split()[-1], port, free_port())
        ready = f"http://127.0.0.1:{port}/health"
    else:
        argv = [sys.executable, str(HERE / "_bare_proxy.py"), "--port", str(port),
                "--upstream", upstreams[0]]  # fmt: skip
        ready = f"http://127.0.0.1:{port}/health"
    url = f"http://127.0.0.1:{port}"
    per: dict[tuple[int, bool], float] = {}
    for stream in (False, True):
        slug = name.replace(" ", "-").replace("%", "pct")  # callgrind expands %p, %q
        out = workdir / f"callgrind-{slug}-{int(stream)}-{'-'.join(map(str, phases))}.out"
        proc = Proc(name, ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                           f"--callgrind-out-file={out}", *argv],
                    log=workdir / f"{out.stem}.log", env=env)  # fmt: skip
        pid = str(proc.popen.pid)
        try:
            wait_http(ready, proc, timeout=180)
            for i, tokens in enumerate(phases):  # every phase sends prompts not seen yet
                asyncio.run(send(url, args.warmup, args.concurrency, stream, tokens,
                                 (2 * i + 1) * RUN_SPAN))  # fmt: skip
                time.sleep(args.settle if i == 0 else 1.0)
                _control("-z", pid)
                _control("-i", "on", pid)
                asyncio.run(send(url, args.requests, args.concurrency, stream, tokens,
                                 (2 * i + 2) * RUN_SPAN))  # fmt: skip
                _control("-d", pid)
                _control("-i", "off", pid)
        finally:
            proc.stop()
        dumps = callgrind_dumps(out)
        if len(dumps) != len(phases):
            raise RuntimeError(f"{name}: callgrind wrote {len(dumps)} dumps for "
                               f"{len(phases)} phases (see {out.parent})")
        for tokens, total in zip(phases, dumps, strict=True):
            per[tokens, stream] = total / args.requests
            label = f"{tokens}t" if tokens else ""
            print(f"{name:24s} {'SSE ' if stream else 'JSON'} {label:>6s} "
                  f"{per[tokens, stream]:>12,.0f} instructions/request", flush=True)
        if sink is not None and stream:
            sink.stop()
    return per


def report(results: dict[str, dict[tuple[int, bool], float]], command: str,
           ratio: float) -> str:  # fmt: skip
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
        if (0, False) in per:
            lines.append(f"| {label} | {per[0, False]:,.0f} | {per[0, True]:,.0f} |")
    lengths = sorted({t for per in results.values() for t, _ in per if t})
    if lengths:
        lines += ["", "Long prompts (bench/_prompts.py, each request its own; the routers "
                  "in front of two upstreams):", "",
                  "| router | prompt tokens | JSON instructions/request "
                  "| SSE instructions/request |", "|---|---:|---:|---:|"]  # fmt: skip
        for name, per in results.items():
            for t in lengths:
                if (t, False) in per:
                    lines.append(f"| {name} | {t:,} | {per[t, False]:,.0f} "
                                 f"| {per[t, True]:,.0f} |")  # fmt: skip
        ours, ca = results.get("mol-router", {}), results.get("vllm-router cache_aware", {})
        ratios = [f"- {t:,}-token prompts, {'SSE' if s else 'JSON'}: ours "
                  f"{ours[t, s]:,.0f} vs vllm-router cache_aware's {ca[t, s]:,.0f} "
                  f"instructions per request ({ours[t, s] / ca[t, s]:.2f}x)"
                  for t in lengths for s in (False, True) if (t, s) in ours and (t, s) in ca]
        if ratios:
            lines += ["", "Ours against cache_aware (long prompts; the goal itself is on CPU "
                      "time, `router_overhead.py`):", *ratios]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: valgrind)")
    workdir = Path(tempfile.mkdtemp(prefix="mol-instructions-"))
    started = time.monotonic()
    results: dict[str, dict[tuple[int, bool], float]] = {}
    names = [t for t in TARGETS if t in args.targets.split(",")]
    ups: list[Proc] = []
    try:
        first, upstream = start_upstream(workdir, None, "upstream")
        ups.append(first)
        for name in names:
            results[name] = count(name, [upstream], workdir, args)
        if args.prompt_tokens:
            second, other = start_upstream(workdir, None, "upstream-2")
            ups.append(second)
            for name in [n for n in names if n != TRACED]:
                results[name].update(count(name, [upstream, other], workdir, args,
                                           args.prompt_tokens))  # fmt: skip
    finally:
        for u in ups:
            u.stop()
    text = report(results, "python bench/router_instructions.py " + " ".join(argv),
                  args.tracing_ratio)
    print(text)
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    if args.write:
        write_section(ROOT / "docs/benchmarks.md", "router-instructions", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
