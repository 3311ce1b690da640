"""Automatic routing accuracy and cost: a labelled prompt set through the router's signals.

`python bench/auto_routing.py [--prompts FILE.jsonl] [--write]`: every prompt
(`{"id", "expert", "prompt"}` a line; default bench/auto_routing_prompts.jsonl, four
experts, ~10% not in English, ~15% borderline) goes through the router's own semantic
signal (mol_router.semantic, the code `mol router serve` runs) with the example
utterances and keywords of the deployment file (default
deploy/examples/macaron-local.yaml), against a real embedding engine: vLLM's pooling
runner on the packaged all-MiniLM-L6-v2 (started from the engine venv, or
`--embeddings-url`). Reported per mode: accuracy per expert and overall, on the clear,
borderline and non-English prompts, a confusion matrix, and the routing step's latency
(p50/p99, the turn's cache off) and the router-side CPU per decision.

`semantic-then-classifier` sends what the semantic signal leaves undecided to the
classifier expert: with `--classifier-url` (an engine serving the deployment's
classifier adapter, e.g. `mol up`'s engine) it is asked as the router asks it;
without, those prompts count as the default expert's (what the router does when the
classifier cannot answer).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine_info
from _report import percentile, write_section
from mol_platform.apps.up.stack import embedding_model_dir
from mol_platform.contract.engine_args import embedding_args
from mol_platform.contract.router_config import router_config_from_spec
from mol_platform.contract.spec import MoLDeployment
from mol_router.semantic import SemanticSignal

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = Path(__file__).resolve().parent / "auto_routing_prompts.jsonl"
DEPLOYMENT = ROOT / "deploy" / "examples" / "macaron-local.yaml"
PORT = 18395


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=Path, default=PROMPTS)
    p.add_argument("--deployment", type=Path, default=DEPLOYMENT)
    p.add_argument("--embeddings-url", help="a running /v1/embeddings server (default: start "
                   "one on the packaged model from $MOL_ENGINE_VENV)")
    p.add_argument("--classifier-url", help="an engine serving the classifier adapter")
    p.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    return p.parse_args(argv)


def load_prompts(path: Path) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            if not {"id", "expert", "prompt"} <= row.keys():
                raise SystemExit(f"{path}:{n}: each line needs id, expert and prompt")
            rows.append(row)
    return rows


def start_engine() -> tuple[subprocess.Popen[bytes], str]:
    venv = os.environ.get("MOL_ENGINE_VENV")
    if not venv:
        raise SystemExit("set MOL_ENGINE_VENV (scripts/engine-venv.sh) or --embeddings-url")
    launch = embedding_args(str(embedding_model_dir()),
                            served_model_name="all-minilm-l6-v2", host="127.0.0.1", port=PORT)
    proc = subprocess.Popen([f"{venv}/bin/python", "-m", "mol_platform.apps.engine_launcher",
                             *launch.serve_args], env={**os.environ, **launch.env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{PORT}"


async def wait_up(url: str, within: float = 600.0) -> None:
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(2)
    raise SystemExit(f"embedding engine at {url} did not come up in {within:.0f} s")


async def classify(session: aiohttp.ClientSession, url: str, model: str, system: str,
                   choices: list[str], text: str) -> str | None:
    body = {"model": model, "messages": [{"role": "system", "content": system},
                                         {"role": "user", "content": text}],
            "structured_outputs": {"choice": choices}, "max_tokens": 16, "temperature": 0}
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as r:
            data = await r.json()
        answer = data["choices"][0]["message"]["content"].strip()
    except (aiohttp.ClientError, KeyError, IndexError, ValueError):
        return None
    return answer if answer in choices else None


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    obj = MoLDeployment.from_yaml(args.deployment.read_text(encoding="utf-8"))
    cfg = router_config_from_spec(obj, endpoints=["http://127.0.0.1:1"], embeddings_url=url)
    assert cfg.semantic is not None
    signal = SemanticSignal(cfg.semantic.model_copy(update={"cache_size": 0}),
                            timeout=10.0)
    rows = load_prompts(args.prompts)
    experts = [e.name for e in cfg.experts if e.name != cfg.classifier]
    out: dict[str, Any] = {"rows": rows, "experts": experts, "modes": {}}
    async with aiohttp.ClientSession() as session:
        await signal.index(session)
        await signal.verdict(session, "warm up")
        semantic, undecided, lat, cpu = [], [], [], []
        for row in rows:
            t0, c0 = time.perf_counter(), time.process_time()
            verdict, error = await signal.verdict(session, row["prompt"])
            lat.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            if error is not None:
                raise SystemExit(f"embedding failed: {error}")
            semantic.append(verdict.expert or cfg.default)  # what mode semantic does
            undecided.append(verdict.expert is None)
        out["modes"]["semantic"] = {"picked": semantic, "latency": lat, "cpu": cpu}
        picked = []
        system = ""
        if args.classifier_url and cfg.classifier is not None:
            from mol_router.classifier import instructions
            from mol_router.selection import Routing
            system = instructions(Routing.build(cfg))
        for row, best, open_ in zip(rows, semantic, undecided, strict=True):
            if not open_:
                picked.append(best)
            elif args.classifier_url and cfg.classifier is not None:
                adapter = next(e.adapter for e in cfg.experts if e.name == cfg.classifier)
                picked.append(await classify(session, args.classifier_url, adapter, system,
                                             experts, row["prompt"]) or cfg.default)
            else:
                picked.append(cfg.default)
        out["modes"]["semantic-then-classifier"] = {
            "picked": picked, "undecided": sum(undecided),
            "classifier": bool(args.classifier_url)}
    return out


def accuracy(rows: list[dict[str, Any]], picked: list[str], keep: Any = None) -> str:
    pairs = [(r, p) for r, p in zip(rows, picked, strict=True) if keep is None or keep(r)]
    if not pairs:
        return "-"
    right = sum(r["expert"] == p for r, p in pairs)
    return f"{100 * right / len(pairs):.1f}% ({right}/{len(pairs)})"


def report(result: dict[str, Any], prompts: Path) -> str:
    rows, experts = result["rows"], result["experts"]
    info = machine_info()
    lines = ["## Automatic routing: accuracy and cost (`bench/auto_routing.py`)", "",
             f"{dt.date.today().isoformat()}, {info.markdown()}; "
             f"{len(rows)} prompts from `{prompts.name}`, examples and keywords of "
             "`deploy/examples/macaron-local.yaml`, all-MiniLM-L6-v2 on vLLM 0.32 (CPU, "
             "pooling runner).", ""]
    for mode, m in result["modes"].items():
        picked = m["picked"]
        lines += [f"### {mode}", "", "| prompts | accuracy |", "|---|---|",
                  f"| all | {accuracy(rows, picked)} |",
                  f"| clear | {accuracy(rows, picked, lambda r: not r.get('borderline'))} |",
                  f"| borderline | {accuracy(rows, picked, lambda r: r.get('borderline'))} |",
                  f"| not English | {accuracy(rows, picked, lambda r: r.get('lang'))} |"]
        lines += [f"| {e} | {accuracy(rows, picked, lambda r, e=e: r['expert'] == e)} |"
                  for e in experts]
        conf = Counter((r["expert"], p) for r, p in zip(rows, picked, strict=True))
        lines += ["", "| labelled \\ routed | " + " | ".join(experts) + " |",
                  "|---" * (len(experts) + 1) + "|"]
        lines += [f"| {a} | " + " | ".join(str(conf[(a, b)]) for b in experts) + " |"
                  for a in experts]
        if "latency" in m:
            lat = [x * 1000 for x in m["latency"]]
            cpu = [x * 1000 for x in m["cpu"]]
            lines += ["", f"Routing step (embedding call + scoring, cache off): p50 "
                      f"{percentile(lat, 50):.1f} ms, p99 {percentile(lat, 99):.1f} ms; "
                      f"router-side CPU {sum(cpu) / len(cpu):.2f} ms per decision (the "
                      "embedding engine's own CPU is not included)."]
        if "undecided" in m:
            lines += ["", f"{m['undecided']} prompts below the threshold or margin went to "
                      + ("the classifier expert." if m["classifier"] else
                         "the default expert (no `--classifier-url`: the classifier on the "
                         "random demo model was not asked).")]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    proc = None
    url = args.embeddings_url
    if url is None:
        proc, url = start_engine()
    try:
        asyncio.run(wait_up(url.removesuffix("/v1")))
        result = asyncio.run(run(args, url))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
    text = report(result, args.prompts)
    print(text)
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", "auto-routing", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
