"""``POST /v1/routing/decisions`` (routers report), ``PUT .../routing/labels/{request_id}``
(a person says which expert was right), ``GET .../routing/labels`` (the export
``mol router train --prompts`` reads), ``GET .../routing/decisions/{request_id}`` and
``GET .../routing/accuracy`` (each trained head's picks against the labels)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.responses import Response, StreamingResponse

from mol_catalog.deps import CatalogDep, PrincipalDep
from mol_catalog.errors import BadRequest, json_response
from mol_catalog.routing import service
from mol_catalog.routing.schemas import (
    AccuracyOut,
    DecisionBatchIn,
    DecisionOut,
    DecisionsRecordedOut,
    LabelIn,
    LabelOut,
)
from mol_catalog.util import valid_name
from mol_platform.contract.refs import DNS_LABEL_PATTERN, is_dns_label
from mol_platform.contract.routing_feedback import REQUEST_ID_PATTERN

router = APIRouter(tags=["routing"])
ROUTING = "/v1/namespaces/{ns}/routing"
NDJSON = "application/x-ndjson"
RequestIdPath = Annotated[str, Path(
    pattern=f"^{REQUEST_ID_PATTERN}$", max_length=128,
    description="The request id the router answered with (its x-request-id header)")]


@router.post("/v1/routing/decisions", response_model=DecisionsRecordedOut)
async def post_decisions(body: DecisionBatchIn, catalog: CatalogDep,
                         who: PrincipalDep) -> Response:
    """Record a batch of automatic routing decisions (scope ``usage``, ``usage:<ns>``
    for every decision's namespace, or ``admin``). A batch id seen before is answered
    ``duplicate: true`` and records nothing; a request id already recorded in its
    namespace keeps its first record."""
    async with catalog.db.unit() as uow:
        out = await service.record(uow, who, body)
    return json_response(out)


@router.put(ROUTING + "/labels/{request_id}", response_model=LabelOut)
async def put_label(ns: str, request_id: RequestIdPath, body: LabelIn, catalog: CatalogDep,
                    who: PrincipalDep) -> Response:
    """Say which expert was right for a recorded decision (scope ``publish:<ns>`` or
    ``admin``); labelling again overwrites. 404 when no decision with that request id
    is recorded in the namespace."""
    who.require_publish(valid_name(ns, "namespace"))
    async with catalog.db.unit() as uow:
        out = await service.label(uow, ns, request_id, body)
    for head, expert, result in out.counts:  # committed: count it
        catalog.metrics.label_counted(head, expert, result)
    return json_response(out.body)


@router.get(ROUTING + "/decisions/{request_id}", response_model=DecisionOut)
async def get_decision(ns: str, request_id: RequestIdPath, catalog: CatalogDep,
                       who: PrincipalDep) -> Response:
    """One recorded decision and its label, if any (read scope on the namespace)."""
    who.require_read(valid_name(ns, "namespace"))
    async with catalog.db.read() as conn:
        out = await service.decision(conn, ns, request_id)
    return json_response(out)


DeploymentQuery = Annotated[str | None, Query(max_length=63, description=(
    "Only this deployment's decisions"), json_schema_extra={
    "pattern": f"^{DNS_LABEL_PATTERN}$"})]


def _deployment(deployment: str | None) -> str | None:
    if deployment is not None and not is_dns_label(deployment):
        raise BadRequest(f"invalid deployment {deployment[:80]!r}: a deployment's name is "
                         "a DNS label (lowercase letters, digits and '-', at most 63)")
    return deployment


def _utc(when: datetime) -> datetime:
    """A naive time is UTC; one whose UTC form leaves the calendar is its end there (a
    filter from before year 1 is every label, one after 9999 none)."""
    if when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    try:
        return when.astimezone(UTC)
    except OverflowError:
        return (datetime.min if when.year == 1 else datetime.max).replace(tzinfo=UTC)


@router.get(ROUTING + "/labels", response_class=Response, responses={
    200: {"description": "One JSON object a line: {\"id\", \"text\", \"expert\", \"routed\", "
                         "\"deployment\", \"source\"}, in labelled order (mol router train "
                         "--prompts reads it)",
          "content": {NDJSON: {"schema": {"type": "string"}}}}})
async def export_labels(
    ns: str, catalog: CatalogDep, who: PrincipalDep,
    deployment: DeploymentQuery = None,
    since: Annotated[datetime | None, Query(description=(
        "Only labels given at or after this time (ISO 8601; without a zone: UTC)"))] = None,
) -> Response:
    """The namespace's labelled decisions as JSON lines (``application/x-ndjson``),
    oldest label first; read scope on the namespace (``read``, ``read:<ns>``,
    ``publish:<ns>`` or ``admin``)."""
    who.require_read(valid_name(ns, "namespace"))
    lines = await service.export(catalog.db, ns, _deployment(deployment),
                                 None if since is None else _utc(since))
    return StreamingResponse(lines, media_type=NDJSON)


@router.get(ROUTING + "/accuracy", response_model=AccuracyOut)
async def accuracy(
    ns: str, catalog: CatalogDep, who: PrincipalDep,
    deployment: DeploymentQuery = None,
    since: Annotated[datetime | None, Query(description=(
        "Only labels given at or after this time (ISO 8601; without a zone: UTC), as the "
        "export's since"))] = None,
) -> Response:
    """How often each trained head picked the expert people labelled right, over the
    namespace's labelled decisions: the head that routed a turn (route ``head``, or
    ``keywords`` the head's measured keywords settled) and a canary head's
    ``candidate`` pick, so a canary and the serving head are compared on the same
    turns; in all and per right expert. Read scope on the namespace."""
    who.require_read(valid_name(ns, "namespace"))
    async with catalog.db.read() as conn:
        out = await service.accuracy(conn, ns, _deployment(deployment),
                                     None if since is None else _utc(since))
    return json_response(out)
