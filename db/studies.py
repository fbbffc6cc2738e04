"""The store's studies and their candidates: created or found, their status, and the views
of a study the report and the search read (funnel, rejections, ranking)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from tsopt.core.devices import recorded_profile
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.names import check_study_name
from tsopt.core.problem import Problem
from tsopt.core.records import DEFAULT_LAUNCH
from tsopt.db import queries
from tsopt.db.database import Database
from tsopt.db.models import STUDY_STATUSES, CandidateRow, StudyRow, utcnow
from tsopt.db.views import CandidateInfo, RankedCandidate, Rejection, StudyInfo, ranking_gpu


class StudyRecords(Database):
    """Studies, the candidates they propose, and what is read of a study as a whole."""

    def create_or_get_study(
        self, name: str, space: str, problem: Problem, arch: str, sampler: str,
        config: dict[str, Any], launch: str | None = None,
    ) -> StudyInfo:
        """The study called ``name``, created if new, measured in the ``launch`` mode (None:
        an existing study's own, :data:`~tsopt.core.records.DEFAULT_LAUNCH` for a new one).

        An existing study keeps its recorded sampler, config and launch mode. Raises
        :class:`UserInputError` when it exists for another space, problem, arch or (asked
        for) launch mode: its measurements would not compare with the new ones.
        """
        check_study_name(name)
        with self._writing() as session:
            fresh = StudyRow(
                name=name, space=space, problem_key=problem.key, problem_json=problem.to_json(),
                arch=arch, sampler=sampler, status="running",
                config_json=json.dumps(config, sort_keys=True), optuna_study_name=name,
                launch=launch or DEFAULT_LAUNCH,
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
                    ("launch mode", row.launch, launch or row.launch),
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
            if status != "killed":
                row.killed_at = None

    # -- candidates ---------------------------------------------------------------------
    def add_candidate(
        self, study: str, genome: Genome, origin: str, trial_number: int | None = None,
    ) -> int:
        """The candidate id of ``genome`` in ``study``; added if new, else the existing id."""
        with self._writing() as session:
            study_row, fresh = self._new_candidate_row(session, study, genome, origin, trial_number)

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

    # -- study views --------------------------------------------------------------------
    def funnel(self, study: str) -> dict[str, int]:
        """Counts: proposed, dataflow_legal, ts_valid, tsopt_checked, built, correct, timed."""
        with self._reading() as session:
            return queries.funnel(session, self._study_row(session, study))

    def rejections(self, study: str) -> list[Rejection]:
        """(stage, rule, count, example message) per reason; see :func:`tsopt.db.queries.rejections`."""
        with self._reading() as session:
            return queries.rejections(session, self._study_row(session, study))

    def ranked(self, study: str, limit: int | None = None,
               device: str | None = None) -> list[RankedCandidate]:
        """Correct, timed candidates, fastest first (best measurement each, ties by hash);
        ``device``: ranked on that GPU's measurements alone."""
        with self._reading() as session:
            return queries.ranked(session, self._study_row(session, study), limit, device)

    def measured_devices(self, study: str) -> dict[str, int]:
        """GPU name -> the study's correct, timed measurements made on it."""
        with self._reading() as session:
            return queries.measured_devices(session, self._study_row(session, study))

    def ranking_gpu(self, study: str, prefer: str | None = None) -> str | None:
        """The GPU whose measurements alone rank ``study`` in the search (its best so far, the
        confirmation, warm starts, the seed library): :func:`tsopt.db.views.ranking_gpu` over
        the cards it was measured on, with the profile its config records as the target, and
        ``prefer`` (the GPU a live run measures on) before it. None where one card (or none)
        measured it."""
        info = self.get_study(study)
        if info is None:
            raise UserInputError(f"no study named {study!r}")
        try:
            target = recorded_profile(info.config, info.arch)
        except UserInputError:  # a profile this version does not know: no target card
            target = None
        return ranking_gpu(self.measured_devices(study), target, prefer)

    def ranked_on_card(self, study: str, limit: int | None = None,
                       prefer: str | None = None) -> list[RankedCandidate]:
        """:meth:`ranked` on the measurements of :meth:`ranking_gpu` alone."""
        return self.ranked(study, limit, device=self.ranking_gpu(study, prefer))

    def measured_hashes(self, study: str) -> set[str]:
        with self._reading() as session:
            return queries.measured_hashes(session, self._study_row(session, study))

    def candidates(self, study: str) -> list[CandidateInfo]:
        with self._reading() as session:
            return queries.candidates(session, self._study_row(session, study))

