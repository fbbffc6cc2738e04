"""Runs and claims: several processes may share one study.

Each ``tsopt tune`` registers a run (pid, host, heartbeat: :meth:`ClaimRecords.start_run`); a
candidate is claimed by the run that evaluates it (:meth:`ClaimRecords.claim_candidate`), so
no two runs build the same genome; a study left ``running`` by a run that is gone (killed by
the system) is marked ``killed``, with when, by the next store that opens the database
(:meth:`ClaimRecords.reap_killed`). A resumed run takes over the candidates a dead one held.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select, update

from tsopt.core.genome import Genome
from tsopt.db import queries
from tsopt.db.database import Database
from tsopt.db.models import RUN_STATUSES, STUDY_STATUSES, CandidateRow, RunRow, StudyRow, utcnow
from tsopt.db.views import CandidateInfo

HEARTBEAT_S = 5.0
"""How often a run's heartbeat is written (:class:`tsopt.search.driver.Driver` beats)."""
STALE_S = 60.0
"""A run on another host not heard of for this long is gone."""
STALE_LOCAL_S = 600.0
"""A run on this host is gone at once when its process is; one whose process lives (a build
may hold the interpreter a while) is gone when not heard of for this long (its pid reused)."""
HOST = socket.gethostname()


@dataclass(frozen=True)
class Claim:
    """The outcome of :meth:`ClaimRecords.claim_candidate`: the candidate, whether this run
    now holds it (new, already its own, or taken over from a run that is gone), else the live
    run that does, and what is recorded of it."""

    candidate_id: int
    mine: bool
    created: bool
    holder: str | None
    info: CandidateInfo


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def run_alive(row: RunRow) -> bool:
    """A run is alive while it says it runs and: on this host, its process exists and was
    heard of within :data:`STALE_LOCAL_S`; on another, it was heard of within :data:`STALE_S`."""
    if row.status != "running":
        return False
    local = row.host == HOST
    heard = utcnow() - queries.aware(row.heartbeat_at)
    if heard > timedelta(seconds=STALE_LOCAL_S if local else STALE_S):
        return False
    return not local or _pid_alive(row.pid)


