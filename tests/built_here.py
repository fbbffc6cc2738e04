"""What a bundle's database holds before the bundle is ingested: the study that built it and
each candidate's build, its artifact files' checksums recorded (``Store.record_build``), as
``tsopt tune`` leaves them. Ingest checks a bundle against these records, so a test bundle is
ingested into a database that "built" it here.

Also measurements as a measuring worker writes them: the rate is its median's, the ratio the
baseline's time over it (a results file edited by hand is what the checks refuse). The
device says "simulated device": they test what is checked and recorded, never any speed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tsopt.core.bundle import expected_rate
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import BuildResult, Measurement
from tsopt.db.store import Store

SIMULATED = "simulated device"


def record_built(store: Store, study: str, problem: Problem, built: Iterable[tuple[Genome, Path]],
                 *, space: str = "copy", arch: str = "sm_90a", origin: str = "suggest",
                 trial_numbers: dict[str, int] | None = None) -> dict[str, int]:
    """Record ``study`` (if new) and each (genome, artifact directory) as built in it; returns
    each genome's candidate id."""
    store.create_or_get_study(study, space, problem, arch, "tpe", {})
    ids = {}
    for genome, directory in built:
        existing = store.candidate_id(study, genome.hash)
        number = (trial_numbers or {}).get(genome.hash)
        candidate_id = existing if existing is not None else store.add_candidate(
            study, genome, origin, trial_number=number)
        store.record_build(candidate_id, BuildResult(
            genome_hash=genome.hash, problem_key=problem.key, arch=arch, status="ok",
            artifact_dir=str(directory), library=str(Path(directory) / "libkernel.so"),
            cache_key=f"test:{genome.hash}:{problem.key}:{arch}"))
        ids[genome.hash] = candidate_id
    return ids


def timed(genome: Genome, problem: Problem, median_us: Any = 25.0, *,
          baseline_us: float = 21.0, **changes: Any) -> Measurement:
    """A correct timing of ``genome`` as the measuring side writes it (``changes`` override)."""
    usable = isinstance(median_us, int | float) and math.isfinite(median_us) and median_us > 0
    # A broken median (the bad-input cases) gets no derived figures: its own check names it.
    rate, unit = expected_rate(problem, median_us) if usable else (None, "GB/s")
    doc: dict[str, Any] = dict(
        genome_hash=genome.hash, problem_key=problem.key, status="ok", median_us=median_us,
        p10_us=median_us * 0.96 if usable else None,
        p90_us=median_us * 1.04 if usable else None, runs=50, rate=rate, rate_unit=unit,
        rel_err=0.0, baseline_name="torch.copy_" if problem.op == "copy" else "torch.matmul",
        baseline_median_us=baseline_us, baseline_rate=expected_rate(problem, baseline_us)[0],
        ratio=baseline_us / median_us if usable else None, device=SIMULATED)
    doc.update(changes)
    return Measurement(**doc)


def failed(genome: Genome, problem: Problem, status: str = "wrong") -> Measurement:
    """A candidate the measuring side found wrong (no times)."""
    return Measurement(genome_hash=genome.hash, problem_key=problem.key,
                       status=status,  # type: ignore[arg-type]
                       rel_err=0.3, device=SIMULATED,
                       error="checked run 1 of 2: 12 of 131072 elements differ")
