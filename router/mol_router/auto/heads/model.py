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

What a head document may hold is the contract's
(:func:`mol_platform.contract.router_heads.check_document`, the very rules the
catalog checks at publish): this module only turns the checked document into arrays
and scores, so a head the catalog accepts is one this loader accepts, and the reverse.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mol_platform.contract.refs import DNS_LABEL_RE
from mol_platform.contract.router_heads import (
    KIND,
    HeadDocument,
    HeadDocumentError,
    NgramSpec,
    canonical,
    check_document,
    digest_of,
    document_digest,
    parse_document,
)
from mol_router.auto import scores

EXPERT_RE = DNS_LABEL_RE


class HeadError(ValueError):
    """A head file that cannot be used (unreadable, breaking a rule of the contract,
    or not for this config)."""

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

    @classmethod
    def of(cls, spec: NgramSpec) -> Ngrams:
        return cls(spec.n, spec.dims, spec.scale, spec.also)


@dataclass(frozen=True)
class Head:
    """A fitted head: ``weights`` (experts x dims), ``bias``, ``temperature``,
    ``threshold``, the embedding model it was trained on and the measured keywords;
    ``training`` is the lineage and the cross-validation report, kept as written. Built
    from a checked document (:func:`parse`) or by training; :meth:`checked` puts a
    trained one through the contract's rules before it is written."""

    experts: tuple[str, ...]
    weights: scores.Vector
    bias: scores.Vector
    temperature: float
    threshold: float
    model: str
    keywords: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    training: Mapping[str, Any] = field(default_factory=dict)
    ngrams: Ngrams | None = None

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
        ``score`` is that probability and ``margin`` its lead over the second; the
        signal is ``head`` (not ``semantic``, which is the example utterances'), and
        each score's ``nearest`` and ``centroid`` are 0: a head has no examples."""
        probs = self.probabilities(query, text)
        hits = {e.name: scores.keyword_hits(e.keywords, text) for e in index}
        order = np.argsort(-probs, kind="stable")
        ranked = tuple(scores.Score(self.experts[i], float(probs[i]), 0.0, 0.0,
                                     hits.get(self.experts[i], 0)) for i in order)
        best = ranked[0]
        lead = best.score - ranked[1].score
        if best.score < self.threshold:
            return scores.Verdict(None, "none", best.score, lead, ranked, "below-confidence")
        return scores.Verdict(best.expert, "head", best.score, lead, ranked)

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
        """The canonical bytes (the contract's): what the digest is taken over."""
        return canonical(self.to_json())

    def digest(self) -> str:
        return digest_of(self.dumps())

    def with_threshold(self, threshold: float) -> Head:
        return Head(self.experts, self.weights, self.bias, self.temperature, threshold,
                    self.model, self.keywords, self.training, self.ngrams)

    def checked(self) -> Head:
        """This head, once its document passed the contract's rules (what the catalog
        would refuse at publish is refused before a file is written)."""
        return parse(self.to_json())

    @classmethod
    def of(cls, doc: HeadDocument) -> Head:
        """The arrays of a checked document."""
        return cls(doc.experts, np.asarray(doc.weights, dtype=np.float64),
                   np.asarray(doc.bias, dtype=np.float64), doc.temperature, doc.threshold,
                   doc.embedding_model, doc.keywords, doc.training,
                   Ngrams.of(doc.ngrams) if doc.ngrams is not None else None)


def parse(data: object) -> Head:
    """A head from its JSON document; :class:`HeadError` names the contract's rule it
    breaks."""
    try:
        return Head.of(check_document(data))
    except HeadDocumentError as exc:
        raise HeadError(f"not a router head: {exc}") from None


def _decoded(raw: bytes | str) -> Any:
    try:
        return parse_document(raw.encode() if isinstance(raw, str) else raw)
    except HeadDocumentError as exc:
        raise HeadError(str(exc)) from None


def loads(raw: bytes | str) -> Head:
    """A head from its file's bytes (NaN and Infinity refused, as at publish)."""
    return parse(_decoded(raw))


def read(path: str | Path) -> tuple[Head, str]:
    """A head file, and its digest as the catalog computes it at publish (over the
    document's canonical bytes, whatever spacing the file has): a file and its
    published copy are named alike."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise HeadError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = _decoded(raw)
        return parse(data), document_digest(data)
    except HeadError as exc:
        raise HeadError(f"{path}: {exc}") from None


def load(path: str | Path) -> Head:
    return read(path)[0]


def check_for(head: Head, experts: Sequence[str], model: str) -> None:
    """Refuse a head that the config cannot use: an expert it names is not one of the
    deployment's, or it was trained on another embedding model's vectors."""
    unknown = [e for e in head.experts if e not in experts]
    if unknown:
        raise HeadError(f"the head names experts the deployment lacks: {', '.join(unknown)}")
    if head.model != model:
        raise HeadError(f"the head was trained on embedding model {head.model!r}, the "
                        f"config's semantic.model is {model!r}")
