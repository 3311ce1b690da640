"""Replica-picking policies on simulated vLLM replicas: adapter loads, TTFT, throughput.

One command (`python bench/routing.py`): 16 simulated replicas (`--max-loras 4`), 500
adapters with Zipf(1.1) popularity, open-loop Poisson arrivals at 70% of the fleet's
capacity; or `--trace FILE.jsonl` (one request a line: {"t", "adapter", "user",
"segments", "prompt_tokens", "max_tokens"}: bench/_workload.py; `bench/traces.py` writes
some) replayed `--speed X` times faster, the simulated token
and load times scaled alike. Every policy sees the same requests at the same times on a
fresh fleet; ours also runs as 4 independent router replicas (requests spread over
them, each with its own tracker and no shared state). The simulator's engine model runs
in-process on a virtual clock, so a run takes seconds and its figures do not depend on
how busy the machine is. Each replica's KV cache is what vLLM gives Llama-3-8B BF16 on
an H100 80 GB (bench/_kvcapacity.py); the policies run again at half of it
(`--no-half-kv` skips that), and the prefix hit rates are set against what the trace
allows (bench/_prefix_bound.py). Writes its section of docs/benchmarks.md with `--write`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fleet import FleetShape, RunResult, run_policy
from _kvcapacity import H100_LLAMA3_8B_BLOCKS
from _machine import machine_info
from _report import write_section
from _routing_goals import (
    BASELINE,
    LLMD,
    OURS,
    OURS_KV,
    PRECISE,
    floors,
    goals,
    prefix_bounds,
)
from _routing_rows import (
    HTTP_HEADER,
    SLOS,
    half_row,
    half_table,
    header,
    hit_rate,
    http_row,
    ms,
    row,
)
from _workload import Arrival, load_trace, synthetic
from mol_router.replicas.policy import make_policy

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=16, help="simulated engine replicas")
    p.add_argument("--max-loras", type=int, default=4, help="adapter slots per replica")
    p.add_argument("--max-num-seqs", type=int, default=8, help="batch size per replica")
    p.add_argument("--ttft-s", type=float, default=0.04, help="time to first token once running")
    p.add_argument("--itl-s", type=float, default=0.02, help="inter-token latency")
    p.add_argument("--lora-load-s", type=float, default=0.01,
                   help="replica stall: an adapter enters a GPU slot from host memory")  # fmt: skip
    p.add_argument("--lora-disk-load-s", type=float, default=0.1,
                   help="further stall when that adapter is read from disk first")  # fmt: skip
    p.add_argument("--max-cpu-loras", type=int, default=32,
                   help="adapters in a replica's host memory (default: the MoLDeployment's "
                   "engine.maxCpuLoras, 32)")  # fmt: skip
    p.add_argument("--prefill-s-per-token", type=float, default=5e-5,
                   help="replica time per prompt token not in its prefix cache "
                   "(default: Llama-3-8B BF16 on one H100)")  # fmt: skip
    p.add_argument("--kv-cache-blocks", type=int, default=H100_LLAMA3_8B_BLOCKS,
                   help="KV blocks of 16 tokens per replica (default: Llama-3-8B BF16 "
                   "on one H100 80 GB, vLLM's 51.38 GiB of available KV at "
                   "gpu_memory_utilization 0.9, 128 KiB a token: "
                   "bench/_kvcapacity.py)")  # fmt: skip
    p.add_argument("--half-kv", action=argparse.BooleanOptionalAction, default=True,
                   help="also run every policy at half the KV blocks (a compact second "
                   "table; --no-half-kv for quick runs)")  # fmt: skip
    p.add_argument("--scrape-interval", type=float, default=1.0,
                   help="how often each router reads every engine's metrics (the "
                   "router's default, scrape_interval_s, is 1 s)")  # fmt: skip
    p.add_argument("--floor-waits", default="0,0.1,0.5,2",
                   help="allowed waits (s) at which to print the adapter-load floor")
    p.add_argument("--adapters", type=int, default=500)
    p.add_argument("--zipf", type=float, default=1.1, help="popularity exponent")
    p.add_argument("--load", type=float, default=0.7, help="offered load, share of capacity")
    p.add_argument("--duration", type=float, default=120.0, help="seconds of arrivals")
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--max-tokens", type=int, default=32, help="tokens generated per request")
    p.add_argument("--routers", type=int, default=4, help="independent replicas of ours")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--trace", type=Path, help="replay this JSONL trace instead")
    p.add_argument("--speed", type=float, default=1.0, help="replay the trace X times faster")
    p.add_argument("--utilisation", type=float, default=None, metavar="U",
                   help="size the fleet (replicas) so the trace's work, every prompt token "
                   "prefilled, fills this share of its batch lanes (e.g. 0.7); default: "
                   "--replicas as given")
    p.add_argument(
        "--http",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the HTTP leg: vllm-router vs ours on replicas over HTTP",
    )
    p.add_argument(
        "--http-duration",
        type=float,
        default=20.0,
        help="seconds of the workload the HTTP leg replays (its first part)",
    )
    p.add_argument(
        "--http-speed",
        type=float,
        default=0.2,
        help="the HTTP leg runs this much slower than nominal (so 2 cores can "
        "stream every token); its times are scaled back for the report",
    )
    p.add_argument(
        "--http-timeout",
        type=float,
        default=20.0,
        help="nominal seconds after which an HTTP-leg request counts as failed",
    )
    p.add_argument(
        "--vllm-router-policies",
        default="round_robin,power_of_two,cache_aware,consistent_hash",
        help="vllm-router policies to try; the report names the best (consistent_hash "
        "is keyed on the adapter through X-Session-ID)",
    )
    p.add_argument("--ours-knobs", type=json.loads, default={}, metavar="JSON",
                   help=f"{OURS}'s policy knobs, e.g. '{{\"slack\": 4}}' (default: its own "
                   "defaults, as the router uses them)")
    p.add_argument("--ours-kv-events", action="store_true",
                   help=f"also run {OURS_KV} (one router and --routers): ours told what is "
                   "cached by the engines' KV events instead of its own prefix index, to "
                   "tell whether the router should subscribe to them")  # fmt: skip
    p.add_argument("--slo-ttft", type=float, action="append", default=[], metavar="S",
                   help="also report goodput at TTFT <= S seconds (repeatable; 1 and 2 "
                   "always)")
    p.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    p.add_argument("--section", default="routing", metavar="NAME",
                   help="the section of docs/benchmarks.md (and docs/img/NAME.png) that "
                   "--write replaces, e.g. routing-chat for a trace")
    args = p.parse_args(argv)
    for name in ("replicas", "max_loras", "max_num_seqs", "adapters", "routers", "max_tokens",
                 "kv_cache_blocks"):  # fmt: skip
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.max_cpu_loras is not None and args.max_cpu_loras < args.max_loras:
        p.error("--max-cpu-loras must be >= --max-loras")
    if min(args.lora_load_s, args.lora_disk_load_s, args.prefill_s_per_token) < 0:
        p.error("--lora-load-s, --lora-disk-load-s and --prefill-s-per-token must be >= 0")
    if not 0 < args.load <= 2 or args.duration <= 0 or args.speed <= 0:
        p.error("--load must be in (0, 2], --duration and --speed > 0")
    if args.http_duration <= 0 or args.http_timeout <= 0 or not 0 < args.http_speed <= 10:
        p.error("--http-duration and --http-timeout must be > 0, --http-speed in (0, 10]")
    if not isinstance(args.ours_knobs, dict):
        p.error("--ours-knobs must be a JSON object, e.g. '{\"slack\": 4}'")
    try:
        make_policy(OURS, args.ours_knobs)
    except ValueError as exc:
        p.error(f"--ours-knobs: {exc}")
    if re.fullmatch(r"[a-z][a-z0-9-]{0,40}", args.section) is None:
        p.error("--section must be lowercase letters, digits and '-', e.g. routing-chat")
    if args.utilisation is not None and not 0 < args.utilisation <= 1:
        p.error("--utilisation must be in (0, 1]")
    if args.half_kv and args.kv_cache_blocks < 4:
        p.error("--half-kv needs --kv-cache-blocks >= 4 (or --no-half-kv)")
    if any(not 0 < x < math.inf for x in args.slo_ttft):
        p.error("--slo-ttft must be a positive number of seconds")
    try:
        waits = [float(w) for w in args.floor_waits.split(",") if w.strip()]
    except ValueError:
        waits = []
    if not waits or not all(0 <= w < math.inf for w in waits):
        p.error("--floor-waits must be a comma-separated list of seconds >= 0, e.g. 0,0.5,2")
    return args


def workload(args: argparse.Namespace, shape: FleetShape) -> tuple[list[Arrival], str]:
    if args.trace is not None:
        arrivals = load_trace(args.trace, args.speed)
        span = arrivals[-1].t if arrivals else 0.0
        return arrivals, (
            f"trace `{args.trace.name}` ({len(arrivals):,} requests over {span:.0f} s "
            f"at speed {args.speed:g})"
        )
    rate = args.load * shape.capacity(args.max_tokens, args.prompt_tokens)
    arrivals = synthetic(
        adapters=args.adapters, zipf=args.zipf, rate=rate, duration=args.duration,
        seed=args.seed, prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens,
    )  # fmt: skip
    return arrivals, (
        f"{args.adapters} adapters, Zipf({args.zipf:g}) popularity, Poisson arrivals at "
        f"{rate:.0f} req/s ({args.load:.0%} of capacity) for {args.duration:g} s: "
        f"{len(arrivals):,} requests of {args.max_tokens} tokens"
    )


def http_leg(args: argparse.Namespace, shape: FleetShape, arrivals: list[Arrival]) -> list[str]:
    """vllm-router (each policy tried) and ours, over HTTP on the same replicas."""
    from _http_leg import run_ours, run_vllm_router

    speed = args.http_speed
    part = [a for a in arrivals if a.t < args.http_duration]
    slow = [replace(a, t=a.t / speed) for a in part]
    tokens = max(a.max_tokens for a in part)
    scaled = shape.scaled(speed)
    log = Path(tempfile.mkdtemp(prefix="mol-routing-")) / "vllm-router.log"
    timeout = args.http_timeout / speed
    # One router replica of ours: the 4-replica case is measured in-process above (four
    # trackers scraping 16 Python replicas would saturate this machine, not the routers).
    results = [run_ours(OURS, 1, slow, scaled, tokens, speed, timeout, log)]
    print(http_row(results[0]), flush=True)
    for policy in args.vllm_router_policies.split(","):
        r = run_vllm_router(policy.strip(), slow, scaled, tokens, speed, timeout, log)
        print(http_row(r), flush=True)
        results.append(r)
    best = min(results[1:], key=lambda r: (r.errors, ms(r, 99)))
    lines = [
        *HTTP_HEADER,
        *(http_row(r) for r in results),
        "",
        f"HTTP leg (load average {os.getloadavg()[2]:.1f} over the last 15 minutes, on "
        f"this shared machine): the first {args.http_duration:g} s of the same workload "
        f"({len(part):,} requests), run {1 / speed:g}x slower than nominal over HTTP and "
        f"scaled back. "
        f"vllm-router's best policy here (fewest failures, then lowest TTFT p99): "
        f"`{best.label.split()[-1]}`; ours vs it: TTFT p99 {ms(results[0], 99):.0f} vs "
        f"{ms(best, 99):.0f} ms, loads {results[0].loads_per_1000:.0f} vs "
        f"{best.loads_per_1000:.0f} per 1,000.",
    ]
    return lines


def sized(shape: FleetShape, arrivals: list[Arrival], utilisation: float) -> FleetShape:
    """``shape`` with as many replicas as the requests' work needs at ``utilisation``:
    each request holds a batch lane for its first token, its other tokens and the
    prefill of its whole prompt (no cache hit assumed), over the trace's span."""
    span = max(a.t for a in arrivals) - min(a.t for a in arrivals) or 1.0
    work = sum(shape.ttft_s + (a.max_tokens - 1) * shape.itl_s
               + a.prompt_tokens * shape.prefill_s_per_token * shape.max_num_seqs
               for a in arrivals)  # fmt: skip
    lanes = work / (span * utilisation)
    return replace(shape, replicas=max(1, math.ceil(lanes / shape.max_num_seqs)))


