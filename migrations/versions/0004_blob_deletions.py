"""blob deletions: gc records what it deleted, so a publish in flight stores it again

gc deletes an orphan blob and inserts its row in one transaction, under a lock on the
digest that a publishing transaction also takes (Postgres advisory locks; SQLite
serializes writers). A publish reads the newest id before it stores its blobs and, in
its transaction, looks for rows of its digests past that id: any there means gc
removed a blob after the publish saw it, and the publish stores it again.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "blob_deletions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("digest", sa.String(71), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_blob_deletions_digest", "blob_deletions", ["digest"])


def downgrade() -> None:
    op.drop_index("ix_blob_deletions_digest", "blob_deletions")
    op.drop_table("blob_deletions")
