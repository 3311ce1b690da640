"""The semantic signal's decision, pure: scores per expert from embeddings and keywords.

Each expert's score mixes three signals, so that no single one has to be right:

- ``nearest``: the cosine of the user's turn to the expert's closest example;
- ``centroid``: the cosine to the mean of its examples (steadier than one example);
- ``keywords``: how many of its keywords the turn contains (at most two count).

``score = 0.5 * nearest + 0.5 * centroid + 0.1 * keywords``. The best expert decides
when its score reaches the threshold and leads the second by the margin; otherwise
nothing is decided and the caller falls back (classifier, then the default expert).
Without an embedding (the engine failed) keywords alone decide when one expert has
strictly the most hits. The embedding call lives in :mod:`mol_router.auto.semantic`.

Keywords first (``keywordsDecide``, on by default): when the turn holds keywords of
exactly one expert, that expert is the answer without an embedding call
(:func:`keyword_verdict`). On the benchmark's labelled set such turns were half of
all and the embedding agreed with the keywords on all but one of them
(docs/benchmarks.md), so the cheap signal settles them and the embedding engine is
asked only about the rest.

Vectors are numpy arrays: one matrix product scores a turn against every example
(~80 examples of 384 dimensions in the demo), where Python's own loops took about
2 ms of the router's CPU per decision.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

NEAREST_WEIGHT = 0.5
CENTROID_WEIGHT = 0.5
KEYWORD_WEIGHT = 0.1
MAX_KEYWORD_HITS = 2

Vector = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ExpertIndex:
    """One expert's unit example vectors (one row each), their unit centroid and its
    keyword pattern."""

    name: str
    examples: Vector
    centroid: Vector | None
    keywords: re.Pattern[str] | None


@dataclass(frozen=True, slots=True)
class Score:
    expert: str
    score: float
    nearest: float
    centroid: float
    keywords: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the signal concluded: the expert (None: undecided), the signal that
    decided (``semantic``, ``keywords``, ``head`` for a trained head, or ``none``), the
    winning score and its lead,
    the scores best first, and why it did not decide (``below-threshold``,
    ``below-margin``, ``no-embedding``, ``no-examples``)."""

    expert: str | None
    signal: str
    score: float
    margin: float
    scores: tuple[Score, ...]
    reason: str = ""


def unit(vector: Sequence[float] | Vector) -> Vector:
    array = np.asarray(vector, dtype=np.float64)
    norm = math.sqrt(float(array @ array)) if array.ndim == 1 else 0.0
    if norm == 0.0 or not math.isfinite(norm):
        raise ValueError("an embedding must be a finite, non-zero vector")
    return array / norm


def keyword_pattern(keywords: Sequence[str]) -> re.Pattern[str] | None:
    """Whole words or phrases, case-insensitive; longer ones first so a phrase wins
    over its own first word."""
    words = sorted({k.strip().lower() for k in keywords if k.strip()}, key=len, reverse=True)
    if not words:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, words)) + r")(?!\w)",
                      re.IGNORECASE)


def expert_index(name: str, examples: Sequence[Sequence[float] | Vector],
                 keywords: Sequence[str]) -> ExpertIndex:
    vectors = [unit(v) for v in examples]
    if len({len(v) for v in vectors}) > 1:
        raise ValueError(f"the examples of {name} have embeddings of different sizes")
    matrix = np.stack(vectors) if vectors else np.zeros((0, 0))
    centroid = unit(matrix.sum(axis=0)) if vectors else None
    return ExpertIndex(name, matrix, centroid, keyword_pattern(keywords))


def keyword_hits(pattern: re.Pattern[str] | None, text: str) -> int:
    if pattern is None:
        return 0
    return min(len({m.lower() for m in pattern.findall(text)}), MAX_KEYWORD_HITS)


def scores(index: Sequence[ExpertIndex], text: str, query: Vector | None) -> tuple[Score, ...]:
    """Every expert's score, best first; ``query`` is the unit embedding of ``text``
    (None: keywords only)."""
    out = []
    for e in index:
        hits = keyword_hits(e.keywords, text)
        nearest = centroid = 0.0
        if query is not None and e.centroid is not None:
            nearest = float((e.examples @ query).max())
            centroid = float(e.centroid @ query)
        total = NEAREST_WEIGHT * nearest + CENTROID_WEIGHT * centroid + KEYWORD_WEIGHT * hits
        out.append(Score(e.name, total, nearest, centroid, hits))
    out.sort(key=lambda s: s.score, reverse=True)
    return tuple(out)


def keyword_verdict(index: Sequence[ExpertIndex], text: str) -> Verdict | None:
    """The expert whose keywords alone the turn holds (no other expert's), else None:
    then the embedding decides."""
    ranked = scores(index, text, None)
    if not ranked or not ranked[0].keywords or (len(ranked) > 1 and ranked[1].keywords):
        return None
    best = ranked[0]
    lead = best.score - ranked[1].score if len(ranked) > 1 else best.score
    return Verdict(best.expert, "keywords", best.score, lead, ranked)


def decide(ranked: tuple[Score, ...], threshold: float, margin: float, *,
           embedded: bool) -> Verdict:
    """The verdict over ``scores``' answer; ``embedded``: the turn had an embedding."""
    if not ranked:
        return Verdict(None, "none", 0.0, 0.0, ranked, "no-examples")
    best = ranked[0]
    lead = best.score - ranked[1].score if len(ranked) > 1 else best.score
    if not embedded:
        if best.keywords and (len(ranked) == 1 or ranked[1].keywords < best.keywords):
            return Verdict(best.expert, "keywords", best.score, lead, ranked)
        return Verdict(None, "none", best.score, lead, ranked, "no-embedding")
    if best.score < threshold:
        return Verdict(None, "none", best.score, lead, ranked, "below-threshold")
    if lead < margin:
        return Verdict(None, "none", best.score, lead, ranked, "below-margin")
    return Verdict(best.expert, "semantic", best.score, lead, ranked)
