"""Where a candidate was built and how long it waited: ``tsopt_candidate.build_node`` (the Ray
node id, else the host, whose worker built it), ``tsopt_candidate.build_wait_s`` (waiting for a
build slot) and ``tsopt_measurement.wait_s`` (waiting for a GPU). Older rows have NULL: not
recorded.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("tsopt_candidate") as batch:
        batch.add_column(sa.Column("build_node", sa.String(255), nullable=True))
        batch.add_column(sa.Column("build_wait_s", sa.Float(), nullable=True))
    with op.batch_alter_table("tsopt_measurement") as batch:
        batch.add_column(sa.Column("wait_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tsopt_measurement") as batch:
        batch.drop_column("wait_s")
    with op.batch_alter_table("tsopt_candidate") as batch:
        batch.drop_column("build_wait_s")
        batch.drop_column("build_node")
