"""What a router adds over calling the upstream directly: latency, CPU, max throughput.

One command (`python bench/router_overhead.py`): a near-free upstream
(bench/_fast_upstream.py: fixed completion, or a fixed SSE stream), wrk with a pacing
Lua script at 200 and 1,000 req/s, streaming and not, against the upstream directly and
through each router, in one run: ours (`mol router serve`, every feature on: API keys,
canary split, handoff), the vLLM project's Rust router (`vllm-router`, `round_robin`
and `cache_aware`) and a bare aiohttp proxy; ours once more with tracing on at 1%
sampling (OTLP/HTTP to a receiver on the load core: the cost of tracing must stay
within 10% of ours off). The router under test is pinned to one
core, upstream and wrk to the other. Refuses to run while other processes use the CPU
(`--allow-busy` runs anyway and the report says the figures are noisy).

Then the same routers (tracing aside) with chat prompts of realistic length
(`--prompt-tokens`, ~1,000 and ~4,000 tokens by default: bench/_prompts.py), each
request its own body, in front of two upstreams, so that prefix-aware routing does
its real work on every request: ours hashes the prompt's prefixes and matches them
against its index, cache_aware walks and grows its radix tree. The report compares
CPU per request of ours with cache_aware's at each length.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml

from _load import LoadResult, require_wrk, run_wrk_script
from _machine import Proc, machine_info, pinned, quiet_check, tree_cpu, wait_http
from _prompts import ACTIVE, DEFAULT_TOKENS, TURNS, chat_template, parse_tokens
from _report import write_section
from mol_platform.contract.router_config import RouterConfig
from mol_testkit.net import free_port

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
LUA = HERE / "wrk_post.lua"
API_KEY = "bench-key-0123456789abcdef"
RATES = (200, 1000)
TRACED = "mol-router tracing 1%"
TARGETS = ("direct", "mol-router", TRACED, "vllm-router round_robin", "vllm-router cache_aware",
           "aiohttp proxy")  # fmt: skip
TRACING_RATIO = 0.01
TRACING_GOAL = 1.10  # CPU per request, traced at 1% over ours untraced
GOALS = {("p50", False, 200): 0.7, ("p99", False, 200): 3.0, ("p99", False, 1000): 8.0}
LONG_RATE = 1000  # long prompts: paced at this rate (both modes), then unpaced (JSON)
RUN_SPAN = 10_000_000  # request numbers each wrk run of long prompts may use


@dataclass(frozen=True)
class Measure:
    target: str
    stream: bool
    rate: int  # 0: unpaced (maximum throughput)
    load: LoadResult
    cpu_ms: float  # CPU of the router process tree per request
    tokens: int = 0  # prompt tokens of the long-prompt runs; 0: the short request


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="length of each paced run")
    p.add_argument("--connections", type=int, default=50, help="wrk connections when paced")
    p.add_argument("--max-connections", type=int, default=64, help="wrk connections, unpaced")
    p.add_argument("--router-core", default="0", help="core the router under test runs on")
    p.add_argument("--load-core", default="1", help="core of the upstream and wrk")
    p.add_argument(
        "--busy-limit",
        type=float,
        default=0.3,
        help="cores other processes may use before the run is refused",
    )
    p.add_argument(
        "--allow-busy",
        action="store_true",
        help="run anyway on a busy machine (the report says so)",
    )
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated subset")
    p.add_argument(
        "--prompt-tokens",
        default=",".join(map(str, DEFAULT_TOKENS)),
        help="prompt lengths (tokens, comma-separated) of the long-prompt runs; 0: none",
    )
    p.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    args = p.parse_args(argv)
    unknown = set(args.targets.split(",")) - set(TARGETS)
    if unknown:
        p.error(f"unknown targets {sorted(unknown)}; choose from {', '.join(TARGETS)}")
    if args.seconds < 2 or args.connections < 1 or args.max_connections < 1:
        p.error("--seconds must be >= 2 and connection counts >= 1")
    try:
        args.prompt_tokens = parse_tokens(args.prompt_tokens)
    except ValueError as exc:
        p.error(f"--prompt-tokens: {exc}")
    return args


def mol_router_config(workdir: Path, *upstreams: str) -> Path:
    """Ours with every routing feature on: API keys with limits, a canary, handoff."""
    keys = workdir / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [{
        "tenant": "bench", "key": API_KEY, "requests_per_minute": 10_000_000,
        "tokens_per_minute": 10_000_000_000,
    }]}))  # fmt: skip
    cfg = RouterConfig.model_validate({
        "deployment": "bench", "profile": "default.bench", "base_model": "tiny",
        "experts": [{"name": "chat", "adapter": "demo/chat@v1", "description": "chat",
                     "canary": {"adapter": "demo/chat@v2", "weight": 10}}],
        "default": "chat", "endpoints": list(upstreams), "handoff_enabled": True,
        "api_keys_file": str(keys),
    })  # fmt: skip
    path = workdir / "router.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(by_alias=True, mode="json")))
    return path


@contextmanager
def target(name: str, upstreams: list[str], workdir: Path, core: str, load_core: str
           ) -> Iterator[tuple[str, Proc | None]]:
    """The URL to load and the router process (None: the upstream itself); routers
    route over ``upstreams``, the direct call and the bare proxy use the first."""
    upstream = upstreams[0]
    if name == "direct":
        yield upstream, None
        return
    port = free_port()
    log = workdir / f"{name.replace(' ', '-')}.log"
    sink: Proc | None = None
    if name in ("mol-router", TRACED):
        argv = [str(Path(sys.executable).parent / "mol"), "router", "serve", "--config",
                str(mol_router_config(workdir, *upstreams)), "--host", "127.0.0.1",
                "--port", str(port)]  # fmt: skip
        env = None
        if name == TRACED:
            otlp = free_port()
            sink = Proc("otlp", pinned([sys.executable, "-m", "mol_testkit.otlp", "--port",
                                        str(otlp)], load_core), log=workdir / "otlp.log")
            env = {**os.environ, "MOL_ROUTER_TRACING_ENDPOINT": f"http://127.0.0.1:{otlp}",
                   "MOL_ROUTER_TRACING_SAMPLE_RATIO": str(TRACING_RATIO)}
        proc = Proc(name, pinned(argv, core), log=log, env=env)
        ready = f"http://127.0.0.1:{port}/readyz"
    elif name == "aiohttp proxy":
        argv = [sys.executable, str(HERE / "_bare_proxy.py"), "--port", str(port),
                "--upstream", upstream]  # fmt: skip
        proc = Proc(name, pinned(argv, core), log=log)
        ready = f"http://127.0.0.1:{port}/health"
    else:
        import _vllm_router

        policy = name.split()[-1]
        yield_proc = _vllm_router.start(upstreams, policy, port, free_port(), log, core)
        try:
            yield f"http://127.0.0.1:{port}", yield_proc
        finally:
            yield_proc.stop()
        return
    try:
        wait_http(ready, proc, timeout=60)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.stop()
        if sink is not None:
            sink.stop()


def body_file(workdir: Path, stream: bool, tokens: int = 0, start: int = 0) -> Path:
    """The short request's body, or a long-prompt template (a body per request,
    numbered from ``start``: every run sends prompts no router has seen yet)."""
    if tokens:
        return chat_template(tokens, stream).write(
            workdir / f"template-{tokens}-{int(stream)}-{start}.txt", start)
    path = workdir / f"body-{'stream' if stream else 'json'}.json"
    path.write_text(json.dumps({
        "model": "chat", "max_tokens": 8, "stream": stream,
        "messages": [{"role": "user", "content": "Say hello in five words."}],
    }))  # fmt: skip
    return path


_runs = iter(range(1, 10**6))


def measure(
    name: str, url: str, proc: Proc | None, workdir: Path, args: argparse.Namespace,
    stream: bool, rate: int, tokens: int = 0,
) -> Measure:  # fmt: skip
    conns = args.connections if rate else args.max_connections
    per_conn = rate / conns if rate else 0

    def wrk_args() -> list[str]:
        body = body_file(workdir, stream, tokens, next(_runs) * RUN_SPAN if tokens else 0)
        return [str(body), f"{per_conn:.6f}", f"Authorization: Bearer {API_KEY}"]

    # warm-up: pools, caches, the first resolution
    run_wrk_script(f"{url}/v1/chat/completions", LUA, wrk_args(), connections=conns,
                   seconds=1, cores=args.load_core)  # fmt: skip
    cpu: Callable[[], float] = (lambda: tree_cpu([proc.popen.pid])) if proc else (lambda: 0.0)
    measured = wrk_args()
    before = cpu()
    load = run_wrk_script(f"{url}/v1/chat/completions", LUA, measured, connections=conns,
                          seconds=args.seconds, cores=args.load_core)  # fmt: skip
    used = cpu() - before
    m = Measure(name, stream, rate, load, 1000 * used / max(load.requests, 1), tokens)
    kind = ("SSE " if stream else "JSON") + (f" {tokens}t" if tokens else "")
    print(f"{name:26s} {kind:11s} {rate or 'max':>5} {load.line()}  cpu/req {m.cpu_ms:.3f} ms",
          flush=True)  # fmt: skip
    return m


def report(ms: list[Measure], note: str | None, command: str) -> str:
    by = {(m.target, m.stream, m.rate): m for m in ms if not m.tokens}
    lines = [
        "## Router overhead: latency and CPU a router adds (`bench/router_overhead.py`)",
        "",
        f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {machine_info().markdown()}; "
        f"`{command}`.",
        "",
    ]
    if note:
        lines += [f"**Caveat: {note}.**", ""]
    lines += [
        "Added latency is the router's percentile minus the direct call's, same rate and "
        "mode; CPU is the router process tree's per request (paced runs); max is "
        "unpaced throughput with the router on one core.",
        "",
        "| router | mode | +p50 ms @200 | +p99 ms @200 | +p50 ms @1000 | +p99 ms @1000 "
        "| CPU ms/req @1000 | max req/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]

    def add(target: str, stream: bool, rate: int, q: str) -> str:
        m, d = by.get((target, stream, rate)), by.get(("direct", stream, rate))
        if m is None or d is None:
            return "-"
        mine = m.load.p50_ms if q == "p50" else m.load.p99_ms
        base = d.load.p50_ms if q == "p50" else d.load.p99_ms
        return f"{mine - base:.2f}"

    for t in TARGETS[1:]:
        for stream in (False, True):
            if (t, stream, 200) not in by:
                continue
            cpu = by.get((t, stream, 1000))
            mx = by.get((t, stream, 0))
            lines.append(
                f"| {t} | {'SSE (TTFB)' if stream else 'JSON'} | {add(t, stream, 200, 'p50')} "
                f"| {add(t, stream, 200, 'p99')} | {add(t, stream, 1000, 'p50')} "
                f"| {add(t, stream, 1000, 'p99')} | {f'{cpu.cpu_ms:.3f}' if cpu else '-'} "
                f"| {f'{mx.load.rps:.0f}' if mx else '-'} |"
            )
    lines += ["", "Direct calls (the baseline):", ""]
    for stream in (False, True):
        for rate in RATES:
            d = by.get(("direct", stream, rate))
            if d:
                lines.append(f"- {'SSE' if stream else 'JSON'} @{rate}: p50 "
                             f"{d.load.p50_ms:.2f} ms, p99 {d.load.p99_ms:.2f} ms, "
                             f"{d.load.rps:.0f} req/s achieved")  # fmt: skip
    mine = [m for m in ms if m.target == "mol-router" and not m.stream]
    if mine:
        lines += ["", "Targets for ours (JSON):"]
        for (q, _stream, rate), goal in GOALS.items():
            got = add("mol-router", False, rate, q)
            ok = got != "-" and float(got) <= goal
            lines.append(f"- added {q} at {rate} req/s <= {goal} ms: {got} ms: "
                         f"{'met' if ok else '**not met**'}")  # fmt: skip
        ca = by.get(("vllm-router cache_aware", False, 1000))
        me = by.get(("mol-router", False, 1000))
        for stream in (False, True):
            off, on = by.get(("mol-router", stream, 1000)), by.get((TRACED, stream, 1000))
            if off and on:
                ratio = on.cpu_ms / off.cpu_ms
                lines.append(
                    f"- {'SSE' if stream else 'JSON'}: CPU per request traced at 1% <= "
                    f"{TRACING_GOAL:.2f}x untraced: {on.cpu_ms:.3f} vs {off.cpu_ms:.3f} ms "
                    f"({ratio:.2f}x): {'met' if ratio <= TRACING_GOAL else '**not met**'}")
        if ca and me:
            ok = me.cpu_ms <= ca.cpu_ms
            lines.append(f"- CPU per request <= vllm-router cache_aware's: {me.cpu_ms:.3f} vs "
                         f"{ca.cpu_ms:.3f} ms: {'met' if ok else '**not met**'}")  # fmt: skip
    long = [m for m in ms if m.tokens]
    if long:
        lines += ["", *long_report(long)]
    return "\n".join(lines)


def long_report(ms: list[Measure]) -> list[str]:
    """The long-prompt table and, per prompt length, ours against cache_aware."""
    by = {(m.target, m.tokens, m.stream, m.rate): m for m in ms}
    lengths = sorted({m.tokens for m in ms})
    lines = [
        "Long prompts (bench/_prompts.py: a shared system prompt of half the tokens, a "
        f"session context shared by {TURNS} turns, {ACTIVE} sessions interleaved, a "
        "question of each request's own; every request a new body), the routers in front "
        "of two upstreams, "
        f"{LONG_RATE:,} req/s paced, then unpaced (JSON):",
        "",
        f"| router | prompt tokens | mode | +p50 ms @{LONG_RATE} | +p99 ms @{LONG_RATE} "
        f"| CPU ms/req @{LONG_RATE} | max req/s |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for t in TARGETS[1:]:
        for tokens in lengths:
            for stream in (False, True):
                m = by.get((t, tokens, stream, LONG_RATE))
                if m is None:
                    continue
                d = by.get(("direct", tokens, stream, LONG_RATE))
                p50 = f"{m.load.p50_ms - d.load.p50_ms:.2f}" if d else "-"
                p99 = f"{m.load.p99_ms - d.load.p99_ms:.2f}" if d else "-"
                mx = by.get((t, tokens, stream, 0))
                lines.append(f"| {t} | {tokens:,} | {'SSE (TTFB)' if stream else 'JSON'} "
                             f"| {p50} | {p99} | {m.cpu_ms:.3f} "
                             f"| {f'{mx.load.rps:.0f}' if mx else '-'} |")  # fmt: skip
    goals = []
    for tokens in lengths:
        for stream in (False, True):
            me = by.get(("mol-router", tokens, stream, LONG_RATE))
            ca = by.get(("vllm-router cache_aware", tokens, stream, LONG_RATE))
            if me and ca:
                ok = me.cpu_ms <= ca.cpu_ms
                goals.append(
                    f"- {tokens:,}-token prompts, {'SSE' if stream else 'JSON'}: CPU per "
                    f"request <= vllm-router cache_aware's: {me.cpu_ms:.3f} vs "
                    f"{ca.cpu_ms:.3f} ms: {'met' if ok else '**not met**'}")
    if goals:
        lines += ["", "Targets for ours (long prompts):", *goals]
    return lines


def start_upstream(workdir: Path, core: str | None, name: str) -> tuple[Proc, str]:
    """A near-free upstream on ``core`` (the long-prompt runs route over two)."""
    port = free_port()
    proc = Proc(name, pinned([sys.executable, str(HERE / "_fast_upstream.py"), "--port",
                              str(port)], core), log=workdir / f"{name}.log")  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/health", proc, timeout=30)
    except BaseException:
        proc.stop()
        raise
    return proc, url


def long_prompts(names: list[str], upstreams: list[str], workdir: Path,
                 args: argparse.Namespace) -> list[Measure]:  # fmt: skip
    """Every target but the traced one with each prompt length: paced in both modes,
    then unpaced JSON (routers only)."""
    out = []
    for name in [n for n in names if n != TRACED]:
        with target(name, upstreams, workdir, args.router_core, args.load_core) as (url, proc):
            for tokens in args.prompt_tokens:
                for stream in (False, True):
                    out.append(measure(name, url, proc, workdir, args, stream, LONG_RATE,
                                       tokens))  # fmt: skip
                if proc is not None:
                    out.append(measure(name, url, proc, workdir, args, False, 0, tokens))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    require_wrk()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ok, seen = quiet_check(args.busy_limit)
    print(f"machine check: {seen}", file=sys.stderr)
    note = None
    if not ok:
        if not args.allow_busy:
            print(f"refusing to measure: {seen} (limit {args.busy_limit} cores). Stop other "
                  "work or pass --allow-busy (the report will say the figures are noisy).",
                  file=sys.stderr)  # fmt: skip
            return 2
        note = f"the machine was busy before the run ({seen}): figures are noisy"
    workdir = Path(tempfile.mkdtemp(prefix="mol-overhead-"))
    port = free_port()
    up = Proc(
        "upstream",
        pinned(
            [sys.executable, str(HERE / "_fast_upstream.py"), "--port", str(port)], args.load_core
        ),
        log=workdir / "upstream.log",
    )
    upstream = f"http://127.0.0.1:{port}"
    ups = [up]
    measures: list[Measure] = []
    started = time.monotonic()
    names = [t for t in TARGETS if t in args.targets.split(",")]
    try:
        wait_http(f"{upstream}/health", up, timeout=30)
        for name in names:
            with target(name, [upstream], workdir, args.router_core, args.load_core) as (url,
                                                                                      proc):
                for stream in (False, True):
                    for rate in RATES:
                        measures.append(measure(name, url, proc, workdir, args, stream, rate))
                if proc is not None:
                    measures.append(measure(name, url, proc, workdir, args, False, 0))
        if args.prompt_tokens:
            second = start_upstream(workdir, args.load_core, "upstream-2")
            ups.append(second[0])
            measures += long_prompts(names, [upstream, second[1]], workdir, args)
    finally:
        for u in ups:
            u.stop()
    text = report(measures, note, "python bench/router_overhead.py " + " ".join(argv))
    print(text)
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    if args.write:
        write_section(ROOT / "docs/benchmarks.md", "router-overhead", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
