"""The oracle harness (bench/oracle) on the CPU: the chooser's plans (deterministic, legal by the
space's declared legal set and the predicting judge, every family of the space), a committed
plan (``mid``, as the fixture ``tests/fixtures/oracle/plans/mid.json.xz``) against the
held-out set by ``check_plans.py``'s check, a real build of two candidates by ``build_and_measure.py``
with optuna, SQLAlchemy and Ray unimportable (as on the GPU machine) into a bundle the runner
reads, its refusal to measure without a GPU, and the summariser's tables on SYNTHETIC
measurements (named so: no GPU here).

The harness is an experiment, so it runs as commands (nothing here imports it but the plan
check, a function; ``check_plans.py`` runs it on every committed plan, unpacked)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tests.fixtures import read_fixture  # noqa: E402
from tsopt.app.heldout import load_heldout  # noqa: E402
from tsopt.core.bundle import read_manifest  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import parse_problem_spec  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search.proposals import Proposer  # noqa: E402
from tsopt.search.samplers import KnobView  # noqa: E402
from tsopt.verify.verifier import judge_for, predicting_judge  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {path.name: path for path in (
    ROOT / "bench" / "oracle" / "choose.py", ROOT / "bench" / "oracle" / "build_and_measure.py",
    ROOT / "bench" / "oracle" / "summarise.py", ROOT / "bench" / "oracle" / "check_plans.py")}
FAMILIES = {f"{d}{s}" for d in ("tile-per-cta", "persistent", "split-k2", "split-k3",
                                "split-k4", "stream-k") for s in ("", "+swap")}
SYNTHETIC_DEVICE = "SYNTHETIC (no GPU: made-up timings, not a measurement)"


def script(name: str, *args: str, env: dict[str, str] | None = None,
           timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPTS[name]), *args], capture_output=True,
                          text=True, env={**os.environ, "CUTE_DSL_ARCH": "sm_90a", **(env or {})},
                          timeout=timeout, cwd=ROOT)


def family_of(genome: Genome) -> str:
    genes = genome.genes
    if genes.get("stream_k"):
        name = "stream-k"
    elif int(genes.get("split_k", 1)) > 1:  # type: ignore[call-overload]
        name = f"split-k{genes['split_k']}"
    else:
        name = "persistent" if genes["persistent"] else "tile-per-cta"
    return name + ("+swap" if genes.get("swap_ab") else "")


def test_a_committed_plan_covers_its_heldout_problem_and_every_family() -> None:
    spec = importlib.util.spec_from_file_location("oracle_check_plans",
                                                  SCRIPTS["check_plans.py"])
    assert spec is not None and spec.loader is not None
    check_plans = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_plans)
    assert check_plans.FAMILIES == FAMILIES
    held = load_heldout()
    item = held.by_name("mid")
    plan = read_fixture("oracle/plans/mid.json.xz")
    assert check_plans.plan_problems(plan, item.spec, held.version, item.oracle) == []
    assert len(plan["candidates"]) >= item.oracle
    for cand in plan["candidates"]:  # the family column is the genome's
        assert family_of(Genome.from_dict(cand["genome"])) == cand["family"]
    # Each thing it checks, broken once, is named.
    other = held.by_name("ragged-small")
    assert "the set has" in check_plans.plan_problems(plan, other.spec, held.version,
                                                      item.oracle)[0]
    assert "oracle 999" in check_plans.plan_problems(plan, item.spec, held.version, 999)[0]
    relabelled = {**plan, "candidates": [{**plan["candidates"][0], "family": "stream-k+swap"
                                          if plan["candidates"][0]["family"] != "stream-k+swap"
                                          else "persistent"}, *plan["candidates"][1:]]}
    assert "family is not its genome's" in check_plans.plan_problems(
        relabelled, item.spec, held.version, item.oracle)[0]
    lopsided = {**plan, "coverage": {**plan["coverage"], "family": {
        **plan["coverage"]["family"], "persistent": 90}}}
    assert "family shares" in check_plans.plan_problems(lopsided, item.spec, held.version,
                                                        item.oracle)[0]


@pytest.mark.slow
def test_the_chooser_is_deterministic_legal_and_stratified(tmp_path: Path) -> None:
    first = script("choose.py", "--problem", "mid", "--count", "36", "--out", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    again = script("choose.py", "--problem", "mid", "--count", "36", "--out", str(tmp_path / "b"))
    a = json.loads((tmp_path / "a" / "mid.json").read_text())
    b = json.loads((tmp_path / "b" / "mid.json").read_text())
    assert again.returncode == 0
    assert [c["genome"] for c in a["candidates"]] == [c["genome"] for c in b["candidates"]]
    assert a["count"] == 36 and set(a["coverage"]["family"]) == FAMILIES
    assert {c["origin"] for c in a["candidates"]} >= {"seed", "coverage", "model"}
    assert_legal_and_valid(a["problem"], a["candidates"])
    other = script("choose.py", "--problem", "mid", "--count", "36", "--seed", "1",
                   "--out", str(tmp_path / "c"))
    assert other.returncode == 0
    c = json.loads((tmp_path / "c" / "mid.json").read_text())
    assert {x["genome_hash"] for x in c["candidates"]} != {x["genome_hash"]
                                                            for x in a["candidates"]}


def assert_legal_and_valid(spec: str, candidates: list[dict]) -> None:
    """Each candidate is legal by the space's declared legal set, valid by the cheap
    predicting judge, and holds what its stratum forced."""
    space = get_space("gemm")
    space.judge = judge_for(space)
    problem = parse_problem_spec(spec)
    proposer = Proposer(space, problem, KnobView.of(space, problem, "evolve"),
                        predicting_judge(space))
    predict = predicting_judge(space)
    for cand in candidates:
        assert proposer.legal(cand["params"]), cand["genome_hash"]
        assert predict(Genome.from_dict(cand["genome"]), problem).valid
        for knob, value in cand["forced"].items():
            assert cand["params"][knob] == value


@pytest.mark.slow
def test_a_grown_space_gets_a_supplement_of_the_values_its_plan_lacks(tmp_path: Path) -> None:
    """The committed plan of ``mid`` was chosen before ``arrangement`` gained ``split_n`` and
    ``tile_m`` 192: ``--grown`` adds candidates holding exactly those, none of the plan's own,
    with the given anchors beside them, the same for the same seed."""
    base = read_fixture("oracle/plans/mid.json.xz")
    anchor = base["candidates"][5]  # any genome of the plan stands in for its best here
    anchors = tmp_path / "oracle-best.json"
    anchors.write_text(json.dumps({"problems": [{"name": "mid", "oracle": [
        {"genome_hash": anchor["genome_hash"], "genome": anchor["genome"]}]}]}))
    made = []
    for out in ("a", "b"):
        (tmp_path / out).mkdir()
        (tmp_path / out / "mid.json").write_text(json.dumps(base))
        run = script("choose.py", "--grown", "--problem", "mid", "--count", "6",
                     "--anchors", str(anchors), "--out", str(tmp_path / out))
        assert run.returncode == 0, run.stderr
        made.append(json.loads((tmp_path / out / "mid.grown.json").read_text()))
    plan, again = made
    assert [c["genome"] for c in plan["candidates"]] == [c["genome"] for c in again["candidates"]]
    assert plan["name"] == "mid.grown" and plan["problem"] == base["problem"]
    assert plan["supplements"]["plan"] == "mid.json"
    assert plan["supplements"]["grown"] == ["arrangement='split_n'", "tile_m=192"]
    assert plan["supplements"]["anchors"] == [anchor["genome_hash"]]
    assert not any(s.startswith("stream-k ") and "split_n" in s
                   for s in plan["chooser"]["strata"])  # stream-K runs cooperative only
    [first, *added] = plan["candidates"]
    assert first["origin"] == "anchor" and first["genome_hash"] == anchor["genome_hash"]
    assert len(added) == plan["count"] == 6
    base_hashes = {c["genome_hash"] for c in base["candidates"]}
    for cand in added:
        assert cand["genome_hash"] not in base_hashes
        assert cand["params"]["arrangement"] == "split_n" or cand["params"]["tile_m"] == 192
    assert_legal_and_valid(plan["problem"], added)
    # A supplement needs the plan it supplements: one line, exit 2.
    missing = script("choose.py", "--grown", "--problem", "mid", "--out", str(tmp_path / "none"))
    assert missing.returncode == 2 and "none/mid.json is missing" in missing.stderr
    assert missing.stderr.strip().count("\n") == 0


@pytest.mark.slow
def test_two_candidates_built_without_the_search_stack_then_summarised(tmp_path: Path) -> None:
    chosen = script("choose.py", "--problem", "ragged-small", "--count", "2",
                    "--out", str(tmp_path / "plans"))
    assert chosen.returncode == 0, chosen.stderr
    plan_path = tmp_path / "plans" / "ragged-small.json"
    plan = json.loads(plan_path.read_text())
    assert plan["count"] == 2
    # The GPU machine has no optuna, SQLAlchemy or Ray: here they are made unimportable.
    blocked = tmp_path / "blocked"
    for name in ("optuna", "sqlalchemy", "ray", "alembic"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(
            f"raise ImportError('{name} is not on the GPU machine')\n")
    env = {"PYTHONPATH": str(blocked)}
    state = tmp_path / "state"
    built = script("build_and_measure.py", "--plan", str(plan_path), "--state", str(state),
                   "--workers", "2", "--build-only", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    doc = json.loads((state / "oracle-results.json").read_text())
    [result] = doc["plans"]
    assert result["counts"] == {"planned": 2, "judged": 2, "valid": 2, "built": 2,
                                "build_failed": 0}
    assert all(r["cpu_s"] > 0 for r in result["index"])
    manifest = read_manifest(state / "ragged-small" / "screen")  # every file against its sha
    assert sorted(c.genome_hash for c in manifest.candidates) == sorted(
        c["genome_hash"] for c in plan["candidates"])
    assert manifest.problem == parse_problem_spec(plan["problem"])

    # Measuring here: the runner finds no GPU; the call says so and keeps the build.
    measured = script("build_and_measure.py", "--plan", str(plan_path), "--state", str(state),
                      "--workers", "1", "--deadline", "120", env=env)
    assert measured.returncode == 0, measured.stderr
    [again] = json.loads((state / "oracle-results.json").read_text())["plans"]
    assert again["counts"]["built"] == 2 and again["screen"] is None
    assert again["runner_calls"] and again["runner_calls"][0]["rc"] != 0

    # A state shipped without its build cache (the plan's index and screen bundle only): the
    # confirmation bundle is made from the screen bundle's artifacts, every file checked.
    spec = importlib.util.spec_from_file_location("oracle_build", SCRIPTS["build_and_measure.py"])
    assert spec is not None and spec.loader is not None
    harness = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPTS["choose.py"].parent))
    spec.loader.exec_module(harness)
    shutil.rmtree(state / "artifacts")
    rows = [harness.in_screen_bundle(json.loads(line), state / "ragged-small" / "screen")
            for line in (state / "ragged-small" / "index.jsonl").read_text().splitlines()]
    assert all(Path(r["artifact_dir"]).is_dir() for r in rows)
    confirm = harness.bundle_of(state / "ragged-small" / "confirm", harness.read_plan(plan_path),
                                rows[:1], "confirm")
    assert [c.genome_hash for c in read_manifest(confirm).candidates] == [rows[0]["genome_hash"]]

    # The summariser on SYNTHETIC measurements of those two (no GPU here; named so).
    fake = dict(doc)
    ratios = {plan["candidates"][0]["genome_hash"]: 0.9, plan["candidates"][1]["genome_hash"]: 1.1}
    fake["plans"] = [dict(result, screen={"device": SYNTHETIC_DEVICE, "baselines": [
        {"median_us": 20.0}], "measurements": [
        {"genome_hash": h, "status": "ok", "ratio": r, "ratio_lo": r - 0.02,
         "ratio_hi": r + 0.02, "median_us": 20.0 / r} for h, r in ratios.items()]},
        confirm=None)]
    results = tmp_path / "synthetic-results.json"
    results.write_text(json.dumps(fake))
    summary = script("summarise.py", str(results), "--plans", str(tmp_path / "plans"),
                     "--out", str(tmp_path / "tables"))
    assert summary.returncode == 0, summary.stderr
    text = (tmp_path / "tables" / "ragged-small.md").read_text()
    best = max(ratios, key=lambda h: ratios[h])
    assert f"**Oracle best**: `{best[:12]}`" in text and "screen only" in text
    assert SYNTHETIC_DEVICE in text
    table = json.loads((tmp_path / "tables" / "ragged-small.table.json").read_text())
    assert {r["genome_hash"]: r["ratio"] for r in table["rows"]} == ratios


def test_bad_plans_and_heldout_files_are_refused_in_one_line(tmp_path: Path) -> None:
    plan = read_fixture("oracle/plans/mid.json.xz")
    plan["problem"] = plan["problem"].replace("bf16", "bf17")
    bad = tmp_path / "bad-plan.json"
    bad.write_text(json.dumps(plan))
    refused = script("build_and_measure.py", "--plan", str(bad), "--state", str(tmp_path / "s"))
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "unknown dtype 'bf17'" in refused.stderr
    assert not (tmp_path / "s").exists()
    held = json.loads((ROOT / "tsopt" / "data" / "heldout.json").read_text())
    held["problems"][0]["problem"] = "gemm:bf16:8x18432"
    bad_held = tmp_path / "heldout.json"
    bad_held.write_text(json.dumps(held))
    chooser = script("choose.py", "--heldout", str(bad_held), "--out", str(tmp_path / "p"))
    assert chooser.returncode == 2 and "gemm needs 3 sizes" in chooser.stderr
    assert chooser.stderr.strip().count("\n") == 0 and not (tmp_path / "p").exists()
