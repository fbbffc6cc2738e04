"""TS's exhaustive searches say whether they are a proof: ``tsopt_ts_search`` gains
``complete`` (no state bound cut the search; backfilled from ``bounded``), ``domain``, the
``states`` explored and the ``max_states`` bound searched under (NULL in rows made before they
were counted). A complete search replaces the cut row of its key (``tsopt prove``).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("tsopt_ts_search") as batch:
        batch.add_column(sa.Column("complete", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
        batch.add_column(sa.Column("domain", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("states", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("max_states", sa.BigInteger(), nullable=True))
    op.execute(sa.text("UPDATE tsopt_ts_search SET complete = (bounded IS NULL)"))


def downgrade() -> None:
    with op.batch_alter_table("tsopt_ts_search") as batch:
        batch.drop_column("max_states")
        batch.drop_column("states")
        batch.drop_column("domain")
        batch.drop_column("complete")