Run = tuple[str, str, int]
"""(label, policy, router replicas)."""


def run_all(
    runs: list[Run], arrivals: list[Arrival], shape: FleetShape, args: argparse.Namespace,
    show: Callable[[RunResult], str],
) -> dict[str, RunResult]:  # fmt: skip
    """Every policy on a fresh fleet of ``shape``, each row printed as it is done."""
    results: dict[str, RunResult] = {}
    for label, policy, routers in runs:
        t0 = time.monotonic()
        knobs = args.ours_knobs if policy in (OURS, OURS_KV) else None
        results[label] = r = run_policy(label, policy, routers, arrivals, shape, knobs)
        print(f"{show(r)}  ({time.monotonic() - t0:.1f} s)", flush=True)
    return results


def setup(args: argparse.Namespace) -> tuple[FleetShape, list[Arrival], str]:
    """The fleet and the requests the arguments describe, and a sentence saying so
    (no requests: an empty list)."""
    shape = FleetShape(
        args.replicas, args.max_loras, args.max_num_seqs, args.ttft_s, args.itl_s,
        args.lora_load_s, args.scrape_interval, lora_disk_load_s=args.lora_disk_load_s,
        prefill_s_per_token=args.prefill_s_per_token, max_cpu_loras=args.max_cpu_loras,
        kv_cache_blocks=args.kv_cache_blocks,
    )  # fmt: skip
    if args.trace is not None:
        shape = shape.scaled(args.speed)
    arrivals, described = workload(args, shape)
    if arrivals and args.utilisation is not None:
        shape = sized(shape, arrivals, args.utilisation)
        described += f"; fleet sized for {args.utilisation:.0%} utilisation"
    return shape, arrivals, described


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM must unwind through the finally blocks so no replica or router outlives it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shape, arrivals, described = setup(args)
    if not arrivals:
        print("no requests to replay", file=sys.stderr)
        return 2
    runs = [(OURS, OURS, 1), (f"{OURS} x{args.routers}", OURS, args.routers),
            (PRECISE, PRECISE, 1), (LLMD, LLMD, 1), (BASELINE, BASELINE, 1),
            ("least-loaded", "least-loaded", 1), ("round-robin", "round-robin", 1)]  # fmt: skip
    if args.ours_kv_events:
        runs[2:2] = [(OURS_KV, OURS_KV, 1), (f"{OURS_KV} x{args.routers}", OURS_KV, args.routers)]
    started = time.monotonic()
    slos = tuple(sorted({*SLOS, *args.slo_ttft}))
    half = replace(shape, kv_cache_blocks=shape.kv_cache_blocks // 2) if args.half_kv else None
    _, bound, half_bound, bounds_line = prefix_bounds(arrivals, shape, half)
    print("\n".join(header(slos)), flush=True)
    results = run_all(runs, arrivals, shape, args, lambda r: row(r, slos))
    table = "\n".join([*header(slos), *(row(r, slos) for r in results.values())])
    offline, online, floor_lines = floors(args, shape, arrivals, results)
    verdict = [bounds_line, "", *goals(results, args.routers, offline, online, bound,
                                         stationary=args.trace is None), "",
               *floor_lines]  # fmt: skip
    print("\n".join(verdict))
    halved: list[str] = []
    if half is not None and half_bound is not None:
        print(f"\nAt half the KV ({half.kv_cache_blocks:,} blocks per replica):")
        print("\n".join(half_table({}, slos)), flush=True)
        low = run_all(runs, arrivals, half, args, lambda r: half_row(r, slos))
        ours = hit_rate(low[OURS])
        halved = [
            f"At half the KV cache ({half.kv_cache_blocks:,} blocks of {half.block_size} "
            "tokens per replica), the same requests:", "", *half_table(low, slos), "",
            f"- at half the KV, prefix hit rate >= 90% of the placement bound: {ours:.1%} "
            f"vs {half_bound.rate:.1%} (x0.9 = {0.9 * half_bound.rate:.1%}): "
            + ("met" if ours >= 0.9 * half_bound.rate - 1e-12 else "**not met**"),
        ]  # fmt: skip
        print(halved[-1])
    http = http_leg(args, shape, arrivals) if args.http else []
    if args.write:
        command = "python bench/routing.py " + " ".join(argv if argv is not None else sys.argv[1:])
        title = ("Routing: replica-picking policies on simulated vLLM replicas"
                 if args.section == "routing" else f"Routing on `{args.trace.name}`"
                 if args.trace is not None else f"Routing ({args.section})")
        body = "\n".join([
            f"## {title}",
            "",
            f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {machine_info().markdown()}; "
            f"`{command.strip()}` ({time.monotonic() - started:.0f} s wall; the policies' "
            "tables on a virtual clock" + (", the HTTP one in real time)." if http else ")."),
            "",
            f"Fleet: {shape.replicas} replicas, max_loras {shape.max_loras}, max_num_seqs "
            f"{shape.max_num_seqs}, TTFT {shape.ttft_s * 1000:g} ms once running, ITL "
            f"{shape.itl_s * 1000:g} ms, adapter load {shape.lora_load_s * 1000:g} ms from host "
            f"memory (+{shape.lora_disk_load_s * 1000:g} ms from disk), prefill "
            f"{shape.prefill_s_per_token * 1e6:g} us per uncached token, KV cache "
            f"{shape.kv_cache_blocks:,} blocks of {shape.block_size} tokens, metrics "
            f"read every {shape.scrape_interval * 1000:g} ms. Workload: {described}.",
            "",
            table,
            "",
            *verdict,
            *(["", *halved] if halved else []),
            *(["", *http] if http else []),
        ])  # fmt: skip
        from _plot import routing_figure

        routing_figure(list(results.values()), ROOT / f"docs/img/{args.section}.png",
                       f"{shape.replicas} simulated replicas, {described}")  # fmt: skip
        body += f"\n\n![Adapter loads and TTFT tail per policy](img/{args.section}.png)"
        write_section(ROOT / "docs/benchmarks.md", args.section, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
