"""search within a tag, namespace or base: the name on the tag rows, covering indexes

A search within a tag, one namespace or one base scans those adapters in key order
before the trigram index takes over (mol_catalog.adapters.listing._search), as a
search of the whole catalog scans ``ix_adapters_search_scan`` (0003). The scan needs the
name at hand: ``adapter_tags`` gets ``full_name`` (copied from the adapter; names never
change) and, on Postgres, covering indexes make the scans index-only:
``ix_adapter_tags_tag_adapter_id_name`` (tag, adapter id, then the name), and the
namespace and base indexes of ``adapters`` rebuilt with the name included (same keys,
same names). ``ix_adapters_search_scan`` keeps only the name: the other filters of a
search now apply to the matches' rows. SQLite gets the column; its scans read the table.

Backfilling the column rewrites ``adapter_tags`` (a minute or so at 2M rows). The
indexes are built CONCURRENTLY (outside the migration's transaction); should a build
fail, Postgres leaves the index INVALID: drop it and run the upgrade again.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 06:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The adapters indexes a search scans, rebuilt under the same names: (key, INCLUDE after,
# INCLUDE before). The scan of all adapters reads the name only now (its other filters
# apply to the matches' rows).
_COVERED = {"ix_adapters_namespace_id_id": ("namespace_id, id", "full_name", ""),
            "ix_adapters_base_name_id": ("base_name, id", "full_name", ""),
            "ix_adapters_base_model_id_id": ("base_model_id, id", "full_name", ""),
            "ix_adapters_search_scan": ("id", "full_name",
                                        "full_name, base_model_id, namespace_id")}


def _rebuild(name: str, columns: str, include: str) -> None:
    """Replace index ``name`` by one on ``columns`` (+ ``include``), built concurrently."""
    op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name}_new ON adapters ({columns})"
               + (f" INCLUDE ({include})" if include else ""))
    op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    op.execute(f"ALTER INDEX {name}_new RENAME TO {name}")


def upgrade() -> None:
    op.add_column("adapter_tags", sa.Column("full_name", sa.String(127), nullable=True))
    if op.get_bind().dialect.name != "postgresql":
        op.execute("UPDATE adapter_tags SET full_name = (SELECT a.full_name FROM adapters a "
                   "WHERE a.id = adapter_tags.adapter_id)")
        with op.batch_alter_table("adapter_tags") as batch:
            batch.alter_column("full_name", existing_type=sa.String(127), nullable=False)
        return
    op.execute("UPDATE adapter_tags t SET full_name = a.full_name FROM adapters a "
               "WHERE a.id = t.adapter_id")
    op.alter_column("adapter_tags", "full_name", nullable=False)
    with op.get_context().autocommit_block():
        op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_adapter_tags_tag_adapter_id_name "
                   "ON adapter_tags (tag, adapter_id) INCLUDE (full_name)")
        for name, (columns, include, _) in _COVERED.items():
            _rebuild(name, columns, include)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_adapter_tags_tag_adapter_id_name")
            for name, (columns, _, include) in _COVERED.items():
                _rebuild(name, columns, include)
    with op.batch_alter_table("adapter_tags") as batch:
        batch.drop_column("full_name")
