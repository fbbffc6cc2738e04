"""The search-table replay (bench/search_table/simulate.py) on a small SYNTHETIC table: real
Optuna studies proposing through the driver's KnobView / make_sampler / space.suggest path.

Checks the score's two ends: random search scores P ~ 0 against the exact expectation, a
sampler that always proposes the table's optimum scores P = 1; and that the exact expected
best of random search matches a brute force over every subset.
"""

import importlib.util
import itertools
import statistics
import sys
from pathlib import Path

import pytest

SIMULATE = Path(__file__).resolve().parents[1] / "bench" / "search_table" / "simulate.py"
HERE = SIMULATE.parent  # its table_space.py beside it (code only: no committed table is read)


@pytest.fixture(scope="module")
def sim():
    sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location("search_table_simulate", SIMULATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(HERE))


@pytest.fixture(scope="module")
def table(sim):
    from table_space import CORE

    # A small product: the core, with the GEMM's real checks deciding which points are valid.
    small = {**CORE, "mma.placement": CORE["mma.placement"][:1], "epilogue": ("tma_store",),
             "swizzle": (8,)}
    doc = sim.synthetic_table(seed=3, restrict=small)
    assert doc["synthetic"] and doc["source"].startswith("SYNTHETIC")
    # The driver's Proposer draws inside the space's declared legal set: the table's valid
    # points are those (as on the measured table, where the two sets are the same).
    legal = sim.warm_verdicts(sim.Table(doc))
    for row in doc["rows"]:
        if row["key"] not in legal:
            row.update(valid=False, built=False, status=None, ratio=None)
    return sim.Table(doc)


@pytest.mark.slow
def test_expected_best_of_random_is_exact(sim, table):
    values = table.values
    assert len(values) >= 8
    for b in (1, 2, 3):
        brute = statistics.fmean(max(c) for c in itertools.combinations(values, b))
        assert table.random_expected_best(3)[b - 1] == pytest.approx(brute, rel=1e-9)


@pytest.mark.slow
def test_random_scores_zero_and_the_oracle_one(sim, table):
    budget = 6
    random_runs = [sim.replay_one(table, "random", seed, budget, 2000) for seed in range(20)]
    for run in random_runs:
        # Every measured point is a distinct valid, built point; rejected ones cost nothing.
        assert run["measured"] == budget
        assert run["proposals"] == run["measured"] + run["pruned"] + run["failed"] \
            + run["duplicates"]
    score = sim.p_score(table, random_runs, budget)["P"]
    assert abs(score) < 0.25, score
    oracle = [sim.replay_one(table, "oracle", seed, budget, 50) for seed in range(2)]
    assert sim.p_score(table, oracle, budget)["P"] == pytest.approx(1.0)
    # The oracle measures the optimum once; its repeats are told its value and cost nothing.
    assert all(r["measured"] == 1 and r["best"] == table.best for r in oracle)


@pytest.mark.slow
def test_summary_counts_against_randoms_expectation(sim, table):
    result = sim.simulate(table.doc, ["random"], seeds=3, budget=4, max_proposals=2000)
    s = result["strategies"]["random"]
    assert result["synthetic"] is True
    assert len(s["curve"]["median"]) == 4
    assert result["random_expected_to_within"]["expected"] == pytest.approx(
        (result["measured"] + 1) / (result["on_target"] + 1))


def test_table_joins_verdicts_builds_and_paired_results(sim, tmp_path):
    import json

    from table_space import SMALL, genome_of, points

    from tsopt.core.registry import get_space

    space = get_space("gemm")
    grid = points(SMALL)[:3]
    genomes = [genome_of(space, values) for values in grid]
    rows = [{"genome_hash": g.hash, "order": i, "origin": "table", "genome": g.to_dict(),
             "valid": i < 2, "verdict": "valid" if i < 2 else "rejected", "build_ok": i < 2,
             "commit": "c", "kernel_sha256": "k"} for i, g in enumerate(genomes)]
    (tmp_path / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    part = tmp_path / "part1"
    part.mkdir()
    (part / "results.json").write_text(json.dumps({"measurements": [
        {"genome_hash": genomes[0].hash, "status": "ok", "ratio": 0.9, "ratio_lo": 0.89,
         "ratio_hi": 0.91, "rounds": 4, "median_us": 200.0, "device": "H200"}]}))
    doc = sim.table_from_build(tmp_path / "index.jsonl", [part], "small")
    by_hash = {r["genome_hash"]: r for r in doc["rows"]}
    # The product as judged: knob values no judged point has are left out.
    judged = {k: tuple(v) for k, v in doc["restrict"].items()}
    assert doc["product_points"] == len(points(judged)) < len(points(SMALL))
    assert all(set(judged[k]) <= set(SMALL[k]) for k in judged) and doc["devices"] == ["H200"]
    assert by_hash[genomes[0].hash]["ratio"] == 0.9
    assert by_hash[genomes[1].hash]["built"] and by_hash[genomes[1].hash]["status"] is None
    assert not by_hash[genomes[2].hash]["valid"]
    assert by_hash[genomes[0].hash]["key"] == sim.point_key(grid[0])
