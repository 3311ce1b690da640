"""The trained router head: a linear classifier over the turn's embedding (numpy only).

``mol router train`` fits it on labelled prompts (:mod:`mol_router.auto.heads.train`); the
router loads it and, per ``model: auto`` turn, computes ``softmax((W @ x + b) / T)`` over
the experts: one small matrix product. With ``ngrams`` (the default of ``mol router
train``), ``x`` is the embedding followed by the turn's character n-grams hashed into a
fixed number of buckets (:class:`Ngrams`; by default 3- and 4-grams, each block of
its own): they carry what a small English-centred embedding model misses (``SQL``,
``regex``, ``función``), about 1.3 ms of the router's CPU for a turn of 2,000
characters. The
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
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mol_platform.contract.refs import DNS_LABEL_RE
from mol_platform.contract.router_heads import KIND, MAX_DIMS, MAX_EXPERTS, MAX_NGRAM_DIMS
from mol_router.auto import scores

# The document's kind and bounds are the contract's, which the catalog checks at publish:
# one set of limits for what a router loads and what the catalog accepts.
EXPERT_RE = DNS_LABEL_RE
MAX_KEYWORDS = 256


class HeadError(ValueError):
    """A head file that cannot be used (unreadable, malformed, or not for this config)."""

_WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class Ngrams:
    """Character ``n``-grams of the turn (lower-cased words joined by one space, with a
    space at each end), each counted in bucket ``crc32(gram) % dims``; the counts form
    a unit vector times ``scale``. crc32, not Python's ``hash``: the same gram must
    land in the same bucket in every process.

    ``also``: further gram lengths, each counted into its own ``dims`` buckets and
    made a unit vector times ``scale`` on its own, after the ``n``-grams' block (a
    head of 3- and 4-grams each at 0.71 gives the character part the weight that one
    block at 1.0 had). Without it the file is what it was before the field existed."""

    n: int = 3
    dims: int = 1024
    scale: float = 1.0
    also: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not 2 <= self.n <= 6:
            raise HeadError("ngrams.n must be within 2..6")
        if not 16 <= self.dims <= MAX_NGRAM_DIMS:
            raise HeadError(f"ngrams.dims must be within 16..{MAX_NGRAM_DIMS}")
        if not (math.isfinite(self.scale) and 0.0 < self.scale <= 100.0):
            raise HeadError("ngrams.scale must be within 0..100")
        lengths = (self.n, *self.also)
        if any(not 2 <= m <= 6 for m in self.also) or len(set(lengths)) != len(lengths):
            raise HeadError("ngrams.also must hold lengths within 2..6, none repeated "
                            "and none equal to ngrams.n")
        if self.width > MAX_NGRAM_DIMS:
            raise HeadError(f"ngrams: dims times the lengths must be at most "
                            f"{MAX_NGRAM_DIMS}")

    @property
    def lengths(self) -> tuple[int, ...]:
        """Every gram length, in the order of their blocks."""
        return (self.n, *self.also)

    @property
    def width(self) -> int:
        """The n-gram part's size in the head's inputs: ``dims`` per gram length."""
        return self.dims * (1 + len(self.also))

    def _block(self, padded: str, n: int) -> scores.Vector:
        grams = [padded[i:i + n] for i in range(len(padded) - n + 1)]
        idx = np.fromiter(map(zlib.crc32, map(str.encode, grams)), dtype=np.int64,
                          count=len(grams)) % self.dims
        counts = np.bincount(idx, minlength=self.dims).astype(np.float64)
        norm = math.sqrt(float(counts @ counts))
        out: scores.Vector = counts * (self.scale / norm) if norm else counts
        return out

    def vector(self, text: str) -> scores.Vector:
        padded = " " + " ".join(_WORD.findall(text.lower())) + " "
        if not self.also:
            return self._block(padded, self.n)
        return np.concatenate([self._block(padded, n) for n in self.lengths])

    def matrix(self, texts: Sequence[str]) -> scores.Vector:
        return np.stack([self.vector(t) for t in texts]) if texts else np.zeros((0, self.width))

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "dims": self.dims, "scale": self.scale,
                **({"also": list(self.also)} if self.also else {})}


def _ngrams(ng: object) -> Ngrams:
    """The ``ngrams`` block of a head file (``also`` optional: files before it load)."""
    if not isinstance(ng, dict):
        raise HeadError("ngrams must be an object with n, dims and scale")
    also = ng.get("also", [])
    if not isinstance(also, list) or not all(isinstance(m, int) and not isinstance(m, bool)
                                             for m in also):
        raise HeadError("ngrams.also must be a list of gram lengths (integers)")
    return Ngrams(int(ng["n"]), int(ng["dims"]), float(ng["scale"]), tuple(also))


@dataclass(frozen=True)
class Head:
    """A fitted head: ``weights`` (experts x dims), ``bias``, ``temperature``,
    ``threshold``, the embedding model it was trained on and the measured keywords;
    ``training`` is the lineage and the cross-validation report, kept as written."""

    experts: tuple[str, ...]
    weights: scores.Vector
    bias: scores.Vector
    temperature: float
    threshold: float
    model: str
    keywords: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    training: Mapping[str, Any] = field(default_factory=dict)
    ngrams: Ngrams | None = None

    def __post_init__(self) -> None:
        k = len(self.experts)
        if not 2 <= k <= MAX_EXPERTS:
            raise HeadError(f"a head needs 2 to {MAX_EXPERTS} experts, not {k}")
        for name in self.experts:
            if not EXPERT_RE.fullmatch(name):
                raise HeadError(f"expert name {name!r} is not a DNS label")
        if len(set(self.experts)) != k:
            raise HeadError("expert names must be unique")
        extra = self.ngrams.width if self.ngrams is not None else 0
        if self.weights.ndim != 2 or self.weights.shape[0] != k \
                or not 1 <= self.weights.shape[1] - extra <= MAX_DIMS:
            raise HeadError(f"weights must be {k} rows of 1 to {MAX_DIMS} numbers"
                            + (f" and {extra} for the n-grams" if extra else ""))
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
        """The embedding's size (the weights' width less the n-gram buckets)."""
        return int(self.weights.shape[1]) - (self.ngrams.width if self.ngrams else 0)

    def features(self, query: scores.Vector, text: str) -> scores.Vector:
        if self.ngrams is None:
            return query
        return np.concatenate([query, self.ngrams.vector(text)])

    def probabilities(self, query: scores.Vector, text: str = "") -> scores.Vector:
        """Calibrated probabilities of each expert (in ``experts`` order) for a unit
        embedding of ``text``; the caller checked its size (:attr:`dims`)."""
        z = (self.weights @ self.features(query, text) + self.bias) / self.temperature
        z = np.exp(z - z.max())
        out: scores.Vector = z / z.sum()
        return out

    def keyword_index(self) -> tuple[scores.ExpertIndex, ...]:
        """The measured keywords as the keyword stage's index (no vectors)."""
        return tuple(scores.expert_index(e, [], self.keywords.get(e, ()))
                     for e in self.experts)

    def verdict(self, query: scores.Vector, text: str = "",
                index: Sequence[scores.ExpertIndex] = ()) -> scores.Verdict:
        """The decision for a unit embedding: the most probable expert when its
        probability reaches ``threshold``, else undecided (``below-confidence``).
        ``score`` is that probability and ``margin`` its lead over the second."""
        probs = self.probabilities(query, text)
        hits = {e.name: scores.keyword_hits(e.keywords, text) for e in index}
        order = np.argsort(-probs, kind="stable")
        ranked = tuple(scores.Score(self.experts[i], float(probs[i]), 0.0, 0.0,
                                     hits.get(self.experts[i], 0)) for i in order)
        best = ranked[0]
        lead = best.score - ranked[1].score
        if best.score < self.threshold:
            return scores.Verdict(None, "none", best.score, lead, ranked, "below-confidence")
        return scores.Verdict(best.expert, "semantic", best.score, lead, ranked)

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
            **({"ngrams": self.ngrams.to_json()} if self.ngrams else {}),
        }

    def dumps(self) -> bytes:
        """The canonical bytes (sorted keys, compact): what the digest is taken over."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"),
                          allow_nan=False).encode()

    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.dumps()).hexdigest()

    def with_threshold(self, threshold: float) -> Head:
        return Head(self.experts, self.weights, self.bias, self.temperature, threshold,
                    self.model, self.keywords, self.training, self.ngrams)


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
        ng = data.get("ngrams")
        ngrams = None if ng is None else _ngrams(ng)
        weights = np.asarray(data["weights"], dtype=np.float64)
        bias = np.asarray(data["bias"], dtype=np.float64)
        head = Head(experts=experts, weights=weights, bias=bias,
                    temperature=float(data["temperature"]),
                    threshold=float(data["threshold"]), model=str(emb["model"]),
                    keywords=keywords, training=dict(data.get("training") or {}),
                    ngrams=ngrams)
        dims = int(emb["dims"])
    except HeadError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise HeadError(f"malformed head: {exc!r}") from None
    if dims != head.dims:
        raise HeadError(f"embedding.dims says {dims}, the weights have {head.dims} for it")
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
