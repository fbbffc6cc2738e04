"""Runs of a study (pid, host, heartbeat), when a study was found killed, which run holds a
candidate: several ``tsopt tune`` processes share a study, and one killed by the system is
recognised as such.

Revision ID: 0003
Revises: 0002
Create Date: 2027-01-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tsopt_run",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("tsopt_study.id"), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("heartbeat_at", TZ, nullable=False),
        sa.Column("finished_at", TZ, nullable=True),
        sa.UniqueConstraint("run_id", name="uq_tsopt_run_run_id"),
    )
    op.create_index("ix_tsopt_run_study", "tsopt_run", ["study_id"])
    with op.batch_alter_table("tsopt_study") as batch:
        batch.add_column(sa.Column("killed_at", TZ, nullable=True))
    with op.batch_alter_table("tsopt_candidate") as batch:
        batch.add_column(sa.Column("claimed_by", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tsopt_candidate") as batch:
        batch.drop_column("claimed_by")
    with op.batch_alter_table("tsopt_study") as batch:
        batch.drop_column("killed_at")
    op.drop_index("ix_tsopt_run_study", table_name="tsopt_run")
    op.drop_table("tsopt_run")
