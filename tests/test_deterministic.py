"""`tsopt tune --deterministic` (issue #13): only schedules whose output is bit-identical run
after run. A space with no deterministic schedule for the problem is refused before anything
is built; a valid proposal the space calls non-deterministic is declined as
``tsopt.deterministic`` and never built. Real driver, verifier, compile and SQLite database.

Every schedule of today's spaces is deterministic (the GEMM's split-K adds its partials in a
fixed order through DSMEM), so the tests make the copy space call some genomes
non-deterministic, as a space with an atomic reduction would."""

from __future__ import annotations

from pathlib import Path

import pytest

import tsopt
from tsopt.core.errors import UserInputError
from tsopt.core.problem import parse_problem_spec
from tsopt.core.registry import get_space
from tsopt.db.store import Store

PROBLEM = "copy:fp16:256x512"


def test_every_gemm_schedule_is_deterministic_and_so_is_the_copy_seed() -> None:
    gemm = get_space("gemm")
    problem = parse_problem_spec("gemm:bf16:128x8192x8192")
    seed = gemm.seed_genome(problem)
    assert gemm.is_deterministic(seed) and gemm.has_deterministic_schedule(problem)
    copy = get_space("copy")
    assert copy.has_deterministic_schedule(parse_problem_spec(PROBLEM))


@pytest.mark.slow
def test_a_space_without_a_deterministic_schedule_is_refused_before_anything_is_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    space_class = type(get_space("copy"))
    monkeypatch.setattr(space_class, "is_deterministic", lambda self, genome: False)
    db = f"sqlite:///{tmp_path / 'tsopt.db'}"
    with pytest.raises(UserInputError, match=r"--deterministic: space 'copy' has no "
                                              r"deterministic schedule for copy fp16"):
        tsopt.tune("copy", PROBLEM, trials=5, db=db, deterministic=True,
                   cache_dir=tmp_path / "artifacts", warm_start=False, library=False)
    assert not (tmp_path / "artifacts").exists()  # nothing was built
    # Without the flag the same run goes ahead.
    summary = tsopt.tune("copy", PROBLEM, trials=1, db=db, cache_dir=tmp_path / "artifacts",
                         warm_start=False, library=False, measure="never")
    assert summary.exit_code == 0


@pytest.mark.slow
def test_non_deterministic_proposals_are_declined_and_never_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    space_class = type(get_space("copy"))
    problem = parse_problem_spec(PROBLEM)
    seed_hash = get_space("copy").seed_genome(problem).hash
    # Only the seed is deterministic: every proposal of the sampler must be declined.
    monkeypatch.setattr(space_class, "is_deterministic",
                        lambda self, genome: genome.hash == seed_hash)
    db = f"sqlite:///{tmp_path / 'tsopt.db'}"
    summary = tsopt.tune("copy", PROBLEM, trials=6, db=db, deterministic=True,
                         cache_dir=tmp_path / "artifacts", warm_start=False, library=False,
                         measure="never", sampler="random")
    assert summary.exit_code == 0
    assert summary.built == 1  # the seed alone
    assert summary.rejected >= 1
    store = Store(db)
    built = [c for c in store.candidates(summary.study) if c.build is not None and c.build.ok]
    assert [c.genome_hash for c in built] == [seed_hash]
    import optuna
    study = optuna.load_study(study_name=summary.study, storage=store.optuna_storage())
    declined = [t for t in study.trials if t.user_attrs.get("rule") == "tsopt.deterministic"]
    assert declined and all(t.state == optuna.trial.TrialState.PRUNED for t in declined)
