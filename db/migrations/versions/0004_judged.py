"""Whole verdicts shared across studies: ``tsopt_judged``, one row per genome, problem key,
arch and verifier version (read before verifying, written after).

Revision ID: 0004
Revises: 0003
Create Date: 2027-01-12
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "tsopt_judged",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("space", sa.String(64), nullable=False),
        sa.Column("genome_hash", sa.String(64), nullable=False),
        sa.Column("problem_key", sa.String(255), nullable=False),
        sa.Column("arch", sa.String(32), nullable=False),
        sa.Column("tool_version", sa.String(64), nullable=False),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("stage", sa.String(16), nullable=False),
        sa.Column("rule", sa.String(128), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("domain", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("space", "genome_hash", "problem_key", "arch", "tool_version",
                            name="uq_tsopt_judged_key"),
    )


def downgrade() -> None:
    op.drop_table("tsopt_judged")
