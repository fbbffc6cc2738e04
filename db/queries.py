"""Read queries of the store: rows in, plain records and views out.

Kept apart from the models (what the tables are) and from the store's
writes (how rows get there): each function takes an open session and returns
frozen data.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import Session

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import BuildResult, Measurement, TsSearch, Verdict
from tsopt.core.standing import Standing, standing
from tsopt.db.models import (
    BuildRow,
    CandidateRow,
    JudgedRow,
    MeasurementRow,
    StudyRow,
    TsSearchRow,
    VerdictRow,
)
from tsopt.db.views import (
    FUNNEL_STAGES,
    CandidateInfo,
    RankedCandidate,
    RecordedMeasurement,
    Rejection,
    StudyInfo,
)

STAGE_ORDER: tuple[str, ...] = ("dataflow", "ts", "tsopt", "build", "measure")


def aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# -- row -> record ----------------------------------------------------------------------


def study_info(row: StudyRow) -> StudyInfo:
    return StudyInfo(
        id=row.id,
        name=row.name,
        space=row.space,
        problem=Problem.from_dict(json.loads(row.problem_json)),
        arch=row.arch,
        sampler=row.sampler,
        status=row.status,
        config=json.loads(row.config_json),
        optuna_study_name=row.optuna_study_name,
        created_at=aware(row.created_at),
        updated_at=aware(row.updated_at),
        killed_at=aware(row.killed_at) if row.killed_at is not None else None,
        launch=row.launch or "isolated",
    )


def verdict_record(row: VerdictRow | JudgedRow) -> Verdict:
    """A kept verdict (a candidate's, or a whole verdict shared across studies) as the record
    the verifier returns (``cached``)."""
    return Verdict(
        genome_hash=row.genome_hash,
        valid=row.valid,
        stage=row.stage,  # type: ignore[arg-type]
        rule=row.rule,
        message=row.message,
        seconds=row.seconds,
        domain=row.domain,
        cached=True,
    )


def search_record(row: TsSearchRow) -> TsSearch:
    """A kept exhaustive search as the record the verifier memoises."""
    return TsSearch(space=row.space, schedule=row.schedule, aliasing=row.aliasing,
                    tool_version=row.tool_version, error=row.error, bounded=row.bounded,
                    seconds=row.seconds, domain=row.domain or 0, states=row.states,
                    max_states=row.max_states)


def build_record(row: BuildRow) -> BuildResult:
    return BuildResult(
        genome_hash=row.genome_hash,
        problem_key=row.problem_key,
        arch=row.arch,
        status=row.status,  # type: ignore[arg-type]
        artifact_dir=row.artifact_dir,
        library=row.library,
        compile_seconds=row.compile_seconds,
        export_seconds=row.export_seconds,
        link_seconds=row.link_seconds,
        registers=row.registers,
        smem_bytes=row.smem_bytes,
        spill_bytes=row.spill_bytes,
        cache_key=row.cache_key,
        cache_hit=True,
        error=row.error,
        versions=json.loads(row.versions_json),
    )


def measurement_record(row: MeasurementRow, genome_hash: str, problem_key: str) -> Measurement:
    return Measurement(
        genome_hash=genome_hash,
        problem_key=problem_key,
        status=row.status,  # type: ignore[arg-type]
        median_us=row.median_us,
        p10_us=row.p10_us,
        p90_us=row.p90_us,
        runs=row.runs,
        rate=row.rate,
        rate_unit=row.rate_unit,
        rel_err=row.rel_err,
        baseline_name=row.baseline_name,
        baseline_median_us=row.baseline_median_us,
        baseline_rate=row.baseline_rate,
        ratio=row.ratio,
        device=row.device,
        driver=row.driver,
        cuda=row.cuda,
        torch=row.torch,
        error=row.error,
        seconds=row.seconds,
        ratio_lo=row.ratio_lo,
        ratio_hi=row.ratio_hi,
        rounds=row.rounds or 0,
        conditions=json.loads(row.conditions_json or "{}"),
        launch=row.launch or "isolated",
        per_m=json.loads(row.per_m_json or "[]"),
    )


# -- study-level queries ----------------------------------------------------------------


def funnel(session: Session, study: StudyRow) -> dict[str, int]:
    """Candidates that passed each gate; see :data:`tsopt.db.views.FUNNEL_STAGES`."""
    stage = VerdictRow.stage

    def count_if(condition: ColumnElement[bool]) -> ColumnElement[int]:
        return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

    row = session.execute(
        select(
            func.count(CandidateRow.id),
            count_if(stage.in_(("ts", "tsopt", "ok"))),
            count_if(stage.in_(("tsopt", "ok"))),
            count_if(VerdictRow.valid.is_(True)),
            count_if(BuildRow.status == "ok"),
        )
        .select_from(CandidateRow)
        .outerjoin(VerdictRow, VerdictRow.id == CandidateRow.verdict_id)
        .outerjoin(BuildRow, BuildRow.id == CandidateRow.build_id)
        .where(CandidateRow.study_id == study.id)
    ).one()
    ok = (
        select(MeasurementRow.candidate_id)
        .join(CandidateRow, CandidateRow.id == MeasurementRow.candidate_id)
        .where(CandidateRow.study_id == study.id, MeasurementRow.status == "ok")
    )
    correct = session.scalar(select(func.count(func.distinct(ok.subquery().c.candidate_id))))
    timed = session.scalar(
        select(func.count(func.distinct(
            ok.where(MeasurementRow.median_us.is_not(None)).subquery().c.candidate_id
        )))
    )
    counts = [int(v or 0) for v in row] + [int(correct or 0), int(timed or 0)]
    return dict(zip(FUNNEL_STAGES, counts, strict=True))


def rejections(session: Session, study: StudyRow) -> list[Rejection]:
    """Why candidates stopped, one group per (stage, rule).

    Verifier rejections keep their stage and rule; a failed build is stage
    ``build`` rule ``build.error``; a measurement that was not ``ok`` is stage
    ``measure`` rule ``measure.<status>`` (``wrong``, ``hang``, ...), counted
    once per candidate. Ordered by pipeline stage, then most frequent first.
    """
    groups: list[Rejection] = []
    verdicts = session.execute(
        select(VerdictRow.stage, VerdictRow.rule, func.count(CandidateRow.id),
               func.min(VerdictRow.message))
        .join(VerdictRow, VerdictRow.id == CandidateRow.verdict_id)
        .where(CandidateRow.study_id == study.id, VerdictRow.valid.is_(False))
        .group_by(VerdictRow.stage, VerdictRow.rule)
    ).all()
    groups += [Rejection(s, r or f"{s}.unnamed", n, m or "") for s, r, n, m in verdicts]
    builds = session.execute(
        select(func.count(CandidateRow.id), func.min(BuildRow.error))
        .join(BuildRow, BuildRow.id == CandidateRow.build_id)
        .where(CandidateRow.study_id == study.id, BuildRow.status != "ok")
    ).one()
    if builds[0]:
        groups.append(Rejection("build", "build.error", int(builds[0]), builds[1] or ""))
    measured = session.execute(
        select(MeasurementRow.status, func.count(func.distinct(MeasurementRow.candidate_id)),
               func.min(MeasurementRow.error))
        .join(CandidateRow, CandidateRow.id == MeasurementRow.candidate_id)
        .where(CandidateRow.study_id == study.id, MeasurementRow.status != "ok")
        .group_by(MeasurementRow.status)
    ).all()
    groups += [Rejection("measure", f"measure.{s}", n, m or "") for s, n, m in measured]
    return sorted(groups, key=lambda g: (STAGE_ORDER.index(g.stage)
                                         if g.stage in STAGE_ORDER else len(STAGE_ORDER),
                                         -g.count, g.rule))


def _timed(study: StudyRow) -> tuple[ColumnElement[bool], ...]:
    """A study's correct, timed measurements: what a ranking reads."""
    return (CandidateRow.study_id == study.id, MeasurementRow.status == "ok",
            MeasurementRow.median_us.is_not(None))


def ranked(session: Session, study: StudyRow, limit: int | None = None,
           device: str | None = None) -> list[RankedCandidate]:
    """Correct, timed candidates, best first by their paired ratio (tsopt.core.standing): the
    median over a candidate's measurements, with the envelope of their intervals; unpaired
    records after them by time; ties broken by genome hash. ``device``: only the measurements
    made on that GPU (its name as the runner recorded it)."""
    query = (select(CandidateRow, MeasurementRow, BuildRow)
             .join(MeasurementRow, MeasurementRow.candidate_id == CandidateRow.id)
             .outerjoin(BuildRow, BuildRow.id == CandidateRow.build_id)
             .where(*_timed(study)))
    if device is not None:
        query = query.where(MeasurementRow.device == device)
    rows = session.execute(query.order_by(CandidateRow.id, MeasurementRow.id)).all()
    problem_key = study.problem_key
    grouped: dict[int, list[tuple[CandidateRow, MeasurementRow, BuildRow | None]]] = {}
    for cand, meas, build in rows:
        grouped.setdefault(cand.id, []).append((cand, meas, build))
    standings: list[tuple[Standing, list[tuple[CandidateRow, MeasurementRow, BuildRow | None]]]] = []
    for group in grouped.values():
        records = [measurement_record(meas, cand.genome_hash, problem_key)
                   for cand, meas, _ in group]
        found = standing(group[0][0].genome_hash, records)
        if found is not None:
            standings.append((found, group))
    ordered = sorted(standings, key=lambda pair: pair[0].sort_key())
    if limit is not None:
        ordered = ordered[:limit]
    result = []
    for i, (stand, group) in enumerate(ordered, start=1):
        # The measurement shown for the candidate: the one nearest its standing.
        cand, meas, build = min(
            group, key=lambda row: (abs((row[1].ratio or 0.0) - (stand.ratio or 0.0))
                                    if stand.ratio is not None
                                    else abs(row[1].median_us - stand.median_us), row[1].id))
        result.append(RankedCandidate(
            rank=i,
            candidate_id=cand.id,
            genome=Genome.from_json(cand.genome_json),
            origin=cand.origin,
            trial_number=cand.trial_number,
            measurement=measurement_record(meas, cand.genome_hash, problem_key),
            run_id=meas.run_id,
            measured_at=aware(meas.measured_at),
            build=build_record(build) if build is not None else None,
            standing=stand,
        ))
    return result


def measured_devices(session: Session, study: StudyRow) -> dict[str, int]:
    """The GPUs a study's correct, timed measurements were made on, and how many on each."""
    rows = session.execute(
        select(MeasurementRow.device, func.count(MeasurementRow.id))
        .join(CandidateRow, CandidateRow.id == MeasurementRow.candidate_id)
        .where(*_timed(study))
        .group_by(MeasurementRow.device)
    ).all()
    return {device: int(n) for device, n in sorted(rows)}


def measured_hashes(session: Session, study: StudyRow) -> set[str]:
    """Genome hashes of the candidates with at least one measurement, whatever its status."""
    rows = session.scalars(
        select(CandidateRow.genome_hash)
        .join(MeasurementRow, MeasurementRow.candidate_id == CandidateRow.id)
        .where(CandidateRow.study_id == study.id)
        .distinct()
    )
    return set(rows)


def candidates(session: Session, study: StudyRow,
               candidate_id: int | None = None) -> list[CandidateInfo]:
    """Every candidate of the study in the order they were proposed, with all their records
    (only the one with ``candidate_id`` when given)."""
    problem_key = study.problem_key
    by_candidate: dict[int, list[RecordedMeasurement]] = {}
    chosen = CandidateRow.study_id == study.id
    if candidate_id is not None:
        chosen = chosen & (CandidateRow.id == candidate_id)
    hashes = dict(session.execute(
        select(CandidateRow.id, CandidateRow.genome_hash).where(chosen)
    ).all())
    measurements = session.scalars(
        select(MeasurementRow)
        .join(CandidateRow, CandidateRow.id == MeasurementRow.candidate_id)
        .where(chosen)
        .order_by(MeasurementRow.id)
    )
    for m in measurements:
        by_candidate.setdefault(m.candidate_id, []).append(RecordedMeasurement(
            run_id=m.run_id,
            measured_at=aware(m.measured_at),
            measurement=measurement_record(m, hashes[m.candidate_id], problem_key),
        ))
    rows = session.execute(
        select(CandidateRow, VerdictRow, BuildRow)
        .outerjoin(VerdictRow, VerdictRow.id == CandidateRow.verdict_id)
        .outerjoin(BuildRow, BuildRow.id == CandidateRow.build_id)
        .where(chosen)
        .order_by(CandidateRow.id)
    )
    return [
        CandidateInfo(
            id=cand.id,
            genome=Genome.from_json(cand.genome_json),
            origin=cand.origin,
            trial_number=cand.trial_number,
            created_at=aware(cand.created_at),
            verdict=verdict_record(verdict) if verdict is not None else None,
            build=build_record(build) if build is not None else None,
            measurements=tuple(by_candidate.get(cand.id, ())),
        )
        for cand, verdict, build in rows
    ]
