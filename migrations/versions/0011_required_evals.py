"""required evals: a namespace's protected aliases may require eval reports

``namespace_policies.required_evals`` lists eval suites every version a protected alias
moves to must have a report of (empty or NULL: none). Downgrade drops the column.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 02:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("namespace_policies") as batch:
        batch.add_column(sa.Column("required_evals", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("namespace_policies") as batch:
        batch.drop_column("required_evals")
