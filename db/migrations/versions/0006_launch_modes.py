"""Launch modes: the mode a study measures in and each measurement was timed in
(``graph``, ``eager``; ``isolated`` for everything recorded before, which is how it was
timed: each launch between CUDA events after a spin kernel).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    for table in ("tsopt_study", "tsopt_measurement"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("launch", sa.String(16), nullable=False,
                                       server_default="isolated"))


def downgrade() -> None:
    for table in ("tsopt_measurement", "tsopt_study"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("launch")
