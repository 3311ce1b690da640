"""substring search: pg_trgm trigram index on adapters.full_name (Postgres only)

On SQLite (the embedded default) search is a LIKE scan, which is fine at its scale.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 07:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_adapters_full_name_trgm "
        "ON adapters USING gin (full_name gin_trgm_ops)"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP INDEX IF EXISTS ix_adapters_full_name_trgm")
