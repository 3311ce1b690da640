"""Held-out evaluation of a head (numpy): a test set's overlap with the training data, and
a split in two halves when no test set exists (the benchmark's figures)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mol_router.auto import scores
from mol_router.auto.heads.labelled import Labelled, normalised
from mol_router.auto.heads.train import stratified_folds

NEAR_DUPLICATE = 0.9
"""Cosine at or above which a test prompt counts as a near duplicate of a training one
(all-MiniLM-L6-v2: paraphrases of one request score 0.85-0.95; the closest two
different prompts of the project's set, 0.69)."""


def overlaps(train: Sequence[Labelled], train_vectors: scores.Vector,
             test: Sequence[Labelled], test_vectors: scores.Vector,
             near: float = NEAR_DUPLICATE) -> list[tuple[int, int, float]]:
    """``(test index, train index, cosine)`` of each test prompt that repeats a training
    one (the same text, case and spacing folded) or nearly (cosine >= ``near``): a
    figure on such a set would be partly measured on training data."""
    seen = {normalised(r.text): i for i, r in enumerate(train)}
    out: list[tuple[int, int, float]] = []
    sims = test_vectors @ train_vectors.T if len(train) and len(test) else None
    for t, row in enumerate(test):
        same = seen.get(normalised(row.text))
        if same is not None:
            out.append((t, same, 1.0))
        elif sims is not None:
            j = int(np.argmax(sims[t]))
            if sims[t, j] >= near:
                out.append((t, j, float(sims[t, j])))
    return out


def split_halves(rows: Sequence[Labelled], seed: int = 0) -> tuple[list[int], list[int]]:
    """Two halves of the rows, each holding half of every expert's prompts (seeded): a
    held-out measurement when no held-out set exists (train on one, judge the other)."""
    experts = sorted({r.expert for r in rows})
    y = np.array([experts.index(r.expert) for r in rows])
    fold = stratified_folds(y, 2, seed)
    return [int(i) for i in np.flatnonzero(fold == 0)], [int(i) for i in np.flatnonzero(fold == 1)]
