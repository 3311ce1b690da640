"""eval reports: evaluation results attached to versions

One row per (version, suite, suite version): metric values, the dataset digest, the
judge model and the digest of an optional free-form report blob. Rows go with their
version (ON DELETE CASCADE); gc keeps the report blobs rows reference.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "eval_reports",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("version_id", _ID, sa.ForeignKey("versions.id", ondelete="CASCADE",
                                                   name="fk_eval_reports_version_id_versions"),
                  nullable=False),
        sa.Column("suite", sa.String(63), nullable=False),
        sa.Column("suite_version", sa.String(63), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("dataset_digest", sa.String(71), nullable=True),
        sa.Column("judge_model", sa.String(256), nullable=True),
        sa.Column("report_digest", sa.String(71), nullable=True),
        sa.Column("report_size", sa.BigInteger(), nullable=True),
        sa.Column("created_by", sa.String(128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("version_id", "suite", "suite_version",
                            name="uq_eval_reports_version_id_suite_suite_version"),
    )
    op.create_index("ix_eval_reports_report_digest", "eval_reports", ["report_digest"])


def downgrade() -> None:
    op.drop_index("ix_eval_reports_report_digest", table_name="eval_reports")
    op.drop_table("eval_reports")
