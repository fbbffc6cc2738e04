"""``tsopt ingest BUNDLE``: record a measured bundle in the database and tell the Optuna study.

Idempotent: measurements and baselines are recorded under the results' ``run_id`` (the store
refuses a second copy), and an Optuna trial that is already finished is left alone, so
ingesting the same bundle again adds nothing and says so.

Telling the study, per measured candidate:

- a candidate with a trial number (proposed by Optuna): its trial is completed with the median
  time in microseconds when the status is ``ok``, failed otherwise with the status and error as
  the ``measure_failed`` user attribute (the driver's policy); a finished trial is left alone;
- a candidate without one (seeded, enumerated): a finished trial is added with the genome's
  genes as user attributes, and its number stored on the candidate, so a second ingest finds it
  finished.

Nothing in a bundle is trusted, its own checksums included (whoever edits a bundle can write
them again). Before anything is recorded:

- the bundle holds only what its manifest lists (:func:`tsopt.core.bundle.check_listing`);
  every file that came back has the sha256 the manifest lists, each JSON file its own checksum;
- the bundle is one this database built (:func:`check_provenance`): its study is here with the
  same space, problem and arch (a renamed study is refused, never created), every candidate is
  one of the study's, and every artifact file's sha256 is the one the database recorded when
  the candidate was built (revision 0007). A build recorded before that revision is checked
  against its artifact in the build cache, while it is there; without it the bundle is refused;
- every result is a measurement that could have been taken: finite, positive times between the
  arch's roofline and a minute, the figures a timing carries (rate, ratio, the baseline's), a
  rate that is its median's and a ratio that agrees with the baseline's time, coherent statuses
  and a device the results name (:func:`tsopt.core.bundle.measurement_physics`);
- every genome is verified again (schema, dataflow, TS, tsopt's checks; the store's verdict
  cache makes a genome verified before cheap).

One candidate that does not pass refuses the whole bundle. Then everything is written in one
transaction, Optuna's tables included (:meth:`tsopt.db.store.Store.atomic`): a failure part-way
leaves the database as it was, and the corrected bundle ingests afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tsopt.core.bundle import (
    MANIFEST_NAME,
    BundleError,
    BundleManifest,
    BundleResults,
    artifact_checksums,
    check_listing,
    read_manifest,
    read_results,
)
from tsopt.core.errors import UserInputError
from tsopt.core.problem import ProblemError
from tsopt.core.records import Measurement, TsSearch, Verdict
from tsopt.search.outcomes import add_finished_trial, measurement_outcome, open_study, tell

if TYPE_CHECKING:
    from tsopt.db.store import Store
    from tsopt.db.views import StudyInfo

@dataclass
class IngestReport:
    """What one ingest changed."""

    run_id: str
    study: str
    measurements_new: int = 0
    measurements_known: int = 0
    baselines_new: int = 0
    baselines_known: int = 0
    trials_completed: int = 0
    trials_failed: int = 0
    trials_added: int = 0
    trials_left: int = 0  # already finished
    verified: int = 0  # genomes verified again (all of the manifest's)
    verified_cached: int = 0  # of them, answered by the verdict cache
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.measurements_new or self.baselines_new
                    or self.trials_completed or self.trials_failed or self.trials_added)


def tell_study(
    store: Store, info: StudyInfo, told: list[tuple[int, int | None, Any, Measurement]],
    run_id: str, report: IngestReport,
) -> None:
    """Tell Optuna about measured candidates: (candidate id, trial number, genome, measurement),
    by the driver's own policy (:mod:`tsopt.search.outcomes`)."""
    study = open_study(store, info.optuna_study_name)
    storage = study._storage
    for candidate_id, trial_number, genome, m in told:
        outcome = measurement_outcome(m)
        if trial_number is not None:
            try:
                trial_id = storage.get_trial_id_from_study_id_trial_number(study._study_id,
                                                                           trial_number)
            except KeyError:
                report.notes.append(f"candidate {m.genome_hash[:12]}: trial {trial_number} is not "
                                    f"in Optuna study {info.optuna_study_name!r}; not told")
                continue
            if storage.get_trial(trial_id).state.is_finished():
                report.trials_left += 1
                continue
            storage.set_trial_user_attr(trial_id, "run_id", run_id)
            tell(study, trial_number, outcome)
            if outcome.value is not None:
                report.trials_completed += 1
            else:
                report.trials_failed += 1
            continue
        attrs: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v
                                 for k, v in genome.genes.items()}
        attrs.update(genome_hash=m.genome_hash, status=m.status, run_id=run_id)
        number = add_finished_trial(study, outcome, attrs)
        store.set_trial_number(candidate_id, number)
        report.trials_added += 1


