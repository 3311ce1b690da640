"""Automatic routing accuracy and cost, on prompts the router was not trained on.

`python bench/auto_routing.py [--train FILE.jsonl] [--prompts FILE.jsonl] [--write]`:
the trained head (`mol router train`'s recipe, mol_router.auto.heads.train) is fitted on
`--train` (default: the project's own bench/auto_routing_prompts.jsonl, four experts,
~16% not in English in 13 languages, ~16% borderline) and judged on `--prompts`, a labelled file
(`{"text" or "prompt", "expert"}` a line, `lang` and `borderline` optional) that the
training never saw. The bench refuses to report when the two overlap: the same text
(case and spacing folded) or a near duplicate (cosine >= --near-duplicate by the
embedding model). Without `--prompts` it splits the training file in two halves
(half of every expert's prompts each), trains on one and judges the other, both ways,
so every prompt is judged by a head that never saw it; and it reports the head's
nested k-fold cross-validation on the whole training file.

Modes, with the router's own code (mol_router.auto.semantic) against a real embedding
engine, vLLM's pooling runner with the flags `mol up` and the operator use (started from
$MOL_ENGINE_VENV, or `--embeddings-url`) on the deployment's `router.semantic.model`
(the default, all-MiniLM-L6-v2's first 3 layers; `--layers N` for another cut). A second
engine on the full all-MiniLM-L6-v2 (`--reference-url`) finds the near duplicates, with
the model made for similarity, and gives the comparison line:

- `semantic`: the trained head as the router runs it (the deployment's default
  automatic mode): keywords first where the training data showed them unambiguous
  and, out of fold, no worse than the head (candidates: the deployment file's
  keywords), then the head (the embedding and character 3- and 4-grams), below its
  confidence threshold the default expert;
- `semantic, every turn embedded (keywordsDecide: false)`: the head alone;
- `semantic on the full all-MiniLM-L6-v2 (6 layers)`: the same recipe on the full model's
  vectors (the embedding model before all-minilm-l6-v2-l3 became the default);
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
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _auto_routing_report import (
    EXAMPLES,
    HEAD,
    HEAD_EVERY,
    HEAD_FULL,
    HEAD_KEYWORDS,
    NEAREST,
    report,
    summary,
)
from _report import write_section
from mol_platform.apps.demo.build import build_demo
from mol_platform.apps.embedding_model import derive, model_dir, packaged_dir
from mol_platform.contract.embedding_models import MINILM, PACKAGED_LAYERS
from mol_platform.contract.engine_args import EngineLaunch, embedding_args, engine_args
from mol_platform.contract.router_config import (
    RouterConfig,
    RouterSemantic,
    router_config_from_spec,
)
from mol_platform.contract.spec import MoLDeployment
from mol_router.auto.heads.holdout import NEAR_DUPLICATE, overlaps, split_halves
from mol_router.auto.heads.labelled import Labelled, load_labelled
from mol_router.auto.heads.model import Head
from mol_router.auto.heads.source import HeadSource
from mol_router.auto.heads.train import cross_validate, fit_head
from mol_router.auto.semantic import SemanticSignal, embed_many
from mol_router.auto.training import train as train_head
from mol_router.routing.rules import Routing
from mol_router.serving.classify import instructions

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = Path(__file__).resolve().parent / "auto_routing_prompts.jsonl"
DEPLOYMENT = ROOT / "deploy" / "examples" / "macaron-local.yaml"
PORT = 18395
CLASSIFIER_PORT = 18396
REFERENCE_PORT = 18397
CACHE = Path.home() / ".cache" / "mol-platform" / "embedding"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", type=Path, default=PROMPTS,
                   help="labelled prompts the head is trained on (default: the project's set)")
    p.add_argument("--prompts", type=Path, help="labelled prompts to judge, never trained on "
                   "(default: the training file split in two halves, judged both ways)")
    p.add_argument("--deployment", type=Path, default=DEPLOYMENT,
                   help="the MoLDeployment whose experts, default, keywords and examples are used")
    p.add_argument("--embeddings-url", help="a running /v1/embeddings server on the "
                   "deployment's router.semantic.model (default: start one on the packaged "
                   "model from $MOL_ENGINE_VENV)")
    p.add_argument("--reference-url", help="a running /v1/embeddings server on the full "
                   "all-MiniLM-L6-v2, for the near-duplicate check and the comparison line "
                   "(default: --embeddings-url if that is the model, else start one)")
    p.add_argument("--layers", type=int, choices=range(1, 7), metavar="1..6",
                   help="route on all-MiniLM-L6-v2's first N layers instead of the "
                   "deployment's model (the trade-off curve in docs/router.md)")
    p.add_argument("--near-duplicate", type=float, default=NEAR_DUPLICATE,
                   help="cosine at which a judged prompt counts as a training one's duplicate")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds on --train")
    p.add_argument("--cv-seeds", type=int, default=3, choices=range(1, 11), metavar="1..10",
                   help="fold seeds the cross-validation is repeated with (the mean is "
                   "reported beside each)")
    p.add_argument("--classifier-url", help="an engine serving the classifier adapter "
                   "(default: start the demo base with the demo classifier adapter)")
    p.add_argument("--classifier-model", default="classifier",
                   help="the classifier adapter's served name at --classifier-url")
    p.add_argument("--no-classifier", action="store_true",
                   help="do not measure the classifier expert")
    p.add_argument("--no-full", action="store_true", help="skip the line of the head on the "
                   "full all-MiniLM-L6-v2 (that model still finds the near duplicates)")
    p.add_argument("--summary", type=Path, help="also write the figures as JSON to this file")
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


def routing_model(obj: MoLDeployment, layers: int | None) -> tuple[str, Path]:
    """The served name and folder the router embeds with: the deployment's packaged
    model, or (``--layers``) all-MiniLM-L6-v2 cut to that many layers (the packaged model
    of that depth where there is one)."""
    sem = obj.spec.router.semantic
    if sem is None:
        raise SystemExit("the deployment has no router.semantic")
    packaged = {n: name for name, n in PACKAGED_LAYERS.items()}
    model = sem.model if layers is None else packaged.get(layers)
    if model is not None:
        return model, model_dir(model, CACHE)
    assert layers is not None
    name = f"{MINILM}-first{layers}"
    return name, derive(packaged_dir(), CACHE / name, layers)


def start_embedding_engine(logs: Path, model: str, folder: Path,
                           port: int) -> tuple[subprocess.Popen[bytes], str]:
    launch = embedding_args(str(folder), served_model_name=model, host="127.0.0.1", port=port)
    return _launch(launch, logs / f"embedding-{port}.log"), f"http://127.0.0.1:{port}"


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
    """The classifier's pick, asked as mol_router.serving.classify asks it (None: no answer)."""
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


