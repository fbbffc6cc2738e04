"""SQLAlchemy models of tsopt's tables.

Every table is prefixed ``tsopt_``: Optuna's RDB storage lives in the same
database and owns unprefixed tables (``studies``, ``trials``,
``alembic_version``...). Only the migrations create or change these tables;
this module declares them so that queries are typed.

The verdict, judged and build tables are caches shared across studies (a TS verdict
depends on the genes that can change it, a whole verdict on genome, problem, arch and
verifier version, a build on genome, problem, arch and tool versions); a candidate points
at the rows that judged and built it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

STUDY_STATUSES: tuple[str, ...] = ("running", "finished", "interrupted", "killed")
RUN_STATUSES: tuple[str, ...] = ("running", "finished", "interrupted", "failed", "killed")
ORIGINS: tuple[str, ...] = ("seed", "enumerate", "suggest", "warm_start", "planted",
                            "library_refit")
"""Where a candidate came from; ``library_refit``: a seed-library entry of another shape
re-fitted to the study's (tsopt.search.refit), not measured as it is anywhere."""
VERDICT_STAGES: tuple[str, ...] = ("dataflow", "ts", "tsopt", "ok")
BUILD_STATUSES: tuple[str, ...] = ("ok", "error")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class StudyRow(Base):
    __tablename__ = "tsopt_study"
    __table_args__ = (UniqueConstraint("name", name="uq_tsopt_study_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    space: Mapped[str] = mapped_column(String(64))
    problem_key: Mapped[str] = mapped_column(String(255))
    problem_json: Mapped[str] = mapped_column(Text)
    arch: Mapped[str] = mapped_column(String(32))
    sampler: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), default="running")
    config_json: Mapped[str] = mapped_column(Text, default="{}")
    optuna_study_name: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )
    # When the study was found left ``running`` with no live run: the last heartbeat heard.
    killed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The launch mode its measurements are timed in (revision 0006: a study made before it
    # was measured "isolated", which the server default says).
    launch: Mapped[str] = mapped_column(String(16), server_default="isolated")


class RunRow(Base):
    """One ``tsopt tune`` process on a study: where it runs and when it was last heard of."""

    __tablename__ = "tsopt_run"
    __table_args__ = (
        UniqueConstraint("run_id", name="uq_tsopt_run_run_id"),
        Index("ix_tsopt_run_study", "study_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64))
    study_id: Mapped[int] = mapped_column(ForeignKey("tsopt_study.id"))
    pid: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16), default="running")
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class VerdictRow(Base):
    __tablename__ = "tsopt_verdict"
    __table_args__ = (UniqueConstraint("space", "verdict_key", name="uq_tsopt_verdict_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    space: Mapped[str] = mapped_column(String(64))
    verdict_key: Mapped[str] = mapped_column(String(255))
    # The genome first judged under this key: keeps a cached verdict traceable to a candidate.
    genome_hash: Mapped[str] = mapped_column(String(64))
    valid: Mapped[bool] = mapped_column(Boolean)
    stage: Mapped[str] = mapped_column(String(16))
    rule: Mapped[str | None] = mapped_column(String(128))
    message: Mapped[str | None] = mapped_column(Text)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    domain: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class JudgedRow(Base):
    """A whole verdict (every gate) of one genome for one problem, arch and verifier version:
    the verdict cache shared across studies (``Store.find_judged`` before verifying,
    ``Store.record_judged`` after). Unlike ``tsopt_verdict`` (the TS gate, shared by every
    genome of a verdict key), a row here is never another genome's verdict."""

    __tablename__ = "tsopt_judged"
    __table_args__ = (UniqueConstraint("space", "genome_hash", "problem_key", "arch",
                                       "tool_version", name="uq_tsopt_judged_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    space: Mapped[str] = mapped_column(String(64))
    genome_hash: Mapped[str] = mapped_column(String(64))
    problem_key: Mapped[str] = mapped_column(String(255))
    arch: Mapped[str] = mapped_column(String(32))
    tool_version: Mapped[str] = mapped_column(String(64))
    valid: Mapped[bool] = mapped_column(Boolean)
    stage: Mapped[str] = mapped_column(String(16))
    rule: Mapped[str | None] = mapped_column(String(128))
    message: Mapped[str | None] = mapped_column(Text)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    domain: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TsSearchRow(Base):
    """One run of TS's exhaustive interleaving search (``tsopt.core.records.TsSearch``): the
    memo of the checker that costs seconds on deep pipelines, shared by every worker and study
    of the database. Keyed by the model searched (``tsopt.verify.ts_model``: a digest of the
    checker's input; ``aliasing`` is ``model``) and the DSL checker's version (rows of before
    2026-12-04 carry the old key: a space's ``ts_schedule_key`` with the domain, the SMEM
    aliasing and the verifier's version; kept, never matched);
    a row holds TS's error (NULL: nothing found), the bound that cut the search short (NULL:
    complete, and ``complete`` says so), the domain, the states explored and the bound it ran
    under. A search that says more (complete, or cut later) replaces the row of its key
    (``tsopt prove``); NULL ``states``: recorded before they were counted."""

    __tablename__ = "tsopt_ts_search"
    __table_args__ = (UniqueConstraint("space", "schedule", "aliasing", "tool_version",
                                       name="uq_tsopt_ts_search_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    space: Mapped[str] = mapped_column(String(64))
    schedule: Mapped[str] = mapped_column(String(64))
    aliasing: Mapped[str] = mapped_column(String(64))
    tool_version: Mapped[str] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
    bounded: Mapped[int | None] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    complete: Mapped[bool] = mapped_column(Boolean, default=False)
    domain: Mapped[int] = mapped_column(Integer, default=0)
    states: Mapped[int | None] = mapped_column(BigInteger)
    max_states: Mapped[int | None] = mapped_column(BigInteger)


class BuildRow(Base):
    __tablename__ = "tsopt_build"
    __table_args__ = (
        UniqueConstraint("cache_key", name="uq_tsopt_build_cache_key"),
        Index("ix_tsopt_build_genome_hash", "genome_hash"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    cache_key: Mapped[str] = mapped_column(String(255))
    genome_hash: Mapped[str] = mapped_column(String(64))
    problem_key: Mapped[str] = mapped_column(String(255))
    arch: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    artifact_dir: Mapped[str | None] = mapped_column(Text)
    library: Mapped[str | None] = mapped_column(Text)
    compile_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    export_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    link_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    registers: Mapped[int | None] = mapped_column(Integer)
    smem_bytes: Mapped[int | None] = mapped_column(Integer)
    spill_bytes: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    versions_json: Mapped[str] = mapped_column(Text, default="{}")
    # {file name: sha256} of the artifact's bundled files as built; NULL before revision 0007.
    files_json: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CandidateRow(Base):
    __tablename__ = "tsopt_candidate"
    __table_args__ = (
        UniqueConstraint("study_id", "genome_hash", name="uq_tsopt_candidate_genome"),
        Index("ix_tsopt_candidate_genome_hash", "genome_hash"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("tsopt_study.id"))
    genome_hash: Mapped[str] = mapped_column(String(64))
    genome_json: Mapped[str] = mapped_column(Text)
    origin: Mapped[str] = mapped_column(String(16))
    trial_number: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    verdict_id: Mapped[int | None] = mapped_column(ForeignKey("tsopt_verdict.id"))
    build_id: Mapped[int | None] = mapped_column(ForeignKey("tsopt_build.id"))
    # The run verifying, building or measuring it (a run of another process waits for it).
    claimed_by: Mapped[str | None] = mapped_column(String(64))
    # Revision 0006: where its build ran (a Ray node id, else the host) and how long it waited
    # for a build slot (from the driver's queueing to the result, less the worker's own time).
    build_node: Mapped[str | None] = mapped_column(String(255))
    build_wait_s: Mapped[float | None] = mapped_column(Float)


class MeasurementRow(Base):
    __tablename__ = "tsopt_measurement"
    __table_args__ = (
        UniqueConstraint("candidate_id", "run_id", name="uq_tsopt_measurement_run"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("tsopt_candidate.id"))
    run_id: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))
    median_us: Mapped[float | None] = mapped_column(Float)
    p10_us: Mapped[float | None] = mapped_column(Float)
    p90_us: Mapped[float | None] = mapped_column(Float)
    runs: Mapped[int] = mapped_column(Integer, default=0)
    rate: Mapped[float | None] = mapped_column(Float)
    rate_unit: Mapped[str] = mapped_column(String(16), default="")
    rel_err: Mapped[float | None] = mapped_column(Float)
    baseline_name: Mapped[str] = mapped_column(String(64), default="")
    baseline_median_us: Mapped[float | None] = mapped_column(Float)
    baseline_rate: Mapped[float | None] = mapped_column(Float)
    ratio: Mapped[float | None] = mapped_column(Float)
    device: Mapped[str] = mapped_column(String(255), default="")
    driver: Mapped[str] = mapped_column(String(64), default="")
    cuda: Mapped[str] = mapped_column(String(64), default="")
    torch: Mapped[str] = mapped_column(String(64), default="")
    error: Mapped[str | None] = mapped_column(Text)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    measured_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Paired timing (revision 0002): the ratio's 95 % interval, its rounds, the GPU's state.
    ratio_lo: Mapped[float | None] = mapped_column(Float)
    ratio_hi: Mapped[float | None] = mapped_column(Float)
    rounds: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    conditions_json: Mapped[str] = mapped_column(Text, default="{}", server_default="{}")
    # The launch mode it was timed in (revision 0006; before it, every one was "isolated").
    launch: Mapped[str] = mapped_column(String(16), server_default="isolated")
    # Revision 0006: how long the candidate waited for a GPU (from the driver's queueing to
    # the result, less ``seconds``, the measuring worker's own time).
    wait_s: Mapped[float | None] = mapped_column(Float)
    # A runtime-M kernel's paired figures at each M it was measured at (revision 0010;
    # Measurement.per_m), "[]" for one measured at its one M.
    per_m_json: Mapped[str] = mapped_column(Text, default="[]", server_default="[]")


class BaselineRow(Base):
    __tablename__ = "tsopt_baseline"
    __table_args__ = (
        UniqueConstraint("problem_key", "name", "run_id", name="uq_tsopt_baseline_run"),
        Index("ix_tsopt_baseline_problem", "problem_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    problem_key: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(64))
    device: Mapped[str] = mapped_column(String(255), default="")
    run_id: Mapped[str] = mapped_column(String(255))
    median_us: Mapped[float | None] = mapped_column(Float)
    p10_us: Mapped[float | None] = mapped_column(Float)
    p90_us: Mapped[float | None] = mapped_column(Float)
    rate: Mapped[float | None] = mapped_column(Float)
    rate_unit: Mapped[str] = mapped_column(String(16), default="")
    measured_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
