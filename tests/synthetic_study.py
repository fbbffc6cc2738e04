"""SYNTHETIC study data for report tests: made-up genomes, verdicts, builds and timings.

Nothing here was measured: the timings are a made-up function of the genes
plus seeded noise, and the GPU name says so. Everything is recorded through
the real Store API (``Store.batch`` for one commit), so the report reads it
exactly as it would read a real study. Use it to exercise the report, never
as a figure.
"""

from __future__ import annotations

import random
from functools import cache
from itertools import product

from tsopt.core.genome import Genome, Section
from tsopt.core.problem import Problem
from tsopt.core.records import BuildResult, Measurement, Verdict
from tsopt.db.store import Store

PROBLEM = Problem.of("copy", "fp16", rows=4096, cols=4096)
SPACE = "synthetic-copy"  # not a registered space: the report draws from the genome alone
DEVICE = "SYNTHETIC GPU (no real measurement)"
BASELINE_US = 21.0

REJECTIONS = (
    ("dataflow", "dataflow.use_before_produce", "tma_store reads smem before tma_load wrote it"),
    ("ts", "ts.missing_release",
     "schedule is missing ConsumerRelease after ConsumerWork group for resource 'smemResource'"),
    ("ts", "ts.unconsumed_commit", "1x ProducerCommit from smemResource not consumed!"),
    ("tsopt", "tsopt.warp_overlap", "tasks 'load' and 'store' both run on warp 0"),
)


def genome(stages: int, box_cols: int, store_warps: int, release: Section, prefetch: int,
           grid: int, cadence: int) -> Genome:
    return Genome.make(
        SPACE,
        schedule={
            "load": [("acquire", "head" if prefetch else "loop"), ("tma_load", "loop"),
                     ("commit", "loop")],
            "store": [("wait", "loop"), ("tma_store", "loop"), ("release", release)],
        },
        structure={"prefetch": prefetch, "release_every": cadence},
        numeric={"stages": stages, "box_cols": box_cols, "load_warp": 0,
                 "store_warps": store_warps, "grid": grid},
    )


@cache
def _every_genome() -> tuple[Genome, ...]:
    releases: tuple[Section, ...] = ("loop", "tail")
    grid = product(range(1, 9), (32, 64, 128, 256), (1, 2, 4), releases, (0, 1),
                   (16, 32, 48, 64, 96, 132, 192, 264, 528, 792, 1056, 2112), (1, 2, 3))
    genomes = [genome(*g) for g in grid]
    random.Random(1).shuffle(genomes)
    return tuple(genomes)


def all_genomes(count: int) -> list[Genome]:
    genomes = _every_genome()
    if count > len(genomes):
        raise ValueError(f"at most {len(genomes)} synthetic genomes, asked for {count}")
    return list(genomes[:count])


def synthetic_time_us(g: Genome, rng: random.Random) -> float:
    """Made-up: more stages, wider boxes, a fuller grid are faster, with noise."""
    stages, box, grid = int(g["stages"]), int(g["box_cols"]), int(g["grid"])  # type: ignore[arg-type]
    base = 18.0 + 400.0 / (stages * box / 32) ** 0.8 + 4000.0 / grid
    slower = 1.1 if g["prefetch"] == 0 else 1.0
    return float(base * slower * rng.uniform(0.97, 1.03))


def make_study(store: Store, name: str, count: int, *, timed: bool = True, seed: int = 0) -> str:
    """A SYNTHETIC study of ``count`` candidates through the Store API.

    About 20 % are rejected by the verifier (spread over four rules), 2 % fail
    to build, and of the built ones (when ``timed``) 3 % are wrong and 1 %
    hang; the rest get a synthetic timing.
    """
    rng = random.Random(seed)
    config = {"trials": count, "seed": seed}
    store.create_or_get_study(name, SPACE, PROBLEM, "sm_90a", "tpe", config)
    with store.batch():
        for number, g in enumerate(all_genomes(count)):
            cid = store.add_candidate(name, g, "suggest" if number else "seed", trial_number=number)
            roll = rng.random()
            if roll < 0.2:
                stage, rule, message = REJECTIONS[int(roll / 0.05)]
                verdict = Verdict.reject(g.hash, stage, rule, message)  # type: ignore[arg-type]
            else:
                verdict = Verdict.ok(g.hash, seconds=0.004, domain=int(g["stages"]) + 2)  # type: ignore[arg-type]
            store.record_verdict(cid, SPACE, g.hash, verdict)
            if not verdict.valid:
                continue
            broken = rng.random() < 0.02
            store.record_build(cid, BuildResult(
                g.hash, PROBLEM.key, "sm_90a", "error" if broken else "ok",
                artifact_dir=None if broken else f"/synthetic/{g.short_hash}",
                compile_seconds=0.4, registers=40 + 8 * int(g["store_warps"]),  # type: ignore[arg-type]
                smem_bytes=int(g["stages"]) * int(g["box_cols"]) * 128 * 2,  # type: ignore[arg-type]
                cache_key=f"synthetic-{g.hash}",
                error="synthetic link failure: undefined symbol" if broken else None,
            ))
            if broken or not timed:
                continue
            store.record_measurement(cid, _measurement(g, rng), run_id="synthetic-run-1")
    return name


def _measurement(g: Genome, rng: random.Random) -> Measurement:
    outcome = rng.random()
    if outcome < 0.03:
        return Measurement(g.hash, PROBLEM.key, "wrong", rel_err=0.41, device=DEVICE,
                           error="synthetic: max relative error 0.41 > 1e-2")
    if outcome < 0.04:
        return Measurement(g.hash, PROBLEM.key, "hang", device=DEVICE,
                           error="synthetic: killed by the watchdog after 10 s")
    median = synthetic_time_us(g, rng)
    rate = PROBLEM.bytes_moved / median / 1e3
    return Measurement(
        g.hash, PROBLEM.key, "ok", median_us=median, p10_us=median * 0.98, p90_us=median * 1.04,
        runs=50, rate=rate, rate_unit="GB/s", rel_err=0.0, baseline_name="torch.copy",
        baseline_median_us=BASELINE_US, baseline_rate=PROBLEM.bytes_moved / BASELINE_US / 1e3,
        ratio=BASELINE_US / median, device=DEVICE, driver="synthetic", cuda="synthetic",
        torch="synthetic", seconds=0.2,
    )
