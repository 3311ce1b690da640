"""tools proposed from sandbox sessions, as catalog artifacts

``tools`` holds one row per (namespace, name) with its newest version; ``tool_versions``
the immutable versions: the canonical JSON document itself (``document``) with its
digest, the automatic checks computed at publish (advice for the reviewer), an optional
model-signing signature, and the lineage of the session that wrote it;
``tool_aliases`` where the protected ``approved`` alias points, and who moved it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 22:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tools",
        sa.Column("id", _BIG_ID, primary_key=True),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("latest_version", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.UniqueConstraint("namespace", "name", name="uq_tools_namespace_name"),
    )
    op.create_table(
        "tool_versions",
        sa.Column("id", _BIG_ID, primary_key=True),
        sa.Column("tool_id", _BIG_ID, sa.ForeignKey("tools.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(71), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("checks", sa.JSON(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("document", sa.LargeBinary(), nullable=False),
        sa.Column("signature", sa.Text(), nullable=True),
        sa.Column("signed_by", sa.String(64), nullable=True),
        sa.Column("session_id", sa.String(128), nullable=True),
        sa.Column("deployment", sa.String(128), nullable=True),
        sa.Column("expert", sa.String(128), nullable=True),
        sa.Column("tenant", sa.String(128), nullable=True),
        sa.Column("created_by", sa.String(128), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.UniqueConstraint("tool_id", "number", name="uq_tool_versions_tool_id_number"),
        sa.UniqueConstraint("tool_id", "digest", name="uq_tool_versions_tool_id_digest"),
    )
    op.create_table(
        "tool_aliases",
        sa.Column("tool_id", _BIG_ID, sa.ForeignKey("tools.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_by", sa.String(128), nullable=True),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("tool_id", "name"),
    )


def downgrade() -> None:
    op.drop_table("tool_aliases")
    op.drop_table("tool_versions")
    op.drop_table("tools")
