"""Router heads as catalog artifacts: the document kind, its rules, and head references.

A trained router head (``mol router train`` writes it; ``mol_router.auto.heads.model`` reads it) is
published to the catalog like an adapter: immutable integer versions per
``namespace/name``, aliases that move, a digest over its canonical bytes and the lineage
its ``training`` section records. Routers resolve ``ns/name@alias`` at start and again
when the alias moves (the ``router_head.*`` events of ``GET /v1/events``), so a new head
reaches traffic without a config change, and a canary head can run beside the serving
one.

What lives here is shared by the catalog (which refuses a document that breaks a rule,
with a sentence a person can act on), the router (which loads heads), the clients and
the CLI: the kind, the limits, the check of a document (pure Python: no numpy on the
ground floor), its canonical bytes and digest, and :class:`HeadRef`. The rules are
written once, here: :func:`check_document` answers a typed :class:`HeadDocument` that
the router only turns into arrays, so a head the catalog accepts is one every router
loads, and the reverse. What the catalog cannot judge (whether the head fits a
deployment's experts and embedding model) the router checks when it is applied.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mol_platform.contract.refs import (
    ALIAS_PATTERN,
    DNS_LABEL_PATTERN,
    EXACT_NAME_PATTERN,
    VERSION_NUMBER_PATTERN,
    RefError,
    check_alias,
    is_dns_label,
    parse_version,
)

KIND = "mol.router.head/v1"
EVENT_PREFIX = "router_head."
"""The catalog event types of router heads (``router_head.published``, ``.alias.set``,
``.alias.deleted``): routers refetch a head on them, and leave them out of adapter events."""
MAX_EXPERTS = 64
MAX_DIMS = 8192
MAX_NGRAM_DIMS = 1 << 16
MAX_MODEL_CHARS = 253
MAX_DOCUMENT_BYTES = 32 << 20  # the largest request body a publish accepts
MAX_DATA_DIGEST_CHARS = 200
MAX_SOURCE_CHARS = 2000
MAX_KEYWORDS = 256  # per expert
MIN_KEYWORD_CHARS, MAX_KEYWORD_CHARS = 2, 80
MAX_JSON_DEPTH = 32  # what any stored JSON document may nest (the catalog's rule)
MAX_INT = 2**63 - 1  # the largest integer every catalog backend stores

# ``ns/name@ref``: a namespace (the catalog's name rule), a head name (a DNS label) and
# a version (3 or v3) or an alias. Full match only: ``\Z``, never ``$``.
HEAD_REF_RE = re.compile(
    rf"(?P<namespace>{EXACT_NAME_PATTERN})/(?P<name>{DNS_LABEL_PATTERN})"
    rf"@(?P<ref>{VERSION_NUMBER_PATTERN}|{ALIAS_PATTERN})\Z")
_VERSION_RE = re.compile(rf"{VERSION_NUMBER_PATTERN}\Z")


class HeadDocumentError(ValueError):
    """A head document that breaks one of the rules of :func:`check_document`."""


@dataclass(frozen=True, slots=True)
class HeadRef:
    """A parsed ``namespace/name@version`` (``ref`` an int) or ``namespace/name@alias``
    (``ref`` a str)."""

    namespace: str
    name: str
    ref: int | str

    @classmethod
    def parse(cls, text: str) -> HeadRef:
        """``acme/chat@stable`` or ``acme/chat@3`` (``@v3`` too); ValueError
        (:class:`~mol_platform.contract.refs.RefError`) that shows the form otherwise."""
        m = HEAD_REF_RE.match(text)
        if m is None or len(m["name"]) > 63 or len(m["namespace"]) > 63:
            raise RefError(
                f"invalid router head reference {text[:200]!r}: expected namespace/name@ref, "
                "the name a DNS label (lowercase letters, digits and '-') and ref a version "
                "(3 or v3) or an alias (e.g. stable), as in acme/chat@stable")
        ref = m["ref"]
        try:
            if _VERSION_RE.match(ref):
                return cls(m["namespace"], m["name"], parse_version(ref))
            return cls(m["namespace"], m["name"], check_alias(ref))
        except RefError as exc:
            raise RefError(f"invalid router head reference {text[:200]!r}: {exc}") from None

    @property
    def head(self) -> str:
        """``namespace/name``: the feed's ``adapter`` column for this head's events."""
        return f"{self.namespace}/{self.name}"

    @property
    def version(self) -> int | None:
        return self.ref if isinstance(self.ref, int) else None

    @property
    def alias(self) -> str | None:
        return self.ref if isinstance(self.ref, str) else None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}@{self.ref}"


def check_head_name(value: str) -> str:
    """A router head's name: a DNS label (it becomes a Prometheus label and a path)."""
    if not is_dns_label(value):
        raise RefError(f"invalid router head name {value[:80]!r}: use a DNS label, 1-63 "
                       "lowercase letters, digits and '-', starting and ending with a letter "
                       "or digit")
    return value