@dataclass(frozen=True, slots=True)
class Step:
    """One turn's routing step by the head: wall seconds, router CPU seconds, and
    whether the head left it below its threshold."""

    seconds: float
    cpu: float
    undecided: bool


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
        return HeadSource(None, {}, (), head.model, files={"stable": str(path)})


async def judge_heads(session: aiohttp.ClientSession, args: argparse.Namespace,
                      cfg: RouterConfig, sem: RouterSemantic, train: list[Labelled],
                      rows: list[Labelled], x_train: Any,
                      plan: list[tuple[list[int], list[int]]],
                      modes: tuple[tuple[str, bool | None, bool], ...]
                      ) -> tuple[dict[str, dict[str, Any]], list[Head], list[Step]]:
    """Each mode ``(name, keywords first (None: the config's), keywords gate)`` over the
    judged rows, a head trained per plan step on ``x_train`` (the vectors of ``sem``'s
    model); the modes' results, the heads of the first mode, and the first mode's
    step per row (for semantic-then-classifier)."""
    keywords = {e.name: list(e.keywords) for e in sem.experts}
    n = len(rows)
    out: dict[str, dict[str, Any]] = {m: {"picked": [""] * n, "timer": Timer(), "below": 0}
                                      for m, _, _ in modes}
    heads: list[Head] = []
    steps = [Step(0.0, 0.0, False)] * n
    for fit, judge in plan:
        tr = [train[i] for i in fit]
        trained: dict[bool, Head] = {}
        for k, (mode, first, gate) in enumerate(modes):
            if gate not in trained:  # the head train fits (its report is not needed here)
                trained[gate], _ = fit_head(x_train[fit], tr, sem.model, keywords=keywords,
                                            folds=args.folds, keywords_gate=gate)
            if k == 0:
                heads.append(trained[gate])
            signal = SemanticSignal(sem.model_copy(update={
                "cache_size": 0,
                "keywords_decide": sem.keywords_decide if first is None else first}),
                timeout=10.0, heads=head_source(trained[gate]))
            await signal.verdict(session, "warm up")
            timer = out[mode]["timer"]
            for i in judge:
                with timer:
                    verdict, error = await signal.verdict(session, rows[i].text)
                if error is not None:
                    raise SystemExit(f"embedding failed: {error}")
                out[mode]["picked"][i] = verdict.expert or cfg.default
                timer.keywords += verdict.signal == "keywords"
                out[mode]["below"] += verdict.expert is None
                if k == 0:
                    steps[i] = Step(timer.latency[-1], timer.cpu[-1], verdict.expert is None)
    for m in out.values():
        m["keywords"] = m["timer"].keywords
    return out, heads, steps


