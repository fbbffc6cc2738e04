"""The checksums of each build's artifact files, recorded when the build is: ``tsopt ingest``
checks a bundle's artifacts against them, not against the bundle's own manifest (whose
checksums whoever edits the bundle can write again).

A build recorded before this revision has none (NULL): ingest then hashes the artifact the row
names in the build cache, when it is still there, and refuses the bundle when it is not.

Revision ID: 0007
Revises: 0006
Create Date: 2027-02-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("tsopt_build") as batch:
        batch.add_column(sa.Column("files_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tsopt_build") as batch:
        batch.drop_column("files_json")
