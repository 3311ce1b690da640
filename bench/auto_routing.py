"""Automatic routing accuracy and cost, on prompts the router was not trained on.

`python bench/auto_routing.py [--train FILE.jsonl] [--prompts FILE.jsonl] [--write]`:
the trained head (`mol router train`'s recipe, mol_router.head_train) is fitted on
`--train` (default: the project's own bench/auto_routing_prompts.jsonl, four experts,
~16% not in English in 13 languages, ~16% borderline) and judged on `--prompts`, a labelled file
(`{"text" or "prompt", "expert"}` a line, `lang` and `borderline` optional) that the
training never saw. The bench refuses to report when the two overlap: the same text
(case and spacing folded) or a near duplicate (cosine >= --near-duplicate by the
embedding model). Without `--prompts` it splits the training file in two halves
(half of every expert's prompts each), trains on one and judges the other, both ways,
so every prompt is judged by a head that never saw it; and it reports the head's
nested k-fold cross-validation on the whole training file.

Modes, with the router's own code (mol_router.semantic) against a real embedding
engine, vLLM's pooling runner on the packaged all-MiniLM-L6-v2 with the flags `mol up`
and the operator use (started from $MOL_ENGINE_VENV, or `--embeddings-url`):

- `semantic`: the trained head as the router runs it (the deployment's default
  automatic mode): keywords first where the training data showed them unambiguous
  and, out of fold, no worse than the head (candidates: the deployment file's
  keywords), then the head (the embedding and character 3- and 4-grams), below its
  confidence threshold the default expert;
- `semantic, every turn embedded (keywordsDecide: false)`: the head alone;
- `semantic, keywords first kept whatever their out-of-fold record`: keywords
  unambiguous on the training data come first even where, out of fold, they routed
  worse than the head (which `mol router train` checks, dropping them then);
- `nearest training example`: the expert of the closest training prompt (a baseline);
- `hand-written examples and keywords`: the deployment file's examples scored as
  before the head (`0.5 nearest + 0.5 centroid + 0.1 keywords`); they were written
  with the project's set in view, so on it this line is not a held-out figure;
- `classifier` and `semantic-then-classifier` with `--classifier-url` (or the demo
  classifier on the random tiny demo base, near chance); `--no-classifier` skips them.

Reported per mode: accuracy overall, per expert, per language and on the clear and
borderline prompts, a confusion matrix, the routing step's latency (p50/p99, the
turn's cache off, one request at a time) and the router-side CPU per decision.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
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
from mol_router.head import Head
from mol_router.head_cli import train as train_head
from mol_router.head_source import HeadSource
from mol_router.head_train import (
    NEAR_DUPLICATE,
    Labelled,
    load_labelled,
    overlaps,
    split_halves,
)
from mol_router.selection import Routing
from mol_router.semantic import SemanticSignal, embed_many

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = Path(__file__).resolve().parent / "auto_routing_prompts.jsonl"
DEPLOYMENT = ROOT / "deploy" / "examples" / "macaron-local.yaml"
PORT = 18395
CLASSIFIER_PORT = 18396


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", type=Path, default=PROMPTS,
                   help="labelled prompts the head is trained on (default: the project's set)")
    p.add_argument("--prompts", type=Path, help="labelled prompts to judge, never trained on "
                   "(default: the training file split in two halves, judged both ways)")
    p.add_argument("--deployment", type=Path, default=DEPLOYMENT,
                   help="the MoLDeployment whose experts, default, keywords and examples are used")
    p.add_argument("--embeddings-url", help="a running /v1/embeddings server (default: start "
                   "one on the packaged model from $MOL_ENGINE_VENV)")
    p.add_argument("--near-duplicate", type=float, default=NEAR_DUPLICATE,
                   help="cosine at which a judged prompt counts as a training one's duplicate")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds on --train")
    p.add_argument("--classifier-url", help="an engine serving the classifier adapter "
                   "(default: start the demo base with the demo classifier adapter)")
    p.add_argument("--classifier-model", default="classifier",
                   help="the classifier adapter's served name at --classifier-url")
    p.add_argument("--no-classifier", action="store_true",
                   help="do not measure the classifier expert")
    p.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    return p.parse_args(argv)


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


def head_source(head: Head) -> HeadSource:
    """A source serving ``head`` read from its file, as the router reads
    ``semantic.headFile`` (the same bytes, digest and keyword index)."""
    with tempfile.TemporaryDirectory(prefix="mol-bench-head-") as tmp:
        path = Path(tmp) / "head.json"
        path.write_bytes(head.dumps())
        return HeadSource.of_file(str(path))


HEAD = "semantic"
HEAD_EVERY = "semantic, every turn embedded (keywordsDecide: false)"
HEAD_KEYWORDS = "semantic, keywords first kept whatever their out-of-fold record"
NEAREST = "nearest training example"
EXAMPLES = "hand-written examples and keywords (before the head)"


async def run(args: argparse.Namespace, cfg: RouterConfig, classifier_url: str | None,
              train: list[Labelled], test: list[Labelled] | None) -> dict[str, Any]:
    """Every mode over the judged prompts; with ``test`` None, the halves of ``train``."""
    assert cfg.semantic is not None
    sem = cfg.semantic
    keywords = {e.name: list(e.keywords) for e in sem.experts}
    x_train = await embed_many(sem.embeddings_url, sem.model, [r.text for r in train])
    if test is None:
        a, b = split_halves(train)
        plan = [(a, b), (b, a)]
        rows = train
        x_test = x_train
        judged = "the training file in two halves (half of every expert's prompts each), " \
            "a head trained on each half judging the other"
    else:
        rows = test
        x_test = await embed_many(sem.embeddings_url, sem.model, [r.text for r in test])
        plan = [(list(range(len(train))), list(range(len(test))))]
        judged = f"`{args.prompts.name}`, a head trained on all of `{args.train.name}`"
    out: dict[str, Any] = {"rows": rows, "experts": sorted({r.expert for r in rows}),
                           "modes": {}, "judged": judged}
    found: list[tuple[str, str, float]] = []
    for fit, judge in plan:
        tr = [train[i] for i in fit]
        te = [rows[i] for i in judge]
        found += [(te[t].text, tr[j].text, c) for t, j, c in
                  overlaps(tr, x_train[fit], te, x_test[judge], args.near_duplicate)]
    if found:
        lines = "\n".join(f"  {c:.3f}  {a!r} ~ {b!r}" for a, b, c in found[:20])
        raise SystemExit(f"refusing to report: {len(found)} judged prompts repeat training "
                         f"ones (same text or cosine >= {args.near_duplicate}):\n{lines}")
    out["cv"] = train_head(train, x_train, sem.model, keywords=keywords, default=cfg.default,
                           folds=args.folds, source=args.train.name).report
    n = len(rows)
    picks: dict[str, list[str]] = {m: [""] * n
                                   for m in (HEAD, HEAD_EVERY, HEAD_KEYWORDS, NEAREST)}
    timers = {HEAD: Timer(), HEAD_EVERY: Timer(), HEAD_KEYWORDS: Timer()}
    undecided = [False] * n
    head_seconds, head_cpu = [0.0] * n, [0.0] * n  # the head's step, by row
    heads: list[Head] = []
    async with aiohttp.ClientSession() as session:
        for fit, judge in plan:
            tr = [train[i] for i in fit]
            head = train_head(tr, x_train[fit], sem.model, keywords=keywords,
                              default=cfg.default, folds=args.folds).head
            forced = train_head(tr, x_train[fit], sem.model, keywords=keywords,
                                default=cfg.default, folds=args.folds,
                                keywords_gate=False).head
            heads.append(head)
            for mode, first, used in ((HEAD, sem.keywords_decide, head),
                                      (HEAD_EVERY, False, head),
                                      (HEAD_KEYWORDS, True, forced)):
                signal = SemanticSignal(sem.model_copy(update={
                    "cache_size": 0, "keywords_decide": first}), timeout=10.0,
                    heads=head_source(used))
                await signal.verdict(session, "warm up")
                for i in judge:
                    with timers[mode]:
                        verdict, error = await signal.verdict(session, rows[i].text)
                    if error is not None:
                        raise SystemExit(f"embedding failed: {error}")
                    picks[mode][i] = verdict.expert or cfg.default
                    timers[mode].keywords += verdict.signal == "keywords"
                    if mode == HEAD:
                        undecided[i] = verdict.expert is None
                        head_seconds[i] = timers[mode].latency[-1]
                        head_cpu[i] = timers[mode].cpu[-1]
            nearest = (x_test[judge] @ x_train[fit].T).argmax(axis=1)
            for i, j in zip(judge, nearest, strict=True):
                picks[NEAREST][i] = tr[int(j)].expert
        ex_t, ex_picks, _ = await semantic_mode(session, cfg, rows, sem)
        out["modes"][HEAD] = {"picked": picks[HEAD], "timer": timers[HEAD],
                              "keywords": timers[HEAD].keywords, "below": sum(undecided)}
        out["modes"][HEAD_EVERY] = {"picked": picks[HEAD_EVERY], "timer": timers[HEAD_EVERY]}
        out["modes"][HEAD_KEYWORDS] = {"picked": picks[HEAD_KEYWORDS],
                                       "timer": timers[HEAD_KEYWORDS],
                                       "keywords": timers[HEAD_KEYWORDS].keywords}
        out["modes"][NEAREST] = {"picked": picks[NEAREST], "timer": None}
        out["modes"][EXAMPLES] = {"picked": ex_picks, "timer": ex_t,
                                  "keywords": ex_t.keywords}
        out["heads"] = heads
        if classifier_url is not None:
            routing = Routing.build(cfg)
            choices = list(routing.classifier_choices)
            system = instructions(routing)
            cls_t, answers = Timer(), []
            await classify(session, classifier_url, args.classifier_model, system, choices,
                           "warm up")
            for row in rows:
                with cls_t:
                    answers.append(await classify(session, classifier_url,
                                                  args.classifier_model, system, choices,
                                                  row.text))
            out["modes"]["classifier"] = {
                "picked": [p or cfg.default for p in answers], "timer": cls_t,
                "unanswered": sum(p is None for p in answers)}
            # the head first; the classifier for what it leaves open (its time counted once)
            both_t, both = Timer(), []
            for i, open_ in enumerate(undecided):
                both_t.latency.append(head_seconds[i])
                both_t.cpu.append(head_cpu[i])
                if open_:
                    both_t.latency[-1] += cls_t.latency[i]
                    both_t.cpu[-1] += cls_t.cpu[i]
                    both.append(answers[i] or cfg.default)
                else:
                    both.append(picks[HEAD][i])
            out["modes"]["semantic-then-classifier"] = {
                "picked": both, "timer": both_t, "undecided": sum(undecided)}
    return out


async def semantic_mode(session: aiohttp.ClientSession, cfg: RouterConfig,
                        rows: list[Labelled], semantic: RouterSemantic
                        ) -> tuple[Timer, list[str], list[bool]]:
    """The hand-written examples and keywords over the prompts (no head): the timer,
    the picks, which were undecided."""
    # The examples' one call may take long on a loaded CPU; each turn's gets 10 s.
    signal = SemanticSignal(semantic.model_copy(update={"cache_size": 0}), timeout=300.0)
    await signal.ready(session)
    signal.timeout = 10.0
    await signal.verdict(session, "warm up")
    timer, picked, undecided = Timer(), [], []
    for row in rows:
        with timer:
            verdict, error = await signal.verdict(session, row.text)
        if error is not None:
            raise SystemExit(f"embedding failed: {error}")
        picked.append(verdict.expert or cfg.default)  # what mode semantic does
        undecided.append(verdict.expert is None)
        timer.keywords += verdict.signal == "keywords"
    return timer, picked, undecided


def accuracy(rows: list[Labelled], picked: list[str], keep: Any = None) -> str:
    pairs = [(r, p) for r, p in zip(rows, picked, strict=True) if keep is None or keep(r)]
    if not pairs:
        return "-"
    right = sum(r.expert == p for r, p in pairs)
    return f"{100 * right / len(pairs):.1f}% ({right}/{len(pairs)})"


def _ms(values: list[float], q: float) -> str:
    return f"{percentile([v * 1000 for v in values], q):.1f} ms"


def report(result: dict[str, Any], args: argparse.Namespace, classifier: str) -> str:
    rows, experts = result["rows"], result["experts"]
    info = machine_info()
    cv = result["cv"]
    langs = sorted({r.lang for r in rows})
    lines = ["## Automatic routing: accuracy and cost (`bench/auto_routing.py`)", "",
             f"{dt.date.today().isoformat()}, {info.markdown()}; {len(rows)} prompts judged: "
             f"{result['judged']}; no judged prompt repeats a training one (same text or "
             f"cosine >= {args.near_duplicate}). Experts, default and keyword candidates of "
             f"`{args.deployment.name}`; all-MiniLM-L6-v2 on vLLM 0.32 (CPU, pooling runner, "
             f"the flags of `embedding_args`); {classifier}.", "",
             f"The head's nested {cv.folds}-fold cross-validation on all {cv.prompts} prompts "
             f"of `{args.train.name}` (`mol router train`'s report): "
             f"{100 * cv.accuracy:.1f}% as routed, {100 * cv.accuracy_head:.1f}% the head "
             "alone.", "",
             "| mode | accuracy | routing step p50 | p99 | router CPU / decision |",
             "|---|---|---|---|---|"]
    for mode, m in result["modes"].items():
        t = m["timer"]
        if t is None:
            lines.append(f"| {mode} | {accuracy(rows, m['picked'])} | - | - | - |")
            continue
        cpu = [x * 1000 for x in t.cpu]
        lines.append(f"| {mode} | {accuracy(rows, m['picked'])} | {_ms(t.latency, 50)} | "
                     f"{_ms(t.latency, 99)} | {sum(cpu) / len(cpu):.2f} ms |")
    lines += ["", "Latency is the routing step alone (embedding call and scoring, or the "
              "classifier's completion), one request at a time, the turn cache off; the "
              "CPU is the router process' (the engines' own CPU is not included). "
              f"`{EXAMPLES}` used the deployment file's examples, written with the project's "
              "set in view: on that set it is not a held-out figure.", "",
              "| prompts | " + " | ".join(result["modes"]) + " |",
              "|---" * (len(result["modes"]) + 1) + "|"]
    groups: list[tuple[str, Any]] = [
        ("all", None), ("clear", lambda r: not r.borderline),
        ("borderline", lambda r: r.borderline)]
    if len(langs) > 1:  # the languages but English together, then each on its own
        groups.append(("not English", lambda r: r.lang != "en"))
    groups += [(f"language {g}", lambda r, g=g: r.lang == g) for g in langs]
    groups += [(e, lambda r, e=e: r.expert == e) for e in experts]
    for name, keep in groups:
        lines.append(f"| {name} | " + " | ".join(accuracy(rows, m["picked"], keep)
                                                for m in result["modes"].values()) + " |")
    for mode, m in result["modes"].items():
        if mode not in (HEAD, HEAD_KEYWORDS, EXAMPLES):
            continue
        conf = Counter((r.expert, p) for r, p in zip(rows, m["picked"], strict=True))
        lines += ["", f"### {mode}", "", "| labelled \\ routed | " + " | ".join(experts)
                  + " |", "|---" * (len(experts) + 1) + "|"]
        lines += [f"| {a} | " + " | ".join(str(conf[(a, b)]) for b in experts) + " |"
                  for a in experts]
        if m.get("keywords"):
            lines += ["", f"{m['keywords']} of {len(rows)} prompts were decided by keywords "
                      "alone (no embedding call)."]
        if m.get("below"):
            lines += ["", f"{m['below']} prompts below the head's confidence threshold went "
                      "to the default expert."]
    gates = [h.training.get("keywordsOutOfFold") for h in result["heads"]]
    kept = "; ".join(", ".join(f"{e}: {' '.join(w)}" for e, w in h.keywords.items())
                     or "none" for h in result["heads"])
    lines += ["", "Keywords first, judged out of fold within each head's training data "
              "(right / the head right on the same turns / turns settled): "
              + "; ".join(f"{g['right']}/{g['headRight']}/{g['settled']}" if g else "-"
                          for g in gates)
              + f"; keywords kept per head: {kept}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    obj = MoLDeployment.from_yaml(args.deployment.read_text(encoding="utf-8"))
    train = load_labelled(args.train)
    test = load_labelled(args.prompts) if args.prompts is not None else None
    if test is not None and args.prompts.resolve() == args.train.resolve():
        raise SystemExit("refusing to report: --prompts is the training file")
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
            result = asyncio.run(run(args, cfg, classifier_url, train, test))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    text = report(result, args, described)
    print(text)
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", "auto-routing", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
