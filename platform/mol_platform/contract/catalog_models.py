"""Typed answers of the catalog's REST API, as the Python clients return them.

They mirror the response schemas in the catalog's ``/openapi.json`` field by field (a
test compares them), and live here, on the ground floor, so the router, the operator,
the vLLM plugin and scripts get them without importing the catalog. Fields the catalog
adds later are kept (``extra="allow"``): an older client still reads a newer catalog,
and ``model_dump(mode="json")`` gives the whole answer back. The catalog keeps its own
response classes (they carry the OpenAPI descriptions and change with the service);
``tests/catalog/test_client_models.py`` keeps the two in step.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from mol_platform.contract.router_head_answers import RouterHeadAlias as RouterHeadAlias
from mol_platform.contract.router_head_answers import (
    RouterHeadAliasDeleted as RouterHeadAliasDeleted,
)
from mol_platform.contract.router_head_answers import RouterHeadAliasItem as RouterHeadAliasItem
from mol_platform.contract.router_head_answers import RouterHeadAliasList as RouterHeadAliasList
from mol_platform.contract.router_head_answers import RouterHeadAliasSet as RouterHeadAliasSet
from mol_platform.contract.router_head_answers import RouterHeadItem as RouterHeadItem
from mol_platform.contract.router_head_answers import RouterHeadList as RouterHeadList
from mol_platform.contract.router_head_answers import RouterHeadVersion as RouterHeadVersion
from mol_platform.contract.router_head_answers import RouterHeadVersionList as RouterHeadVersionList

# The answers of the routing feedback and router head calls are the wire contracts' own
# models (re-exported: the clients' typed answers).
from mol_platform.contract.routing_feedback import DecisionsRecorded as DecisionsRecorded
from mol_platform.contract.routing_feedback import ExpertAccuracy as ExpertAccuracy
from mol_platform.contract.routing_feedback import HeadAccuracy as HeadAccuracy
from mol_platform.contract.routing_feedback import Label as Label
from mol_platform.contract.routing_feedback import LabelSource, Route
from mol_platform.contract.routing_feedback import RoutingAccuracy as RoutingAccuracy
from mol_platform.contract.routing_feedback import RoutingCandidate as RoutingCandidate


class CatalogModel(BaseModel):
    model_config = ConfigDict(extra="allow")


class Reason(CatalogModel):
    """Why an adapter does not fit: a stable ``code`` and a sentence for people."""

    code: str
    message: str


class Verdict(CatalogModel):
    compatible: bool
    reasons: list[Reason]


class FileEntry(CatalogModel):
    path: str
    digest: str
    size: int


class ResolvedFile(FileEntry):
    url: str  # absolute once the client has it (see ``catalog_client.join_url``)


class Resolved(CatalogModel):
    """``GET /v1/resolve/{ns}/{name}@{ref}``: the immutable version a reference names."""

    adapter: str
    version: int
    digest: str
    status: str
    yank_reason: str | None
    base: str
    files: list[ResolvedFile]
    verdict: Verdict | None  # None without ``profile``
    # The model-signing signature checked at publish (a Sigstore bundle, JSON), the id of
    # the key that signed it, that key's PEM and whether it was revoked since.
    signature: str | None
    signed_by: str | None
    signer_key: str | None
    signer_revoked: bool
    # Whether ``profile`` requires its engines to verify the signature.
    signature_required: bool


class Refusal(Reason):
    """Why an alias may not move: ``yanked`` or ``incompatible`` (with its ``profile``)."""

    profile: str | None = None


class AliasRefused(CatalogModel):
    alias: str
    reasons: list[Refusal]


class Published(CatalogModel):
    """``POST .../versions``; ``created`` is False for content already published;
    ``alias_refused``: the form's alias did not move (the version is stored)."""

    adapter: str
    version: int
    digest: str
    created: bool
    status: str
    base: str
    verdicts: dict[str, Verdict]
    alias_refused: AliasRefused | None = None


class AdapterItem(CatalogModel):
    adapter: str
    namespace: str
    name: str
    base: str
    tags: list[str]
    labels: dict[str, str]
    latest_version: int | None
    updated_at: str | None


class AdapterPage(CatalogModel):
    items: list[AdapterItem]
    next_cursor: str | None


class AdapterDetail(AdapterItem):
    aliases: dict[str, int]


class VersionItem(CatalogModel):
    version: int
    digest: str
    status: str
    rank: int
    alpha: float
    target_modules: list[str]
    size: int
    parent: int | None
    source: str | None
    created_by: str | None
    created_at: str | None
    yank_reason: str | None
    signed: bool  # a model-signing signature was verified at publish
    signed_by: str | None  # the id of the key that signed it


class VersionPage(CatalogModel):
    items: list[VersionItem]
    next_cursor: str | None


class VersionDetail(VersionItem):
    adapter: str
    base: str
    signature: str | None
    files: list[FileEntry]
    verdicts: dict[str, Verdict]


class Yanked(VersionItem):
    adapter: str


class Deleted(CatalogModel):
    adapter: str
    version: int
    digest: str
    aliases_removed: list[str]
    latest_version: int | None


class AliasSet(CatalogModel):
    alias: str
    version: int
    previous: int | None
    forced: bool = False  # an admin forced it past ``overridden``
    overridden: list[Refusal] | None = None


class AliasMove(CatalogModel):
    version: int | None  # None: the alias was removed (its version was deleted)
    previous: int | None
    changed_by: str | None
    changed_at: str | None
    forced: bool
    overridden: list[Refusal] | None


