"""The trained router head: a linear classifier over the turn's embedding (numpy only).

``mol router train`` fits it on labelled prompts (:mod:`mol_router.head_train`); the
router loads it and, per ``model: auto`` turn, computes ``softmax((W @ x + b) / T)`` over
the experts: one small matrix product, a few microseconds of the router's CPU. The
temperature ``T`` was fitted on cross-validated predictions, so the probabilities are
calibrated and the confidence ``threshold`` means what it says: below it the turn goes
to the deployment's default expert (``x-mol-route: default; semantic=below-confidence``).

The head also carries the keywords that its training data showed to be unambiguous
(every labelled prompt holding one belonged to the keyword's expert, at least twice):
with ``keywordsDecide`` they settle a turn before any embedding call. Keywords that
the data contradicted are not in the file at all, so a keyword is never trusted on
faith.

The file is JSON (:data:`KIND`), written canonically (sorted keys, no spaces) so its
sha256 is the head's digest in the catalog. Why JSON and not pickle or npz: the router
reads heads published by others, and a JSON document of numbers executes nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mol_router import signals

KIND = "mol.router.head/v1"
EXPERT_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
MAX_EXPERTS = 64
MAX_DIMS = 8192
MAX_KEYWORDS = 256


class HeadError(ValueError):
    """A head file that cannot be used (unreadable, malformed, or not for this config)."""


@dataclass(frozen=True)
class Head:
    """A fitted head: ``weights`` (experts x dims), ``bias``, ``temperature``,
    ``threshold``, the embedding model it was trained on and the measured keywords;
    ``training`` is the lineage and the cross-validation report, kept as written."""

    experts: tuple[str, ...]
    weights: signals.Vector
    bias: signals.Vector
    temperature: float
    threshold: float
    model: str
    keywords: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    training: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        k = len(self.experts)
        if not 2 <= k <= MAX_EXPERTS:
            raise HeadError(f"a head needs 2 to {MAX_EXPERTS} experts, not {k}")
        for name in self.experts:
            if not EXPERT_RE.fullmatch(name):
                raise HeadError(f"expert name {name!r} is not a DNS label")
        if len(set(self.experts)) != k:
            raise HeadError("expert names must be unique")
        if self.weights.ndim != 2 or self.weights.shape[0] != k \
                or not 1 <= self.weights.shape[1] <= MAX_DIMS:
            raise HeadError(f"weights must be {k} rows of 1 to {MAX_DIMS} numbers")
        if self.bias.shape != (k,):
            raise HeadError(f"bias must hold {k} numbers")
        if not (np.isfinite(self.weights).all() and np.isfinite(self.bias).all()):
            raise HeadError("weights and bias must be finite")
        if not (math.isfinite(self.temperature) and 1e-3 <= self.temperature <= 1e3):
            raise HeadError("temperature must be within 0.001..1000")
        if not 0.0 <= self.threshold <= 1.0:
            raise HeadError("threshold must be within 0..1")
        if not self.model or len(self.model) > 253:
            raise HeadError("the embedding model's name must be 1 to 253 characters")
        for name, words in self.keywords.items():
            if name not in self.experts:
                raise HeadError(f"keywords for {name!r}, which is not one of the experts")
            if len(words) > MAX_KEYWORDS or any(not 2 <= len(w) <= 80 for w in words):
                raise HeadError(f"keywords of {name!r}: at most {MAX_KEYWORDS}, each 2 to "
                                "80 characters")

    @property
    def dims(self) -> int:
        return int(self.weights.shape[1])

    def probabilities(self, query: signals.Vector) -> signals.Vector:
        """Calibrated probabilities of each expert (in ``experts`` order) for a unit
        embedding; the caller checked its size (:attr:`dims`)."""
        z = (self.weights @ query + self.bias) / self.temperature
        z = np.exp(z - z.max())
        out: signals.Vector = z / z.sum()
        return out

    def keyword_index(self) -> tuple[signals.ExpertIndex, ...]:
        """The measured keywords as the keyword stage's index (no vectors)."""
        return tuple(signals.expert_index(e, [], self.keywords.get(e, ()))
                     for e in self.experts)

    def verdict(self, query: signals.Vector, text: str = "",
                index: Sequence[signals.ExpertIndex] = ()) -> signals.Verdict:
        """The decision for a unit embedding: the most probable expert when its
        probability reaches ``threshold``, else undecided (``below-confidence``).
        ``score`` is that probability and ``margin`` its lead over the second."""
        probs = self.probabilities(query)
        hits = {e.name: signals.keyword_hits(e.keywords, text) for e in index}
        order = np.argsort(-probs, kind="stable")
        ranked = tuple(signals.Score(self.experts[i], float(probs[i]), 0.0, 0.0,
                                     hits.get(self.experts[i], 0)) for i in order)
        best = ranked[0]
        lead = best.score - ranked[1].score
        if best.score < self.threshold:
            return signals.Verdict(None, "none", best.score, lead, ranked, "below-confidence")
        return signals.Verdict(best.expert, "semantic", best.score, lead, ranked)

    # --- the file ----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "experts": list(self.experts),
            "embedding": {"model": self.model, "dims": self.dims},
            "weights": [[float(v) for v in row] for row in self.weights],
            "bias": [float(v) for v in self.bias],
            "temperature": float(self.temperature),
            "threshold": float(self.threshold),
            "keywords": {e: list(w) for e, w in self.keywords.items() if w},
            "training": dict(self.training),
        }

    def dumps(self) -> bytes:
        """The canonical bytes (sorted keys, compact): what the digest is taken over."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"),
                          allow_nan=False).encode()

    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.dumps()).hexdigest()

    def with_threshold(self, threshold: float) -> Head:
        return Head(self.experts, self.weights, self.bias, self.temperature, threshold,
                    self.model, self.keywords, self.training)


def parse(data: object) -> Head:
    """A head from its JSON document; :class:`HeadError` says what is wrong."""
    if not isinstance(data, dict):
        raise HeadError("a head file is a JSON object")
    if data.get("kind") != KIND:
        raise HeadError(f"not a router head (kind must be {KIND!r})")
    try:
        emb = data["embedding"]
        experts = tuple(data["experts"])
        keywords = {str(k): tuple(str(w) for w in v)
                    for k, v in dict(data.get("keywords") or {}).items()}
        weights = np.asarray(data["weights"], dtype=np.float64)
        bias = np.asarray(data["bias"], dtype=np.float64)
        head = Head(experts=experts, weights=weights, bias=bias,
                    temperature=float(data["temperature"]),
                    threshold=float(data["threshold"]), model=str(emb["model"]),
                    keywords=keywords, training=dict(data.get("training") or {}))
        dims = int(emb["dims"])
    except HeadError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise HeadError(f"malformed head: {exc!r}") from None
    if dims != head.dims:
        raise HeadError(f"embedding.dims says {dims}, the weights have {head.dims}")
    if not all(isinstance(e, str) for e in experts):
        raise HeadError("experts must be names")
    return head


def loads(raw: bytes | str) -> Head:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HeadError(f"not JSON: {exc}") from None
    return parse(data)


def load(path: str | Path) -> Head:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise HeadError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return loads(raw)
    except HeadError as exc:
        raise HeadError(f"{path}: {exc}") from None


def check_for(head: Head, experts: Sequence[str], model: str) -> None:
    """Refuse a head that the config cannot use: an expert it names is not one of the
    deployment's, or it was trained on another embedding model's vectors."""
    unknown = [e for e in head.experts if e not in experts]
    if unknown:
        raise HeadError(f"the head names experts the deployment lacks: {', '.join(unknown)}")
    if head.model != model:
        raise HeadError(f"the head was trained on embedding model {head.model!r}, the "
                        f"config's semantic.model is {model!r}")
