"""substring search: covering index for the key-order scan of a search (Postgres only)

A search scans id ranges in key order before it hands over to the trigram index
(mol_catalog.adapters.listing._search). With the name and the filter columns in
the index, that scan never visits the table: an index-only scan reads a few thousand
narrow entries instead of as many wide adapter rows. SQLite walks its rowid table.

Built CONCURRENTLY (outside the migration's transaction): publishing goes on while a
large catalog builds it. Should the build fail, Postgres leaves the index INVALID: drop
it (`DROP INDEX ix_adapters_search_scan`) and run the upgrade again.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 10:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    with op.get_context().autocommit_block():
        op.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_adapters_search_scan "
            "ON adapters (id) INCLUDE (full_name, base_model_id, namespace_id)"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_adapters_search_scan")
