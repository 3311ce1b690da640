"""Fitting the router head (numpy only): what ``mol router train`` and the benchmark run.

The head is multinomial logistic regression on the unit embeddings, with an L2
penalty. Everything is measured on data the step did not see:

- the penalty is picked by stratified k-fold cross-validation over a small grid
  (the lowest out-of-fold log-loss);
- the temperature that calibrates the probabilities is fitted on out-of-fold logits
  (so it corrects the over-confidence of a model judged on its own training data), with
  targets smoothed by what the number of prompts can show
  (:mod:`mol_router.auto.heads.calibration`);
- a candidate keyword is kept only when every labelled prompt that holds it belongs to
  its expert (at least :data:`MIN_KEYWORD_SUPPORT` of them);
- the reported accuracy is *nested* cross-validation: in each outer fold all of the
  above is redone on the other folds alone, then the held-out fold is routed as the
  router would route it (keywords first, the head, the threshold to the default
  expert). A figure computed any other way would have seen its own test data. So
  every expert needs :func:`min_prompts` labelled prompts (7 for 5 folds); a smaller
  file is trained with fewer folds (:func:`folds_for`), never with a check skipped.

The fit is deterministic (accelerated gradient descent from zeros, seeded folds), so
the same prompts and embeddings give the same head, byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mol_router.auto import scores
from mol_router.auto.heads.calibration import calibration_error, fit_temperature, nll
from mol_router.auto.heads.labelled import MAX_PROMPTS as MAX_PROMPTS
from mol_router.auto.heads.labelled import MAX_TEXT as MAX_TEXT
from mol_router.auto.heads.labelled import Labelled as Labelled
from mol_router.auto.heads.labelled import data_digest as data_digest
from mol_router.auto.heads.labelled import load_labelled as load_labelled
from mol_router.auto.heads.labelled import normalised as normalised
from mol_router.auto.heads.model import Head, Ngrams

L2_GRID = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
DEFAULT_NGRAMS = Ngrams(3, 1024, math.sqrt(0.5), (4,))
"""Character 3-grams and 4-grams beside the embedding, each in 1,024 buckets of their
own at 0.71 (the two blocks together weigh what one block at 1.0 did). On the project's
240 prompts (all-MiniLM-L6-v2, nested 5-fold cross-validation, mean of three seeds;
the split-half figure trains on 120 and judges the other 120, both ways, three splits):
the embedding alone 82.6% / 79.9%, with 3-grams 86.4% / 82.4%, with 3- and 4-grams and
the penalty chosen by log-loss 87.1% / 83.8%, non-English prompts 72% (from 69%). Word
uni- and bigrams (tf, log tf, idf from the training rows), 2- to 5-grams together,
2,048 buckets, block weights or the penalty picked by inner folds' accuracy, label
smoothing, a nearest-neighbour vote on the embedding, and training copies of each
prompt lower-cased or without punctuation all did no better on both figures
(docs/router.md, "A trained head")."""
DEFAULT_THRESHOLD = 0.4
"""On the project's 240 prompts (5-fold, out of fold) a calibrated probability under 0.4
was 2% of the turns, right about half the time: the default expert is no worse there."""
MIN_KEYWORD_SUPPORT = 2
_ITERS = 400
_TOLERANCE = 1e-6  # the gradient's size at which a fit stops early
# --- fitting -----------------------------------------------------------------------


def fit_softmax(x: scores.Vector, y: np.ndarray, k: int, l2: float,
                iters: int = _ITERS) -> tuple[scores.Vector, scores.Vector]:
    """L2-penalised multinomial logistic regression by Nesterov-accelerated gradient
    descent (the bias is not penalised); ``y`` holds class indices.

    With fewer rows than inputs (a few hundred prompts, 2,432 inputs by default) the
    same descent runs in the rows' span: every iterate ``W`` is ``A @ x`` (it starts at
    zero and each gradient ``(G.T + l2 A) @ x`` is in that span), so the steps are taken
    on ``A`` against the rows' Gram matrix, the same iterates at a fraction of the cost
    (n x n instead of n x d per step)."""
    n, d = x.shape
    if n < d:
        a, b = _descend(x @ x.T, y, k, l2, iters)
        return a @ x, b
    return _descend_primal(x, y, k, l2, iters)


def _step(lipschitz_x: float, n: int, l2: float) -> float:
    # the loss' gradient is Lipschitz with at most ||X||^2 / n (softmax Hessian <= 1/2 I)
    return 1.0 / (0.5 * (lipschitz_x + n) / n + l2)


def _residual(z: scores.Vector, target: scores.Vector) -> scores.Vector:
    """The softmax cross-entropy's gradient in the logits ``z``, averaged over rows:
    ``(softmax(z) - target) / n``, shifted by each row's max so ``exp`` cannot overflow."""
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    out: scores.Vector = (p - target) / len(target)
    return out


