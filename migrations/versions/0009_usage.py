"""usage: daily per-version roll-ups reported by routers, and the batch ids counted

``version_usage`` holds one row per version per UTC day (requests, input and output
tokens, last use); ``usage_batches`` the ids of batches already counted, so that a
retried batch is not counted twice.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "version_usage",
        sa.Column("version_id", _BIG_ID, sa.ForeignKey("versions.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("day", sa.Integer(), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("last_used", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("version_id", "day"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "usage_batches",
        sa.Column("batch_id", sa.String(64), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("batch_id"),
    )


def downgrade() -> None:
    op.drop_table("usage_batches")
    op.drop_table("version_usage")
