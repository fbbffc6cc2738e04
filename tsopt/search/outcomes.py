"""What Optuna is told about a candidate: the one policy, for the driver and for ingest alike.

A candidate's records become an :class:`Outcome`: for a correct timing, a value (the objective:
its time relative to the vendor baseline's, paired); PRUNED for a schedule the checks
rejected; FAIL for a build or a measurement that failed. Each comes with its reason as a user
attribute (``rejected``, ``build_error``, ``measure_failed``, ``duplicate_of``), and a timing
with its ratio to the vendor baseline and its rate (``ratio``, ``baseline``, ``TFLOP/s`` or
``GB/s``). :func:`open_study` is the one place a study is created or loaded, :func:`tell` the
one place a trial is finished, and :func:`add_finished_trial` the one place a measured
candidate that no trial proposed (seeded, enumerated, or new to this database through a
bundle) joins the study.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tsopt.core.records import BuildResult, Measurement, Verdict

if TYPE_CHECKING:
    import optuna

    from tsopt.db.store import Store

OBJECTIVE = "relative_time"
"""What a study minimises: the candidate's time over the vendor baseline's, paired (the two
alternating in one process, tsopt.workers.paired): 1 / its ratio. Absolute times move by ±10 %
at the GPU's power cap; this does not."""

LEGACY_OBJECTIVE = "median_us"
"""What studies created before paired measurement minimise (microseconds); they keep it, so
that one study's values stay in one unit."""


@dataclass(frozen=True)
class Outcome:
    """What a trial is told: a time (COMPLETE) or a state (PRUNED/FAIL) and its reasons.

    ``value`` is :data:`OBJECTIVE` (relative time); ``time_us`` the candidate's median time,
    told instead to a study that minimises :data:`LEGACY_OBJECTIVE`."""

    value: float | None = None
    state: str = "complete"  # complete | pruned | fail
    attrs: dict[str, Any] = field(default_factory=dict)
    time_us: float | None = None

    def duplicate(self, of: str) -> Outcome:
        return Outcome(self.value, self.state, {**self.attrs, "duplicate_of": of}, self.time_us)

    def value_for(self, study: Any) -> float | None:
        """The value in the unit ``study`` minimises."""
        names = getattr(study, "metric_names", None)
        if names == [LEGACY_OBJECTIVE]:
            return self.time_us if self.time_us is not None else self.value
        return self.value


def figures(measurement: Measurement) -> dict[str, Any]:
    """What a timing means beside its time, as trial user attributes (optuna-dashboard shows
    them): the ratio to the vendor baseline timed in the same run, and the rate under its unit
    (``TFLOP/s`` for a GEMM, ``GB/s`` for a copy)."""
    found: dict[str, Any] = {}
    if measurement.ratio is not None and math.isfinite(measurement.ratio):
        found["ratio"] = round(measurement.ratio, 4)
        found["baseline"] = measurement.baseline_name
        if measurement.ratio_lo is not None and measurement.ratio_hi is not None:
            found["ratio_95"] = [round(measurement.ratio_lo, 4), round(measurement.ratio_hi, 4)]
    if measurement.rate is not None and math.isfinite(measurement.rate) and measurement.rate_unit:
        found[measurement.rate_unit] = round(measurement.rate, 2)
    return found


def measurement_outcome(measurement: Measurement) -> Outcome:
    """A correct timing is a value (with its :func:`figures`); any other status a FAIL with
    its first error line."""
    if measurement.status == "ok" and measurement.median_us is not None:
        relative = (1.0 / measurement.ratio if measurement.ratio
                    and math.isfinite(measurement.ratio) and measurement.ratio > 0
                    else measurement.median_us)
        return Outcome(value=relative, attrs={**figures(measurement),
                                              "median_us": round(measurement.median_us, 3)},
                       time_us=measurement.median_us)
    first = (measurement.error or "").strip().splitlines()[0] if measurement.error else ""
    reason = f"{measurement.status}: {first}" if first else measurement.status
    return Outcome(state="fail", attrs={"measure_failed": reason[:500]})


