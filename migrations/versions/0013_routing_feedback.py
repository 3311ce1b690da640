"""routing feedback: the routers' automatic decisions and the labels people give them

``routing_decisions`` holds one row per (namespace, request id) a router reported
(the turn, the expert it chose, what decided, when), and its label once a user or a
reviewer said which expert was right (``label_*``, ``labelled_at``); the export reads a
namespace's labels in labelled order (``ix_routing_decisions_namespace_labelled_at``),
gc the unlabelled rows past the retention window (``ix_routing_decisions_decided_at``).
``routing_batches`` holds the ids of batches already recorded, so that a retried batch
is not recorded twice.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06 19:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "routing_decisions",
        sa.Column("id", _BIG_ID, primary_key=True),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("deployment", sa.String(63), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("expert", sa.String(63), nullable=False),
        sa.Column("route", sa.String(16), nullable=False),
        sa.Column("head", sa.String(71), nullable=True),
        sa.Column("decided_at", _TS, nullable=False),
        sa.Column("batch_id", sa.String(64), nullable=False),
        sa.Column("received_at", _TS, nullable=False),
        sa.Column("label_expert", sa.String(63), nullable=True),
        sa.Column("label_source", sa.String(16), nullable=True),
        sa.Column("label_note", sa.String(500), nullable=True),
        sa.Column("labelled_at", _TS, nullable=True),
        sa.UniqueConstraint("namespace", "request_id",
                            name="uq_routing_decisions_namespace_request_id"),
    )
    op.create_index("ix_routing_decisions_namespace_labelled_at", "routing_decisions",
                    ["namespace", "labelled_at", "id"])
    op.create_index("ix_routing_decisions_decided_at", "routing_decisions", ["decided_at"])
    op.create_table(
        "routing_batches",
        sa.Column("batch_id", sa.String(64), nullable=False),
        sa.Column("received_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("batch_id"),
    )


def downgrade() -> None:
    op.drop_table("routing_batches")
    op.drop_index("ix_routing_decisions_decided_at", table_name="routing_decisions")
    op.drop_index("ix_routing_decisions_namespace_labelled_at", table_name="routing_decisions")
    op.drop_table("routing_decisions")
