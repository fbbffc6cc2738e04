"""Bundles: writing, reading and validating manifests and results; measure_bundle's bookkeeping.

Artifacts here hold a placeholder library (the format never loads it). The bookkeeping tests of
``measure_bundle`` (resume, skip, limit, atomic writes) replace the measurer (the GPU side) with a
*simulated device* (``SimulatedDevice``): this machine has no GPU, and what is under test is
which candidates get measured and what lands in results.json; no figure from it is reported
anywhere. The end-to-end test at the bottom runs real measuring worker processes on the
simulated device of tests/test_watchdog.py.
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.built_here import timed
from tests.test_watchdog import use_simulated_runner
from tsopt.app.measure import measure_bundle
from tsopt.cli import app
from tsopt.core.artifact import ArtifactManifest, TensorDesc
from tsopt.core.bundle import (
    MANIFEST_NAME,
    RESULTS_NAME,
    Baseline,
    BundleEntry,
    BundleError,
    BundleResults,
    expected_rate,
    read_manifest,
    read_results,
    with_checksum,
    write_bundle,
    write_results,
)
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import Measurement
from tsopt.workers import bundle_measure
from tsopt.workers.measurer import Measurer, Probe

PROBLEM = Problem.of("copy", "fp16", rows=256, cols=512)


def genome(stages: int) -> Genome:
    return Genome.make(
        "copy",
        schedule={"load": [("acquire", "loop"), ("tma_load", "loop"), ("commit", "loop")]},
        numeric={"stages": stages, "box_cols": 64},
    )


def make_artifact(root: Path, g: Genome, problem: Problem = PROBLEM, arch: str = "sm_90a") -> Path:
    directory = root / "built" / g.hash
    directory.mkdir(parents=True)
    (directory / "libkernel.so").write_bytes(b"placeholder library, never loaded here")
    shape = (problem.sizes.get("rows", 1), problem.sizes.get("cols", 1))
    tensors = (TensorDesc("src", "input", shape, problem.dtype),
               TensorDesc("dst", "output", shape, problem.dtype))
    ArtifactManifest(g.hash, g.space, problem.to_dict(), arch, tensors).write(directory)
    return directory


def make_bundle(root: Path, n: int = 3,
                libraries: list[str] | None = None) -> tuple[Path, list[Genome]]:
    """A bundle of ``n`` candidates; ``libraries``: the text of each one's library."""
    genomes = [genome(s) for s in range(2, 2 + n)]
    bundle = root / "bundle"
    artifacts = [make_artifact(root, g) for g in genomes]
    for artifact, text in zip(artifacts, libraries or [], strict=False):
        (artifact / "libkernel.so").write_text(text)
    write_bundle(bundle, study="copy-study", space="copy", problem=PROBLEM, arch="sm_90a",
                 candidates=[BundleEntry(g, a, origin="enumerate")
                             for g, a in zip(genomes, artifacts, strict=True)])
    return bundle, genomes


def edit_manifest(bundle: Path, change: Any) -> None:
    doc = json.loads((bundle / MANIFEST_NAME).read_text())
    change(doc)
    (bundle / MANIFEST_NAME).write_text(json.dumps(doc))


# -- writing and reading -------------------------------------------------------------------
def test_write_then_read_round_trips_and_copies_artifacts(tmp_path: Path) -> None:
    bundle, genomes = make_bundle(tmp_path)
    manifest = read_manifest(bundle)
    uuid.UUID(manifest.bundle_id)
    assert (manifest.study, manifest.space, manifest.problem, manifest.arch) == (
        "copy-study", "copy", PROBLEM, "sm_90a")
    assert [c.genome for c in manifest.candidates] == genomes
    assert all(c.origin == "enumerate" for c in manifest.candidates)
    for c in manifest.candidates:
        assert c.artifact == f"artifacts/{c.genome_hash}"
        assert (bundle / c.artifact / "libkernel.so").is_file()
    assert not list(bundle.rglob("*.tmp"))


