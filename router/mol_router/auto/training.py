"""``mol router train``: embed labelled prompts, fit the head, report its nested k-fold
cross-validation and write the head file (docs/router.md, "A trained head").

Kept apart from :mod:`mol_router.cli` so the verb's work is importable (the benchmark
and the tests call :func:`train`) and the CLI module stays a list of verbs."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mol_router.auto import scores
from mol_router.auto.heads.labelled import Labelled, data_digest
from mol_router.auto.heads.model import Head, Ngrams
from mol_router.auto.heads.train import (
    DEFAULT_NGRAMS,
    DEFAULT_THRESHOLD,
    Report,
    cross_validate,
    fit_head,
    folds_for,
    min_prompts,
)
from mol_router.auto.semantic import embed_many


@dataclass(frozen=True)
class Trained:
    head: Head
    report: Report
    dropped: Mapping[str, str]


def train(rows: Sequence[Labelled], vectors: scores.Vector, model: str, *,
          keywords: Mapping[str, Sequence[str]] | None = None,
          threshold: float = DEFAULT_THRESHOLD, default: str | None = None,
          folds: int = 5, source: str = "",
          ngrams: Ngrams | None = DEFAULT_NGRAMS, keywords_gate: bool = True) -> Trained:
    """Cross-validate the recipe, then fit the head on every row; the head's
    ``training`` records the lineage (embedding model, data digest) and the report.
    A file too small for ``folds`` is trained with as many as it can fill (the report
    says so: :attr:`Report.folds_asked`)."""
    asked, folds = folds, folds_for(rows, folds)
    report = cross_validate(vectors, rows, model, keywords=keywords, threshold=threshold,
                            default=default, folds=folds, ngrams=ngrams,
                            keywords_gate=keywords_gate)
    if folds != asked:
        report = dataclasses.replace(report, folds_asked=asked)
    lineage = {"embeddingModel": model, "source": source, "dataDigest": data_digest(rows),
               "trainedAt": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "crossValidation": report.as_dict()}
    head, dropped = fit_head(vectors, rows, model, keywords=keywords, threshold=threshold,
                             folds=folds, lineage=lineage, ngrams=ngrams,
                             keywords_gate=keywords_gate)
    return Trained(head, report, dropped)


def embed_rows(url: str, model: str, rows: Sequence[Labelled],
               bound: float = 120.0) -> scores.Vector:
    """The prompts' unit embeddings from the deployment's embedding engine."""
    return asyncio.run(embed_many(url, model, [r.text for r in rows], bound=bound))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def report_text(t: Trained, default: str | None) -> str:
    r, head = t.report, t.head
    grams = ""
    if head.ngrams is not None:
        lengths = "- and ".join(str(n) for n in (head.ngrams.n, *head.ngrams.also))
        grams = f" and character {lengths}-grams in {head.ngrams.dims} buckets each"
    lines = []
    if r.folds_asked:
        lines += [f"folds: {r.folds}, not {r.folds_asked}: nested {r.folds_asked}-fold "
                  f"cross-validation needs {min_prompts(r.folds_asked)} labelled prompts "
                  f"per expert, and the smallest expert has fewer; add prompts for "
                  f"{r.folds_asked} folds", ""]
    lines += [f"head: {len(head.experts)} experts ({', '.join(head.experts)}), "
             f"{head.dims} dimensions of {head.model}{grams}, L2 {head.training.get('l2')}, "
             f"temperature {head.temperature:.3f}, threshold {head.threshold:.2f}",
             f"digest: {head.digest()}",
             "",
             f"{r.folds}-fold cross-validation on {r.prompts} prompts (nested: each fold's "
             "head, penalty, temperature and keywords fitted without it):",
             f"  accuracy as routed: {_pct(r.accuracy)} (keywords first, then the head; "
             f"below the threshold: {'the default expert ' + default if default else 'no expert'})",
             f"  the head alone, every turn embedded: {_pct(r.accuracy_head)}",
             f"  settled by keywords: {_pct(r.keyword_share)} of turns, right "
             f"{_pct(r.keyword_accuracy)} (the head alone on them: "
             f"{_pct(r.keyword_head_accuracy)})",
             f"  below the threshold: {_pct(r.below_threshold)} of turns",
             f"  calibration error (ECE, the head alone): {_pct(r.calibration_error)} "
             f"(mean top probability {_pct(r.confidence)}, accuracy {_pct(r.accuracy_head)})"]
    lines += [f"  {e}: {_pct(v)}" for e, v in r.per_expert.items()]
    lines += [f"  language {g}: {_pct(v)}" for g, v in r.per_lang.items()]
    kept = ", ".join(f"{e}: {' '.join(w)}" for e, w in head.keywords.items()) or "none"
    lines += ["", f"keywords kept (unambiguous on all {r.prompts} prompts): {kept}"]
    if t.dropped:
        lines.append(f"keywords dropped: {len(t.dropped)} (" + "; ".join(
            f"{w}: {why}" for w, why in list(t.dropped.items())[:8])
            + ("; ..." if len(t.dropped) > 8 else "") + ")")
    return "\n".join(lines)


def write_head(head: Head, out: Path) -> None:
    """The head's canonical bytes (sha256 of the file = its digest in the catalog),
    once they pass the contract's rules: what the catalog would refuse is not written."""
    out.write_bytes(head.checked().dumps())