class ProtectedAliases(CatalogModel):
    """``/v1/namespaces/{ns}/protected-aliases``."""

    namespace: str
    protected_aliases: list[str]
    required_evals: list[str]
    default: bool
    updated_by: str | None
    updated_at: str | None


class Webhook(CatalogModel):
    id: int
    namespace: str
    url: str
    events: list[str]
    created_by: str | None
    created_at: str | None


class WebhookList(CatalogModel):
    items: list[Webhook]


class WebhookDelivery(CatalogModel):
    delivery_id: str
    event_id: int
    status: str
    attempts: int
    next_attempt_at: str | None
    last_status: int | None
    last_error: str | None
    created_at: str | None
    delivered_at: str | None


class WebhookDeliveryList(CatalogModel):
    items: list[WebhookDelivery]


class AliasHistory(CatalogModel):
    items: list[AliasMove]


class BaseRevision(CatalogModel):
    revision: str
    architecture: str | None
    config: dict[str, Any]
    tensors: dict[str, list[int]]
    num_layers: int
    created_at: str | None


class BaseRegistered(BaseRevision):
    name: str


class BaseDetail(CatalogModel):
    name: str
    current: str
    revisions: list[BaseRevision]


class Profile(CatalogModel):
    name: str
    base_model: str
    engine: str
    max_lora_rank: int
    max_loras: int | None
    supported_modules: list[str] | None
    require_signatures: bool
    generation: int
    updated_at: str | None


class ProfileList(CatalogModel):
    items: list[Profile]


class SigningKey(CatalogModel):
    """A public key that may sign a namespace's adapters (``key_id``: sha256 hex of its
    PEM, the hint model-signing writes into a signature)."""

    namespace: str
    key_id: str
    name: str
    public_key: str
    created_by: str | None
    created_at: str | None
    revoked_at: str | None


class SigningKeyList(CatalogModel):
    items: list[SigningKey]


class SignaturePolicy(CatalogModel):
    """``keys`` None: any registered, unrevoked key of the namespace may sign."""

    namespace: str
    require_signatures: bool
    keys: list[str] | None


class TokenInfo(CatalogModel):
    id: int
    name: str
    scopes: list[str]
    created_at: str | None
    revoked_at: str | None


class TokenList(CatalogModel):
    items: list[TokenInfo]


class TokenCreated(CatalogModel):
    id: int
    name: str
    scopes: list[str]
    created_at: str | None
    token: str  # the bearer token, shown only in this answer


class EvalReport(CatalogModel):
    """One eval suite's results for one version (``GET .../versions/{v}/evals``)."""

    adapter: str
    version: int
    suite: str
    suite_version: str
    metrics: dict[str, float]
    dataset_digest: str | None
    judge_model: str | None
    report_digest: str | None  # the free-form report's blob, when one was attached
    report_size: int | None
    created_by: str | None
    created_at: str | None


class EvalAttached(EvalReport):
    """``POST .../versions/{v}/evals``: ``replaced`` when it overwrote the same suite
    version's report; neither flag when it was identical to it."""

    created: bool
    replaced: bool


class EvalList(CatalogModel):
    items: list[EvalReport]


class Event(CatalogModel):
    id: int
    type: str
    adapter: str | None
    version: int | None
    alias: str | None
    data: dict[str, Any] | None
    created_at: str | None


class EventPage(CatalogModel):
    items: list[Event]
    last: int


class GcReport(CatalogModel):
    deleted: list[str]
    kept: int
    leftovers_removed: int  # temp folders and partial blobs of interrupted publishes
    usage_rows_pruned: int  # daily usage roll-ups older than the retention window
    usage_batches_pruned: int  # usage batch ids older than two days
    routing_decisions_pruned: int  # unlabelled routing decisions older than the window
    routing_batches_pruned: int  # routing decision batch ids older than two days


class BadBlob(CatalogModel):
    digest: str
    reason: str
    versions: list[str]
    version_count: int


class VerifyReport(CatalogModel):
    referenced: int
    checked: int
    ok: bool
    missing: list[BadBlob]
    corrupt: list[BadBlob]


class UsageRecorded(CatalogModel):
    """The answer to a usage batch (``POST /v1/usage``)."""

    batch_id: str
    duplicate: bool
    counted: int
    expired: int
    unknown: list[str]


class UsageTotals(CatalogModel):
    requests: int
    input_tokens: int
    output_tokens: int
    last_used: str | None


class VersionUsage(UsageTotals):
    version: int


class DailyUsage(UsageTotals):
    version: int
    day: str


class AdapterUsage(CatalogModel):
    adapter: str
    days: int
    total: UsageTotals
    versions: list[VersionUsage]
    daily: list[DailyUsage]


class UsageItem(UsageTotals):
    adapter: str
    version: int | None


class UsagePage(CatalogModel):
    days: int
    items: list[UsageItem]
    next_offset: int | None


class RoutingDecisionLabel(CatalogModel):
    """What a person said was right for a decision."""

    expert: str
    source: LabelSource
    note: str | None
    labelled_at: datetime


class RoutingDecision(CatalogModel):
    """One recorded routing decision (``GET /v1/namespaces/{ns}/routing/decisions/{id}``):
    the turn, the expert the router chose and why, and its label (None until labelled)."""

    request_id: str
    namespace: str
    deployment: str
    text: str
    expert: str
    route: Route
    head: str | None
    decided_at: datetime
    label: RoutingDecisionLabel | None
    candidate: RoutingCandidate | None = None  # a canary head's pick beside ``head``

