"""shared docs: adapter configs and tensor-shape maps stored once, referenced by digest

A version kept its adapter_config and its whole tensor-shape map inline (~35 KB of JSON
for a Llama-3-8B all-linear LoRA), though most versions repeat one of a few. They move
to ``shared_docs`` (digest -> body, digest = sha256 of the canonical JSON) and versions
keep ``config_digest`` and ``tensors_digest``. Downgrade copies the bodies back inline.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 20:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from mol_catalog.shared_docs import digest_of

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 1000
_FKS = (("fk_versions_config_digest_shared_docs", "config_digest"),
        ("fk_versions_tensors_digest_shared_docs", "tensors_digest"))
_versions = sa.table("versions", sa.column("id", sa.BigInteger()),
                     sa.column("adapter_config", sa.JSON()), sa.column("tensors", sa.JSON()),
                     sa.column("config_digest", sa.String()),
                     sa.column("tensors_digest", sa.String()))
_docs = sa.table("shared_docs", sa.column("digest", sa.String()), sa.column("body", sa.JSON()))


def upgrade() -> None:
    op.create_table(
        "shared_docs",
        sa.Column("digest", sa.String(71), primary_key=True),
        sa.Column("body", sa.JSON(), nullable=False),
    )
    with op.batch_alter_table("versions") as batch:
        batch.add_column(sa.Column("config_digest", sa.String(71), nullable=True))
        batch.add_column(sa.Column("tensors_digest", sa.String(71), nullable=True))
    _move_inline_to_shared()
    with op.batch_alter_table("versions") as batch:
        batch.drop_column("adapter_config")
        batch.drop_column("tensors")
        for name, column in _FKS:
            batch.alter_column(column, existing_type=sa.String(71), nullable=False)
            batch.create_foreign_key(name, "shared_docs", [column], ["digest"])


def _move_inline_to_shared() -> None:
    """Keyset batches of versions: their documents stored once, their digests set."""
    bind = op.get_bind()
    insert = (pg_insert if bind.dialect.name == "postgresql" else sqlite_insert)(_docs)
    store = insert.on_conflict_do_nothing(index_elements=["digest"])
    point = (_versions.update().where(_versions.c.id == sa.bindparam("b_id"))
             .values(config_digest=sa.bindparam("b_config"),
                     tensors_digest=sa.bindparam("b_tensors")))
    last = 0
    while True:
        rows = bind.execute(
            sa.select(_versions.c.id, _versions.c.adapter_config, _versions.c.tensors)
            .where(_versions.c.id > last).order_by(_versions.c.id).limit(BATCH)).all()
        if not rows:
            return
        docs: dict[str, object] = {}
        updates = []
        for vid, config, tensors in rows:
            c, t = digest_of(config), digest_of(tensors)
            docs[c], docs[t] = config, tensors
            updates.append({"b_id": vid, "b_config": c, "b_tensors": t})
        bind.execute(store, [{"digest": d, "body": docs[d]} for d in sorted(docs)])
        bind.execute(point, updates)
        last = rows[-1][0]


def downgrade() -> None:
    with op.batch_alter_table("versions") as batch:
        batch.add_column(sa.Column("adapter_config", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("tensors", sa.JSON(), nullable=True))
    config = sa.select(_docs.c.body).where(_docs.c.digest == _versions.c.config_digest)
    tensors = sa.select(_docs.c.body).where(_docs.c.digest == _versions.c.tensors_digest)
    op.execute(_versions.update().values(adapter_config=config.scalar_subquery(),
                                         tensors=tensors.scalar_subquery()))
    with op.batch_alter_table("versions") as batch:
        for name, column in _FKS:
            batch.drop_constraint(name, type_="foreignkey")
            batch.drop_column(column)
        batch.alter_column("adapter_config", existing_type=sa.JSON(), nullable=False)
        batch.alter_column("tensors", existing_type=sa.JSON(), nullable=False)
    op.drop_table("shared_docs")