def _descend(gram: scores.Vector, y: np.ndarray, k: int,
             l2: float, iters: int) -> tuple[scores.Vector, scores.Vector]:
    """The descent on ``A`` (W = A @ x): logits ``gram @ A.T + b``; it stops early when
    the weights' gradient (``(G.T + l2 A) @ x``, its Frobenius norm through the Gram
    matrix) is under the tolerance."""
    n = len(y)
    target = np.eye(k)[y]
    step = _step(float(np.linalg.eigvalsh(gram)[-1]), n, l2)
    a, b = np.zeros((k, n)), np.zeros(k)
    va, vb, t = a.copy(), b.copy(), 1.0
    for _ in range(iters):
        g = _residual(gram @ va.T + vb, target)
        ga = g.T + l2 * va
        if math.sqrt(max(float(np.einsum("ij,jk,ik->", ga, gram, ga)), 0.0)) < _TOLERANCE:
            return va, vb
        a2 = va - step * ga
        b2 = vb - step * g.sum(axis=0)
        t2 = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
        va = a2 + (t - 1.0) / t2 * (a2 - a)
        vb = b2 + (t - 1.0) / t2 * (b2 - b)
        a, b, t = a2, b2, t2
    return a, b


def _descend_primal(x: scores.Vector, y: np.ndarray, k: int, l2: float,
                    iters: int) -> tuple[scores.Vector, scores.Vector]:
    n, d = x.shape
    target = np.eye(k)[y]
    step = _step(float(np.linalg.norm(x, 2) ** 2), n, l2)
    w, b = np.zeros((k, d)), np.zeros(k)
    vw, vb, t = w.copy(), b.copy(), 1.0
    for _ in range(iters):
        g = _residual(x @ vw.T + vb, target)
        gw = g.T @ x + l2 * vw
        if float(np.abs(gw).max()) < _TOLERANCE:
            return vw, vb
        w2 = vw - step * gw
        b2 = vb - step * g.sum(axis=0)
        t2 = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
        vw = w2 + (t - 1.0) / t2 * (w2 - w)
        vb = b2 + (t - 1.0) / t2 * (b2 - b)
        w, b, t = w2, b2, t2
    return w, b