def test_writing_twice_needs_append_and_append_keeps_the_bundle_id(tmp_path: Path) -> None:
    bundle, _ = make_bundle(tmp_path, n=1)
    first = read_manifest(bundle)
    extra = genome(9)
    entry = [(extra, make_artifact(tmp_path, extra))]
    with pytest.raises(BundleError, match="already holds a bundle"):
        write_bundle(bundle, study="copy-study", space="copy", problem=PROBLEM, arch="sm_90a",
                     candidates=entry)
    grown = write_bundle(bundle, study="copy-study", space="copy", problem=PROBLEM,
                         arch="sm_90a", candidates=entry, append=True)
    assert grown.bundle_id == first.bundle_id and len(grown.candidates) == 2
    other = Problem.of("copy", "fp16", rows=128, cols=128)
    with pytest.raises(BundleError, match="cannot append copy-study/copy/copy-fp16-128x128"):
        write_bundle(bundle, study="copy-study", space="copy", problem=other, arch="sm_90a",
                     candidates=[], append=True)


def test_an_artifact_built_for_something_else_is_refused(tmp_path: Path) -> None:
    g = genome(2)
    other = Problem.of("copy", "fp16", rows=128, cols=128)
    with pytest.raises(BundleError, match="problem copy-fp16-128x128.*mismatched artifact"):
        write_bundle(tmp_path / "b", study="s", space="copy", problem=PROBLEM, arch="sm_90a",
                     candidates=[(g, make_artifact(tmp_path, g, problem=other))])
    g3 = genome(3)
    with pytest.raises(BundleError, match="arch sm_100a"):
        write_bundle(tmp_path / "c", study="s", space="copy", problem=PROBLEM, arch="sm_90a",
                     candidates=[(g3, make_artifact(tmp_path, g3, arch="sm_100a"))])


# -- manifest validation -------------------------------------------------------------------
def test_missing_directory_or_manifest(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="does not exist"):
        read_manifest(tmp_path / "nowhere")
    with pytest.raises(BundleError, match="is not a tsopt bundle: it has no manifest.json"):
        read_manifest(tmp_path)


def test_corrupted_manifest(tmp_path: Path) -> None:
    bundle, _ = make_bundle(tmp_path, n=1)
    text = (bundle / MANIFEST_NAME).read_text()
    (bundle / MANIFEST_NAME).write_text(text[: len(text) // 2])
    with pytest.raises(BundleError, match=r"manifest.json is corrupted: not valid JSON \(.* line"):
        read_manifest(bundle)


@pytest.mark.parametrize("doc, message", [
    ([1, 2, 3], "a JSON list, not an object"),
    ({"name": "some-package", "version": "1.0"}, "its format is None.*a foreign file"),
    ({"format": "tsopt-bundle-results", "version": 1}, "is not a tsopt-bundle file"),
])
def test_foreign_manifest(tmp_path: Path, doc: Any, message: str) -> None:
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(BundleError, match=message):
        read_manifest(tmp_path)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(version=3), "version 3 is not supported"),
    (lambda d: d.update(version=1), "version 1 was written by an older tsopt, without the "
                                    "checksums"),
    (lambda d: d.update(bundle_id="bundle-7"), "bundle_id 'bundle-7' is not a UUID"),
    (lambda d: d.pop("arch"), "missing field 'arch'"),
    (lambda d: d.update(extra=1), r"unknown field\(s\) \['extra'\]"),
    (lambda d: d.update(created_at="yesterday"), "created_at 'yesterday'"),
    (lambda d: d["problem"].update(dtype="fp8"), "bad problem: unknown dtype 'fp8'"),
    (lambda d: d.update(candidates={}), "field 'candidates' has the wrong type"),
    (lambda d: d["candidates"][0].update(genome_hash="ab" * 32),
     r"candidates\[0\]: artifact 'artifacts/.*' must be artifacts/abab"),
    (lambda d: d["candidates"][0].update(artifact="../../etc"), "must be artifacts/"),
    (lambda d: d["candidates"][0]["genome"]["numeric"].update(stages=99),
     "does not match its genome, which hashes to"),
    (lambda d: d["candidates"][0].update(genome_hash="xyz"), "not a 64-digit hex sha256"),
    (lambda d: d["candidates"].append(d["candidates"][0]), "is listed twice"),
    (lambda d: d["candidates"][0]["genome"].update(space="gemm"),
     "does not match its genome|of space 'gemm' in a bundle of space 'copy'"),
])
def test_mismatched_or_malformed_manifest_names_the_problem(
    tmp_path: Path, change: Any, message: str,
) -> None:
    bundle, _ = make_bundle(tmp_path, n=2)
    edit_manifest(bundle, change)
    with pytest.raises(BundleError, match=message):
        read_manifest(bundle)