class ClaimRecords(Database):
    """The runs of a study, what each holds, and the reaping of runs that are gone."""

    # -- runs ---------------------------------------------------------------------------
    def start_run(self, study: str, run_id: str) -> int:
        """Register this process as a run of ``study`` (status ``running``); returns how many
        other runs of it are alive now."""
        with self._writing() as session:
            row = self._study_row(session, study)
            others = [r for r in session.scalars(select(RunRow).where(
                RunRow.study_id == row.id, RunRow.status == "running")) if run_alive(r)]
            now = utcnow()
            session.add(RunRow(run_id=run_id, study_id=row.id, pid=os.getpid(), host=HOST,
                               status="running", started_at=now, heartbeat_at=now))
            row.status, row.killed_at, row.updated_at = "running", None, now
            return len(others)

    def heartbeat(self, run_id: str) -> None:
        """This run is alive (the driver writes it every :data:`HEARTBEAT_S`)."""
        with self._writing() as session:
            session.execute(update(RunRow).where(RunRow.run_id == run_id,
                                                 RunRow.status == "running")
                            .values(heartbeat_at=utcnow()))

    def finish_run(self, run_id: str, status: str) -> str:
        """End a run; the study takes ``status`` unless another of its runs is still alive
        (then it stays ``running``). Returns the study's status."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status {status!r} is not one of {RUN_STATUSES}")
        with self._writing() as session:
            run = session.scalar(select(RunRow).where(RunRow.run_id == run_id))
            if run is None:
                raise ValueError(f"no run {run_id!r}")
            run.status, run.finished_at = status, utcnow()
            study = session.get(StudyRow, run.study_id)
            assert study is not None
            others = [r for r in session.scalars(select(RunRow).where(
                RunRow.study_id == study.id, RunRow.status == "running",
                RunRow.run_id != run_id)) if run_alive(r)]
            study_status = "running" if others else (
                status if status in STUDY_STATUSES else "interrupted")
            study.status, study.updated_at = study_status, utcnow()
            if study_status != "killed":
                study.killed_at = None
            return study_status

    def run_alive(self, run_id: str) -> bool:
        with self._reading() as session:
            row = session.scalar(select(RunRow).where(RunRow.run_id == run_id))
            return row is not None and run_alive(row)

    def live_runs(self, study: str) -> set[str]:
        """The runs of ``study`` alive now."""
        with self._reading() as session:
            row = self._study_row(session, study)
            return {r.run_id for r in session.scalars(select(RunRow).where(
                RunRow.study_id == row.id, RunRow.status == "running")) if run_alive(r)}

    def reap_killed(self) -> list[str]:
        """Mark every study left ``running`` with no live run (its process killed by the
        system, the machine gone) as ``killed``, with when it was last heard of, and its dead
        runs the same. Returns the names marked. Runs when a store opens the database: the
        next command to touch a killed study says so."""
        stale_before = utcnow() - timedelta(seconds=STALE_S)
        with self._reading() as session:
            running = list(session.scalars(select(StudyRow).where(StudyRow.status == "running")))
            suspects = []
            for study in running:
                runs = list(session.scalars(select(RunRow).where(RunRow.study_id == study.id)))
                if any(run_alive(r) for r in runs):
                    continue
                if not runs and queries.aware(study.updated_at) > stale_before:
                    continue  # just created; its run registers in a moment
                suspects.append(study.id)
        if not suspects:
            return []
        marked = []
        with self._writing() as session:
            for study_id in suspects:
                study = session.get(StudyRow, study_id)
                if study is None or study.status != "running":
                    continue
                runs = list(session.scalars(select(RunRow).where(RunRow.study_id == study_id)))
                if any(run_alive(r) for r in runs):
                    continue
                dead = [r for r in runs if r.status == "running"]
                heard = [queries.aware(r.heartbeat_at) for r in dead] or [
                    queries.aware(study.updated_at)]
                for r in dead:
                    r.status, r.finished_at = "killed", queries.aware(r.heartbeat_at)
                study.status, study.killed_at = "killed", max(heard)
                marked.append(study.name)
        return marked

    # -- claims -------------------------------------------------------------------------
    def claim_candidate(
        self, study: str, genome: Genome, origin: str, trial_number: int | None, run_id: str,
    ) -> Claim:
        """Add ``genome`` to ``study`` held by run ``run_id``, or find it; this run holds it
        when it is new, already this run's, or held by no live run (taken over: a run killed
        part-way leaves its candidates to the next). Otherwise the live run that holds it is
        named, and this run must not evaluate it (it waits for that run's outcome)."""
        with self._writing() as session:
            study_row, fresh = self._new_candidate_row(session, study, genome, origin, trial_number)
            fresh.claimed_by = run_id

            def lookup() -> CandidateRow | None:
                return session.scalar(select(CandidateRow).where(
                    CandidateRow.study_id == study_row.id, CandidateRow.genome_hash == genome.hash,
                ).with_for_update())

            row = self._insert_or_get(session, fresh, lookup)
            created = row is fresh
            holder = None
            if not created and row.claimed_by != run_id:
                claimer = None if row.claimed_by is None else session.scalar(
                    select(RunRow).where(RunRow.run_id == row.claimed_by))
                if claimer is not None and run_alive(claimer):
                    holder = claimer.run_id
                else:
                    row.claimed_by = run_id
            session.flush()
            info = queries.candidates(session, study_row, row.id)[0]
            return Claim(row.id, holder is None, created, holder, info)

    def candidate(self, study: str, candidate_id: int) -> tuple[CandidateInfo, str | None]:
        """What is recorded of one candidate, and the live run holding it (None when none)."""
        with self._reading() as session:
            study_row = self._study_row(session, study)
            found = queries.candidates(session, study_row, candidate_id)
            if not found:
                raise ValueError(f"no candidate {candidate_id} in study {study!r}")
            row = self._candidate_row(session, candidate_id)
            claimer = None if row.claimed_by is None else session.scalar(
                select(RunRow).where(RunRow.run_id == row.claimed_by))
            return found[0], (claimer.run_id if claimer is not None and run_alive(claimer)
                              else None)

