"""Initial tsopt tables: study, verdict cache, build cache, candidate, measurement, baseline.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tsopt_study",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("space", sa.String(64), nullable=False),
        sa.Column("problem_key", sa.String(255), nullable=False),
        sa.Column("problem_json", sa.Text(), nullable=False),
        sa.Column("arch", sa.String(32), nullable=False),
        sa.Column("sampler", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("config_json", sa.Text(), nullable=False),
        sa.Column("optuna_study_name", sa.String(255), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
        sa.UniqueConstraint("name", name="uq_tsopt_study_name"),
    )
    op.create_table(
        "tsopt_verdict",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("space", sa.String(64), nullable=False),
        sa.Column("verdict_key", sa.String(255), nullable=False),
        sa.Column("genome_hash", sa.String(64), nullable=False),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("stage", sa.String(16), nullable=False),
        sa.Column("rule", sa.String(128), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("domain", sa.Integer(), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.UniqueConstraint("space", "verdict_key", name="uq_tsopt_verdict_key"),
    )
    op.create_table(
        "tsopt_build",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("cache_key", sa.String(255), nullable=False),
        sa.Column("genome_hash", sa.String(64), nullable=False),
        sa.Column("problem_key", sa.String(255), nullable=False),
        sa.Column("arch", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("artifact_dir", sa.Text(), nullable=True),
        sa.Column("library", sa.Text(), nullable=True),
        sa.Column("compile_seconds", sa.Float(), nullable=False),
        sa.Column("export_seconds", sa.Float(), nullable=False),
        sa.Column("link_seconds", sa.Float(), nullable=False),
        sa.Column("registers", sa.Integer(), nullable=True),
        sa.Column("smem_bytes", sa.Integer(), nullable=True),
        sa.Column("spill_bytes", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("versions_json", sa.Text(), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.UniqueConstraint("cache_key", name="uq_tsopt_build_cache_key"),
    )
    op.create_index("ix_tsopt_build_genome_hash", "tsopt_build", ["genome_hash"])
    op.create_table(
        "tsopt_candidate",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("tsopt_study.id"), nullable=False),
        sa.Column("genome_hash", sa.String(64), nullable=False),
        sa.Column("genome_json", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=True),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("verdict_id", sa.Integer(), sa.ForeignKey("tsopt_verdict.id"), nullable=True),
        sa.Column("build_id", sa.Integer(), sa.ForeignKey("tsopt_build.id"), nullable=True),
        sa.UniqueConstraint("study_id", "genome_hash", name="uq_tsopt_candidate_genome"),
    )
    op.create_index("ix_tsopt_candidate_genome_hash", "tsopt_candidate", ["genome_hash"])
    op.create_table(
        "tsopt_measurement",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "candidate_id", sa.Integer(), sa.ForeignKey("tsopt_candidate.id"), nullable=False
        ),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("median_us", sa.Float(), nullable=True),
        sa.Column("p10_us", sa.Float(), nullable=True),
        sa.Column("p90_us", sa.Float(), nullable=True),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("rate", sa.Float(), nullable=True),
        sa.Column("rate_unit", sa.String(16), nullable=False),
        sa.Column("rel_err", sa.Float(), nullable=True),
        sa.Column("baseline_name", sa.String(64), nullable=False),
        sa.Column("baseline_median_us", sa.Float(), nullable=True),
        sa.Column("baseline_rate", sa.Float(), nullable=True),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("device", sa.String(255), nullable=False),
        sa.Column("driver", sa.String(64), nullable=False),
        sa.Column("cuda", sa.String(64), nullable=False),
        sa.Column("torch", sa.String(64), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("measured_at", TZ, nullable=False),
        sa.UniqueConstraint("candidate_id", "run_id", name="uq_tsopt_measurement_run"),
    )
    op.create_table(
        "tsopt_baseline",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("problem_key", sa.String(255), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("device", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("median_us", sa.Float(), nullable=True),
        sa.Column("p10_us", sa.Float(), nullable=True),
        sa.Column("p90_us", sa.Float(), nullable=True),
        sa.Column("rate", sa.Float(), nullable=True),
        sa.Column("rate_unit", sa.String(16), nullable=False),
        sa.Column("measured_at", TZ, nullable=False),
        sa.UniqueConstraint("problem_key", "name", "run_id", name="uq_tsopt_baseline_run"),
    )
    op.create_index("ix_tsopt_baseline_problem", "tsopt_baseline", ["problem_key"])


def downgrade() -> None:
    op.drop_index("ix_tsopt_baseline_problem", table_name="tsopt_baseline")
    op.drop_table("tsopt_baseline")
    op.drop_table("tsopt_measurement")
    op.drop_index("ix_tsopt_candidate_genome_hash", table_name="tsopt_candidate")
    op.drop_table("tsopt_candidate")
    op.drop_index("ix_tsopt_build_genome_hash", table_name="tsopt_build")
    op.drop_table("tsopt_build")
    op.drop_table("tsopt_verdict")
    op.drop_table("tsopt_study")
