"""Automatic routing accuracy and cost: a labelled prompt set through the router's signals.

`python bench/auto_routing.py [--prompts FILE.jsonl] [--write]`: every prompt
(`{"id", "expert", "prompt"}` a line; default bench/auto_routing_prompts.jsonl, four
experts, ~10% not in English, ~15% borderline) is routed three ways, with the router's
own code and the deployment file's example utterances, keywords and expert
descriptions (default deploy/examples/macaron-local.yaml):

- `semantic`: mol_router.semantic against a real embedding engine, vLLM's pooling
  runner on the packaged all-MiniLM-L6-v2 with the flags `mol up` and the operator use
  (started from $MOL_ENGINE_VENV, or `--embeddings-url`);
- `classifier`: the classifier expert asked as the router asks it (the same
  instructions, output constrained to the expert names), on a real vLLM engine: by
  default the bench starts the demo base with the demo classifier adapter preloaded
  (a random tiny model: its picks are near chance), or `--classifier-url` names an
  engine serving the classifier adapter (`--classifier-model` its served name);
- `semantic-then-classifier`: the semantic verdict where it decides, the classifier
  for the rest.

Reported per mode: accuracy overall, per expert and on the clear, borderline and
non-English prompts, a confusion matrix, the routing step's latency (p50/p99, the
turn's cache off, one request at a time) and the router-side CPU per decision.
`--no-classifier` skips the classifier (then semantic-then-classifier sends what the
semantic signal leaves open to the default expert, as the router does when the
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
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine_info
from _report import percentile, write_section
from mol_platform.apps.demo.build import build_demo
from mol_platform.apps.up.stack import embedding_model_dir
from mol_platform.contract.engine_args import EngineLaunch, embedding_args, engine_args
from mol_platform.contract.router_config import (
    RouterConfig,
    RouterSemantic,
    router_config_from_spec,
)
from mol_platform.contract.spec import MoLDeployment
from mol_router.classifier import instructions
from mol_router.selection import Routing
from mol_router.semantic import SemanticSignal

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = Path(__file__).resolve().parent / "auto_routing_prompts.jsonl"
DEPLOYMENT = ROOT / "deploy" / "examples" / "macaron-local.yaml"
PORT = 18395
CLASSIFIER_PORT = 18396


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=Path, default=PROMPTS,
                   help="labelled prompts, one {id, expert, prompt} JSON object a line")
    p.add_argument("--deployment", type=Path, default=DEPLOYMENT,
                   help="the MoLDeployment whose semantic examples and experts are used")
    p.add_argument("--embeddings-url", help="a running /v1/embeddings server (default: start "
                   "one on the packaged model from $MOL_ENGINE_VENV)")
    p.add_argument("--classifier-url", help="an engine serving the classifier adapter "
                   "(default: start the demo base with the demo classifier adapter)")
    p.add_argument("--classifier-model", default="classifier",
                   help="the classifier adapter's served name at --classifier-url")
    p.add_argument("--no-classifier", action="store_true",
                   help="do not measure the classifier expert")
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


def _launch(launch: EngineLaunch, log: Path) -> subprocess.Popen[bytes]:
    venv = os.environ.get("MOL_ENGINE_VENV")
    if not venv:
        raise SystemExit("set MOL_ENGINE_VENV (scripts/engine-venv.sh) or pass the engines' "
                         "URLs (--embeddings-url, --classifier-url)")
    with log.open("wb") as out:
        return subprocess.Popen([f"{venv}/bin/python", "-m", "mol_platform.apps.engine_launcher",
                                 *launch.serve_args], env={**os.environ, **launch.env},
                                stdout=out, stderr=subprocess.STDOUT)


def start_embedding_engine(logs: Path) -> tuple[subprocess.Popen[bytes], str]:
    launch = embedding_args(str(embedding_model_dir()),
                            served_model_name="all-minilm-l6-v2", host="127.0.0.1", port=PORT)
    return _launch(launch, logs / "embedding.log"), f"http://127.0.0.1:{PORT}"


def start_classifier_engine(obj: MoLDeployment, work: Path) -> tuple[subprocess.Popen[bytes],
                                                                      str]:
    """The demo base on vLLM's CPU build with the demo classifier adapter preloaded."""
    demo = build_demo(work / "demo")
    adapter = demo.adapters.get("router")
    if adapter is None:
        raise SystemExit("the demo build has no classifier (router) adapter")
    launch = engine_args(obj.spec, model=str(demo.base), host="127.0.0.1",
                         port=CLASSIFIER_PORT, cpu=True,
                         lora_modules={"classifier": str(adapter)},
                         extra_env={"VLLM_PLUGINS": ""})
    return _launch(launch, work / "classifier.log"), f"http://127.0.0.1:{CLASSIFIER_PORT}"


