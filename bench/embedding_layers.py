"""How many of all-MiniLM-L6-v2's layers a trained router head needs: accuracy against
the routing step's latency, one cut after another.

`python bench/embedding_layers.py [--prompts held-out.jsonl] [--layers 1,2,3,4,5,6]
[--write]` runs `bench/auto_routing.py --layers N` for each N (the head trained on the
project's set, judged on `--prompts` or on the set's halves; no classifier), with one
engine on the full model for the near-duplicate check shared by all runs, and prints one
row per cut: the head's nested cross-validation on the training set, its accuracy on the
judged prompts (all, not English, borderline), and the routing step p50/p99 and router
CPU with every turn embedded. The default embedding model (`all-minilm-l6-v2-l3`) is the
3-layer cut; the choice is made on the cross-validation column, which only the
training set enters. `--write` puts the table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _auto_routing_report import HEAD, HEAD_EVERY
from _machine import machine_info
from _report import write_section
from auto_routing import (
    PROMPTS,
    REFERENCE_PORT,
    start_embedding_engine,
    wait_up,
)
from mol_platform.apps.embedding_model import packaged_dir
from mol_platform.contract.embedding_models import (
    DEFAULT_EMBEDDING_MODEL,
    MINILM,
    PACKAGED_LAYERS,
)

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent / "auto_routing.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", type=Path, default=PROMPTS,
                   help="labelled prompts the heads are trained on (default: the project's)")
    p.add_argument("--prompts", type=Path, help="labelled prompts to judge (default: the "
                   "training file's halves)")
    p.add_argument("--layers", default="1,2,3,4,5,6",
                   help="the cuts to measure, comma-separated (1..6)")
    p.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    args = p.parse_args(argv)
    try:
        args.cuts = sorted({int(x) for x in args.layers.split(",")})
    except ValueError:
        p.error("--layers takes numbers such as 1,3,6")
    if not all(1 <= n <= 6 for n in args.cuts):
        p.error("--layers must be within 1..6")
    return args


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def table(runs: dict[int, dict[str, Any]]) -> list[str]:
    lines = ["| layers | CV (training set, mean of the fold seeds) | judged | not English | "
             "borderline | routing step p50 | p99 | router CPU |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, s in runs.items():
        head, every = s["modes"][HEAD], s["modes"][HEAD_EVERY]
        mark = " (the default)" if n == PACKAGED_LAYERS[DEFAULT_EMBEDDING_MODEL] else ""
        seeds = s["cvSeeds"]
        lines.append(f"| {n}{mark} | {_pct(sum(seeds) / len(seeds))} | "
                     f"{_pct(head['accuracy'])} | "
                     f"{_pct(head['notEnglish'])} | {_pct(head['borderline'])} | "
                     f"{every['p50Ms']:.1f} ms | {every['p99Ms']:.1f} ms | "
                     f"{every['cpuMs']:.2f} ms |")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="mol-embedding-layers-") as tmp:
        work = Path(tmp)
        ref, ref_url = start_embedding_engine(work, MINILM, packaged_dir(), REFERENCE_PORT)
        try:
            asyncio.run(wait_up(ref_url))
            for n in args.cuts:
                out = work / f"layers-{n}.json"
                cmd = [sys.executable, str(BENCH), "--train", str(args.train),
                       "--layers", str(n), "--reference-url", ref_url, "--no-classifier",
                       "--no-full", "--summary", str(out)]
                if args.prompts is not None:
                    cmd += ["--prompts", str(args.prompts)]
                print(f"--- {n} layer(s)", flush=True)
                done = subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
                if done.returncode != 0:
                    raise SystemExit(f"bench/auto_routing.py --layers {n} failed "
                                     f"({done.returncode})")
                runs[n] = json.loads(out.read_text())
                print("\n".join(table({n: runs[n]})[2:]), flush=True)
        finally:
            ref.terminate()
            ref.wait(timeout=60)
    judged = next(iter(runs.values()))["judged"]
    text = "\n".join([
        "## Automatic routing: how many embedding layers (`bench/embedding_layers.py`)", "",
        f"{dt.date.today().isoformat()}, {machine_info().markdown()}; heads trained on "
        f"`{args.train.name}`, judged: {judged}. Each row embeds with the first N layers of "
        f"all-MiniLM-L6-v2 (mean-pooled, normalised, no retraining; 3 is "
        f"`{DEFAULT_EMBEDDING_MODEL}`, 6 the full model) on vLLM 0.32 (CPU, the flags of "
        "`embedding_args`); accuracy as the router routes (`semantic`), latency with "
        "every turn embedded, one request at a time.", "", *table(runs), ""])
    print(text)
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", "embedding-layers", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