@dataclass(frozen=True, slots=True)
class NgramSpec:
    """The ``ngrams`` block: character ``n``-grams (and each length of ``also``), each
    length hashed into ``dims`` buckets of its own, the block a unit vector times
    ``scale``."""

    n: int
    dims: int
    scale: float
    also: tuple[int, ...] = ()

    @property
    def width(self) -> int:
        """The n-gram part's size in the head's inputs: ``dims`` per gram length."""
        return self.dims * (1 + len(self.also))


@dataclass(frozen=True, slots=True)
class HeadDocument:
    """A head document that passed :func:`check_document`: every field of the file,
    typed, and the facts the catalog keeps beside it (:attr:`data_digest`,
    :attr:`source`, :attr:`cross_validation`). ``weights`` and ``bias`` are the
    document's own lists (checked: finite numbers of the right shape)."""

    experts: tuple[str, ...]
    embedding_model: str
    dims: int
    weights: Sequence[Sequence[float]]
    bias: Sequence[float]
    temperature: float
    threshold: float
    keywords: Mapping[str, tuple[str, ...]]
    training: Mapping[str, Any]
    ngrams: NgramSpec | None = None

    @property
    def ngram_dims(self) -> int:
        """The n-gram part's width (0: none)."""
        return self.ngrams.width if self.ngrams is not None else 0

    @property
    def data_digest(self) -> str | None:
        value = self.training.get("dataDigest")
        return value if isinstance(value, str) else None

    @property
    def source(self) -> str | None:
        value = self.training.get("source")
        return value if isinstance(value, str) else None

    @property
    def cross_validation(self) -> dict[str, Any] | None:
        value = self.training.get("crossValidation")
        return value if isinstance(value, dict) else None


def _refuse_constant(name: str) -> Any:
    raise HeadDocumentError(f"the head contains {name}, which JSON cannot represent: "
                            "write it with allow_nan=False (mol router train does)")


def parse_document(raw: bytes) -> Any:
    """The JSON value of a request body; NaN and Infinity refused (Python's json
    accepts them, JSON has neither)."""
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except HeadDocumentError:
        raise
    except RecursionError:
        raise HeadDocumentError("the head is nested too deeply to be a router head") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise HeadDocumentError(f"the body is not JSON ({exc}): send the file mol router "
                                "train wrote, as application/json") from None


def canonical(doc: Any) -> bytes:
    """The bytes the catalog stores and the digest is taken over (the router writes
    its head files in this form, so a file's sha256 is its digest in the catalog)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def digest_of(stored: bytes) -> str:
    """A head's digest: the sha256 of its stored (canonical) bytes."""
    return "sha256:" + hashlib.sha256(stored).hexdigest()


def document_digest(doc: Any) -> str:
    """The digest of a document, whatever spacing its file had: that of its canonical
    bytes, as the catalog computes at publish."""
    return digest_of(canonical(doc))


def _number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) if isinstance(value, float) else abs(value) <= MAX_INT


def _experts(doc: Mapping[str, Any]) -> list[str]:
    experts = doc.get("experts")
    if not isinstance(experts, list) or not 2 <= len(experts) <= MAX_EXPERTS:
        raise HeadDocumentError(f"experts must be a list of 2 to {MAX_EXPERTS} expert names")
    for e in experts:
        if not isinstance(e, str) or not is_dns_label(e):
            raise HeadDocumentError(f"expert name {str(e)[:80]!r} is not a DNS label "
                                    "(lowercase letters, digits and '-', at most 63)")
    if len(set(experts)) != len(experts):
        raise HeadDocumentError("experts must be unique: a name is listed twice")
    return experts