async def wait_up(url: str, within: float = 1200.0) -> None:
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
    """The classifier's pick, asked as mol_router.classifier asks it (None: no answer)."""
    body = {"model": model, "messages": [{"role": "system", "content": system},
                                         {"role": "user", "content": text}],
            "structured_outputs": {"choice": choices}, "max_tokens": 16, "temperature": 0,
            "stream": False}
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as r:
            data = await r.json()
        answer = data["choices"][0]["message"]["content"].strip()
    except (aiohttp.ClientError, KeyError, IndexError, TypeError, ValueError):
        return None
    return answer if answer in choices else None


class Timer:
    """Wall time and this process' CPU time of one routing step."""

    def __init__(self) -> None:
        self.latency: list[float] = []
        self.cpu: list[float] = []
        self.keywords = 0  # decisions the keywords made alone (no embedding call)

    def __enter__(self) -> Timer:
        self._t, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.latency.append(time.perf_counter() - self._t)
        self.cpu.append(time.process_time() - self._c)


async def run(args: argparse.Namespace, cfg: RouterConfig,
              classifier_url: str | None) -> dict[str, Any]:
    assert cfg.semantic is not None
    rows = load_prompts(args.prompts)
    routing = Routing.build(cfg)
    experts = [e.name for e in cfg.experts if e.name != cfg.classifier]
    choices = list(routing.classifier_choices)
    system = instructions(routing)
    out: dict[str, Any] = {"rows": rows, "experts": experts, "modes": {}}
    async with aiohttp.ClientSession() as session:
        sem_t, semantic, undecided = await semantic_mode(session, cfg, rows, cfg.semantic)
        out["modes"]["semantic"] = {"picked": semantic, "timer": sem_t,
                                    "keywords": sem_t.keywords}
        if cfg.semantic.keywords_decide:  # the same without keywords first, for the trade
            every = cfg.semantic.model_copy(update={"keywords_decide": False})
            timer, picked, _ = await semantic_mode(session, cfg, rows, every)
            out["modes"]["semantic, every turn embedded (keywordsDecide: false)"] = {
                "picked": picked, "timer": timer, "keywords": timer.keywords}
        picks: list[str | None] = []
        cls_t = Timer()
        if classifier_url is not None:
            await classify(session, classifier_url, args.classifier_model, system, choices,
                           "warm up")
            for row in rows:
                with cls_t:
                    picks.append(await classify(session, classifier_url,
                                                args.classifier_model, system, choices,
                                                row["prompt"]))
            out["modes"]["classifier"] = {
                "picked": [p or cfg.default for p in picks], "timer": cls_t,
                "unanswered": sum(p is None for p in picks)}
        # semantic first; the classifier for what it leaves open (its time counted once)
        both_t, both = Timer(), []
        for i, (best, open_) in enumerate(zip(semantic, undecided, strict=True)):
            both_t.latency.append(sem_t.latency[i])
            both_t.cpu.append(sem_t.cpu[i])
            if open_ and picks:
                both_t.latency[-1] += cls_t.latency[i]
                both_t.cpu[-1] += cls_t.cpu[i]
                both.append(picks[i] or cfg.default)
            else:
                both.append(best if not open_ else cfg.default)
        out["modes"]["semantic-then-classifier"] = {
            "picked": both, "timer": both_t, "undecided": sum(undecided),
            "classifier": classifier_url is not None}
    return out