class _FindSearches:
    """The database's exhaustive searches, to read only: an ingest writes nothing outside its
    one transaction (a search it runs is memoised for the ingest alone)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def find_search(self, space: str, schedule: str, aliasing: str,
                    tool_version: str) -> TsSearch | None:
        return self._store.find_search(space, schedule, aliasing, tool_version)

    def record_search(self, search: TsSearch) -> None:
        del search


def check_provenance(store: Store, manifest: BundleManifest) -> dict[str, int]:
    """BundleError unless the bundle is one this database built: its study is here with the
    manifest's space, problem and arch, and every candidate's artifact files are those the
    database recorded when it built them. Returns each genome's candidate id."""
    where = f"bundle of study {manifest.study!r} ({MANIFEST_NAME})"
    refused = "the bundle is refused, nothing was recorded"
    info = store.get_study(manifest.study)
    if info is None:
        names = sorted(s.name for s in store.list_studies())
        shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "") if names else "none"
        raise BundleError(
            f"{where}: study {manifest.study!r} is not in this database (its studies: {shown}); "
            "a bundle is ingested into the database whose `tsopt tune` built it, which "
            f"recorded its artifacts: {refused}")
    for what, theirs, ours in (("space", manifest.space, info.space),
                               ("problem", manifest.problem.key, info.problem_key),
                               ("arch", manifest.arch, info.arch)):
        if theirs != ours:
            raise BundleError(f"{where}: {what} {theirs!r}, but study {manifest.study!r} of "
                              f"this database is of {what} {ours!r}: {refused}")
    ids: dict[str, int] = {}
    for c in manifest.candidates:
        short = f"{c.genome_hash[:12]}..."
        build = store.recorded_build(manifest.study, c.genome_hash)
        if build is None:
            raise BundleError(f"{where}: candidate {short} was never built in study "
                              f"{manifest.study!r} of this database: {refused}")
        if (build.status, build.problem_key, build.arch) != ("ok", manifest.problem.key,
                                                            manifest.arch):
            raise BundleError(
                f"{where}: candidate {short}: this database recorded a build of status "
                f"{build.status!r} for {build.problem_key} / {build.arch}, not a built "
                f"artifact for {manifest.problem.key} / {manifest.arch}: {refused}")
        recorded = build.files
        if recorded is None:  # recorded before revision 0007: the build cache's copy, if kept
            cached = Path(build.artifact_dir) if build.artifact_dir else None
            if cached is None or not cached.is_dir():
                raise BundleError(
                    f"{where}: candidate {short} was built before this database recorded "
                    f"artifact checksums, and its artifact ({build.artifact_dir}) is no longer "
                    f"in the build cache: nothing to check the bundle against; {refused}; "
                    "build the study again with `tsopt tune` and measure the new bundle")
            recorded = artifact_checksums(cached)
        listed = dict(c.files)
        for name in sorted(set(recorded) | set(listed)):
            if recorded.get(name) == listed.get(name):
                continue
            if name not in listed:
                said = f"the bundle lacks it (the build recorded {recorded[name][:12]}...)"
            elif name not in recorded:
                said = "the build recorded no such file"
            else:
                said = (f"the bundle's is {listed[name][:12]}..., the build recorded "
                        f"{recorded[name][:12]}...")
            raise BundleError(f"{where}: {c.artifact}/{name} is not the file this database "
                              f"recorded when it built candidate {short}: {said}; {refused}")
        ids[c.genome_hash] = build.candidate_id
    return ids


def verify_candidates(
    store: Store, manifest: BundleManifest, report: IngestReport,
) -> dict[str, tuple[Verdict, str]]:
    """Verify every genome of the manifest again; BundleError naming the first that does not
    pass. Returns each genome's verdict and the key it is cached under."""
    from tsopt.core.dsl_env import ensure_arch
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import VerdictCache, verdict_cache_key, verify_genome

    where = f"bundle of study {manifest.study!r} ({MANIFEST_NAME})"
    try:
        ensure_arch(manifest.arch)
        space = get_space(manifest.space)
        space.check(manifest.problem)
    except (UserInputError, ProblemError) as exc:
        raise BundleError(f"{where}: {exc}") from None
    if manifest.arch not in space.archs:
        raise BundleError(f"{where}: arch {manifest.arch!r} is not one space {space.name!r} "
                          f"builds for ({', '.join(space.archs)})")
    recorded = store.get_study(manifest.study)
    if recorded is not None:  # judged for the GPU the study builds for (stream-K's waves)
        from tsopt.core.devices import recorded_profile

        space.device = recorded_profile(recorded.config, manifest.arch)
    cache = VerdictCache(lookup=store.find_verdict, searches=_FindSearches(store))
    verdicts: dict[str, tuple[Verdict, str]] = {}
    for candidate in manifest.candidates:
        verdict = verify_genome(candidate.genome, manifest.problem, space=space, cache=cache)
        report.verified += 1
        report.verified_cached += verdict.cached
        if not verdict.valid:
            raise BundleError(
                f"{where}: candidate {candidate.genome_hash[:12]}... does not pass verification "
                f"for {manifest.problem.key}: [{verdict.stage}] {verdict.rule}: "
                f"{(verdict.message or '').splitlines()[0]}; the bundle is refused, nothing "
                "was recorded")
        key = (verdict_cache_key(space, candidate.genome, manifest.problem, verdict.domain)
               if verdict.stage != "dataflow" else f"dataflow:{candidate.genome_hash}")
        verdicts[candidate.genome_hash] = (verdict, key)
    return verdicts


