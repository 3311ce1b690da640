"""signatures: signing keys per namespace, a namespace signature policy, signed versions

``signing_keys`` holds the public keys that may sign a namespace's adapters (revoked
ones stay, with ``revoked_at``); ``namespaces`` gains the policy (``require_signatures``,
optionally limited to ``signature_keys``); ``versions`` gains the model-signing signature
checked at publish and the id of the key that signed it; ``serving_profiles`` gains
``require_signatures`` (its engines load only signed adapters). Downgrade drops them all.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "signing_keys",
        sa.Column("id", BigId, primary_key=True),
        sa.Column("namespace_id", BigId, sa.ForeignKey("namespaces.id"), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("namespace_id", "key_id", name="uq_signing_keys_namespace_id_key_id"),
    )
    with op.batch_alter_table("namespaces") as batch:
        batch.add_column(sa.Column("require_signatures", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
        batch.add_column(sa.Column("signature_keys", sa.JSON(), nullable=True))
    with op.batch_alter_table("serving_profiles") as batch:
        batch.add_column(sa.Column("require_signatures", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
    with op.batch_alter_table("versions") as batch:
        batch.add_column(sa.Column("signature", sa.Text(), nullable=True))
        batch.add_column(sa.Column("signed_by", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("versions") as batch:
        batch.drop_column("signed_by")
        batch.drop_column("signature")
    with op.batch_alter_table("serving_profiles") as batch:
        batch.drop_column("require_signatures")
    with op.batch_alter_table("namespaces") as batch:
        batch.drop_column("signature_keys")
        batch.drop_column("require_signatures")
    op.drop_table("signing_keys")
