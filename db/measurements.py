"""Measurements of candidates and vendor baselines, each recorded once per run (a run that
records one again is told so, nothing is overwritten)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from tsopt.core.records import MEASURE_STATUSES, Measurement
from tsopt.db import queries
from tsopt.db.database import Database
from tsopt.db.models import BaselineRow, MeasurementRow


class MeasurementRecords(Database):
    """Timings of candidates (by candidate and run) and of vendor baselines (by problem)."""

    def record_measurement(self, candidate_id: int, m: Measurement, run_id: str,
                           wait_s: float | None = None) -> bool:
        """Record one timing of a candidate (``wait_s``: how long it waited for a GPU);
        False if this run already recorded it."""
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
            fields["conditions_json"] = json.dumps(fields.pop("conditions"), sort_keys=True)
            fields["per_m_json"] = json.dumps(fields.pop("per_m"), sort_keys=True)
            fresh = MeasurementRow(candidate_id=candidate_id, run_id=run_id,
                                   wait_s=None if wait_s is None else max(0.0, wait_s), **fields)
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