def ingest_results(
    store: Store, manifest: BundleManifest, results: BundleResults,
) -> IngestReport:
    """Verify every genome of ``manifest`` again, then record ``results`` in ``store`` and tell
    the study, all in one transaction (nothing recorded when anything fails)."""
    report = IngestReport(run_id=results.run_id, study=manifest.study)
    ids = check_provenance(store, manifest)
    verdicts = verify_candidates(store, manifest, report)
    with store.atomic():
        _record(store, manifest, results, verdicts, ids, report)
    return report


def _record(
    store: Store, manifest: BundleManifest, results: BundleResults,
    verdicts: dict[str, tuple[Verdict, str]], ids: dict[str, int], report: IngestReport,
) -> None:
    info = store.get_study(manifest.study)
    if info is None:  # check_provenance found it; a guard for a study deleted since
        raise BundleError(f"study {manifest.study!r} is no longer in this database")
    if info.launch != manifest.launch:  # a study measured in another mode refuses the bundle
        raise BundleError(f"bundle measured in launch mode {manifest.launch!r}, but study "
                          f"{manifest.study!r} is measured in {info.launch!r}")
    note_another_gpu(store.measured_devices(manifest.study), results, report)
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
        candidate_id = ids[m.genome_hash]
        info_row = known.get(m.genome_hash)
        trial_number = info_row.trial_number if info_row is not None else None
        verdict, key = verdicts[m.genome_hash]
        store.record_verdict(candidate_id, manifest.space, key, verdict)
        new = store.record_measurement(candidate_id, m, results.run_id)
        report.measurements_new += new
        report.measurements_known += not new
        told.append((candidate_id, trial_number, candidate.genome, m))
    if told:
        tell_study(store, info, told, results.run_id, report)


def note_another_gpu(before: dict[str, int], results: BundleResults,
                     report: IngestReport) -> None:
    """A note when these results come from a GPU the study was not measured on before: its
    ranking would then mix two cards, which `tsopt export` refuses without --measured-on."""
    from tsopt.db.views import named_gpus

    named = list(named_gpus(before))
    now = sorted({m.device for m in results.measurements if m.status == "ok" and m.device}
                 - set(named))
    if named and now:
        report.notes.append(
            f"study {report.study!r} was measured on {', '.join(named)} before; this run "
            f"was measured on {', '.join(now)}. Its candidates now hold measurements of "
            f"{len(named) + len(now)} GPUs, never pooled: the search ranks on one card (the "
            "study's target where it measured it, else the most measured) and plans evolve's "
            "next proposals from that card's figures, and `tsopt export` asks which card "
            "(--measured-on)")


def _print(console: Console, report: IngestReport, bundle: Path) -> None:
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
    console.print(f"verified {report.verified} genomes again ({report.verified_cached} from the "
                  "verdict cache): every one passes", highlight=False)
    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)


def ingest_bundle(bundle: Path, db_url: str, console: Console | None = None) -> int:
    """Record a measured bundle; returns the exit code (0). Bad bundles raise BundleError."""

    from tsopt.reports.existing import open_existing

    console = console or Console()
    bundle = Path(bundle)
    # The artifacts are not needed to record results (a GPU box may send back results only);
    # every one that is there is checked against its checksums.
    manifest = read_manifest(bundle, check_artifacts="present")
    check_listing(bundle, manifest)
    results = read_results(bundle, manifest)
    if results is None:
        raise BundleError(f"{bundle} has not been measured: it has no results.json; run "
                          f"`tsopt measure {bundle}` on a GPU machine first")
    # The database that built the bundle: a missing file is a mistyped --db, never a new one.
    with open_existing(db_url) as store:
        report = ingest_results(store, manifest, results)
    _print(console, report, bundle)
    return 0
