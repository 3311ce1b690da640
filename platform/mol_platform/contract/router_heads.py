"""Router heads as catalog artifacts: the document kind, its rules, and head references.

A trained router head (``mol router train`` writes it; ``mol_router.auto.heads.model`` reads it) is
published to the catalog like an adapter: immutable integer versions per
``namespace/name``, aliases that move, a digest over its canonical bytes and the lineage
its ``training`` section records. Routers resolve ``ns/name@alias`` at start and again
when the alias moves (the ``router_head.*`` events of ``GET /v1/events``), so a new head
reaches traffic without a config change, and a canary head can run beside the serving
one.

What lives here is shared by the catalog (which refuses a document that breaks a rule,
with a sentence a person can act on), the clients and the CLI: the kind, the limits, the
check of a document (pure Python: no numpy on the ground floor) and :class:`HeadRef`.
The router keeps its own, stricter loader; the rules here are the subset a catalog can
judge without knowing the deployment (its experts, its embedding model).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from mol_platform.contract.refs import (
    ALIAS_PATTERN,
    DNS_LABEL_PATTERN,
    EXACT_NAME_PATTERN,
    VERSION_NUMBER_PATTERN,
    RefError,
    check_alias,
    parse_version,
)

KIND = "mol.router.head/v1"
MAX_EXPERTS = 64
MAX_DIMS = 8192
MAX_NGRAM_DIMS = 1 << 16
MAX_MODEL_CHARS = 253
MAX_DOCUMENT_BYTES = 32 << 20  # the largest request body a publish accepts
MAX_DATA_DIGEST_CHARS = 200
MAX_SOURCE_CHARS = 2000

DNS_LABEL_RE = re.compile(DNS_LABEL_PATTERN)
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
    if len(value) > 63 or DNS_LABEL_RE.fullmatch(value) is None:
        raise RefError(f"invalid router head name {value[:80]!r}: use a DNS label, 1-63 "
                       "lowercase letters, digits and '-', starting and ending with a letter "
                       "or digit")
    return value


@dataclass(frozen=True, slots=True)
class HeadFacts:
    """What the catalog keeps beside a checked document (and answers with)."""

    experts: list[str]
    embedding_model: str
    dims: int
    ngram_dims: int  # the n-gram part's width: ngrams.dims per gram length (0: none)
    data_digest: str | None
    source: str | None
    cross_validation: dict[str, Any] | None


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
    return "sha256:" + hashlib.sha256(stored).hexdigest()


def _number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _experts(doc: Mapping[str, Any]) -> list[str]:
    experts = doc.get("experts")
    if not isinstance(experts, list) or not 2 <= len(experts) <= MAX_EXPERTS:
        raise HeadDocumentError(f"experts must be a list of 2 to {MAX_EXPERTS} expert names")
    for e in experts:
        if not isinstance(e, str) or len(e) > 63 or DNS_LABEL_RE.fullmatch(e) is None:
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


def _ngram_dims(doc: Mapping[str, Any]) -> int:
    """The n-gram part's width in the weights: ``dims`` buckets per gram length (``n``,
    then each of ``also``); 0 without ``ngrams``."""
    if "ngrams" not in doc or doc["ngrams"] is None:
        return 0
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
    width = dims * (1 + len(also))
    if width > MAX_NGRAM_DIMS:
        raise HeadDocumentError(f"ngrams: dims times the gram lengths must be at most "
                                f"{MAX_NGRAM_DIMS}")
    return width


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


def _scalars(doc: Mapping[str, Any]) -> None:
    temperature: Any = doc.get("temperature")
    threshold: Any = doc.get("threshold")
    if not _number(temperature) or not 1e-3 <= temperature <= 1e3:
        raise HeadDocumentError("temperature must be a number from 0.001 to 1000")
    if not _number(threshold) or not 0.0 <= threshold <= 1.0:
        raise HeadDocumentError("threshold must be a number from 0 to 1")


def _training(doc: Mapping[str, Any]) -> tuple[str | None, str | None, dict[str, Any] | None]:
    training = doc.get("training")
    if training is None:
        return None, None, None
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
    return data, source, cv


def check_document(doc: Any) -> HeadFacts:
    """The facts of a head document, or :class:`HeadDocumentError` naming the first rule
    it breaks: a JSON object of ``kind`` :data:`KIND`; ``experts`` 2..64 unique DNS
    labels; ``embedding`` ``{model: 1..253 characters, dims: 1..8192}``; ``ngrams`` (when
    there) as the router reads it; ``weights`` one row per expert of ``dims`` (+
    ``ngrams.dims`` per gram length) finite numbers; ``bias`` one finite number per
    expert; ``temperature`` and ``threshold`` in the router's ranges; the lineage in
    ``training`` of the types the catalog lists."""
    if not isinstance(doc, dict):
        raise HeadDocumentError(f"a router head is a JSON object, not a JSON "
                                f"{type(doc).__name__}")
    if doc.get("kind") != KIND:
        raise HeadDocumentError(f"kind must be {KIND!r} (a head written by mol router train), "
                                f"not {str(doc.get('kind'))[:80]!r}")
    experts = _experts(doc)
    model, dims = _embedding(doc)
    ngram_dims = _ngram_dims(doc)
    _matrix(doc, len(experts), dims + ngram_dims, ngram_dims)
    _scalars(doc)
    keywords = doc.get("keywords")
    if keywords is not None and (not isinstance(keywords, dict) or any(
            k not in experts or not isinstance(v, list) or not all(isinstance(w, str) for w in v)
            for k, v in keywords.items())):
        raise HeadDocumentError("keywords must map experts of the head to lists of words")
    data, source, cv = _training(doc)
    return HeadFacts(experts, model, dims, ngram_dims, data, source, cv)


# --- the catalog's answers (the clients' typed answers; re-exported by catalog_models) ---


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")  # fields a newer catalog adds are kept


class RouterHeadVersion(_Answer):
    """One immutable version of a router head: its digest and what its document says."""

    namespace: str
    name: str
    version: int
    digest: str
    experts: list[str]
    embedding_model: str
    dims: int
    ngram_dims: int  # the n-gram inputs: ngrams.dims per gram length (0: no n-grams)
    data_digest: str | None  # training.dataDigest
    source: str | None  # training.source
    cross_validation: dict[str, Any] | None  # training.crossValidation
    size_bytes: int  # of the stored (canonical) document
    created_by: str | None
    created_at: datetime


class RouterHeadVersionList(_Answer):
    items: list[RouterHeadVersion]  # newest first


class RouterHeadAlias(RouterHeadVersion):
    """The version an alias names, and the alias."""

    alias: str


class RouterHeadAliasSet(RouterHeadAlias):
    previous: int | None  # where the alias pointed before (None: it is new)


class RouterHeadAliasItem(_Answer):
    alias: str
    version: int
    updated_at: datetime


class RouterHeadAliasList(_Answer):
    items: list[RouterHeadAliasItem]


class RouterHeadAliasDeleted(_Answer):
    namespace: str
    name: str
    alias: str
    version: int  # where it pointed


class RouterHeadItem(_Answer):
    """A head name with its latest version and its aliases."""

    namespace: str
    name: str
    latest_version: int
    latest: RouterHeadVersion
    aliases: dict[str, int]
    updated_at: datetime


class RouterHeadList(_Answer):
    items: list[RouterHeadItem]  # by name
