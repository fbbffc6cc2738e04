"""``tsopt.search.efficiency``: the search-efficiency figure from recorded studies.

Real SQLite databases written through ``tsopt.db.store.Store`` (studies, candidates, verdicts,
builds, measurements), and JSON dumps of them, then the analysis on them. The measurements are
MADE-UP TEST DATA (constructed ``Measurement`` records with chosen times, as in
tests/test_db.py), not timings of anything: they only pin down the counting arithmetic. No GPU,
no DSL compile.
"""

from __future__ import annotations

import itertools
import json
import lzma
import statistics
import time
from pathlib import Path

import pytest

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import BuildResult, Measurement, Verdict
from tsopt.db.store import Store
from tsopt.search import efficiency as se

PROBLEM = Problem.of("copy", "fp16", rows=4096, cols=4096)


def genome(i: int) -> Genome:
    """A distinct copy genome per ``i`` (only its hash matters here)."""
    return Genome.make(
        "copy",
        schedule={
            "load": [("acquire", "loop"), ("tma_load", "loop"), ("commit", "loop")],
            "store": [("wait", "loop"), ("tma_store", "loop"), ("release", "loop")],
        },
        numeric={"stages": 2 + i % 5, "box_cols": 64 * (1 + i // 5), "load_warp": 0,
                 "store_warps": 1},
    )


def fake_measurement(g: Genome, status: str, median_us: float | None = None) -> Measurement:
    """MADE-UP TEST DATA: a constructed measurement record, not a timing."""
    return Measurement(genome_hash=g.hash, problem_key=PROBLEM.key, status=status,  # type: ignore[arg-type]
                       median_us=median_us, runs=50 if median_us else 0, device="test-device")


class Recorder:
    """Records one study through the Store API, the way the driver does."""

    def __init__(self, store: Store, study: str, sampler: str, seed: int) -> None:
        self.store, self.study = store, study
        store.create_or_get_study(study, "copy", PROBLEM, "sm_90a", sampler,
                                  {"trials": 100, "seed": seed, "knobs": []})
        self.next = 0

    def propose(self) -> tuple[int, Genome]:
        g = genome(self.next + 1000 * len(self.study))
        cid = self.store.add_candidate(self.study, g, "suggest", trial_number=self.next)
        self.next += 1
        return cid, g

    def reject(self) -> None:
        cid, g = self.propose()
        self.store.record_verdict(cid, "copy", f"{self.study}-{cid}", Verdict.reject(
            g.hash, "ts", "ts.missing_release", "made-up rejection"))

    def fail_build(self) -> None:
        cid, g = self.propose()
        self.store.record_verdict(cid, "copy", f"{self.study}-{cid}", Verdict.ok(g.hash))
        self.store.record_build(cid, BuildResult(g.hash, PROBLEM.key, "sm_90a", "error",
                                                 cache_key=f"{self.study}-{cid}",
                                                 error="made-up build failure"))

    def build(self) -> tuple[int, Genome]:
        cid, g = self.propose()
        self.store.record_verdict(cid, "copy", f"{self.study}-{cid}", Verdict.ok(g.hash))
        self.store.record_build(cid, BuildResult(g.hash, PROBLEM.key, "sm_90a", "ok",
                                                 cache_key=f"{self.study}-{cid}"))
        return cid, g

    def measure(self, cid: int, g: Genome, status: str, median_us: float | None = None,
                run: str = "run-1") -> None:
        time.sleep(0.002)  # distinct measured_at stamps: the order under test
        self.store.record_measurement(cid, fake_measurement(g, status, median_us), run)

    def built_and_measured(self, status: str, median_us: float | None = None) -> None:
        self.measure(*self.build(), status, median_us)


REFERENCE_TIMES: list[tuple[str, float | None]] = [
    ("ok", 130.0), ("ok", 120.0), ("wrong", None), ("ok", 100.0), ("ok", 110.0),
    ("ok", 101.5), ("timeout", None), ("ok", 150.0), ("ok", 104.0), ("ok", 125.0),
]  # MADE-UP TEST DATA: best 100 us, target 102 us, met by 100 and 101.5 (m = 2 of T = 10)


@pytest.fixture
def dbs(tmp_path: Path) -> dict[str, str]:
    urls = {name: f"sqlite:///{tmp_path / name}.db" for name in ("r", "t0", "t1")}
    with Store(urls["r"]) as store:
        ref = Recorder(store, "gemm-random", "random", 0)
        ref.reject()
        for status, us in REFERENCE_TIMES[:3]:
            ref.built_and_measured(status, us)
        ref.fail_build()
        for status, us in REFERENCE_TIMES[3:]:
            ref.built_and_measured(status, us)
    with Store(urls["t0"]) as store:
        run = Recorder(store, "gemm-tpe-0", "tpe", 0)
        # Proposed first (trial 0), measured third: the order is that of the measurements.
        first_proposed = run.build()
        run.fail_build()  # no measurement: not counted
        a = run.build()
        b = run.build()
        run.reject()  # no measurement: not counted
        run.measure(*a, "wrong")  # measured: counted although not correct
        run.measure(*b, "ok", 130.0)
        run.measure(*first_proposed, "ok", 101.0)  # 3rd measured, within 102 us
        run.built_and_measured("ok", 99.0)
    with Store(urls["t1"]) as store:
        run = Recorder(store, "gemm-tpe-1", "tpe", 1)
        run.built_and_measured("ok", 110.0)
        late = run.build()
        run.measure(*late, "timeout")
        run.built_and_measured("ok", 105.0)
        # Re-measured later by another run: the search was told 'timeout', so it stays that.
        run.measure(*late, "ok", 100.0, run="run-2")
        run.reject()
    return urls


def figure(dbs: dict[str, str], **kwargs: object) -> dict:
    return se.studies(f"{dbs['r']}:gemm-random",
                      [f"tpe={dbs['t0']}:gemm-tpe-0", f"tpe={dbs['t1']}:gemm-tpe-1",
                       f"random={dbs['r']}:gemm-random"], **kwargs)


@pytest.mark.slow
def test_counts_from_recorded_studies(dbs: dict[str, str]) -> None:
    result = figure(dbs, within=0.02, shuffles=2000, seed=3)
    assert result["target_us"] == pytest.approx(102.0)
    ref = result["reference"]
    assert (ref["best_us"], ref["measured"], ref["correct"], ref["on_target"]) == (100.0, 10, 8, 2)
    assert ref["proposed"] == 12  # a rejection and a failed build: proposed, never measured
    t0, t1, rnd = result["runs"]
    assert (t0["label"], t0["seed"], t0["recorded_sampler"]) == ("tpe", 0, "tpe")
    assert t0["candidates_to_target"] == 3
    assert (t0["measured"], t0["correct"], t0["proposed"]) == (4, 3, 6)
    assert t0["statuses"] == {"ok": 3, "wrong": 1}
    assert t0["best_us"] == 99.0 and t0["best_vs_reference"] == pytest.approx(0.99)
    assert t0["series"] == [[1, None], [2, 130.0], [3, 101.0], [4, 99.0]]
    assert t1["candidates_to_target"] is None
    assert (t1["measured"], t1["best_us"], t1["remeasured_candidates"]) == (3, 105.0, 1)
    assert t1["series"] == [[1, 110.0], [2, 110.0], [3, 105.0]]
    assert rnd["candidates_to_target"] == 4  # 130, 120, wrong, 100
    assert rnd["devices"] == ["test-device"]
    tpe = result["by_label"]["tpe"]
    assert tpe["candidates_to_target"] == [3, None] and tpe["reached"] == "1/2"
    assert tpe["seeds"] == [0, 1] and tpe["median"] is None
    assert tpe["median_bounds"] == [3.5, None]  # the unreached one counts >= 4
    assert result["by_label"]["random"]["median"] == 4


@pytest.mark.slow
def test_random_order_matches_exact_distribution(dbs: dict[str, str]) -> None:
    order = figure(dbs, shuffles=20000, seed=1)["reference"]["random_order"]
    total, hits = 10, 2
    assert (order["total"], order["on_target"]) == (total, hits)
    assert order["expected"] == pytest.approx((total + 1) / (hits + 1))
    # Every placement of the 2 on-target candidates among 10 positions is equally likely.
    firsts = sorted(min(c) + 1 for c in itertools.combinations(range(total), hits))
    assert statistics.fmean(firsts) == pytest.approx(order["expected"])
    cdf = [sum(f <= k for f in firsts) / len(firsts) for k in range(1, total + 1)]
    for p, key in ((0.25, "q1"), (0.5, "median"), (0.75, "q3")):
        assert order["exact"][key] == next(k for k, c in enumerate(cdf, 1) if c >= p)
    assert order["shuffled"]["mean"] == pytest.approx(order["expected"], rel=0.03)
    assert order["shuffled"]["median"] == order["exact"]["median"]
    again = figure(dbs, shuffles=20000, seed=1)["reference"]["random_order"]
    assert again == order  # seeded


def test_random_order_without_hits() -> None:
    assert se.random_order(5, 0, 100, 0)["expected"] is None
    assert se.random_order(5, 5, 100, 0)["expected"] == 1.0


@pytest.mark.parametrize("value, words", [
    ("sqlite:///r.db", "no study name"),
    ("r.db:gemm", "no database URL"),
    ("sqlite:///r.db:", "no study name"),
])
def test_bad_reference_is_named(value: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as err:
        se.studies(value, ["tpe=sqlite:///x.db:s"])
    assert f"--reference {value!r}" in str(err.value)


@pytest.mark.parametrize("value, words", [
    ("sqlite:///t.db:s", "no sampler label"),
    ("t p e=sqlite:///t.db:s", "is not a name"),
])
def test_bad_run_is_named(value: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as err:
        se.parse_source(value, "--run", labelled=True)
    assert f"--run {value!r}" in str(err.value)


def test_last_colon_split() -> None:
    src = se.parse_source("pg=postgresql://u:pw@host:5432/tsopt:gemm-tpe-0", "--run", True)
    assert (src.label, src.url, src.study) == ("pg", "postgresql://u:pw@host:5432/tsopt",
                                                 "gemm-tpe-0")


@pytest.mark.slow
def test_missing_file_and_study_are_named(dbs: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    with pytest.raises(ValueError, match="no database file"):
        se.studies(f"sqlite:///{missing}:s", [f"tpe={dbs['t0']}:gemm-tpe-0"])
    assert not missing.exists()  # not created by the look-up
    with pytest.raises(ValueError, match=r"no study 'gemm-tpe-9'.*gemm-tpe-0"):
        se.studies(f"{dbs['r']}:gemm-random", [f"tpe={dbs['t0']}:gemm-tpe-9"])


@pytest.mark.slow
def test_other_problem_is_refused(dbs: dict[str, str]) -> None:
    with Store(dbs["t1"]) as store:
        store.create_or_get_study("other", "copy", Problem.of("copy", "fp16", rows=1024,
                                                              cols=1024), "sm_90a", "tpe", {})
    with pytest.raises(ValueError, match="not comparable"):
        se.studies(f"{dbs['r']}:gemm-random", [f"tpe={dbs['t1']}:other"])


@pytest.mark.slow
def test_write_figure_writes_json_and_markdown(dbs: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "results" / "se.json"
    result = se.studies(f"{dbs['r']}:gemm-random", [f"tpe={dbs['t0']}:gemm-tpe-0",
                                                    f"random={dbs['r']}:gemm-random"], shuffles=100)
    text = se.write_figure(result, out, "python make_figure.py --reference R")
    doc = json.loads(out.read_text())
    assert [r["candidates_to_target"] for r in doc["runs"]] == [3, 4]
    assert doc["command"] == "python make_figure.py --reference R"
    assert out.with_suffix(".md").read_text() == text
    assert doc["command"] in text and "| tpe | 1/1 | 3 | 3 |" in text
    assert out.with_suffix(".png").exists() == (doc.get("plot") == "se.png")


def _dump(url: str, path: Path) -> None:
    with Store(url) as store:
        docs = se.dump_studies(store)
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "wt") as f:
        json.dump(docs, f, default=str)


@pytest.mark.slow
def test_dumps_give_the_figure_of_the_databases(dbs: dict[str, str], tmp_path: Path) -> None:
    dumps = {name: tmp_path / f"{name}.json{'.xz' if name == 'r' else ''}" for name in dbs}
    for name, path in dumps.items():
        _dump(dbs[name], path)
    from_dbs = figure(dbs, shuffles=100)
    from_dumps = figure({k: str(v) for k, v in dumps.items()}, shuffles=100)

    def sourceless(doc: object) -> object:
        if isinstance(doc, dict):
            return {k: sourceless(v) for k, v in doc.items() if k != "source"}
        if isinstance(doc, list):
            return [sourceless(v) for v in doc]
        return doc

    assert from_dumps["reference"]["source"] == str(dumps["r"])
    assert sourceless(from_dumps) == sourceless(from_dbs)
    assert from_dumps["runs"][0]["candidates_to_target"] == 3  # the measured order survives


@pytest.mark.slow
def test_dump_errors_are_named(dbs: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ValueError, match="no dump file"):
        se.studies(f"{missing}:gemm-random", [f"tpe={dbs['t0']}:gemm-tpe-0"])
    dump = tmp_path / "r.json"
    _dump(dbs["r"], dump)
    with pytest.raises(ValueError, match=r"no study 'other'.*gemm-random"):
        se.studies(f"{dump}:other", [f"tpe={dbs['t0']}:gemm-tpe-0"])
    old = json.loads(dump.read_text())
    for c in old[0]["candidates"]:  # a dump written before measured_at was recorded
        for m in c["measurements"]:
            del m["measured_at"]
    dump.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="lacks measured_at"):
        se.studies(f"{dump}:gemm-random", [f"tpe={dbs['t0']}:gemm-tpe-0"])


def test_remeasured_costs_decide_the_target(dbs: dict[str, str], tmp_path: Path) -> None:
    with se.StudyReader() as reader:
        ref = reader.load(se.parse_source(f"{dbs['r']}:gemm-random", "--reference", False)).measured
        t0 = reader.load(se.parse_source(f"{dbs['t0']}:gemm-tpe-0", "--run", False)).measured
    by_time = {r.median_us: r.genome_hash for r in ref if r.median_us is not None}
    # MADE-UP TEST DATA: paired re-measurements (cuBLAS time / candidate time), as a paired
    # A/B run writes them (bench/gemm_h200/gemm_h200.py headline); the cost is the inverse.
    results = [
        {"genome_hash": by_time[100.0], "correct": True, "median_ratio": 1.00},  # cost 1.0
        {"genome_hash": by_time[101.5], "correct": True, "median_ratio": 0.90},  # 1.11: off
        {"genome_hash": by_time[104.0], "correct": True, "median_ratio": 0.99},  # 1.01: on
        {"genome_hash": t0[2].genome_hash, "correct": True, "median_ratio": 0.95},  # its 101 us
        {"genome_hash": t0[3].genome_hash, "correct": True, "median_ratio": 1.05},  # its 99 us
        {"genome_hash": by_time[110.0], "correct": False, "median_ratio": 2.0},  # left out
    ]
    path = tmp_path / "remeasured.json"
    path.write_text(json.dumps({"results": results}))
    result = figure(dbs, within=0.02, shuffles=100, remeasured=path)
    paired = result["remeasured"]
    assert (paired["candidates"], paired["reference_on_target"]) == (5, 2)  # 100 and 104 us
    assert paired["target_cost"] == pytest.approx(1.02)
    t0_run, t1_run, rnd = result["runs"]
    assert t0_run["candidates_to_target"] == 4  # 101 us re-measured off target; 99 us on it
    assert t1_run["candidates_to_target"] is None  # nothing of it was re-measured
    assert rnd["candidates_to_target"] == 4
    assert result["reference"]["random_order"]["on_target"] == 2
    with pytest.raises(ValueError, match="no correct re-measured"):
        empty = tmp_path / "empty.json"
        empty.write_text(json.dumps({"results": []}))
        figure(dbs, remeasured=empty)