def stratified_folds(y: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Each row's fold (0..k-1), every class spread evenly over the folds."""
    rng = np.random.default_rng(seed)
    fold = np.zeros(len(y), dtype=int)
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        fold[idx] = (np.arange(len(idx)) + int(rng.integers(k))) % k
    return fold


def min_prompts(folds: int) -> int:
    """The fewest labelled prompts per expert that nested ``folds``-fold
    cross-validation runs on: each outer fold holds up to ``ceil(n / folds)`` of an
    expert's ``n`` prompts and must leave ``folds`` of them for the inner folds (2
    folds: 4, 3: 5, 5: 7)."""
    n = folds
    while n - math.ceil(n / folds) < folds:
        n += 1
    return n


def folds_for(rows: Sequence[Labelled], folds: int) -> int:
    """``folds``, or the most folds the smallest expert's prompts can fill (at least 2);
    ValueError naming the minimum and the expert when not even 2 folds can run."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.expert] = counts.get(r.expert, 0) + 1
    if not counts:
        raise ValueError("no labelled prompts")
    smallest = min(counts, key=lambda e: (counts[e], e))
    n = counts[smallest]
    fits = [k for k in range(2, folds + 1) if min_prompts(k) <= n]
    if not fits:
        raise ValueError(f"every expert needs at least {min_prompts(2)} labelled prompts "
                         f"(nested cross-validation with 2 folds); {smallest} has {n}")
    return fits[-1]


def out_of_fold(x: scores.Vector, y: np.ndarray, k: int, l2: float, folds: int,
                seed: int) -> scores.Vector:
    """Each row's logits from a head fitted without its fold."""
    fold = stratified_folds(y, folds, seed)
    z = np.zeros((len(y), k))
    for f in range(folds):
        tr = fold != f
        w, b = fit_softmax(x[tr], y[tr], k, l2)
        z[~tr] = x[~tr] @ w.T + b
    return z


def choose_l2(x: scores.Vector, y: np.ndarray, k: int, folds: int, seed: int,
              grid: Sequence[float] = L2_GRID) -> tuple[float, scores.Vector]:
    """The penalty with the lowest cross-validated log-loss, and its out-of-fold
    logits (for the temperature). Log-loss, not accuracy: on a couple of hundred
    prompts the folds' accuracy moves in steps of one prompt, so picking by it follows
    noise; on the project's set the log-loss pick raised both nested cross-validation
    and the split-half figure (:data:`DEFAULT_NGRAMS`)."""
    best: tuple[float, float, scores.Vector] | None = None
    for l2 in grid:
        z = out_of_fold(x, y, k, l2, folds, seed)
        loss = nll(z, y, 1.0)
        if best is None or loss < best[0]:
            best = (loss, l2, z)
    assert best is not None
    return best[1], best[2]


def measure_keywords(candidates: Mapping[str, Sequence[str]], texts: Sequence[str],
                     labels: Sequence[str]) -> tuple[dict[str, tuple[str, ...]],
                                                     dict[str, str]]:
    """The candidate keywords the data shows unambiguous (every prompt holding one is
    its expert's, at least :data:`MIN_KEYWORD_SUPPORT` prompts), and why each other
    candidate was dropped."""
    kept: dict[str, tuple[str, ...]] = {}
    dropped: dict[str, str] = {}
    for expert, words in candidates.items():
        keep = []
        for word in dict.fromkeys(w.strip().lower() for w in words if w.strip()):
            pattern = scores.keyword_pattern([word])
            holders = [lab for t, lab in zip(texts, labels, strict=True)
                       if scores.keyword_hits(pattern, t)]
            wrong = sum(lab != expert for lab in holders)
            if wrong:
                dropped[word] = f"{expert}: {wrong} of {len(holders)} prompts holding it " \
                    "are another expert's"
            elif len(holders) < MIN_KEYWORD_SUPPORT:
                dropped[word] = f"{expert}: in {len(holders)} prompt(s), fewer than " \
                    f"{MIN_KEYWORD_SUPPORT}"
            else:
                keep.append(word)
        if keep:
            kept[expert] = tuple(keep)
    return kept, dropped


def keywords_hold_out_of_fold(candidates: Mapping[str, Sequence[str]], texts: Sequence[str],
                              labels: Sequence[str], head_oof: np.ndarray,
                              experts: Sequence[str], fold: np.ndarray) -> tuple[int, int, int]:
    """Keywords first, judged out of fold: in each fold the keywords that
    :func:`measure_keywords` keeps on the other folds settle the fold's turns. Returns
    the turns they settled, how many they got right, and how many of those same turns
    the head's out-of-fold pick (``head_oof``, class indices) got right. A keyword that
    is unambiguous on all the data is never wrong on it, so only this tells how often
    the rule picks keywords that fail on prompts it has not seen."""
    settled = right = head_right = 0
    for f in np.unique(fold):
        inside = [i for i, g in enumerate(fold) if g != f]
        sub, _ = measure_keywords(candidates, [texts[i] for i in inside],
                                  [labels[i] for i in inside])
        if not sub:
            continue
        index = [scores.expert_index(e, [], w) for e, w in sub.items()]
        for i in map(int, np.flatnonzero(fold == f)):
            verdict = scores.keyword_verdict(index, texts[i])
            if verdict is not None:
                settled += 1
                right += verdict.expert == labels[i]
                head_right += experts[int(head_oof[i])] == labels[i]
    return settled, right, head_right


# --- the router's decision, replayed -----------------------------------------------


def route(head: Head, vectors: scores.Vector, texts: Sequence[str], default: str | None,
          keywords_first: bool = True) -> list[tuple[str | None, str]]:
    """What the router decides for each row: ``(expert, signal)``, the expert None
    when the turn goes below the threshold and no default is named."""
    index = head.keyword_index()
    out: list[tuple[str | None, str]] = []
    for vec, text in zip(vectors, texts, strict=True):
        if keywords_first and head.keywords:
            settled = scores.keyword_verdict(index, text)
            if settled is not None:
                out.append((settled.expert, "keywords"))
                continue
        verdict = head.verdict(vec, text, index)
        out.append((verdict.expert, "semantic") if verdict.expert is not None
                   else (default, "default"))
    return out


@dataclass
class Report:
    """What ``train`` measured: nested cross-validation of the whole recipe."""

    folds: int
    prompts: int
    accuracy: float  # as the router routes (keywords first, head, threshold -> default)
    accuracy_head: float  # the head alone, every turn embedded, no threshold
    keyword_share: float  # turns the keywords settled
    keyword_accuracy: float | None
    keyword_head_accuracy: float | None  # the head alone on the turns keywords settled
    below_threshold: float
    per_expert: dict[str, float] = field(default_factory=dict)
    per_lang: dict[str, float] = field(default_factory=dict)
    keywords_dropped: dict[str, str] = field(default_factory=dict)
    calibration_error: float = 0.0  # ECE of the head alone's top probability, out of fold
    confidence: float = 0.0  # the mean top probability, out of fold
    folds_asked: int = 0  # the folds asked for, when the file was too small for them

    def as_dict(self) -> dict[str, Any]:
        return {"folds": self.folds, "prompts": self.prompts,
                "accuracy": round(self.accuracy, 4),
                "accuracyHeadAlone": round(self.accuracy_head, 4),
                "keywordShare": round(self.keyword_share, 4),
                "keywordAccuracy": (None if self.keyword_accuracy is None
                                    else round(self.keyword_accuracy, 4)),
                "keywordTurnsHeadAccuracy": (None if self.keyword_head_accuracy is None
                                             else round(self.keyword_head_accuracy, 4)),
                "belowThreshold": round(self.below_threshold, 4),
                "perExpert": {k: round(v, 4) for k, v in self.per_expert.items()},
                "perLanguage": {k: round(v, 4) for k, v in self.per_lang.items()},
                "calibrationError": round(self.calibration_error, 4),
                "meanConfidence": round(self.confidence, 4),
                **({"foldsAsked": self.folds_asked} if self.folds_asked else {})}


def design(vectors: scores.Vector, rows: Sequence[Labelled],
           ngrams: Ngrams | None) -> scores.Vector:
    """The head's inputs: each embedding, then its text's n-grams (when the head has them)."""
    if ngrams is None:
        return vectors
    return np.hstack([vectors, ngrams.matrix([r.text for r in rows])])


def fit_head(vectors: scores.Vector, rows: Sequence[Labelled], model: str, *,
             keywords: Mapping[str, Sequence[str]] | None = None,
             threshold: float = DEFAULT_THRESHOLD, folds: int = 5, seed: int = 0,
             ngrams: Ngrams | None = DEFAULT_NGRAMS,
             lineage: Mapping[str, Any] | None = None,
             inputs: scores.Vector | None = None,
             keywords_gate: bool = True) -> tuple[Head, dict[str, str]]:
    """One head on all of ``rows`` (penalty and temperature by cross-validation inside
    them), and the candidate keywords it dropped with why. ``inputs``: the rows'
    :func:`design` already computed. ``keywords_gate``: keep the keyword stage only
    when, out of fold, it routes no worse than the head on the turns it settles
    (:func:`keywords_hold_out_of_fold`)."""
    experts = tuple(sorted({r.expert for r in rows}))
    if len(experts) < 2:
        raise ValueError("the labelled prompts name fewer than two experts")
    y = np.array([experts.index(r.expert) for r in rows])
    small = min(np.bincount(y, minlength=len(experts)))
    if small < folds:
        raise ValueError(f"every expert needs at least {folds} labelled prompts (one per "
                         f"fold); the smallest has {small}")
    if vectors.shape[0] != len(rows):
        raise ValueError(f"{vectors.shape[0]} embeddings for {len(rows)} prompts")
    x = design(vectors, rows, ngrams) if inputs is None else inputs
    l2, z = choose_l2(x, y, len(experts), folds, seed)
    temperature = fit_temperature(z, y)
    w, b = fit_softmax(x, y, len(experts), l2)
    texts, labels = [r.text for r in rows], [r.expert for r in rows]
    kept, dropped = measure_keywords(keywords or {}, texts, labels)
    gate: dict[str, Any] = {}
    if kept and keywords_gate:
        settled, right, head_right = keywords_hold_out_of_fold(
            keywords or {}, texts, labels, z.argmax(axis=1), experts,
            stratified_folds(y, folds, seed))
        gate = {"settled": settled, "right": right, "headRight": head_right,
                "kept": right >= head_right}
        if right < head_right:  # keywords first would cost accuracy: no keyword stage
            for e, words in kept.items():
                for word in words:
                    dropped[word] = (f"{e}: keywords first was right {right} of "
                                     f"{settled} times out of fold, the head {head_right}")
            kept = {}
    training = {"prompts": len(rows), "dataDigest": data_digest(rows), "l2": l2,
                **({"keywordsOutOfFold": gate} if gate else {}),
                "perExpert": {e: int((y == i).sum()) for i, e in enumerate(experts)},
                **(lineage or {})}
    head = Head(experts, w, b, temperature, threshold, model,
                {e: v for e, v in kept.items() if e in experts}, training, ngrams)
    return head, dropped


def cross_validate(vectors: scores.Vector, rows: Sequence[Labelled], model: str, *,
                   keywords: Mapping[str, Sequence[str]] | None = None,
                   threshold: float = DEFAULT_THRESHOLD, default: str | None = None,
                   folds: int = 5, seed: int = 0,
                   ngrams: Ngrams | None = DEFAULT_NGRAMS,
                   keywords_gate: bool = True) -> Report:
    """Nested k-fold cross-validation of :func:`fit_head` and the router's decision:
    each outer fold's head (penalty, temperature, keywords) sees the other folds only.
    ValueError when an expert has fewer than :func:`min_prompts` prompts."""
    experts = sorted({r.expert for r in rows})
    y = np.array([experts.index(r.expert) for r in rows])
    counts = np.bincount(y, minlength=len(experts))
    if len(experts) >= 2 and int(counts.min()) < min_prompts(folds):
        small = experts[int(np.argmin(counts))]
        fewer = folds_for(rows, folds)
        raise ValueError(
            f"nested {folds}-fold cross-validation needs at least {min_prompts(folds)} "
            f"labelled prompts per expert (each outer fold must leave {folds} for the inner "
            f"folds); {small} has {int(counts.min())}: add prompts, or pass --folds {fewer}")
    fold = stratified_folds(y, folds, seed + 1)
    picked: list[str | None] = [None] * len(rows)
    alone: list[str] = [""] * len(rows)
    confidence = np.zeros(len(rows))
    via: list[str] = [""] * len(rows)
    dropped: dict[str, str] = {}
    x = design(vectors, rows, ngrams)
    for f in range(folds):
        train = [r for r, g in zip(rows, fold, strict=True) if g != f]
        test = np.flatnonzero(fold == f)
        head, lost = fit_head(vectors[fold != f], train, model, keywords=keywords,
                              threshold=threshold, folds=folds, seed=seed, ngrams=ngrams,
                              inputs=x[fold != f], keywords_gate=keywords_gate)
        dropped.update(lost)
        decided = route(head, vectors[test], [rows[int(i)].text for i in test], default)
        for i, (expert, signal) in zip(test, decided, strict=True):
            picked[i], via[i] = expert, signal
            probs = head.probabilities(vectors[i], rows[int(i)].text)
            alone[i] = head.experts[int(np.argmax(probs))]
            confidence[i] = float(probs.max())
    right = [p == r.expert for p, r in zip(picked, rows, strict=True)]
    by_kw = [ok for ok, v in zip(right, via, strict=True) if v == "keywords"]
    head_kw = [a == r.expert for a, r, v in zip(alone, rows, via, strict=True)
               if v == "keywords"]

    per_expert = {e: float(np.mean([ok for ok, r in zip(right, rows, strict=True)
                                    if r.expert == e])) for e in experts}
    langs = sorted({r.lang for r in rows})
    per_lang = {g: float(np.mean([ok for ok, r in zip(right, rows, strict=True)
                                  if r.lang == g])) for g in langs}
    right_alone = np.array([a == r.expert for a, r in zip(alone, rows, strict=True)])
    return Report(
        folds=folds, prompts=len(rows), accuracy=float(np.mean(right)),
        accuracy_head=float(np.mean(right_alone)),
        calibration_error=calibration_error(confidence, right_alone),
        confidence=float(confidence.mean()),
        keyword_share=len(by_kw) / len(rows),
        keyword_accuracy=float(np.mean(by_kw)) if by_kw else None,
        keyword_head_accuracy=float(np.mean(head_kw)) if head_kw else None,
        below_threshold=sum(v == "default" for v in via) / len(rows),
        per_expert=per_expert, per_lang=per_lang, keywords_dropped=dropped)
