"""The GPU check's figures as JSON (kept after every phase) and as a Markdown section.

The JSON is rewritten after each phase, so a run stopped by its time limit still
leaves what it measured, with ``status`` naming the phase it was in. A dry run's
figures say so in their label and in the Markdown: they come from vLLM's CPU build and
the tiny demo model, and only show that every step works.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

JSON_NAME = "gpu-check.json"
MD_NAME = "gpu-check.md"
DRY_RUN_LABEL = ("CPU dry run: vLLM's CPU build and the tiny demo model; these figures only "
                 "show that every step runs, they are not performance figures")
GPU_LABEL = "GPU run"


def write_json(out: Path, figures: dict[str, Any]) -> Path:
    """Write atomically (a reader never sees half a file)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / JSON_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(figures, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def _ms(seconds: object) -> str:
    return f"{float(seconds) * 1000:.1f} ms" if isinstance(seconds, int | float) else "-"


def _tiers(tiers: dict[str, Any]) -> list[str]:
    lines = [f"Base model alone, one-token completion: {_ms(tiers['base_first_token_s'])} "
             f"(median of {tiers['repeats']}).", "",
             "| rank | adapter size | from disk | from the host cache | resident | "
             "disk: load API + first token | loads seen (disk reads / GPU slot loads) |",
             "|---|---|---|---|---|---|---|"]
    for row in tiers["by_rank"]:
        seen = ", ".join(f"{tier} {n.get('cpu', 0)}/{n.get('gpu', 0)}"
                         for tier, n in row["loads"].items())
        lines.append(f"| {row['rank']} | {row['adapter_bytes'] / 1e6:.1f} MB | "
                     f"{_ms(row['disk_s'])} | {_ms(row['host_s'])} | {_ms(row['resident_s'])} | "
                     f"{_ms(row['load_api_s'])} + {_ms(row['first_token_after_load_s'])} | "
                     f"{seen} |")
    return lines


def _throughput(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| through | distinct adapters | output tokens/s | TTFT p50 | TTFT p99 | errors |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        adapters = "none (base model)" if r["adapters"] == 0 else str(r["adapters"])
        lines.append(f"| {r['target']} | {adapters} | {r['tokens_per_s']:.1f} | "
                     f"{_ms(r['ttft_p50_s'])} | {_ms(r['ttft_p99_s'])} | {r['errors']} |")
    return lines


def markdown(figures: dict[str, Any]) -> str:
    """The section, from whatever phases the figures hold."""
    plan = figures["plan"]
    model = plan["model"]
    lines = ["## GPU check (`bench/gpu/run.sh`)", "", f"**{figures['label']}.**", "",
             f"Measured {figures['measured_at']} on {figures['machine']}; GPU: "
             f"{figures.get('gpu') or 'none'}; vLLM {figures.get('vllm_version', '?')}; "
             f"base `{model['base']}` ({model['params'] / 1e9:.3f}B parameters, random "
             f"weights); engine --max-loras {plan['max_loras']} --max-lora-rank "
             f"{plan['max_lora_rank']} --max-cpu-loras {plan['max_cpu_loras']}; "
             f"status: {figures['status']}.", ""]
    if "startup_s" in figures:
        s = figures["startup_s"]
        lines += [f"Start-up: assets built in {figures['build_s']:.1f} s; catalog "
                  f"{s['catalog']:.1f} s, engine {s['engine']:.1f} s, router {s['router']:.1f} s; "
                  f"{figures.get('published', 0)} adapters published in "
                  f"{figures.get('publish_s', 0.0):.1f} s.", ""]
    if "load_tiers" in figures:
        lines += ["### Adapter load time by tier (to the first token, straight to the engine)",
                  "", *_tiers(figures["load_tiers"]), ""]
    if "throughput" in figures:
        t = figures["throughput"][0]
        lines += ["### Throughput and TTFT by distinct adapters in the batch", "",
                  f"{t['requests']} streamed completions per row, {t['concurrency']} at a time, "
                  f"{t['max_tokens']} tokens each, a {plan['prompt_words']}-word prompt; "
                  "adapters are rank 8 on every linear module, warmed up before each row.", "",
                  *_throughput(figures["throughput"]), ""]
    if "router_overhead" in figures:
        lines += ["Router against the engine alone, same adapters:", ""]
        for o in figures["router_overhead"]:
            lines.append(f"- {o['adapters']} adapter(s): throughput x{o['throughput_ratio']:.3f}, "
                         f"TTFT p50 {o['ttft_p50_added_s'] * 1000:+.1f} ms")
        lines.append("")
    if "time_to_serve" in figures:
        t = figures["time_to_serve"]
        lines += ["### Time to serve: publish -> first token through the router", "",
                  f"{t['runs']} new adapters (rank 8, q/v): p50 {_ms(t['p50_s'])}, max "
                  f"{_ms(t['max_s'])}; of which catalog resolve {_ms(t['resolve_p50_s'])}, "
                  f"download into the cache {_ms(t['fetch_p50_s'])}, warm first token "
                  f"{_ms(t['warm_first_token_p50_s'])} (p50s).", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_markdown(out: Path, figures: dict[str, Any]) -> Path:
    path = out / MD_NAME
    path.write_text(markdown(figures))
    return path