def test_a_missing_or_swapped_artifact_is_named(tmp_path: Path) -> None:
    bundle, genomes = make_bundle(tmp_path, n=2)
    first, second = (bundle / "artifacts" / g.hash for g in genomes)
    (first / "artifact.json").rename(tmp_path / "saved.json")
    with pytest.raises(BundleError, match="no artifact manifest"):
        read_manifest(bundle)
    assert read_manifest(bundle, check_artifacts=False).candidates  # results need no artifacts
    (second / "artifact.json").replace(first / "artifact.json")
    with pytest.raises(BundleError, match="mismatched artifact"):
        read_manifest(bundle)


# -- results -------------------------------------------------------------------------------
def measurement(g: Genome, status: str = "ok", median_us: float | None = 30.0) -> Measurement:
    if status == "ok" and median_us is not None:  # every figure a measuring worker writes
        return timed(g, PROBLEM, median_us, p10_us=median_us, p90_us=median_us)
    timed_ = status == "ok"
    return Measurement(
        genome_hash=g.hash, problem_key=PROBLEM.key, status=status,  # type: ignore[arg-type]
        median_us=median_us if timed_ else None, p10_us=median_us if timed_ else None,
        p90_us=median_us if timed_ else None, runs=50 if timed_ else 0,
        rate_unit="GB/s", device="simulated device", error=None if timed_ else status,
    )


def results_for(bundle: Path, ms: list[Measurement]) -> BundleResults:
    manifest = read_manifest(bundle, check_artifacts=False)
    baseline = Baseline(PROBLEM.key, "torch.copy_", "simulated device", 21.0, 20.5, 22.0, 50)
    files = {c.genome_hash: dict(c.files) for c in manifest.candidates}
    return BundleResults(bundle_id=manifest.bundle_id, run_id=str(uuid.uuid4()),
                         device="simulated device", baselines=[baseline], measurements=ms,
                         measured_files={m.genome_hash: files[m.genome_hash] for m in ms})


def test_results_round_trip_atomically(tmp_path: Path) -> None:
    bundle, genomes = make_bundle(tmp_path)
    assert read_results(bundle) is None
    written = results_for(bundle, [measurement(genomes[0]), measurement(genomes[1], "hang")])
    write_results(bundle, written)
    back = read_results(bundle, read_manifest(bundle))
    assert back is not None
    assert back.measurements == written.measurements and back.run_id == written.run_id
    assert back.baselines == written.baselines and back.updated_at
    assert not list(bundle.glob(".*tmp"))


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(bundle_id=str(uuid.uuid4())), "belongs to bundle .* mismatched results"),
    (lambda d: d.update(format="tsopt-bundle"), "not a tsopt-bundle-results file"),
    (lambda d: d.update(run_id="7"), "run_id '7' is not a UUID"),
    (lambda d: d["measurements"][0].update(status="fast"), "unknown measurement status 'fast'"),
    (lambda d: d["measurements"][0].update(genome_hash="cd" * 32),
     "genome cdcdcdcdcdcd..., which the manifest does not list"),
    (lambda d: d["measurements"][0].update(problem_key="copy-fp16-1x1"),
     "for problem 'copy-fp16-1x1'"),
    (lambda d: d["baselines"][0].update(median_us=0), "median_us must be positive"),
    (lambda d: d.update(device=3), "field 'device' has the wrong type"),
])
def test_bad_results_name_the_problem(tmp_path: Path, change: Any, message: str) -> None:
    bundle, genomes = make_bundle(tmp_path)
    write_results(bundle, results_for(bundle, [measurement(genomes[0])]))
    doc = json.loads((bundle / RESULTS_NAME).read_text())
    change(doc)
    (bundle / RESULTS_NAME).write_text(json.dumps(doc))
    with pytest.raises(BundleError, match=message):
        read_results(bundle, read_manifest(bundle))