def _embedding(doc: Mapping[str, Any]) -> tuple[str, int]:
    emb = doc.get("embedding")
    if not isinstance(emb, dict):
        raise HeadDocumentError('embedding must be an object {"model": name, "dims": n}')
    model, dims = emb.get("model"), emb.get("dims")
    if not isinstance(model, str) or not 1 <= len(model) <= MAX_MODEL_CHARS:
        raise HeadDocumentError(f"embedding.model must be the embedding model's name, 1 to "
                                f"{MAX_MODEL_CHARS} characters")
    if type(dims) is not int or not 1 <= dims <= MAX_DIMS:
        raise HeadDocumentError(f"embedding.dims must be an integer from 1 to {MAX_DIMS}")
    return model, dims


def _ngrams(doc: Mapping[str, Any]) -> NgramSpec | None:
    """The ``ngrams`` block (None without one); its width is ``dims`` buckets per gram
    length (``n``, then each of ``also``)."""
    if "ngrams" not in doc or doc["ngrams"] is None:
        return None
    ng = doc["ngrams"]
    if not isinstance(ng, dict):
        raise HeadDocumentError("ngrams must be an object with n, dims and scale")
    n, dims, also = ng.get("n"), ng.get("dims"), ng.get("also", [])
    scale: Any = ng.get("scale")
    if type(n) is not int or not 2 <= n <= 6:
        raise HeadDocumentError("ngrams.n must be an integer from 2 to 6")
    if type(dims) is not int or not 16 <= dims <= MAX_NGRAM_DIMS:
        raise HeadDocumentError(f"ngrams.dims must be an integer from 16 to {MAX_NGRAM_DIMS}")
    if not _number(scale) or not 0.0 < scale <= 100.0:
        raise HeadDocumentError("ngrams.scale must be a number above 0, at most 100")
    if not isinstance(also, list) or any(type(m) is not int or not 2 <= m <= 6 for m in also) \
            or len({n, *also}) != 1 + len(also):
        raise HeadDocumentError("ngrams.also must be a list of further gram lengths from 2 "
                                "to 6, none repeated and none equal to ngrams.n")
    spec = NgramSpec(n, dims, float(scale), tuple(also))
    if spec.width > MAX_NGRAM_DIMS:
        raise HeadDocumentError(f"ngrams: dims times the gram lengths must be at most "
                                f"{MAX_NGRAM_DIMS}")
    return spec


def _matrix(doc: Mapping[str, Any], rows: int, width: int, ngram_dims: int) -> None:
    weights = doc.get("weights")
    what = (f"{width} numbers ({width - ngram_dims} for the embedding and {ngram_dims} for "
            "the n-grams)" if ngram_dims else f"{width} numbers")
    if not isinstance(weights, list) or len(weights) != rows:
        raise HeadDocumentError(f"weights must be {rows} rows (one per expert) of {what}")
    for i, row in enumerate(weights):
        if not isinstance(row, list) or len(row) != width:
            got = len(row) if isinstance(row, list) else type(row).__name__
            raise HeadDocumentError(f"weights row {i} must hold {what}, it holds {got}")
        if not all(map(_number, row)):
            raise HeadDocumentError(f"weights row {i} holds something other than a finite "
                                    "number")
    bias = doc.get("bias")
    if not isinstance(bias, list) or len(bias) != rows or not all(map(_number, bias)):
        raise HeadDocumentError(f"bias must be {rows} finite numbers (one per expert)")


def _scalars(doc: Mapping[str, Any]) -> tuple[float, float]:
    temperature: Any = doc.get("temperature")
    threshold: Any = doc.get("threshold")
    if not _number(temperature) or not 1e-3 <= temperature <= 1e3:
        raise HeadDocumentError("temperature must be a number from 0.001 to 1000")
    if not _number(threshold) or not 0.0 <= threshold <= 1.0:
        raise HeadDocumentError("threshold must be a number from 0 to 1")
    return float(temperature), float(threshold)