async def semantic_mode(session: aiohttp.ClientSession, cfg: RouterConfig,
                        rows: list[dict[str, Any]], semantic: RouterSemantic
                        ) -> tuple[Timer, list[str], list[bool]]:
    """Mode ``semantic`` over the prompts: the timer, the picks, which were undecided."""
    # The examples' one call may take long on a loaded CPU; each turn's gets 10 s.
    signal = SemanticSignal(semantic.model_copy(update={"cache_size": 0}), timeout=300.0)
    await signal.ready(session)
    signal.timeout = 10.0
    await signal.verdict(session, "warm up")
    timer, picked, undecided = Timer(), [], []
    for row in rows:
        with timer:
            verdict, error = await signal.verdict(session, row["prompt"])
        if error is not None:
            raise SystemExit(f"embedding failed: {error}")
        picked.append(verdict.expert or cfg.default)  # what mode semantic does
        undecided.append(verdict.expert is None)
        timer.keywords += verdict.signal == "keywords"
    return timer, picked, undecided


def accuracy(rows: list[dict[str, Any]], picked: list[str], keep: Any = None) -> str:
    pairs = [(r, p) for r, p in zip(rows, picked, strict=True) if keep is None or keep(r)]
    if not pairs:
        return "-"
    right = sum(r["expert"] == p for r, p in pairs)
    return f"{100 * right / len(pairs):.1f}% ({right}/{len(pairs)})"


def report(result: dict[str, Any], prompts: Path, classifier: str) -> str:
    rows, experts = result["rows"], result["experts"]
    info = machine_info()
    lines = ["## Automatic routing: accuracy and cost (`bench/auto_routing.py`)", "",
             f"{dt.date.today().isoformat()}, {info.markdown()}; "
             f"{len(rows)} prompts from `{prompts.name}`, examples, keywords and expert "
             "descriptions of `deploy/examples/macaron-local.yaml`; all-MiniLM-L6-v2 on "
             f"vLLM 0.32 (CPU, pooling runner, the flags of `embedding_args`); {classifier}.",
             "", "| mode | accuracy | routing step p50 | p99 | router CPU / decision |",
             "|---|---|---|---|---|"]
    for mode, m in result["modes"].items():
        lat = [x * 1000 for x in m["timer"].latency]
        cpu = [x * 1000 for x in m["timer"].cpu]
        lines.append(f"| {mode} | {accuracy(rows, m['picked'])} | "
                     f"{percentile(lat, 50):.1f} ms | {percentile(lat, 99):.1f} ms | "
                     f"{sum(cpu) / len(cpu):.2f} ms |")
    lines += ["", "Latency is the routing step alone (embedding call and scoring, or the "
              "classifier's completion), one request at a time, the turn cache off; the "
              "CPU is the router process' (the engines' own CPU is not included).", ""]
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
        if "unanswered" in m:
            lines += ["", f"{m['unanswered']} prompts got no valid answer (counted as the "
                      "default expert's, as the router does)."]
        if m.get("keywords"):
            lines += ["", f"{m['keywords']} of {len(rows)} prompts were decided by keywords "
                      "alone (no embedding call)."]
        if "undecided" in m:
            lines += ["", f"{m['undecided']} prompts below the threshold or margin went to "
                      + ("the classifier expert." if m["classifier"] else
                         "the default expert (`--no-classifier`).")]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    obj = MoLDeployment.from_yaml(args.deployment.read_text(encoding="utf-8"))
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="mol-auto-routing-") as tmp:
        work = Path(tmp)
        try:
            url = args.embeddings_url
            if url is None:
                proc, url = start_embedding_engine(work)
                procs.append(proc)
            classifier_url = None if args.no_classifier else args.classifier_url
            described = ("classifier: not measured" if args.no_classifier else
                         f"classifier: the engine at {args.classifier_url}")
            if classifier_url is None and not args.no_classifier:
                if obj.spec.router.classifier is None:
                    raise SystemExit(f"{args.deployment} names no router.classifier")
                proc, classifier_url = start_classifier_engine(obj, work)
                procs.append(proc)
                args.classifier_model = "classifier"
                described = ("classifier: the demo adapter on the random tiny demo base "
                             "(vLLM CPU, the deployment's engine flags)")
            asyncio.run(wait_up(url.removesuffix("/v1")))
            if classifier_url is not None:
                asyncio.run(wait_up(classifier_url))
            cfg = router_config_from_spec(obj, endpoints=["http://127.0.0.1:1"],
                                          embeddings_url=url)
            result = asyncio.run(run(args, cfg, classifier_url))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    text = report(result, args.prompts, described)
    print(text)
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", "auto-routing", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
