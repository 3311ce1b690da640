"""Routing decisions and their labels, the wire between routers, the catalog and people.

A router with ``semantic.recordDecisions`` on reports each automatic decision (the turn
it routed, the expert it chose and why) to the catalog in batches
(``POST /v1/routing/decisions``, the router's usage token). A user's thumbs-down or a
reviewer then says which expert was right for a request id
(``PUT /v1/namespaces/{ns}/routing/labels/{request_id}``, ``mol router label``), and
the labelled turns come back as the JSON lines ``mol router train --prompts`` reads
(``GET /v1/namespaces/{ns}/routing/labels``, ``mol router train --from-catalog``), so
the next head learns from real traffic. Everything lives in the tenant's namespace: a
token of one namespace never sees another's turns.

These models are shared by the catalog's schemas (which add the OpenAPI descriptions),
the router's recorder and the CLI; the limits are the catalog's range checks.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from mol_platform.contract.refs import DNS_LABEL_PATTERN, EXACT_NAME_PATTERN
from mol_platform.contract.usage import BATCH_ID_PATTERN

# The router's x-request-id (its own uuid4 hex, or a client's id it passed on).
REQUEST_ID_PATTERN = r"[A-Za-z0-9._:-]{1,128}"
MAX_TEXT_CHARS = 4000  # a turn as the router embedded it (semantic.maxChars <= this)
MAX_NOTE_CHARS = 500
MAX_BATCH_DECISIONS = 500
ROUTES = ("keywords", "head", "semantic", "classifier", "default")
Route = Literal["keywords", "head", "semantic", "classifier", "default"]
LabelSource = Literal["user", "reviewer"]

RequestId = Annotated[str, Field(pattern=f"\\A{REQUEST_ID_PATTERN}\\Z")]
Namespace = Annotated[str, Field(pattern=f"\\A{EXACT_NAME_PATTERN}\\Z", max_length=63)]
ExpertName = Annotated[str, Field(pattern=f"\\A{DNS_LABEL_PATTERN}\\Z", max_length=63)]


class _Strict(BaseModel):
    # Python's re: the name patterns use a lookahead, and ``\\Z`` (not ``$``) ends a
    # full match, so a trailing newline is refused.
    model_config = ConfigDict(extra="forbid", regex_engine="python-re")


HEAD_DIGEST_PATTERN = r"sha256:[0-9a-f]{64}"
HeadDigest = Annotated[str, Field(pattern=rf"\A{HEAD_DIGEST_PATTERN}\Z")]


class Candidate(_Strict):
    """On a turn where the router ran a canary head beside the serving one: the pick of
    the head that did NOT route the turn (``Decision.head``/``expert`` are the one that
    did). Labels then score both heads on the same turns."""

    head: HeadDigest
    expert: ExpertName


class Decision(_Strict):
    """One automatic decision of a router."""

    request_id: RequestId
    namespace: Namespace  # the tenant's: its API key's namespace, else the deployment's
    deployment: Annotated[str, Field(pattern=f"\\A{DNS_LABEL_PATTERN}\\Z", max_length=63)]
    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    expert: ExpertName  # the expert it routed to
    route: Route  # what decided: keywords, the trained head, examples, classifier, default
    head: HeadDigest | None = None  # the trained head that picked (route head or keywords)
    at: datetime  # when it decided (UTC)
    candidate: Candidate | None = None  # absent in batches of routers without a canary


class DecisionBatch(_Strict):
    """``POST /v1/routing/decisions``: a batch id (a retry is counted once) and its
    decisions, each namespace's needing the token's ``usage``/``usage:<ns>`` scope."""

    batch_id: Annotated[str, Field(pattern=f"\\A{BATCH_ID_PATTERN}\\Z")]
    decisions: Annotated[list[Decision], Field(min_length=1, max_length=MAX_BATCH_DECISIONS)]


class DecisionsRecorded(BaseModel):
    """The answer to a batch: ``recorded`` new decisions (a request id already recorded
    in its namespace is kept as it was)."""

    model_config = ConfigDict(extra="allow")
    batch_id: str
    duplicate: bool
    recorded: int


class LabelIn(_Strict):
    """``PUT /v1/namespaces/{ns}/routing/labels/{request_id}``: the right expert."""

    expert: ExpertName
    source: LabelSource = "reviewer"
    note: Annotated[str | None, Field(max_length=MAX_NOTE_CHARS)] = None


class Label(BaseModel):
    """A labelled decision: the answer to the PUT. The export
    (``GET .../routing/labels``, ``application/x-ndjson``) writes one line per label,
    ``{"id", "text", "expert", "routed", "deployment", "source"}``: the lines
    ``mol router train --prompts`` reads."""

    model_config = ConfigDict(extra="allow")
    request_id: str
    namespace: str
    deployment: str
    text: str
    routed: str  # the expert the router chose
    expert: str  # the right one
    source: LabelSource
    note: str | None
    labelled_at: datetime


class RoutingCandidate(BaseModel):
    """A recorded decision's ``candidate``: the other head's pick."""

    model_config = ConfigDict(extra="allow")
    head: str
    expert: str


class ExpertAccuracy(BaseModel):
    model_config = ConfigDict(extra="allow")
    labelled: int
    correct: int


class HeadAccuracy(BaseModel):
    """One head's picks on labelled decisions, in all and per right (labelled) expert."""

    model_config = ConfigDict(extra="allow")
    head: str  # its digest
    ref: str | None  # ns/name@version when it is a published router head of the namespace
    labelled: int
    correct: int
    experts: dict[str, ExpertAccuracy]


class RoutingAccuracy(BaseModel):
    """``GET /v1/namespaces/{ns}/routing/accuracy``: every head that picked on a labelled
    decision (the serving head, and a canary's candidate picks), most labelled first."""

    model_config = ConfigDict(extra="allow")
    namespace: str
    heads: list[HeadAccuracy]
