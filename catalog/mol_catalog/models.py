"""The catalog's tables, declared with SQLAlchemy 2's typed mapping.

The classes only declare tables (for Alembic and for the columns of Core statements):
repositories read with ``Prepared`` statements and write with Core statements, never
through ORM sessions (see docs/catalog.md, "Reaching the database").

Table and column names are stable: the benchmark bulk-loads them with COPY and
docs/catalog.md lists them. Change them only together with a migration.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.expression import false

# BIGINT ids on Postgres, INTEGER PRIMARY KEY (rowid) on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Namespace(Base):
    __tablename__ = "namespaces"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Signature policy: publishes must carry a model-signing signature by one of the
    # namespace's registered, unrevoked keys (only those in ``signature_keys`` when set).
    require_signatures: Mapped[bool] = mapped_column(Boolean, default=False,
                                                     server_default=false())
    signature_keys: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)


class SigningKey(Base):
    """A public key that may sign a namespace's adapters; revoked keys stay listed."""

    __tablename__ = "signing_keys"
    __table_args__ = (
        UniqueConstraint("namespace_id", "key_id", name="uq_signing_keys_namespace_id_key_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id"))
    # sha256 hex of the PEM public key: the hint model-signing writes into a signature.
    key_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(63))
    public_key: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class BaseLLM(Base):
    """One revision of a base model: its config and per-tensor shapes (never weights).
    (Not ``BaseModel``: that is pydantic's, used by every schema module.)"""

    __tablename__ = "base_models"
    __table_args__ = (UniqueConstraint("name", "revision", name="uq_base_models_name_revision"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(63))
    revision: Mapped[str] = mapped_column(String(128))
    architecture: Mapped[str] = mapped_column(String(128))
    config: Mapped[dict[str, Any]]
    tensors: Mapped[dict[str, Any]]
    # BaseShapes digest: {"num_layers": n, "modules": {kind: [out, in]}}
    shapes: Mapped[dict[str, Any]]
    content_digest: Mapped[str] = mapped_column(String(71))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ServingProfile(Base):
    """A place adapters are served: base revision, engine, max rank, supported modules."""

    __tablename__ = "serving_profiles"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    base_model_id: Mapped[int] = mapped_column(ForeignKey("base_models.id"))
    engine: Mapped[str] = mapped_column(String(128))
    max_lora_rank: Mapped[int] = mapped_column(Integer)
    max_loras: Mapped[int | None] = mapped_column(Integer, nullable=True)
    supported_modules: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    # Engines serving this profile load only adapters with a valid signature.
    require_signatures: Mapped[bool] = mapped_column(Boolean, default=False,
                                                     server_default=false())
    # Bumped on every change; verdicts computed for an older generation are stale.
    generation: Mapped[int] = mapped_column(Integer, default=1)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Adapter(Base):
    __tablename__ = "adapters"
    __table_args__ = (
        UniqueConstraint("namespace_id", "name", name="uq_adapters_namespace_name"),
        # Postgres: the name in the index too, for a search's scan of a namespace or a base.
        Index("ix_adapters_namespace_id_id", "namespace_id", "id",
              postgresql_include=["full_name"]),
        Index("ix_adapters_base_name_id", "base_name", "id", postgresql_include=["full_name"]),
        Index("ix_adapters_base_model_id_id", "base_model_id", "id",
              postgresql_include=["full_name"]),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id"))
    name: Mapped[str] = mapped_column(String(63))
    # "namespace/name": the resolve key and the substring-search column.
    full_name: Mapped[str] = mapped_column(String(127), unique=True)
    base_model_id: Mapped[int] = mapped_column(ForeignKey("base_models.id"))
    base_name: Mapped[str] = mapped_column(String(63))
    tags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Newest ready version number (what `latest` resolves to); None when all are yanked.
    latest_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    version_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AdapterTag(Base):
    """(tag, base, adapter) side table: keyset listing by tag and base is one index range.

    ``full_name`` is the adapter's (names never change): a search within a tag scans the
    tag's rows in key order with the name at hand (on Postgres, an index-only scan of
    ``ix_adapter_tags_tag_adapter_id_name``, migration 0012)."""

    __tablename__ = "adapter_tags"
    __table_args__ = (
        Index("ix_adapter_tags_tag_base_name_adapter_id", "tag", "base_name", "adapter_id"),
        Index("ix_adapter_tags_tag_base_model_id_adapter_id", "tag", "base_model_id", "adapter_id"),
        Index("ix_adapter_tags_adapter_id", "adapter_id"),
    )

    tag: Mapped[str] = mapped_column(String(63), primary_key=True)
    adapter_id: Mapped[int] = mapped_column(
        ForeignKey("adapters.id", ondelete="CASCADE"), primary_key=True
    )
    base_name: Mapped[str] = mapped_column(String(63))
    base_model_id: Mapped[int] = mapped_column(BigId)
    full_name: Mapped[str] = mapped_column(String(127))


class Version(Base):
    """An immutable adapter version; content-addressed by its manifest digest."""

    __tablename__ = "versions"
    __table_args__ = (
        UniqueConstraint("adapter_id", "number", name="uq_versions_adapter_id_number"),
        UniqueConstraint("adapter_id", "digest", name="uq_versions_adapter_id_digest"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(71))
    base_model_id: Mapped[int] = mapped_column(ForeignKey("base_models.id"))
    rank: Mapped[int] = mapped_column(Integer)
    alpha: Mapped[float] = mapped_column(Float)
    target_modules: Mapped[list[Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="ready")  # pending|ready|yanked
    yank_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    parent: Mapped[int | None] = mapped_column(Integer, nullable=True)
    source: Mapped[str | None] = mapped_column(Text, nullable=True)
    size: Mapped[int] = mapped_column(BigInteger)
    # [{"path", "digest", "size"}]: resolve answers from this row alone.
    files: Mapped[list[Any]] = mapped_column(JSON)
    # adapter_config.json and the tensor shapes (enough to judge a later profile), kept
    # once in shared_docs: many versions have the same ones.
    config_digest: Mapped[str] = mapped_column(
        ForeignKey("shared_docs.digest", name="fk_versions_config_digest_shared_docs"))
    tensors_digest: Mapped[str] = mapped_column(
        ForeignKey("shared_docs.digest", name="fk_versions_tensors_digest_shared_docs"))
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The model-signing signature (a Sigstore bundle, JSON) checked at publish, and the
    # id of the key it verified with; both NULL for an unsigned version.
    signature: Mapped[str | None] = mapped_column(Text, nullable=True)
    signed_by: Mapped[str | None] = mapped_column(String(64), nullable=True)


class EvalReport(Base):
    """One evaluation suite's results for one version: metric values, what produced them
    and an optional free-form report (a blob, by digest). One row per (version, suite,
    suite version): attaching the same suite version again replaces it."""

    __tablename__ = "eval_reports"
    __table_args__ = (UniqueConstraint("version_id", "suite", "suite_version",
                                       name="uq_eval_reports_version_id_suite_suite_version"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"))
    suite: Mapped[str] = mapped_column(String(63))
    suite_version: Mapped[str] = mapped_column(String(63))
    # {"metric name": finite float}
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    dataset_digest: Mapped[str | None] = mapped_column(String(71), nullable=True)
    judge_model: Mapped[str | None] = mapped_column(String(256), nullable=True)
    report_digest: Mapped[str | None] = mapped_column(String(71), nullable=True, index=True)
    report_size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SharedDoc(Base):
    """A JSON document many versions share (an adapter_config, a tensor-shape map), stored
    once under the sha256 of its canonical JSON (see mol_catalog.shared_docs). Rows are
    immutable and never deleted: a version's delete leaves them for the next version."""

    __tablename__ = "shared_docs"

    digest: Mapped[str] = mapped_column(String(71), primary_key=True)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)


class VersionBlob(Base):
    """Which versions reference a blob: gc keeps every blob listed here."""

    __tablename__ = "version_blobs"

    digest: Mapped[str] = mapped_column(String(71), primary_key=True)
    version_id: Mapped[int] = mapped_column(
        ForeignKey("versions.id", ondelete="CASCADE"), primary_key=True
    )


class BlobDeletion(Base):
    """A blob gc deleted: a publish that checked the blob present before this row's id
    stores it again before it commits (see blobs.orphans)."""

    __tablename__ = "blob_deletions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    digest: Mapped[str] = mapped_column(String(71), index=True)
    deleted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Alias(Base):
    __tablename__ = "aliases"

    adapter_id: Mapped[int] = mapped_column(
        ForeignKey("adapters.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AliasHistory(Base):
    """Append-only: every move of an alias, newest last."""

    __tablename__ = "alias_history"
    __table_args__ = (Index("ix_alias_history_adapter_id_alias_id", "adapter_id", "alias", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id", ondelete="CASCADE"))
    alias: Mapped[str] = mapped_column(String(63))
    # NULL: the alias was removed (its version was deleted).
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    previous: Mapped[int | None] = mapped_column(Integer, nullable=True)
    changed_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # An admin moved a protected alias despite refusal reasons (kept in ``overridden``).
    forced: Mapped[bool] = mapped_column(Boolean, default=False)
    overridden: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)


class Verdict(Base):
    """Compatibility of one version under one serving profile (at a profile generation)."""

    __tablename__ = "verdicts"

    version_id: Mapped[int] = mapped_column(
        ForeignKey("versions.id", ondelete="CASCADE"), primary_key=True
    )
    profile_id: Mapped[int] = mapped_column(
        ForeignKey("serving_profiles.id", ondelete="CASCADE"), primary_key=True
    )
    profile_generation: Mapped[int] = mapped_column(Integer)
    compatible: Mapped[bool] = mapped_column(Boolean)
    reasons: Mapped[list[Any]] = mapped_column(JSON)
    computed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Event(Base):
    """The outbox: ids are allocated at commit, in commit order (see db.UnitOfWork)."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    type: Mapped[str] = mapped_column(String(32))
    adapter: Mapped[str | None] = mapped_column(String(127), nullable=True)
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    alias: Mapped[str | None] = mapped_column(String(63), nullable=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Token(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class NamespacePolicy(Base):
    """What a namespace's admin decided: its protected aliases (no row: ``stable`` only).
    Keyed by name: a policy may be set before the namespace's first publish."""

    __tablename__ = "namespace_policies"

    namespace: Mapped[str] = mapped_column(String(63), primary_key=True)
    protected_aliases: Mapped[list[Any]] = mapped_column(JSON)
    # Eval suites a protected alias's target must have a report of (None: none).
    required_evals: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    updated_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AliasBinding(Base):
    """A serving profile an alias was resolved under, and when last (see
    ``mol_catalog.namespaces.bindings``): the profiles a protected alias is "served under"."""

    __tablename__ = "alias_bindings"

    adapter: Mapped[str] = mapped_column(String(127), primary_key=True)
    alias: Mapped[str] = mapped_column(String(63), primary_key=True)
    profile: Mapped[str] = mapped_column(String(63), primary_key=True)
    last_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Webhook(Base):
    """A receiver of a namespace's events. ``after_event``: the newest event id when it was
    registered (it gets only later events). The secret signs deliveries; never served."""

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    namespace: Mapped[str] = mapped_column(String(63), index=True)
    url: Mapped[str] = mapped_column(String(2048))
    secret: Mapped[str] = mapped_column(String(256))
    events: Mapped[list[Any]] = mapped_column(JSON)
    after_event: Mapped[int] = mapped_column(BigInteger, default=0)
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class WebhookDelivery(Base):
    """One event for one webhook: pending until the receiver answers 2xx (delivered) or
    the attempts run out (failed). ``delivery_id`` is sent with every attempt (dedupe)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "event_id", name="uq_webhook_deliveries_webhook_event"),
        Index("ix_webhook_deliveries_status_next_attempt_at", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(36), unique=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    event_id: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # |delivered|failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class WebhookCursor(Base):
    """One row: the newest event id fanned out to webhook deliveries."""

    __tablename__ = "webhook_cursor"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_event: Mapped[int] = mapped_column(BigInteger, default=0)


class VersionUsage(Base):
    """One version's use on one UTC day (days since 1970-01-01), summed from the routers'
    batches; rows older than USAGE_RETENTION_DAYS are pruned by gc. Keyed (version, day)
    without a rowid on SQLite: the key is the whole index."""

    __tablename__ = "version_usage"
    __table_args__ = ({"sqlite_with_rowid": False},)

    version_id: Mapped[int] = mapped_column(
        ForeignKey("versions.id", ondelete="CASCADE"), primary_key=True)
    day: Mapped[int] = mapped_column(Integer, primary_key=True)
    requests: Mapped[int] = mapped_column(BigInteger)
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    last_used: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class UsageBatch(Base):
    """The id of a usage batch already counted: a retried batch is answered, not counted
    again. Kept two days (gc prunes older ones)."""

    __tablename__ = "usage_batches"

    batch_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RoutingDecision(Base):
    """One automatic routing decision a router reported (``POST /v1/routing/decisions``),
    and what a person later said was the right expert (the ``label_*`` columns, null until
    labelled; relabelling overwrites them). A request id is recorded once per namespace:
    the first report wins. Unlabelled rows older than USAGE_RETENTION_DAYS are pruned by
    gc; labelled ones are kept (they are training data)."""

    __tablename__ = "routing_decisions"
    __table_args__ = (
        UniqueConstraint("namespace", "request_id",
                         name="uq_routing_decisions_namespace_request_id"),
        # The export: a namespace's labels in labelled order.
        Index("ix_routing_decisions_namespace_labelled_at", "namespace", "labelled_at", "id"),
        # gc: the unlabelled rows past the retention window.
        Index("ix_routing_decisions_decided_at", "decided_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    namespace: Mapped[str] = mapped_column(String(63))
    request_id: Mapped[str] = mapped_column(String(128))
    deployment: Mapped[str] = mapped_column(String(63))
    text: Mapped[str] = mapped_column(Text)
    expert: Mapped[str] = mapped_column(String(63))  # the expert the router chose
    route: Mapped[str] = mapped_column(String(16))
    head: Mapped[str | None] = mapped_column(String(71), nullable=True)
    # A canary head's pick beside ``head`` (the head that did not route the turn).
    candidate_head: Mapped[str | None] = mapped_column(String(71), nullable=True)
    candidate_expert: Mapped[str | None] = mapped_column(String(63), nullable=True)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    batch_id: Mapped[str] = mapped_column(String(64))  # the batch that recorded it
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    label_expert: Mapped[str | None] = mapped_column(String(63), nullable=True)
    label_source: Mapped[str | None] = mapped_column(String(16), nullable=True)
    label_note: Mapped[str | None] = mapped_column(String(500), nullable=True)
    labelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                         nullable=True)


class RoutingBatch(Base):
    """The id of a decision batch already recorded (as ``usage_batches`` for usage): a
    retried batch is answered, not recorded again. Kept two days."""

    __tablename__ = "routing_batches"

    batch_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class VersionedName:
    """The columns of a versioned document's name (a router head's, a tool's): unique
    per namespace, ``latest_version`` its newest version (versions are never deleted;
    0 before the first). Each table names its own unique constraint."""

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    namespace: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(63))
    latest_version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RouterHead(VersionedName, Base):
    """A router head name in a namespace (``mol catalog head publish``); ``latest_version``
    is its newest version (versions are never deleted)."""

    __tablename__ = "router_heads"
    __table_args__ = (UniqueConstraint("namespace", "name",
                                       name="uq_router_heads_namespace_name"),)


class RouterHeadVersion(Base):
    """An immutable router head version: its canonical JSON document (``document``, a
    few MiB at most: in the row, not the blob store, whose gc keeps only what adapter
    versions and eval reports reference) and the facts the API answers with."""

    __tablename__ = "router_head_versions"
    __table_args__ = (
        UniqueConstraint("head_id", "number", name="uq_router_head_versions_head_id_number"),
        UniqueConstraint("head_id", "digest", name="uq_router_head_versions_head_id_digest"),
        Index("ix_router_head_versions_digest", "digest"),  # accuracy: digest -> ref
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    head_id: Mapped[int] = mapped_column(ForeignKey("router_heads.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(71))
    experts: Mapped[list[Any]] = mapped_column(JSON)
    embedding_model: Mapped[str] = mapped_column(String(253))
    dims: Mapped[int] = mapped_column(Integer)
    ngram_dims: Mapped[int] = mapped_column(Integer)
    data_digest: Mapped[str | None] = mapped_column(String(200), nullable=True)
    source: Mapped[str | None] = mapped_column(Text, nullable=True)
    cross_validation: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    document: Mapped[bytes] = mapped_column(LargeBinary)
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RouterHeadAlias(Base):
    __tablename__ = "router_head_aliases"

    head_id: Mapped[int] = mapped_column(
        ForeignKey("router_heads.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Tool(VersionedName, Base):
    """A tool name in a namespace (``mol catalog tools publish``); ``latest_version`` is
    its newest version (versions are never deleted)."""

    __tablename__ = "tools"
    __table_args__ = (UniqueConstraint("namespace", "name", name="uq_tools_namespace_name"),)


class ToolVersion(Base):
    """An immutable tool version: its canonical JSON document (in the row, as a router
    head's: a few KiB), the checks computed at publish, its signature and lineage."""

    __tablename__ = "tool_versions"
    __table_args__ = (
        UniqueConstraint("tool_id", "number", name="uq_tool_versions_tool_id_number"),
        UniqueConstraint("tool_id", "digest", name="uq_tool_versions_tool_id_digest"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tool_id: Mapped[int] = mapped_column(ForeignKey("tools.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(71))
    description: Mapped[str] = mapped_column(Text)
    checks: Mapped[list[Any]] = mapped_column(JSON)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    document: Mapped[bytes] = mapped_column(LargeBinary)
    signature: Mapped[str | None] = mapped_column(Text, nullable=True)
    signed_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    session_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    deployment: Mapped[str | None] = mapped_column(String(128), nullable=True)
    expert: Mapped[str | None] = mapped_column(String(128), nullable=True)
    tenant: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ToolAlias(Base):
    __tablename__ = "tool_aliases"

    tool_id: Mapped[int] = mapped_column(
        ForeignKey("tools.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    updated_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