def outcome_of(verdict: Verdict | None, build: BuildResult | None,
               measurement: Measurement | None) -> Outcome | None:
    """The outcome recorded so far, or None while the candidate is unfinished."""
    if verdict is None:
        return None
    if not verdict.valid:
        return Outcome(state="pruned",
                       attrs={"rejected": f"{verdict.rule}: {verdict.message}"[:500]})
    if build is None:
        return None
    if not build.ok:
        return Outcome(state="fail", attrs={"build_error": (build.error or "")[:500]})
    if measurement is None:
        return None
    return measurement_outcome(measurement)


def open_study(store: Store, name: str, sampler: Any = None) -> optuna.Study:
    """Create or load the Optuna study ``name`` in the store's database (minimising
    :data:`OBJECTIVE`, named so in optuna-dashboard)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=store.optuna_storage(),
                                direction="minimize", load_if_exists=True, sampler=sampler)
    if study.metric_names is None:
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2, and still there
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([OBJECTIVE])
    return study


def tell(study: optuna.Study, trial: Any, outcome: Outcome) -> bool:
    """Finish ``trial`` (a Trial or a trial number) with ``outcome``, its reasons first.

    Returns False, telling nothing, when the trial is already finished: another process on
    the same study (or an ingest) told it first, and the first outcome stands."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    trial_id = (trial._trial_id if hasattr(trial, "_trial_id")
                else study._storage.get_trial_id_from_study_id_trial_number(study._study_id,
                                                                             int(trial)))
    if study._storage.get_trial(trial_id).state.is_finished():
        return False
    try:
        for key, value in outcome.attrs.items():
            study._storage.set_trial_user_attr(trial_id, key, value)
        value = outcome.value_for(study)
        if value is not None and math.isfinite(value):
            study.tell(trial, value, skip_if_finished=True)
        else:
            study.tell(trial, state=TrialState.PRUNED if outcome.state == "pruned"
                       else TrialState.FAIL, skip_if_finished=True)
    except UpdateFinishedTrialError:  # finished by another process between the look and now
        return False
    return True


def add_finished_trial(study: optuna.Study, outcome: Outcome,
                       user_attrs: dict[str, Any]) -> int:
    """Add an already finished trial (no sampler proposed it); returns its number."""
    import optuna
    from optuna.trial import TrialState

    value = outcome.value_for(study)
    ok = value is not None and math.isfinite(value)
    state = TrialState.COMPLETE if ok else (TrialState.PRUNED if outcome.state == "pruned"
                                            else TrialState.FAIL)
    frozen = optuna.trial.create_trial(state=state, value=value if ok else None,
                                       params={}, distributions={},
                                       user_attrs={**user_attrs, **outcome.attrs})
    # The storage hands back the new trial's id, which stays right when other processes add
    # trials to the same study meanwhile (Study.add_trial returns nothing).
    storage = study._storage
    trial_id = storage.create_new_trial(study._study_id, template_trial=frozen)
    return int(storage.get_trial_number_from_id(trial_id))


def card_values(store: Store, study_name: str, study: Any, target: Any = None,
                prefer: str | None = None) -> tuple[str, dict[int, float], set[int]] | None:
    """Where a study was measured on several GPUs: the card it ranks on
    (:func:`tsopt.db.views.ranking_gpu`, ``target`` the profile this run builds for, ``prefer``
    the GPU this run measures on, once known), each
    trial's value on it (:data:`OBJECTIVE`, from its standing there: the median over that card's
    measurements) and the trials timed on other cards only. None for a study measured on one
    card or none, and for one that minimises :data:`LEGACY_OBJECTIVE` (absolute times)."""
    from tsopt.db.views import ranking_gpu

    if getattr(study, "metric_names", None) == [LEGACY_OBJECTIVE]:
        return None
    card = ranking_gpu(store.measured_devices(study_name), target, prefer)
    if card is None:
        return None
    values = {r.trial_number: 1.0 / r.standing.ratio
              for r in store.ranked(study_name, device=card)
              if r.trial_number is not None and r.standing is not None
              and r.standing.ratio is not None and r.standing.ratio > 0}
    elsewhere = {r.trial_number for r in store.ranked(study_name)
                 if r.trial_number is not None and r.trial_number not in values}
    return card, values, elsewhere
