"""Routing feedback bodies: the contract's models (``mol_platform.contract.routing_feedback``)
with what the catalog adds: text every backend can store, timestamps in UTC, and JSON
schema patterns in the ``^...$`` form the fuzzer and other JSON Schema tools read (the
validators still match in full, so a trailing newline is refused with 422)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, Field

from mol_catalog.util import ResponseBody, Text
from mol_platform.contract import routing_feedback as rf
from mol_platform.contract.refs import DNS_LABEL_PATTERN, EXACT_NAME_PATTERN
from mol_platform.contract.usage import BATCH_ID_PATTERN

HEAD_PATTERN = r"sha256:[0-9a-f]{64}"
# Free text as the schema documents it: no NUL (Postgres cannot store one; ``Text``
# refuses it, and a schema that allowed it would promise what is refused).
NO_NUL = {"pattern": "^[^\\u0000]*$"}
# ... and not blank (a blank turn is not a line ``mol router train`` can learn from).
TURN = {"pattern": "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"}


HeadDigest = Annotated[str, Field(pattern=f"\\A{HEAD_PATTERN}\\Z"), Field(
    json_schema_extra={"pattern": f"^{HEAD_PATTERN}$"})]


def _pattern(regex: str, **extra: str) -> object:
    """The JSON schema's form of a pattern the validator matches in full."""
    return Field(json_schema_extra={"pattern": f"^{regex}$", **extra})


def _in_utc(value: datetime) -> datetime:
    """In UTC, or refused (a timestamp whose UTC form leaves the calendar)."""
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ValueError("timestamp out of range") from None


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("text is blank: send the turn as the router embedded it")
    return value


class CandidateIn(rf.Candidate):
    """A canary head's pick on a turn the serving head routed."""

    head: Annotated[HeadDigest, Field(description=(
        "The digest of the head that ran beside the one that routed the turn"))]
    expert: Annotated[rf.ExpertName, _pattern(DNS_LABEL_PATTERN, description=(
        "The expert that head picked"))]


class DecisionIn(rf.Decision):
    """One automatic decision: the turn the router routed, the expert it chose and what
    decided, when (UTC)."""

    request_id: Annotated[rf.RequestId, _pattern(rf.REQUEST_ID_PATTERN, description=(
        "The router's x-request-id (the id a user labels it by)"))]
    namespace: Annotated[rf.Namespace, _pattern(EXACT_NAME_PATTERN, description=(
        "The tenant's namespace: its API key's, else the deployment's"))]
    deployment: Annotated[str, Field(pattern=f"\\A{DNS_LABEL_PATTERN}\\Z", max_length=63),
                          _pattern(DNS_LABEL_PATTERN)]
    text: Annotated[Text, AfterValidator(_not_blank),
                    Field(min_length=1, max_length=rf.MAX_TEXT_CHARS, description=(
                        "The turn as the router embedded it"), json_schema_extra=TURN)]
    expert: Annotated[rf.ExpertName, _pattern(DNS_LABEL_PATTERN, description=(
        "The expert the router routed to"))]
    head: Annotated[HeadDigest | None, Field(description="The trained head's digest")] = None
    at: Annotated[AwareDatetime, AfterValidator(_in_utc), Field(description=(
        "When it decided (with a zone; a time ahead of the catalog's clock counts as now)"))]
    candidate: Annotated[CandidateIn | None, Field(description=(
        "With a canary head: the pick of the head that did not route the turn"))] = None


class DecisionBatchIn(rf.DecisionBatch):
    """``POST /v1/routing/decisions``."""

    batch_id: Annotated[str, Field(pattern=f"\\A{BATCH_ID_PATTERN}\\Z"),
                        _pattern(BATCH_ID_PATTERN, description=(
                            "Chosen by the reporter, unique per batch; a batch id seen "
                            "before is answered without recording again (retries are safe)"))]
    # The contract's list, of the catalog's decisions (what validation builds).
    decisions: Annotated[list[DecisionIn], Field(  # type: ignore[assignment]
        min_length=1, max_length=rf.MAX_BATCH_DECISIONS)]


class LabelIn(rf.LabelIn):
    """``PUT /v1/namespaces/{ns}/routing/labels/{request_id}``: the expert that was right."""

    expert: Annotated[rf.ExpertName, _pattern(DNS_LABEL_PATTERN, description=(
        "The expert that should have taken the turn"))]
    source: rf.LabelSource = Field(default="reviewer", description=(
        "user (a thumbs-down in the product) or reviewer (a person going over traffic)"))
    note: Annotated[Annotated[Text, Field(json_schema_extra=NO_NUL)] | None, Field(
        max_length=rf.MAX_NOTE_CHARS, description="Why, for the next reviewer")] = None


class DecisionsRecordedOut(ResponseBody):
    batch_id: str
    duplicate: bool = Field(description="The batch was recorded before; nothing changed")
    recorded: int = Field(description=(
        "New decisions (a request id already recorded in its namespace keeps its first "
        "record)"))


class LabelOut(ResponseBody):
    request_id: str
    namespace: str
    deployment: str
    text: str
    routed: str = Field(description="The expert the router chose")
    expert: str = Field(description="The expert that was right")
    source: rf.LabelSource
    note: str | None
    labelled_at: datetime


class DecisionLabelOut(ResponseBody):
    expert: str
    source: rf.LabelSource
    note: str | None
    labelled_at: datetime


class CandidateOut(ResponseBody):
    head: str
    expert: str


class DecisionOut(ResponseBody):
    request_id: str
    namespace: str
    deployment: str
    text: str
    expert: str = Field(description="The expert the router chose")
    route: rf.Route
    head: str | None
    decided_at: datetime
    label: DecisionLabelOut | None = Field(description="null until someone labels it")
    candidate: CandidateOut | None = Field(None, description=(
        "A canary head's pick beside ``head`` (null: no canary ran)"))


class ExpertAccuracyOut(ResponseBody):
    labelled: int = Field(description="Labelled decisions whose right expert is this one")
    correct: int = Field(description="... of which the head picked it")


class HeadAccuracyOut(ResponseBody):
    head: str = Field(description="The head's digest")
    ref: str | None = Field(description=(
        "ns/name@version when the digest is a published router head of the namespace"))
    labelled: int = Field(description="Labelled decisions this head picked on")
    correct: int = Field(description="... where its pick was the labelled expert")
    experts: dict[str, ExpertAccuracyOut] = Field(description="By the right expert")


class AccuracyOut(ResponseBody):
    namespace: str
    heads: list[HeadAccuracyOut] = Field(description="Most labelled first")
