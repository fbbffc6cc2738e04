"""``tsopt ingest BUNDLE``: record a measured bundle in the database and tell the Optuna study.

Idempotent: measurements and baselines are recorded under the results' ``run_id`` (the store
refuses a second copy), and an Optuna trial that is already finished is left alone, so
ingesting the same bundle again adds nothing and says so.

Telling the study, per measured candidate:

- a candidate with a trial number (proposed by Optuna): its trial is completed with the median
  time in microseconds when the status is ``ok``, failed otherwise with the status and error as
  the ``fail_reason`` user attribute; a finished trial is left alone;
- a candidate without one (seeded, enumerated, or new to this database): a finished trial is
  added with the genome's genes as user attributes, and its number stored on the candidate, so
  a second ingest finds it finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tsopt.core.bundle import BundleError, BundleManifest, BundleResults, read_manifest, read_results
from tsopt.core.records import Measurement

if TYPE_CHECKING:
    import optuna

    from tsopt.db.store import Store
    from tsopt.db.views import StudyInfo

OBJECTIVE = "median_us"  # what the study minimises
DEFAULT_ORIGIN = "enumerate"


@dataclass
class IngestReport:
    """What one ingest changed."""

    run_id: str
    study: str
    created_study: bool = False
    measurements_new: int = 0
    measurements_known: int = 0
    baselines_new: int = 0
    baselines_known: int = 0
    candidates_added: int = 0
    trials_completed: int = 0
    trials_failed: int = 0
    trials_added: int = 0
    trials_left: int = 0  # already finished
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.measurements_new or self.baselines_new or self.candidates_added
                    or self.trials_completed or self.trials_failed or self.trials_added)


def _fail_reason(m: Measurement) -> str:
    first = (m.error or "").splitlines()[0] if m.error else ""
    return f"{m.status}: {first}"[:500] if first else m.status


def _user_attrs(genes: dict[str, Any], m: Measurement, run_id: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in genes.items()}
    attrs.update(genome_hash=m.genome_hash, status=m.status, run_id=run_id)
    if m.status != "ok":
        attrs["fail_reason"] = _fail_reason(m)
    return attrs


def _optuna_study(
    store: Store, info: StudyInfo,
) -> tuple[optuna.Study, optuna.storages.RDBStorage, int]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = store.optuna_storage()
    study = optuna.create_study(study_name=info.optuna_study_name, storage=storage,
                                direction="minimize", load_if_exists=True)
    return study, storage, storage.get_study_id_from_name(info.optuna_study_name)


def tell_study(
    store: Store, info: StudyInfo, told: list[tuple[int, int | None, Any, Measurement]],
    run_id: str, report: IngestReport,
) -> None:
    """Tell Optuna about measured candidates: (candidate id, trial number, genome, measurement)."""
    import optuna
    from optuna.trial import TrialState

    study, storage, study_id = _optuna_study(store, info)
    for candidate_id, trial_number, genome, m in told:
        ok = m.status == "ok" and m.median_us is not None
        if trial_number is not None:
            try:
                trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial_number)
            except KeyError:
                report.notes.append(f"candidate {m.genome_hash[:12]}: trial {trial_number} is not "
                                    f"in Optuna study {info.optuna_study_name!r}; not told")
                continue
            if storage.get_trial(trial_id).state.is_finished():
                report.trials_left += 1
                continue
            storage.set_trial_user_attr(trial_id, "run_id", run_id)
            if ok:
                study.tell(trial_number, m.median_us)
                report.trials_completed += 1
            else:
                storage.set_trial_user_attr(trial_id, "fail_reason", _fail_reason(m))
                study.tell(trial_number, state=TrialState.FAIL)
                report.trials_failed += 1
            continue
        frozen = optuna.trial.create_trial(
            state=TrialState.COMPLETE if ok else TrialState.FAIL,
            value=m.median_us if ok else None, params={}, distributions={},
            user_attrs=_user_attrs(genome.genes, m, run_id),
        )
        trial_id = storage.create_new_trial(study_id, template_trial=frozen)
        store.set_trial_number(candidate_id, storage.get_trial_number_from_id(trial_id))
        report.trials_added += 1


def ingest_results(
    store: Store, manifest: BundleManifest, results: BundleResults,
) -> IngestReport:
    """Record ``results`` of ``manifest``'s bundle in ``store`` and tell the study."""
    from tsopt.db.models import ORIGINS

    report = IngestReport(run_id=results.run_id, study=manifest.study)
    existed = store.get_study(manifest.study) is not None
    info = store.create_or_get_study(
        manifest.study, manifest.space, manifest.problem, manifest.arch, sampler="bundle",
        config={"created_by": "tsopt ingest", "bundle_id": manifest.bundle_id},
    )
    report.created_study = not existed
    for b in results.baselines:
        new = store.record_baseline(b.problem_key, b.name, b.device, results.run_id, b.median_us,
                                    b.p10_us, b.p90_us, b.rate, b.rate_unit)
        report.baselines_new += new
        report.baselines_known += not new
    known = {c.genome_hash: c for c in store.candidates(manifest.study)}
    told: list[tuple[int, int | None, Any, Measurement]] = []
    for m in results.measurements:
        candidate = manifest.candidate(m.genome_hash)
        if candidate is None:  # read_results checked this; a guard for hand-made results
            raise BundleError(f"results name genome {m.genome_hash[:12]}..., not in the manifest")
        info_row = known.get(m.genome_hash)
        if info_row is None:
            origin = candidate.origin if candidate.origin in ORIGINS else DEFAULT_ORIGIN
            candidate_id = store.add_candidate(manifest.study, candidate.genome, origin)
            trial_number = None
            report.candidates_added += 1
        else:
            candidate_id, trial_number = info_row.id, info_row.trial_number
        new = store.record_measurement(candidate_id, m, results.run_id)
        report.measurements_new += new
        report.measurements_known += not new
        told.append((candidate_id, trial_number, candidate.genome, m))
    if told:
        tell_study(store, info, told, results.run_id, report)
    return report


def _print(console: Console, report: IngestReport, bundle: Path) -> None:
    if report.created_study:
        console.print(f"study {report.study!r} was not in this database: created it from the "
                      "bundle manifest", highlight=False)
    if not report.changed:
        console.print(
            f"nothing new: run {report.run_id} of {bundle} was already ingested "
            f"({report.measurements_known} measurements, {report.baselines_known} baselines "
            f"already recorded; {report.trials_left} trials already finished)", highlight=False,
        )
    else:
        console.print(
            f"run {report.run_id}: recorded {report.measurements_new} new measurements "
            f"({report.measurements_known} already there), {report.baselines_new} baselines; "
            f"study {report.study!r}: {report.trials_completed} trials completed, "
            f"{report.trials_failed} failed, {report.trials_added} added, {report.trials_left} "
            "already finished", highlight=False,
        )
    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)


def ingest_bundle(bundle: Path, db_url: str, console: Console | None = None) -> int:
    """Record a measured bundle; returns the exit code (0). Bad bundles raise BundleError."""
    from tsopt.db.store import Store

    console = console or Console()
    bundle = Path(bundle)
    # The artifacts are not needed to record results (a GPU box may send back results only).
    manifest = read_manifest(bundle, check_artifacts=False)
    results = read_results(bundle, manifest)
    if results is None:
        raise BundleError(f"{bundle} has not been measured: it has no results.json; run "
                          f"`tsopt measure {bundle}` on a GPU machine first")
    with Store(db_url) as store:
        report = ingest_results(store, manifest, results)
    _print(console, report, bundle)
    return 0