async def run(args: argparse.Namespace, cfg: RouterConfig, reference_url: str,
              classifier_url: str | None, train: list[Labelled],
              test: list[Labelled] | None) -> dict[str, Any]:
    """Every mode over the judged prompts; with ``test`` None, the halves of ``train``.
    Near duplicates are found with the full all-MiniLM-L6-v2 (a model trained for
    similarity; a shallower one scores unrelated texts higher), whatever routes."""
    assert cfg.semantic is not None
    sem = cfg.semantic
    ref = sem.model_copy(update={"model": MINILM, "embeddings_url": reference_url})
    texts = [r.text for r in train]
    x_train = await embed_many(sem.embeddings_url, sem.model, texts)
    r_train = (x_train if ref.embeddings_url == sem.embeddings_url and ref.model == sem.model
               else await embed_many(ref.embeddings_url, ref.model, texts))
    if test is None:
        a, b = split_halves(train)
        plan = [(a, b), (b, a)]
        rows, x_test, r_test = train, x_train, r_train
        judged = "the training file in two halves (half of every expert's prompts each), " \
            "a head trained on each half judging the other"
    else:
        rows = test
        x_test = await embed_many(sem.embeddings_url, sem.model, [r.text for r in test])
        r_test = (x_test if r_train is x_train else
                  await embed_many(ref.embeddings_url, ref.model, [r.text for r in test]))
        plan = [(list(range(len(train))), list(range(len(test))))]
        judged = f"`{args.prompts.name}`, a head trained on all of `{args.train.name}`"
    out: dict[str, Any] = {"rows": rows, "experts": sorted({r.expert for r in rows}),
                           "modes": {}, "judged": judged, "model": sem.model}
    found: list[tuple[str, str, float]] = []
    for fit, judge in plan:
        tr = [train[i] for i in fit]
        te = [rows[i] for i in judge]
        found += [(te[t].text, tr[j].text, c) for t, j, c in
                  overlaps(tr, r_train[fit], te, r_test[judge], args.near_duplicate)]
    if found:
        lines = "\n".join(f"  {c:.3f}  {a!r} ~ {b!r}" for a, b, c in found[:20])
        raise SystemExit(f"refusing to report: {len(found)} judged prompts repeat training "
                         f"ones (same text or cosine >= {args.near_duplicate} by "
                         f"{MINILM}):\n{lines}")
    keywords = {e.name: list(e.keywords) for e in sem.experts}
    out["cv"] = train_head(train, x_train, sem.model, keywords=keywords, default=cfg.default,
                           folds=args.folds, source=args.train.name).report
    full = sem.model != MINILM and not args.no_full
    if full:
        out["cv_full"] = train_head(train, r_train, MINILM, keywords=keywords,
                                    default=cfg.default, folds=args.folds).report
    # the same cross-validation under other fold seeds: one prompt moves it 0.1-0.4 points
    out["cv_seeds"] = {name: [out[key].accuracy] + [cross_validate(
        x, train, model, keywords=keywords, default=cfg.default, folds=args.folds,
        seed=seed).accuracy for seed in range(1, args.cv_seeds)]
        for name, key, x, model in ((sem.model, "cv", x_train, sem.model),
                                    (MINILM, "cv_full", r_train, MINILM)) if key in out}
    async with aiohttp.ClientSession() as session:
        modes, heads, steps = await judge_heads(
            session, args, cfg, sem, train, rows, x_train, plan,
            ((HEAD, None, True), (HEAD_EVERY, False, True), (HEAD_KEYWORDS, True, False)))
        out["modes"].update(modes)
        if full:
            more, _, _ = await judge_heads(session, args, cfg, ref, train, rows, r_train,
                                              plan, ((HEAD_FULL, None, True),))
            out["modes"].update(more)
        nearest = [""] * len(rows)
        for fit, judge in plan:
            picks = (x_test[judge] @ x_train[fit].T).argmax(axis=1)
            for i, j in zip(judge, picks, strict=True):
                nearest[i] = train[fit[int(j)]].expert
        out["modes"][NEAREST] = {"picked": nearest, "timer": None}
        ex_t, ex_picks, _ = await semantic_mode(session, cfg, rows, sem)
        out["modes"][EXAMPLES] = {"picked": ex_picks, "timer": ex_t,
                                  "keywords": ex_t.keywords}
        out["heads"] = heads
        if classifier_url is not None:
            out["modes"].update(await classifier_modes(
                session, args, cfg, classifier_url, rows, out["modes"][HEAD]["picked"],
                steps))
    return out


