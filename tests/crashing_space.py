"""A copy space whose builder process dies on purpose: for the worker-death tests (Ray tasks and
local build processes).

Not a fake of anything: the real copy template, verifier and builder, except that
``kernel_spec`` (called in the build) kills its own process first for some genomes,
the way a compiler crash or the OOM killer would. Each attempt appends a line to
``$TSOPT_TEST_CRASH_DIR/<genome hash>.attempts``.

- ``stages == 2``: the first attempt dies, the retry builds;
- ``stages == 3``: every attempt dies.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.db.store import Store
from tsopt.search_spaces.copy.space import CopySpace

GRID_KNOBS = ("stages=2,3,4", "box_rows=8", "box_cols=256", "chunk=1", "vector=8",
              "advance_on_wait=false", "raster=row", "ctas_per_sm=1")
"""With the tests' narrow placements: a grid of exactly stages 2, 3 and 4."""


def attempts(directory: Path, genome: Genome) -> int:
    path = directory / f"{genome.hash}.attempts"
    return len(path.read_text().splitlines()) if path.exists() else 0


class CrashingCopySpace(CopySpace):
    def kernel_spec(self, genome: Genome, problem: Problem, arch: str,
                    device: Any = None) -> Any:
        directory = Path(os.environ["TSOPT_TEST_CRASH_DIR"])
        before = attempts(directory, genome)
        with open(directory / f"{genome.hash}.attempts", "a") as log:
            log.write(f"{os.getpid()}\n")
        stages = genome["stages"]
        if stages == 3 or (stages == 2 and before == 0):
            os._exit(17)
        return super().kernel_spec(genome, problem, arch, device)


def check_the_grid_outcome(url: str, study: str, directory: Path, trials: list[Any]) -> None:
    """What a driver must have recorded after building the stages 2, 3, 4 grid: stages=2 died
    once and was built by the retry; stages=3 died twice, a failed build told to Optuna as
    FAIL with its reason; stages=4 built at once. The seed obeys the --knob restrictions, so it
    is one of the three (stages=2: the first allowed), and its trial a duplicate of it."""
    with Store(url) as store:
        candidates = {c.genome["stages"]: c for c in store.candidates(study)}
    assert set(candidates) == {2, 3, 4}
    assert attempts(directory, candidates[2].genome) == 2 and candidates[2].build.ok  # type: ignore[union-attr]
    assert attempts(directory, candidates[4].genome) == 1 and candidates[4].build.ok  # type: ignore[union-attr]
    failed = candidates[3]
    assert attempts(directory, failed.genome) == 2
    assert failed.verdict is not None and failed.verdict.valid
    assert failed.build is not None and not failed.build.ok
    assert "worker failed twice" in (failed.build.error or "")
    trial = next(t for t in trials if t.number == failed.trial_number)
    assert trial.state == TrialState.FAIL
    assert "worker failed twice" in trial.user_attrs["build_error"]
