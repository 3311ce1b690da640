"""router heads as catalog artifacts, and a canary head's pick on routing decisions

``router_heads`` holds one row per (namespace, name) with its newest version;
``router_head_versions`` the immutable versions: the canonical JSON document itself
(``document``; a head is a few MiB at most) with its digest and the facts the API answers
with; ``router_head_aliases`` where each alias points. ``routing_decisions`` gains
``candidate_head``/``candidate_expert``: on a turn where a router ran a canary head beside
the serving one, the pick of the head that did not route it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 21:50:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "router_heads",
        sa.Column("id", _BIG_ID, primary_key=True),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("latest_version", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.UniqueConstraint("namespace", "name", name="uq_router_heads_namespace_name"),
    )
    op.create_table(
        "router_head_versions",
        sa.Column("id", _BIG_ID, primary_key=True),
        sa.Column("head_id", _BIG_ID, sa.ForeignKey("router_heads.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(71), nullable=False),
        sa.Column("experts", sa.JSON(), nullable=False),
        sa.Column("embedding_model", sa.String(253), nullable=False),
        sa.Column("dims", sa.Integer(), nullable=False),
        sa.Column("ngram_dims", sa.Integer(), nullable=False),
        sa.Column("data_digest", sa.String(200), nullable=True),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("cross_validation", sa.JSON(), nullable=True),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("document", sa.LargeBinary(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.UniqueConstraint("head_id", "number", name="uq_router_head_versions_head_id_number"),
        sa.UniqueConstraint("head_id", "digest", name="uq_router_head_versions_head_id_digest"),
    )
    op.create_index("ix_router_head_versions_digest", "router_head_versions", ["digest"])
    op.create_table(
        "router_head_aliases",
        sa.Column("head_id", _BIG_ID, sa.ForeignKey("router_heads.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("head_id", "name"),
    )
    with op.batch_alter_table("routing_decisions") as batch:
        batch.add_column(sa.Column("candidate_head", sa.String(71), nullable=True))
        batch.add_column(sa.Column("candidate_expert", sa.String(63), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("routing_decisions") as batch:
        batch.drop_column("candidate_expert")
        batch.drop_column("candidate_head")
    op.drop_table("router_head_aliases")
    op.drop_index("ix_router_head_versions_digest", table_name="router_head_versions")
    op.drop_table("router_head_versions")
    op.drop_table("router_heads")