async def classifier_modes(session: aiohttp.ClientSession, args: argparse.Namespace,
                           cfg: RouterConfig, classifier_url: str, rows: list[Labelled],
                           head_picks: list[str], steps: list[Step]
                           ) -> dict[str, dict[str, Any]]:
    """The classifier alone, and the head first with the classifier for what the head
    leaves below its threshold (the head's time counted once)."""
    routing = Routing.build(cfg)
    choices = list(routing.classifier_choices)
    system = instructions(routing)
    cls_t, answers = Timer(), []
    await classify(session, classifier_url, args.classifier_model, system, choices, "warm up")
    for row in rows:
        with cls_t:
            answers.append(await classify(session, classifier_url, args.classifier_model,
                                          system, choices, row.text))
    both_t, both = Timer(), []
    for i, step in enumerate(steps):
        both_t.latency.append(step.seconds)
        both_t.cpu.append(step.cpu)
        if step.undecided:
            both_t.latency[-1] += cls_t.latency[i]
            both_t.cpu[-1] += cls_t.cpu[i]
            both.append(answers[i] or cfg.default)
        else:
            both.append(head_picks[i])
    return {"classifier": {"picked": [p or cfg.default for p in answers], "timer": cls_t,
                           "unanswered": sum(p is None for p in answers)},
            "semantic-then-classifier": {"picked": both, "timer": both_t,
                                         "undecided": sum(s.undecided for s in steps)}}


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
            model, folder = routing_model(obj, args.layers)
            url = args.embeddings_url
            if url is None:
                proc, url = start_embedding_engine(work, model, folder, PORT)
                procs.append(proc)
            reference = args.reference_url or (url if model == MINILM else None)
            if reference is None:
                proc, reference = start_embedding_engine(work, MINILM, packaged_dir(),
                                                         REFERENCE_PORT)
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
            for up in {url, reference}:
                asyncio.run(wait_up(up.removesuffix("/v1")))
            if classifier_url is not None:
                asyncio.run(wait_up(classifier_url))
            cfg = router_config_from_spec(obj, endpoints=["http://127.0.0.1:1"],
                                          embeddings_url=url)
            assert cfg.semantic is not None
            cfg = cfg.model_copy(update={"semantic": cfg.semantic.model_copy(
                update={"model": model})})
            result = asyncio.run(run(args, cfg, reference, classifier_url, train, test))
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
    if args.summary is not None:
        args.summary.write_text(json.dumps(summary(result), indent=2) + "\n")
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", "auto-routing", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
