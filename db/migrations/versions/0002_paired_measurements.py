"""Paired measurements: the ratio's confidence interval, the rounds it took, and the GPU's
conditions (clocks, power, throttle reasons) while it was taken.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("tsopt_measurement") as batch:
        batch.add_column(sa.Column("ratio_lo", sa.Float(), nullable=True))
        batch.add_column(sa.Column("ratio_hi", sa.Float(), nullable=True))
        batch.add_column(sa.Column("rounds", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("conditions_json", sa.Text(), nullable=False,
                                   server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("tsopt_measurement") as batch:
        batch.drop_column("conditions_json")
        batch.drop_column("rounds")
        batch.drop_column("ratio_hi")
        batch.drop_column("ratio_lo")