# -- measure_bundle bookkeeping, on a simulated device --------------------------------------
class SimulatedDevice(Measurer):
    """Stands in for the GPU side of measure_bundle; every figure it returns is made up."""

    isolation = "simulated"

    def __init__(self, statuses: dict[str, str] | None = None, stop_after: int | None = None):
        super().__init__()
        self.statuses = statuses or {}
        self.stop_after = stop_after
        self.measured: list[str] = []
        self.probe_count = 0
        self.opened: list[dict[str, Any]] = []

    def open(self, isolation: str, runs: int, warmup: int, checks: int, gpu: int | None,
             **options: Any) -> SimulatedDevice:
        """Replaces bundle_measure.open_measurer: the same device, whatever the options."""
        self.opened.append({"isolation": isolation, "runs": runs, **options})
        self.runs, self.warmup, self.checks = runs, warmup, checks
        self.launch = options.get("launch", self.launch)
        return self

    def probe(self, problem: Problem) -> Probe:
        if problem.key not in self.probes:
            self.probe_count += 1
            base = Baseline(problem.key, "torch.copy_", "simulated device", 21.0, 20.0, 23.0,
                            self.runs, rate=expected_rate(problem, 21.0)[0], rate_unit="GB/s")
            self._record_baseline(problem.key, Probe(base, {
                "device": "simulated device", "driver": "none", "cuda": "none", "torch": "none"}))
        return self.probes[problem.key]

    def _measure(self, artifact_dir: Path, genome_hash: str, problem: Problem) -> Measurement:
        if self.stop_after is not None and len(self.measured) >= self.stop_after:
            raise KeyboardInterrupt  # the operator stops the run part-way
        assert (artifact_dir / "artifact.json").is_file()
        self.probe(problem)
        self.measured.append(genome_hash)
        status = self.statuses.get(genome_hash, "ok")
        timed = status == "ok"
        runs = self.runs
        return Measurement(genome_hash, problem.key, status,  # type: ignore[arg-type]
                           median_us=25.0 if timed else None, runs=runs if timed else 0,
                           rate=expected_rate(problem, 25.0)[0] if timed else None,
                           rate_unit="GB/s",
                           p10_us=24.0 if timed else None, p90_us=26.0 if timed else None,
                           ratio=21.0 / 25.0 if timed else None, rel_err=0.0 if timed else None,
                           baseline_median_us=21.0 if timed else None,
                           baseline_rate=expected_rate(problem, 21.0)[0] if timed else None,
                           baseline_name="torch.copy_", device="simulated device",
                           error=None if timed else f"simulated {status}")


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> SimulatedDevice:
    sim = SimulatedDevice()
    monkeypatch.setattr(bundle_measure, "open_measurer", sim.open)
    return sim


def quiet() -> Console:
    return Console(quiet=True)


def test_measure_bundle_records_every_status_and_resumes(
    tmp_path: Path, device: SimulatedDevice,
) -> None:
    bundle, genomes = make_bundle(tmp_path, n=4)
    device.statuses = {genomes[1].hash: "hang", genomes[2].hash: "crash"}
    device.stop_after = 2
    with pytest.raises(KeyboardInterrupt):
        measure_bundle(bundle, console=quiet())
    partial = read_results(bundle)
    assert partial is not None  # written after each candidate, so the interruption lost nothing
    assert [m.status for m in partial.measurements] == ["ok", "hang"]

    device.stop_after = None
    assert measure_bundle(bundle, console=quiet()) == 0
    done = read_results(bundle)
    assert done is not None and done.run_id == partial.run_id  # the same run, resumed
    assert [m.genome_hash for m in done.measurements] == [g.hash for g in genomes]
    assert [m.status for m in done.measurements] == ["ok", "hang", "crash", "ok"]
    assert device.measured == [g.hash for g in genomes]  # nobody measured twice
    assert len(done.baselines) == 2
    assert done.settings == {"runs": 50, "warmup": 10, "checks": 2, "isolation": "worker",
                             "baseline": "once", "launch": "graph"}
    assert [o["isolation"] for o in device.opened] == ["worker", "worker"]  # the default

    probes = device.probe_count
    assert measure_bundle(bundle, console=quiet()) == 0  # nothing left
    assert device.probe_count == probes