def _keywords(doc: Mapping[str, Any], experts: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The measured keywords: experts of the head to at most :data:`MAX_KEYWORDS` words
    each, every word 2 to 80 characters (what the router's keyword stage matches)."""
    keywords = doc.get("keywords")
    if keywords is None:
        return {}
    if not isinstance(keywords, dict) or any(
            k not in experts or not isinstance(v, list) or not all(isinstance(w, str) for w in v)
            for k, v in keywords.items()):
        raise HeadDocumentError("keywords must map experts of the head to lists of words")
    for expert, words in keywords.items():
        if len(words) > MAX_KEYWORDS or any(
                not MIN_KEYWORD_CHARS <= len(w) <= MAX_KEYWORD_CHARS for w in words):
            raise HeadDocumentError(
                f"keywords of {expert!r}: at most {MAX_KEYWORDS}, each {MIN_KEYWORD_CHARS} "
                f"to {MAX_KEYWORD_CHARS} characters")
    return {k: tuple(v) for k, v in keywords.items() if v}


def _storable(doc: Mapping[str, Any]) -> None:
    """What every stored JSON document must be, checked here so a router never loads
    a head the catalog could not hold: strings without NUL or unpaired surrogates,
    integers within 64 bits, nested at most :data:`MAX_JSON_DEPTH` levels. The weights
    and bias were checked as numbers already."""
    stack: list[tuple[Any, int]] = [(v, 2) for k, v in doc.items()
                                    if k not in ("weights", "bias")]
    stack += [(k, 1) for k in doc]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise HeadDocumentError("the head contains a NUL character (\\u0000)")
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise HeadDocumentError("the head contains an unpaired UTF-16 "
                                        "surrogate") from None
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_INT:
            raise HeadDocumentError("the head contains an integer beyond the 64-bit range")
        elif isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise HeadDocumentError(f"the head is nested more than {MAX_JSON_DEPTH} "
                                        "levels deep")
            if isinstance(item, dict):
                stack.extend((k, depth) for k in item)
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)


def _training(doc: Mapping[str, Any]) -> None:
    training = doc.get("training")
    if training is None:
        return
    if not isinstance(training, dict):
        raise HeadDocumentError("training must be an object (the lineage mol router train "
                                "records)")
    data, source, cv = (training.get(k) for k in ("dataDigest", "source", "crossValidation"))
    if data is not None and (not isinstance(data, str) or len(data) > MAX_DATA_DIGEST_CHARS):
        raise HeadDocumentError(f"training.dataDigest must be a string of at most "
                                f"{MAX_DATA_DIGEST_CHARS} characters")
    if source is not None and (not isinstance(source, str) or len(source) > MAX_SOURCE_CHARS):
        raise HeadDocumentError(f"training.source must be a string of at most "
                                f"{MAX_SOURCE_CHARS} characters")
    if cv is not None and not isinstance(cv, dict):
        raise HeadDocumentError("training.crossValidation must be an object")


def check_document(doc: Any) -> HeadDocument:
    """The typed document, or :class:`HeadDocumentError` naming the first rule it
    breaks: a JSON object of ``kind`` :data:`KIND`; ``experts`` 2..64 unique DNS labels;
    ``embedding`` ``{model: 1..253 characters, dims: 1..8192}`` (integers, never 4.0);
    ``ngrams`` (when there) ``{n: 2..6, dims: 16..65536, scale: (0, 100], also}``;
    ``weights`` one row per expert of ``dims`` (+ ``ngrams.dims`` per gram length)
    finite numbers; ``bias`` one finite number per expert; ``temperature`` 0.001..1000
    and ``threshold`` 0..1; ``keywords`` at most 256 per expert of the head, each 2..80
    characters; the lineage in ``training`` of the types the catalog lists; and what
    any stored document must be (:func:`_storable`). The only rules: the catalog
    checks a publish with them, the router every head it loads."""
    if not isinstance(doc, dict):
        raise HeadDocumentError(f"a router head is a JSON object, not a JSON "
                                f"{type(doc).__name__}")
    if doc.get("kind") != KIND:
        raise HeadDocumentError(f"kind must be {KIND!r} (a head written by mol router train), "
                                f"not {str(doc.get('kind'))[:80]!r}")
    experts = _experts(doc)
    model, dims = _embedding(doc)
    ngrams = _ngrams(doc)
    width = ngrams.width if ngrams is not None else 0
    _matrix(doc, len(experts), dims + width, width)
    temperature, threshold = _scalars(doc)
    keywords = _keywords(doc, experts)
    _training(doc)
    _storable(doc)
    return HeadDocument(tuple(experts), model, dims, doc["weights"], doc["bias"], temperature,
                        threshold, keywords, dict(doc.get("training") or {}), ngrams)
