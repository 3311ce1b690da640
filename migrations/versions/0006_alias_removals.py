"""alias removals: an alias history row may record that the alias went away

Deleting a version removes the aliases pointing at it; the alias history records each
removal as a row whose ``version`` is NULL (the alias points nowhere after it).
Downgrade drops those rows, which the older schema cannot hold.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 21:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_history = sa.table("alias_history", sa.column("version", sa.Integer()))


def upgrade() -> None:
    with op.batch_alter_table("alias_history") as batch:
        batch.alter_column("version", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    op.execute(_history.delete().where(_history.c.version.is_(None)))
    with op.batch_alter_table("alias_history") as batch:
        batch.alter_column("version", existing_type=sa.Integer(), nullable=False)
