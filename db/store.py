"""The store: the one API the rest of tsopt uses to record and read results.

``Store(url)`` opens (and creates or migrates) the database; every method
runs in its own short transaction (or in the caller's ``with store.batch():``)
and returns plain data (``tsopt.core.records`` and ``tsopt.db.views``), never ORM
objects. Writes are idempotent where a caller may repeat them (a candidate
proposed twice, a bundle ingested twice) and never overwrite a recorded
result (the one exception: a cached build failure gives way to a later
success under the same cache key), so nothing already recorded is lost.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import MEASURE_STATUSES, BuildResult, Measurement, Verdict
from tsopt.db import queries
from tsopt.db.engine import display_url, is_sqlite_memory, open_engine, parse_url, write_engine
from tsopt.db.migrate import upgrade
from tsopt.db.models import (
    BUILD_STATUSES,
    ORIGINS,
    STUDY_STATUSES,
    BaselineRow,
    BuildRow,
    CandidateRow,
    MeasurementRow,
    StudyRow,
    VerdictRow,
    utcnow,
)
from tsopt.db.views import CandidateInfo, RankedCandidate, Rejection, StudyInfo

if TYPE_CHECKING:
    import optuna

Row = TypeVar("Row", bound=Any)

# Optuna's own engine on a shared SQLite file must wait for our writers too.
_OPTUNA_SQLITE_TIMEOUT_S = 30


VERDICT_KEY_LENGTH = 255  # tsopt_verdict.verdict_key is VARCHAR(255)


def stored_verdict_key(verdict_key: str) -> str:
    """The verdict key as stored: itself when it fits the column, else ``sha256:<digest>``
    (a space's key spells out the genes that reach TS and may be longer; SQLite would keep
    it whole, PostgreSQL refuses it)."""
    if len(verdict_key) <= VERDICT_KEY_LENGTH:
        return verdict_key
    return "sha256:" + hashlib.sha256(verdict_key.encode()).hexdigest()


class Store:
    """tsopt's database: studies, candidates, the verdict and build caches, measurements.

    Raises :class:`UserInputError` naming the URL when it is malformed, its
    driver is missing or the database cannot be opened.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._parsed = parse_url(url)
        self._engine = open_engine(url)
        try:
            upgrade(self._engine)
        except DBAPIError as exc:  # unreachable server, bad password, no right to create tables
            self._engine.dispose()
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise UserInputError(
                f"cannot open database {display_url(self._parsed)!r}: {reason}"
            ) from None
        self._read = sessionmaker(self._engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(write_engine(self._engine), expire_on_commit=False)
        self._local = threading.local()

    # -- plumbing -----------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self._url

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({display_url(self._parsed)!r})"

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Run every store call inside the block in one transaction (in this thread).

        All or nothing: an exception leaving the block rolls back every write
        made in it. Use it to ingest a bundle atomically, or to record many
        rows quickly (one commit instead of one per call). Nested blocks join
        the outer one.
        """
        if getattr(self._local, "session", None) is not None:
            yield
            return
        with self._write_sessions() as session, session.begin():
            self._local.session = session
            try:
                yield
            finally:
                self._local.session = None

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        batched: Session | None = getattr(self._local, "session", None)
        if batched is not None:
            yield batched
            return
        with self._read() as session, session.begin():
            yield session

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        batched: Session | None = getattr(self._local, "session", None)
        if batched is not None:
            yield batched
            return
        with self._write_sessions() as session, session.begin():
            yield session

    def optuna_storage(self) -> optuna.storages.RDBStorage:
        """Optuna's RDB storage on the same database, so optuna-dashboard reads it too."""
        import optuna

        if is_sqlite_memory(self._parsed):
            raise UserInputError(
                f"database URL {self._url!r} is in memory: Optuna would open a second, "
                "separate database; use a file (sqlite:///tsopt.db)"
            )
        kwargs: dict[str, Any] = {}
        if self._parsed.get_backend_name() == "sqlite":
            kwargs["connect_args"] = {"timeout": _OPTUNA_SQLITE_TIMEOUT_S}
        # The parsed URL, not the raw string: it carries the driver chosen by parse_url.
        url = self._parsed.render_as_string(hide_password=False)
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)

    def _study_row(self, session: Session, name: str) -> StudyRow:
        # Remembered per session: a batch of thousands of writes looks the study up once.
        known: dict[str, StudyRow] = session.info.setdefault("tsopt_studies", {})
        row = known.get(name) or session.scalar(select(StudyRow).where(StudyRow.name == name))
        if row is None:
            raise UserInputError(
                f"no study named {name!r} in {display_url(self._parsed)!r}"
            )
        known[name] = row
        return row

    @staticmethod
    def _candidate_row(session: Session, candidate_id: int) -> CandidateRow:
        row = session.get(CandidateRow, candidate_id)
        if row is None:
            raise ValueError(f"no candidate with id {candidate_id}")
        return row

    @staticmethod
    def _insert_or_get(session: Session, row: Row, lookup: Callable[[], Row | None]) -> Row:
        """Insert ``row`` unless ``lookup`` finds it; a concurrent insert of the same key wins."""
        existing = lookup()
        if existing is not None:
            return existing
        if session.get_bind().dialect.name == "sqlite":
            # Writes hold SQLite's write lock from BEGIN: nobody can insert in between.
            session.add(row)
            session.flush()
            return row
        try:
            with session.begin_nested():
                session.add(row)
        except IntegrityError:
            found = lookup()
            if found is None:
                raise
            return found
        return row

    # -- studies ------------------------------------------------------------------------
    def create_or_get_study(
        self, name: str, space: str, problem: Problem, arch: str, sampler: str,
        config: dict[str, Any],
    ) -> StudyInfo:
        """The study called ``name``, created if new.

        An existing study keeps its recorded sampler and config. Raises
        :class:`UserInputError` when it exists for another space, problem or arch.
        """
        if not isinstance(name, str) or not name.strip() or len(name) > 255:
            raise UserInputError(f"study name {name!r} must be 1 to 255 characters")
        with self._writing() as session:
            fresh = StudyRow(
                name=name, space=space, problem_key=problem.key, problem_json=problem.to_json(),
                arch=arch, sampler=sampler, status="running",
                config_json=json.dumps(config, sort_keys=True), optuna_study_name=name,
            )

            def lookup() -> StudyRow | None:
                return session.scalar(select(StudyRow).where(StudyRow.name == name))

            row = self._insert_or_get(session, fresh, lookup)
            clash = [
                f"{field} {have!r} (asked for {want!r})"
                for field, have, want in (
                    ("space", row.space, space),
                    ("problem", row.problem_key, problem.key),
                    ("arch", row.arch, arch),
                )
                if have != want
            ]
            if clash:
                raise UserInputError(
                    f"study {name!r} already exists with " + ", ".join(clash)
                    + "; choose another study name"
                )
            return queries.study_info(row)

    def get_study(self, name: str) -> StudyInfo | None:
        with self._reading() as session:
            row = session.scalar(select(StudyRow).where(StudyRow.name == name))
            return queries.study_info(row) if row is not None else None

    def list_studies(self) -> list[StudyInfo]:
        """Every study, oldest first."""
        with self._reading() as session:
            rows = session.scalars(select(StudyRow).order_by(StudyRow.created_at, StudyRow.id))
            return [queries.study_info(r) for r in rows]

    def set_study_status(self, name: str, status: str) -> None:
        if status not in STUDY_STATUSES:
            raise ValueError(f"study status {status!r} is not one of {STUDY_STATUSES}")
        with self._writing() as session:
            row = self._study_row(session, name)
            row.status = status
            row.updated_at = utcnow()

    # -- candidates ---------------------------------------------------------------------
    def add_candidate(
        self, study: str, genome: Genome, origin: str, trial_number: int | None = None,
    ) -> int:
        """The candidate id of ``genome`` in ``study``; added if new, else the existing id."""
        if origin not in ORIGINS:
            raise ValueError(f"candidate origin {origin!r} is not one of {ORIGINS}")
        with self._writing() as session:
            study_row = self._study_row(session, study)
            if genome.space != study_row.space:
                raise UserInputError(
                    f"genome {genome.short_hash} is of space {genome.space!r}, "
                    f"but study {study!r} searches space {study_row.space!r}"
                )
            fresh = CandidateRow(
                study_id=study_row.id, genome_hash=genome.hash, genome_json=genome.canonical_json(),
                origin=origin, trial_number=trial_number,
            )

            def lookup() -> CandidateRow | None:
                return session.scalar(select(CandidateRow).where(
                    CandidateRow.study_id == study_row.id, CandidateRow.genome_hash == genome.hash,
                ))

            return self._insert_or_get(session, fresh, lookup).id

    def candidate_id(self, study: str, genome_hash: str) -> int | None:
        with self._reading() as session:
            study_row = self._study_row(session, study)
            return session.scalar(select(CandidateRow.id).where(
                CandidateRow.study_id == study_row.id, CandidateRow.genome_hash == genome_hash,
            ))

    def set_trial_number(self, candidate_id: int, n: int) -> None:
        with self._writing() as session:
            self._candidate_row(session, candidate_id).trial_number = n

    # -- verdict cache ------------------------------------------------------------------
    def find_verdict(self, space: str, verdict_key: str) -> Verdict | None:
        """The cached verdict (``cached=True``; ``genome_hash`` of the genome first judged)."""
        verdict_key = stored_verdict_key(verdict_key)
        with self._reading() as session:
            row = session.scalar(select(VerdictRow).where(
                VerdictRow.space == space, VerdictRow.verdict_key == verdict_key,
            ))
            return queries.verdict_record(row) if row is not None else None

    def record_verdict(
        self, candidate_id: int, space: str, verdict_key: str, verdict: Verdict,
    ) -> None:
        """Attach the verdict to the candidate, reusing the cached row for the key if present.

        The key caches the TS gate, which every genome of one key shares: a TS (or dataflow)
        rejection is one row for all of them. Past TS, tsopt's checks judge the genome itself
        (they see genes the key leaves out), so a ``tsopt`` or ``ok`` verdict is also kept in a
        row of its own genome, and the candidate points at that one: never at a verdict
        another genome of the key got.
        """
        keys = [stored_verdict_key(verdict_key)]
        if verdict.stage in ("tsopt", "ok"):
            keys.append(stored_verdict_key(f"{verdict_key}|genome={verdict.genome_hash}"))
        with self._writing() as session:
            candidate = self._candidate_row(session, candidate_id)
            for key in keys:
                fresh = VerdictRow(
                    space=space, verdict_key=key, genome_hash=verdict.genome_hash,
                    valid=verdict.valid, stage=verdict.stage, rule=verdict.rule,
                    message=verdict.message, seconds=verdict.seconds, domain=verdict.domain,
                )

                def lookup(key: str = key) -> VerdictRow | None:
                    return session.scalar(select(VerdictRow).where(
                        VerdictRow.space == space, VerdictRow.verdict_key == key,
                    ))

                candidate.verdict_id = self._insert_or_get(session, fresh, lookup).id

    # -- build cache --------------------------------------------------------------------
    def find_build(self, cache_key: str) -> BuildResult | None:
        """The cached build (``cache_hit=True``) or None."""
        with self._reading() as session:
            row = session.scalar(select(BuildRow).where(BuildRow.cache_key == cache_key))
            return queries.build_record(row) if row is not None else None

    def record_build(self, candidate_id: int, build: BuildResult) -> None:
        """Attach the build to the candidate, caching it by ``build.cache_key``.

        A cached successful build is kept; a cached failure is replaced by a
        later success under the same key (a retry that worked).
        """
        if not build.cache_key:
            raise ValueError(f"build of {build.genome_hash[:12]} has no cache_key")
        if build.status not in BUILD_STATUSES:
            raise ValueError(f"build status {build.status!r} is not one of {BUILD_STATUSES}")
        values = dict(
            genome_hash=build.genome_hash, problem_key=build.problem_key, arch=build.arch,
            status=build.status, artifact_dir=build.artifact_dir, library=build.library,
            compile_seconds=build.compile_seconds, export_seconds=build.export_seconds,
            link_seconds=build.link_seconds, registers=build.registers,
            smem_bytes=build.smem_bytes, spill_bytes=build.spill_bytes, error=build.error,
            versions_json=json.dumps(build.versions, sort_keys=True),
        )
        with self._writing() as session:
            candidate = self._candidate_row(session, candidate_id)

            def lookup() -> BuildRow | None:
                return session.scalar(select(BuildRow).where(BuildRow.cache_key == build.cache_key))

            fresh = BuildRow(cache_key=build.cache_key, **values)
            row = self._insert_or_get(session, fresh, lookup)
            if row.status != "ok" and build.ok:
                for key, value in values.items():
                    setattr(row, key, value)
            candidate.build_id = row.id

    # -- measurements -------------------------------------------------------------------
    def record_measurement(self, candidate_id: int, m: Measurement, run_id: str) -> bool:
        """Record one timing of a candidate; False if this run already recorded it."""
        if m.status not in MEASURE_STATUSES:
            raise ValueError(f"measurement status {m.status!r} is not one of {MEASURE_STATUSES}")
        with self._writing() as session:
            self._candidate_row(session, candidate_id)

            def lookup() -> MeasurementRow | None:
                return session.scalar(select(MeasurementRow).where(
                    MeasurementRow.candidate_id == candidate_id, MeasurementRow.run_id == run_id,
                ))

            fields = m.to_dict()
            for derived in ("genome_hash", "problem_key"):
                fields.pop(derived)
            fresh = MeasurementRow(candidate_id=candidate_id, run_id=run_id, **fields)
            return self._insert_or_get(session, fresh, lookup) is fresh

    def record_baseline(
        self, problem_key: str, name: str, device: str, run_id: str,
        median_us: float | None, p10_us: float | None, p90_us: float | None,
        rate: float | None, rate_unit: str,
    ) -> bool:
        """Record a vendor baseline timing; False if this run already recorded it."""
        with self._writing() as session:
            fresh = BaselineRow(
                problem_key=problem_key, name=name, device=device, run_id=run_id,
                median_us=median_us, p10_us=p10_us, p90_us=p90_us, rate=rate, rate_unit=rate_unit,
            )

            def lookup() -> BaselineRow | None:
                return session.scalar(select(BaselineRow).where(
                    BaselineRow.problem_key == problem_key, BaselineRow.name == name,
                    BaselineRow.run_id == run_id,
                ))

            return self._insert_or_get(session, fresh, lookup) is fresh

    def baselines(self, problem_key: str) -> list[dict[str, Any]]:
        """Every baseline recorded for a problem, oldest first, as plain dicts."""
        with self._reading() as session:
            rows = session.scalars(
                select(BaselineRow).where(BaselineRow.problem_key == problem_key)
                .order_by(BaselineRow.id)
            )
            return [
                dict(name=r.name, device=r.device, run_id=r.run_id, median_us=r.median_us,
                     p10_us=r.p10_us, p90_us=r.p90_us, rate=r.rate, rate_unit=r.rate_unit,
                     measured_at=queries.aware(r.measured_at))
                for r in rows
            ]

    # -- study views --------------------------------------------------------------------
    def funnel(self, study: str) -> dict[str, int]:
        """Counts: proposed, dataflow_legal, ts_valid, tsopt_checked, built, correct, timed."""
        with self._reading() as session:
            return queries.funnel(session, self._study_row(session, study))

    def rejections(self, study: str) -> list[Rejection]:
        """(stage, rule, count, example message) per reason; see :func:`tsopt.db.queries.rejections`."""
        with self._reading() as session:
            return queries.rejections(session, self._study_row(session, study))

    def ranked(self, study: str, limit: int | None = None) -> list[RankedCandidate]:
        """Correct, timed candidates, fastest first (best measurement each, ties by hash)."""
        with self._reading() as session:
            return queries.ranked(session, self._study_row(session, study), limit)

    def measured_hashes(self, study: str) -> set[str]:
        with self._reading() as session:
            return queries.measured_hashes(session, self._study_row(session, study))

    def candidates(self, study: str) -> list[CandidateInfo]:
        with self._reading() as session:
            return queries.candidates(session, self._study_row(session, study))