def test_measure_bundle_limit_takes_the_first_candidates(
    tmp_path: Path, device: SimulatedDevice,
) -> None:
    bundle, genomes = make_bundle(tmp_path, n=3)
    assert measure_bundle(bundle, limit=2, runs=20, warmup=0, console=quiet()) == 0
    assert device.measured == [genomes[0].hash, genomes[1].hash]


def test_measure_bundle_without_a_console_prints_plain_lines(
    tmp_path: Path, device: SimulatedDevice, capsys: pytest.CaptureFixture[str],
) -> None:
    """The runner's ``--bundle`` (no rich on the measuring side): the same run, plain text."""
    bundle, genomes = make_bundle(tmp_path, n=2)
    device.statuses = {genomes[1].hash: "crash"}
    assert bundle_measure.measure_bundle(bundle) == 0
    out = capsys.readouterr().out
    assert "2 candidates, 0 of the 2 selected already measured" in out
    assert "simulated device: torch.copy_ 21.00 us (25.0 GB/s); watchdog limits: check" in out
    assert f"ok           {genomes[0].hash[:12]}      25.00 us       21.0 GB/s" in out
    assert f"crash        {genomes[1].hash[:12]}  simulated crash" in out
    assert "statuses: crash 1, ok 1" in out and "fastest correct candidates on" in out
    assert "results written to" in out and "[/" not in out and "[dim]" not in out  # no markup
    results = read_results(bundle)
    assert results is not None and [m.status for m in results.measurements] == ["ok", "crash"]


def test_measure_bundle_refuses_bad_options(tmp_path: Path) -> None:
    bundle, _ = make_bundle(tmp_path, n=1)
    for kwargs, message in [({"runs": 19}, "--runs 19"), ({"warmup": -1}, "--warmup -1"),
                            ({"limit": 0}, "--limit 0"), ({"isolation": "thread"}, "'thread'"),
                            ({"max_candidates": 0}, "max_candidates=0"),
                            ({"baseline": "never"}, "'never'")]:
        with pytest.raises(UserInputError, match=message):
            measure_bundle(bundle, console=quiet(), **kwargs)


# -- launch modes -------------------------------------------------------------------------
def test_a_bundle_says_its_studys_launch_mode_and_is_measured_in_it(
    tmp_path: Path, device: SimulatedDevice,
) -> None:
    bundle, genomes = make_bundle(tmp_path, n=2)
    assert read_manifest(bundle).launch == "graph"  # a new study's default
    assert json.loads((bundle / MANIFEST_NAME).read_text())["launch"] == "graph"
    assert measure_bundle(bundle, console=quiet()) == 0
    assert device.opened[0]["launch"] == "graph"
    done = read_results(bundle)
    assert done is not None and done.settings["launch"] == "graph"
    assert [m.launch for m in done.measurements] == ["graph", "graph"]


def test_a_bundle_from_before_the_modes_reads_and_measures_as_isolated(
    tmp_path: Path, device: SimulatedDevice,
) -> None:
    bundle, _genomes = make_bundle(tmp_path, n=1)

    def before_modes(doc: dict[str, Any]) -> None:
        del doc["launch"]
        doc.update(with_checksum({k: v for k, v in doc.items() if k != "sha256"}))
    edit_manifest(bundle, before_modes)
    assert read_manifest(bundle).launch == "isolated"
    assert measure_bundle(bundle, console=quiet()) == 0
    done = read_results(bundle)
    assert done is not None and [m.launch for m in done.measurements] == ["isolated"]
    # Results written before the modes (no launch on their measurements) read as isolated too.
    doc = done.to_dict()
    for m in doc["measurements"]:
        del m["launch"]
    (bundle / RESULTS_NAME).write_text(json.dumps(with_checksum(
        {k: v for k, v in doc.items() if k != "sha256"})))
    again = read_results(bundle)
    assert again is not None and [m.launch for m in again.measurements] == ["isolated"]


