"""The report of bench/auto_routing.py: accuracy per mode and per group of prompts,
the confusion matrices, the routing step's latency and the keywords' record."""

from __future__ import annotations

import argparse
import datetime as dt
from collections import Counter
from typing import Any

from _machine import machine_info
from _report import percentile
from mol_router.auto.heads.train import Labelled

HEAD = "semantic"
HEAD_EVERY = "semantic, every turn embedded (keywordsDecide: false)"
HEAD_KEYWORDS = "semantic, keywords first kept whatever their out-of-fold record"
HEAD_FULL = "semantic on the full all-MiniLM-L6-v2 (6 layers)"
NEAREST = "nearest training example"
EXAMPLES = "hand-written examples and keywords (before the head)"


def _right(rows: list[Labelled], picked: list[str], keep: Any = None) -> tuple[int, int]:
    """How many of the rows ``keep`` selects were picked right, of how many."""
    pairs = [(r, p) for r, p in zip(rows, picked, strict=True) if keep is None or keep(r)]
    return sum(r.expert == p for r, p in pairs), len(pairs)


def accuracy(rows: list[Labelled], picked: list[str], keep: Any = None) -> str:
    right, total = _right(rows, picked, keep)
    return f"{100 * right / total:.1f}% ({right}/{total})" if total else "-"


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
             f"`{args.deployment.name}`; embedding model `{result['model']}` on vLLM 0.32 "
             f"(CPU, pooling runner, the flags of `embedding_args`, vectors as base64); "
             f"{classifier}.", "",
             f"The head's nested {cv.folds}-fold cross-validation on all {cv.prompts} prompts "
             f"of `{args.train.name}` (`mol router train`'s report): "
             f"{100 * cv.accuracy:.1f}% as routed, {100 * cv.accuracy_head:.1f}% the head "
             "alone" + ("" if "cv_full" not in result else
                        f"; on the full all-MiniLM-L6-v2, {100 * result['cv_full'].accuracy:.1f}%"
                        f" and {100 * result['cv_full'].accuracy_head:.1f}%") + ". As routed, "
             "over fold seeds: " + "; ".join(
                 f"`{m}` " + " / ".join(f"{100 * a:.1f}" for a in accs)
                 + f" (mean {100 * sum(accs) / len(accs):.1f}%)"
                 for m, accs in result["cv_seeds"].items()) + ".", "",
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


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The figures of one run as JSON (``--summary``): what bench/embedding_layers.py
    puts side by side for each cut of the embedding model."""
    rows = result["rows"]

    def share(picked: list[str], keep: Any = None) -> float | None:
        right, total = _right(rows, picked, keep)
        return right / total if total else None

    modes: dict[str, Any] = {}
    for mode, m in result["modes"].items():
        t = m["timer"]
        modes[mode] = {
            "accuracy": share(m["picked"]),
            "notEnglish": share(m["picked"], lambda r: r.lang != "en"),
            "borderline": share(m["picked"], lambda r: r.borderline),
            "p50Ms": None if t is None else percentile([v * 1000 for v in t.latency], 50),
            "p99Ms": None if t is None else percentile([v * 1000 for v in t.latency], 99),
            "cpuMs": None if t is None else 1000 * sum(t.cpu) / len(t.cpu)}
    return {"model": result["model"], "judged": result["judged"], "prompts": len(rows),
            "cv": result["cv"].accuracy, "cvHead": result["cv"].accuracy_head,
            "cvSeeds": result["cv_seeds"].get(result["model"], [result["cv"].accuracy]),
            "modes": modes}
