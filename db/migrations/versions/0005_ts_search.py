"""TS's exhaustive searches shared across workers and studies: ``tsopt_ts_search``, one row
per schedule searched, SMEM aliasing and verifier version (read before searching, written
after).

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "tsopt_ts_search",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("space", sa.String(64), nullable=False),
        sa.Column("schedule", sa.String(64), nullable=False),
        sa.Column("aliasing", sa.String(64), nullable=False),
        sa.Column("tool_version", sa.String(64), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("bounded", sa.Integer(), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("space", "schedule", "aliasing", "tool_version",
                            name="uq_tsopt_ts_search_key"),
    )


def downgrade() -> None:
    op.drop_table("tsopt_ts_search")
