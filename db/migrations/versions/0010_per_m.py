"""A runtime-M kernel's measurement at each M it was measured at: ``tsopt_measurement`` gains
``per_m_json`` (a JSON list, one entry per M: its paired ratio, interval, times;
``Measurement.per_m``). Rows made before it, and every fixed-M measurement, hold ``[]``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("tsopt_measurement") as batch:
        batch.add_column(sa.Column("per_m_json", sa.Text(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("tsopt_measurement") as batch:
        batch.drop_column("per_m_json")
