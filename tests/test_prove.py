"""`tsopt prove`: a schedule whose exhaustive TS search a low state bound cuts gets a complete
search, recorded like any other; the verdict, the report and the export's manifest then say
complete, and a schedule still cut says so.

Everything is real: the GEMM and copy spaces, TS's verifier on the host (its skeleton and its
BFS checker), a SQLite database through the Store (and its Alembic migrations), the copy
kernel compiled and built by the DSL for the export. The low bound (``TSOPT_TS_MAX_STATES``)
stands in for TS's 1,000,000: the two-consumer GEMM below needs 10,464 states, the copy
winner 400, so a bound of 2,000 (or 100) cuts them as 1,000,000 cuts a persistent
two-consumer GEMM, in a fraction of a second.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from rich.console import Console  # noqa: E402

from tests.fixtures import FIXTURES  # noqa: E402
from tsopt.app.prove import ProveTarget, prove_command, prove_targets, ship  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.records import TsSearch  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.db.store import Store  # noqa: E402
from tsopt.search.ts_memo import load_memo, write_memo  # noqa: E402
from tsopt.verify.verifier import (  # noqa: E402
    TS_MAX_STATES_ENV,
    VerdictCache,
    judge_for,
    judged_key,
    proof_of,
    search_bound,
    search_version,
    verify_genome,
)

ROOT = Path(__file__).resolve().parents[1]
GEMM_PROBLEM = Problem.of("gemm", "bf16", m=1024, n=1024, k=1024)


@pytest.fixture(scope="module")
def gemm() -> Any:
    space = get_space("gemm")
    space.judge = judge_for(space)
    return space


def _backed(store: Store) -> VerdictCache:
    """The verifier's memo as the driver's workers read the database."""
    return VerdictCache(lookup=store.find_verdict, judged=store, searches=store)


def test_a_cut_search_becomes_complete_after_prove(gemm: Any, monkeypatch: Any,
                                                  tmp_path: Path) -> None:
    monkeypatch.setenv(TS_MAX_STATES_ENV, "2000")
    genome = gemm.genome(consumers=2, stages=2)  # two consumer warpgroups: 10,464 states
    with Store(f"sqlite:///{tmp_path / 'study.db'}") as store:
        cut = verify_genome(genome, GEMM_PROBLEM, space=gemm, cache=_backed(store))
        assert cut.valid and search_bound(cut) == 2000 and "tsopt prove" in (cut.message or "")
        (kept,) = store.searches()
        assert (kept.complete, kept.bounded, kept.states, kept.max_states) == (
            False, 2000, 2000, 2000)

        report = prove_targets([ProveTarget(genome, GEMM_PROBLEM, "two consumers")], 1_000_000,
                               _backed(store), Console(file=open(os.devnull, "w")),  # noqa: SIM115
                               show_progress=False)
        (outcome,) = report.outcomes
        assert outcome.complete and outcome.states == 10_464 and not report.incomplete
        # One search per key: the complete one replaced the cut one.
        (proof,) = store.searches()
        assert (proof.key, proof.complete, proof.bounded, proof.states, proof.max_states,
                proof.domain) == (kept.key, True, None, 10_464, 1_000_000, cut.domain)

        # Under the same low bound, a fresh worker's verdict is now complete, and so is the
        # whole verdict the database kept (it was cut).
        again = verify_genome(genome, GEMM_PROBLEM, space=gemm, cache=_backed(store))
        assert again.valid and again.message is None and search_bound(again) is None
        stored = store.find_judged(judged_key(gemm, genome, GEMM_PROBLEM))
        assert stored is not None and stored.message is None
        proofs = proof_of(genome, GEMM_PROBLEM, gemm, _backed(store))
        assert [(p.domain, p.complete, p.search.states if p.search else None)
                for p in proofs] == [(cut.domain, True, 10_464)]
        # A cut search never replaces the complete one, and a lower bound is served by it.
        store.record_search(kept)
        assert store.searches()[0].complete
    # Without the proof, the same verdict is still cut (nothing else changed it).
    fresh = verify_genome(genome, GEMM_PROBLEM, space=gemm, cache=VerdictCache())
    assert search_bound(fresh) == 2000


def test_a_search_still_cut_says_so(gemm: Any, monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.setenv(TS_MAX_STATES_ENV, "2000")
    genome = gemm.genome(consumers=2, stages=2)
    with Store(f"sqlite:///{tmp_path / 'study.db'}") as store:
        console = Console(record=True, width=200)
        report = prove_targets([ProveTarget(genome, GEMM_PROBLEM, "two consumers")], 5000,
                               _backed(store), console, show_progress=False)
        (outcome,) = report.outcomes
        assert outcome.valid and not outcome.complete and report.incomplete == [outcome]
        assert "two consumers: still cut at 5,000 states, no complete proof" in console.export_text()
        # The deeper cut search replaced the shallower one, and serves a bound up to its own.
        (kept,) = store.searches()
        assert (kept.bounded, kept.states) == (5000, 5000)
        later = verify_genome(genome, GEMM_PROBLEM, space=gemm, cache=_backed(store))
        assert search_bound(later) == 5000


def test_searches_record_supersession_and_json() -> None:
    cut = TsSearch("gemm", "s", "a", "v", bounded=1_000_000, states=1_000_000)
    deeper = TsSearch("gemm", "s", "a", "v", bounded=5_000_000, states=5_000_000)
    complete = TsSearch("gemm", "s", "a", "v", states=2_900_000, max_states=60_000_000)
    assert complete.supersedes(cut) and deeper.supersedes(cut) and complete.supersedes(deeper)
    assert not cut.supersedes(complete) and not cut.supersedes(cut)
    assert cut.settles(1_000_000) and not cut.settles(1_000_001) and complete.settles(10**12)
    assert TsSearch.from_dict(complete.to_dict()) == complete and complete.to_dict()["complete"]
    with pytest.raises(ValueError, match="contradicts"):
        TsSearch.from_dict({**cut.to_dict(), "complete": True})


def test_ship_keeps_complete_searches_of_the_current_version(gemm: Any, tmp_path: Path) -> None:
    version = search_version()
    complete = TsSearch("gemm", "s1", "a", version, states=10, max_states=100)
    cut = TsSearch("gemm", "s2", "a", version, bounded=100, states=100)
    stale = TsSearch("gemm", "s3", "a", "0" * 16, states=10)
    results = tmp_path / "results.json"
    write_memo([complete, cut, stale], results)
    proofs = tmp_path / "ts_proofs.json"
    assert ship([results], proofs) == (1, 1)
    assert load_memo(proofs) == [complete]


def test_migration_0009_backfills_complete(tmp_path: Path) -> None:
    """A database made before searches said whether they were complete: upgraded in place, a
    cut row stays cut and a complete one says complete."""
    from alembic import command
    from sqlalchemy import create_engine, text

    from tsopt.db.migrate import alembic_config

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0005")
        for schedule, bounded in (("cut", 1_000_000), ("done", None)):
            connection.execute(text(
                "INSERT INTO tsopt_ts_search (space, schedule, aliasing, tool_version, error, "
                "bounded, seconds, created_at) VALUES ('gemm', :s, 'a', 'v', NULL, :b, 1.0, "
                "'2026-12-01 00:00:00')"), {"s": schedule, "b": bounded})
    engine.dispose()
    with Store(url) as store:
        found = {s.schedule: s for s in store.searches()}
    assert (found["cut"].complete, found["cut"].states) == (False, None)
    assert (found["done"].complete, found["done"].domain) == (True, 0)


# -- the export's manifest, with a real copy kernel built --------------------------------

COPY_EVIDENCE = FIXTURES / "copy_h200" / "copy-4096-fenced"  # cut from bench/copy_h200's
STUDY = "copy-fp16-4096x4096-sm_90a"


def test_the_export_manifest_carries_the_proof(monkeypatch: Any, tmp_path: Path) -> None:
    from tsopt.app.export import export_command
    from tsopt.core.genome import Genome
    from tsopt.core.records import Measurement
    from tsopt.reports.data import study_document
    from tsopt.search.pipeline import CandidatePipeline

    monkeypatch.setenv(TS_MAX_STATES_ENV, "100")  # the copy winner's search needs 400 states
    # The shipped proofs hold that search complete already (bench/proofs): start without them.
    monkeypatch.setenv("TSOPT_TS_MEMO", "none")
    manifest = json.loads((COPY_EVIDENCE / "manifest.json").read_text())
    results = json.loads((COPY_EVIDENCE / "results.json").read_text())
    doc = next(c for c in manifest["candidates"] if c["genome_hash"].startswith("d4032827a38d"))
    measured = next(m for m in results["measurements"] if m["genome_hash"] == doc["genome_hash"])
    genome, problem = Genome.from_dict(doc["genome"]), Problem.from_dict(manifest["problem"])
    url = f"sqlite:///{tmp_path / 'tsopt.db'}"
    with Store(url) as store:
        store.create_or_get_study(STUDY, "copy", problem, "sm_90a", "tpe", {})
        pipeline = CandidatePipeline(store, get_space("copy"), problem, "sm_90a", STUDY,
                                     tmp_path / "artifacts")
        candidate = store.add_candidate(STUDY, genome, "suggest")
        verdict = pipeline.verify(candidate, genome)
        assert verdict.valid and search_bound(verdict) == 100
        assert pipeline.build(candidate, genome).ok
        assert store.record_measurement(candidate, Measurement.from_dict(measured), "h200-fenced")
        assert study_document(store, STUDY)["bounded"]["count"] == 1

    def export(name: str) -> tuple[dict[str, Any], str]:
        console = Console(record=True, width=400)
        assert export_command([STUDY], tmp_path / name, 1, False, url, console) == 0
        return json.loads((tmp_path / name / "manifest.json").read_text()), console.export_text()

    before, said = export("cut")
    (search,) = before["ts_proof"]["searches"]
    assert before["ts_proof"]["complete"] is False
    assert (search["domain"], search["states"], search["bounded"], search["complete"]) == (
        before["verdict"]["domain"], 100, 100, False)
    lines = [line for line in said.splitlines() if line.startswith("no complete TS proof")]
    assert len(lines) == 1 and f"tsopt prove --db {url} --study {STUDY} --top 1" in lines[0]

    # A bound still too low: the study's winner stays cut, and the command says so (exit 1).
    console = Console(record=True, width=400)
    assert prove_command("study", url, STUDY, 1, None, None, 200, None, (), console) == 1
    assert "still cut at 200 states" in console.export_text()
    assert export("still-cut")[0]["ts_proof"]["complete"] is False

    console = Console(record=True, width=400)
    assert prove_command("study", url, STUDY, 1, None, None, 10_000, None, (), console) == 0
    assert "1 of 1 valid genome(s) have a complete proof" in console.export_text()
    after, said = export("complete")
    (search,) = after["ts_proof"]["searches"]
    assert after["ts_proof"]["complete"] is True
    assert (search["states"], search["bounded"], search["max_states"], search["complete"]) == (
        400, None, 10_000, True)
    assert "no complete TS proof" not in said
    assert after["verdict"]["message"] is None  # the export's own verdict: complete
    with Store(url) as store:  # the report no longer counts the winner cut
        assert study_document(store, STUDY)["bounded"]["count"] == 0
    # An export's kernels are proven from its manifest alone (no database): searched again.
    console = Console(record=True, width=400)
    assert prove_command("export", None, None, 1, tmp_path / "cut", None, 10_000,
                         tmp_path / "export-proofs.json", (), console) == 0
    assert "complete (1 searches, 400 states)" in console.export_text()
    assert [s.states for s in load_memo(tmp_path / "export-proofs.json")] == [400]


def _tsopt(*args: str, env: dict[str, str] | None = None) -> Any:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "tsopt", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT),
                                         **(env or {})}, timeout=600, check=False)


def test_the_cli_proves_a_genome_and_verify_then_says_complete(gemm: Any, tmp_path: Path) -> None:
    genome = tmp_path / "two_consumers.json"
    genome.write_text(gemm.genome(consumers=2, stages=2).to_json())
    url = f"sqlite:///{tmp_path / 'proofs.db'}"
    low = {TS_MAX_STATES_ENV: "2000"}
    spec = "gemm:bf16:1024x1024x1024"
    cut = _tsopt("verify", str(genome), "--problem", spec, "--db", url, env=low)
    assert cut.returncode == 0 and "stopped at its bound of 2,000" in cut.stdout, cut.stderr
    proved = _tsopt("prove", "--genome", str(genome), "--problem", spec, "--db", url,
                    "--max-states", "1000000", "--out", str(tmp_path / "ran.json"), env=low)
    assert proved.returncode == 0, proved.stderr
    assert "complete (1 searches, 10,464 states)" in proved.stdout
    assert "1 of 1 valid genome(s) have a complete proof" in proved.stdout
    complete = _tsopt("verify", str(genome), "--problem", spec, "--db", url, env=low)
    assert complete.returncode == 0 and "note" not in complete.stdout, complete.stdout
    (ran,) = load_memo(tmp_path / "ran.json")
    assert ran.complete and ran.states == 10_464
    # Bad input: one line naming the bad value, exit 2, nothing recorded.
    for args, named in ((["--max-states", "0"], "--max-states 0"),
                        (["--study", "x"], "--study needs --db"),
                        (["--ship", str(tmp_path / "missing.json")], "missing.json"),
                        (["--problem", spec], "goes with --genome")):
        bad = _tsopt("prove", *args)
        lines = [line for line in bad.stderr.splitlines() if line.strip()]
        assert bad.returncode == 2 and len(lines) == 1 and named in lines[0], bad.stderr


def test_a_new_database_starts_with_the_shipped_proofs(gemm: Any, monkeypatch: Any,
                                                      tmp_path: Path) -> None:
    """The shipped memo's cut search and the shipped proofs' complete one of the same key: a
    study's new database holds the complete one, and a cut verdict read from it is complete."""
    from tsopt.search import ts_memo

    monkeypatch.setenv(TS_MAX_STATES_ENV, "2000")
    monkeypatch.delenv(ts_memo.MEMO_ENV, raising=False)
    genome = gemm.genome(consumers=2, stages=2)
    ran = VerdictCache()
    verify_genome(genome, GEMM_PROBLEM, space=gemm, cache=ran)
    (cut,) = ran.take_searches()
    with pytest.MonkeyPatch.context() as deeper:
        deeper.setenv(TS_MAX_STATES_ENV, "1000000")
        verify_genome(genome, GEMM_PROBLEM, space=gemm, cache=ran)
    (complete,) = ran.take_searches()
    assert (cut.key, cut.complete, complete.complete) == (complete.key, False, True)
    write_memo([cut], tmp_path / "ts_searches.json")
    write_memo([complete], tmp_path / "ts_proofs.json")
    monkeypatch.setattr(ts_memo, "SHIPPED", tmp_path / "ts_searches.json")
    monkeypatch.setattr(ts_memo, "PROOFS", tmp_path / "ts_proofs.json")
    with Store(f"sqlite:///{tmp_path / 'new.db'}") as store:
        assert ts_memo.seed_store(store, gemm) == 1
        assert [s.complete for s in store.searches()] == [True]
        reader = _backed(store)
        verdict = verify_genome(genome, GEMM_PROBLEM, space=gemm, cache=reader)
        assert verdict.valid and search_bound(verdict) is None
        assert (reader.bfs_runs, reader.bfs_hits) == (0, 1)  # read back, not searched