def test_another_launch_mode_than_the_bundles_is_refused_before_anything_is_measured(
    tmp_path: Path, device: SimulatedDevice,
) -> None:
    bundle, _genomes = make_bundle(tmp_path, n=1)
    with pytest.raises(UserInputError, match="--launch eager: bundle .* is of study "
                                             "'copy-study', which measures in launch mode "
                                             "'graph'; measure it with --launch graph"):
        measure_bundle(bundle, console=quiet(), launch="eager")
    with pytest.raises(UserInputError, match="--launch 'replay': expected one of graph, eager"):
        measure_bundle(bundle, console=quiet(), launch="replay")
    assert device.measured == [] and not (bundle / RESULTS_NAME).exists()
    result = CliRunner().invoke(app, ["measure", str(bundle), "--launch", "eager"])
    assert result.exit_code == 2 and "measures in launch mode 'graph'" in result.output
    assert measure_bundle(bundle, console=quiet(), launch="graph") == 0


def test_results_timed_in_another_mode_than_the_bundles_are_refused(
    tmp_path: Path, device: SimulatedDevice,
) -> None:
    bundle, _genomes = make_bundle(tmp_path, n=1)
    assert measure_bundle(bundle, console=quiet()) == 0
    doc = json.loads((bundle / RESULTS_NAME).read_text())
    doc["measurements"][0]["launch"] = "eager"
    (bundle / RESULTS_NAME).write_text(json.dumps(with_checksum(
        {k: v for k, v in doc.items() if k != "sha256"})))
    with pytest.raises(BundleError, match="was timed in launch mode 'eager'; the bundle's "
                                          "study measures in 'graph'"):
        read_results(bundle, read_manifest(bundle))


def test_appending_to_a_bundle_in_another_launch_mode_is_refused(tmp_path: Path) -> None:
    bundle, genomes = make_bundle(tmp_path, n=1)
    artifact = make_artifact(tmp_path / "more", genome(9))
    with pytest.raises(BundleError, match="graph, cannot append .*eager"):
        write_bundle(bundle, study="copy-study", space="copy", problem=PROBLEM, arch="sm_90a",
                     candidates=[BundleEntry(genome(9), artifact)], append=True, launch="eager")
    assert [c.genome_hash for c in read_manifest(bundle).candidates] == [genomes[0].hash]


def test_cli_measure_gives_exit_2_and_one_line_for_a_corrupted_manifest(tmp_path: Path) -> None:
    bundle, _ = make_bundle(tmp_path, n=1)
    (bundle / MANIFEST_NAME).write_text('{"format": "tsopt-bundle", ')
    result = CliRunner().invoke(app, ["measure", str(bundle)])
    assert result.exit_code == 2
    assert "manifest.json is corrupted: not valid JSON" in result.output
    (bundle / MANIFEST_NAME).write_text('{"format": "zip"}')
    result = CliRunner().invoke(app, ["measure", str(bundle)])
    assert result.exit_code == 2 and "a foreign file" in result.output


def test_measure_bundle_in_simulated_measuring_workers_end_to_end(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """Real worker processes running the real runner on the SIMULATED DEVICE of
    tests/test_watchdog.py (CPU tensors, Python kernels): a hang in the middle of a bundle."""
    use_simulated_runner(monkeypatch, tmp_path)
    bundle, genomes = make_bundle(tmp_path, n=4, libraries=[
        f"simulated: {behaviour}\n" for behaviour in ["copy", "hang", "wrong", "copy"]])
    out = io.StringIO()
    code = measure_bundle(bundle, runs=20, warmup=3, console=Console(file=out, width=250))
    text = out.getvalue()
    assert code == 0, text
    results = read_results(bundle, read_manifest(bundle))
    assert results is not None
    assert [m.status for m in results.measurements] == ["ok", "hang", "wrong", "ok"]
    assert all(m.device == "simulated device" for m in results.measurements)
    assert results.settings["isolation"] == "worker" and results.settings["baseline"] == "once"
    # The session's first baseline for ingest; every timing kept: worker 1's, worker 2's (after
    # the hang) and the one at the end.
    assert len(results.baselines) == 1 and len(results.baseline_timings) == 3
    # Each correct candidate's ratio is its own: the vendor alternated with it in paired rounds.
    assert [m.baseline_median_us is not None and m.rounds > 0
            for m in results.measurements] == [True, False, False, True]
    assert results.baseline_timings[0] == results.baselines[0]
    assert "was lost to candidate" in text and "the next candidate gets a new worker" in text
    assert "measured 4 candidates in" in text
    assert "2 worker processes started (1 replaced after a failure" in text
    assert "wall time per candidate: median" in text
