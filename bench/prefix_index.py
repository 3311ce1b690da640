"""The router's prefix index: memory at 1M cached prefixes and the hashing cost per request.

One command (`python bench/prefix_index.py [--write]`): fills a ``PrefixIndex`` with
1,000,000 prefix keys from synthetic sessions over 16 endpoints (memory measured with
tracemalloc, bytes per entry), then times ``prefix_keys`` on chat prompts as JSON of
~1k, ~4k and ~32k tokens (4 characters a token) and ``matches`` against 16 endpoints.
The goal: <= 200 MB at 1M cached blocks, and no tokenizer on the hot path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine_info
from _report import write_section
from mol_router.replicas.policy.prefix import PrefixIndex, prefix_keys

ROOT = Path(__file__).resolve().parents[1]


def memory(entries: int, endpoints: int) -> tuple[int, float]:
    gc.collect()
    tracemalloc.start()
    index = PrefixIndex(capacity=entries)
    i = 0
    while len(index) < entries:
        keys = tuple(range(i * 64, i * 64 + 32))  # 32 distinct keys a request
        index.record(tuple(k * 0x9E3779B97F4A7C15 % (1 << 64) for k in keys),
                     f"http://engine-{i % endpoints}:8000")  # fmt: skip
        i += 1
    gc.collect()
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return used, used / len(index)


def prompt(tokens: int) -> bytes:
    system = "You are Macaron's coding expert. Follow the house style. " * 16
    turns = [{"role": "system", "content": system}]
    n = 0
    while len(json.dumps(turns)) < tokens * 4:
        turns.append({"role": "user" if n % 2 == 0 else "assistant",
                      "content": f"turn {n}: " + "words of the conversation " * 20})  # fmt: skip
        n += 1
    return json.dumps(turns).encode()


def timing(data: bytes, repeat: int) -> float:
    best = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(repeat):
            prefix_keys(data, "ns/coder@v3")
        best.append((time.perf_counter() - t) / repeat)
    return statistics.median(best) * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=1_000_000)
    p.add_argument("--endpoints", type=int, default=16)
    p.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    args = p.parse_args(argv)
    if args.entries < 1 or not 1 <= args.endpoints <= 4096:
        p.error("--entries must be >= 1 and --endpoints in 1..4096")
    used, per = memory(args.entries, args.endpoints)
    print(f"index: {args.entries:,} entries, {used / 1e6:.0f} MB ({per:.0f} B/entry)")
    rows = []
    for tokens in (1000, 4000, 32000):
        data = prompt(tokens)
        keys = prefix_keys(data, "ns/coder@v3")
        us = timing(data, 200)
        index = PrefixIndex()
        for e in range(args.endpoints):
            index.record(keys[: len(keys) * (e + 1) // args.endpoints], f"e{e}")
        t = time.perf_counter()
        for _ in range(200):
            index.matches(keys, [f"e{e}" for e in range(args.endpoints)])
        match_us = (time.perf_counter() - t) / 200 * 1e6
        rows.append(f"| ~{tokens:,} ({len(data) / 1024:.0f} KB of JSON) | {len(keys)} "
                    f"| {us:.1f} | {match_us:.1f} |")  # fmt: skip
        print(rows[-1])
    if args.write:
        body = "\n".join([
            "## Prefix index: memory and hashing cost",
            "",
            f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {machine_info().markdown()}; "
            f"`python bench/prefix_index.py {' '.join(argv or sys.argv[1:])}`.",
            "",
            f"Memory: {args.entries:,} prefix entries over {args.endpoints} endpoints take "
            f"**{used / 1e6:.0f} MB** ({per:.0f} bytes an entry; goal <= 200 MB at 1M).",
            "",
            "| prompt | prefix keys | prefix_keys µs | matches over "
            f"{args.endpoints} endpoints µs |",
            "|---|---:|---:|---:|",
            *rows,
        ])  # fmt: skip
        write_section(ROOT / "docs/benchmarks.md", "prefix-index", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
