"""protected aliases and webhooks

Namespace policies (protected aliases), the serving profiles aliases are resolved under,
forced alias moves in the alias history, webhooks with their deliveries and the cursor
of the events fanned out to them.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("alias_history") as batch:
        batch.add_column(sa.Column("forced", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
        batch.add_column(sa.Column("overridden", sa.JSON(), nullable=True))
    op.create_table(
        "namespace_policies",
        sa.Column("namespace", sa.String(63), primary_key=True),
        sa.Column("protected_aliases", sa.JSON(), nullable=False),
        sa.Column("updated_by", sa.String(128), nullable=True),
        sa.Column("updated_at", TS, nullable=False))
    op.create_table(
        "alias_bindings",
        sa.Column("adapter", sa.String(127), primary_key=True),
        sa.Column("alias", sa.String(63), primary_key=True),
        sa.Column("profile", sa.String(63), primary_key=True),
        sa.Column("last_seen", TS, nullable=False))
    op.create_table(
        "webhooks",
        sa.Column("id", BIG_ID, primary_key=True),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("secret", sa.String(256), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("after_event", sa.BigInteger(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=True),
        sa.Column("created_at", TS, nullable=False))
    op.create_index("ix_webhooks_namespace", "webhooks", ["namespace"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", BIG_ID, primary_key=True),
        sa.Column("delivery_id", sa.String(36), nullable=False, unique=True),
        sa.Column("webhook_id", BIG_ID, sa.ForeignKey("webhooks.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", TS, nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("delivered_at", TS, nullable=True),
        sa.UniqueConstraint("webhook_id", "event_id", name="uq_webhook_deliveries_webhook_event"))
    op.create_index("ix_webhook_deliveries_status_next_attempt_at", "webhook_deliveries",
                    ["status", "next_attempt_at"])
    cursor = op.create_table(
        "webhook_cursor",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("last_event", sa.BigInteger(), nullable=False))
    # Webhooks registered from now on get events from now on: start at the newest event.
    op.execute(cursor.insert().from_select(
        ["id", "last_event"],
        sa.select(sa.literal(1), sa.func.coalesce(sa.func.max(sa.column("id")), 0))
        .select_from(sa.table("events", sa.column("id")))))


def downgrade() -> None:
    op.drop_table("webhook_cursor")
    op.drop_index("ix_webhook_deliveries_status_next_attempt_at", "webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_webhooks_namespace", "webhooks")
    op.drop_table("webhooks")
    op.drop_table("alias_bindings")
    op.drop_table("namespace_policies")
    with op.batch_alter_table("alias_history") as batch:
        batch.drop_column("overridden")
        batch.drop_column("forced")
