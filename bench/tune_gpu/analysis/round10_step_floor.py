"""The shortest time a K step can take, whatever it moves: a floor under the cost model's
step (CPU only; the figures in bench/tune_gpu's round 10 notes).

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/tune_gpu/analysis/round10_step_floor.py \\
        --out bench/tune_gpu/analysis/round10_step_floor.json

Round 9's lead (``round9_cluster_sync.py``) added a cluster barrier's cost to every K step
and helped the decode shapes in-sample but not the 8192^3 table. Here the same cost is a
floor instead: a step takes at least ``FLOOR + PER_CTA x (CTAs in the cluster - 1)`` ns
(the consumer's wait, wgmma issue and release, and the release's round trip to every CTA
the stage was multicast to), which binds only where a step moves and computes little:
tile_k 32 and wide clusters at decode shapes, never a 128x256 tile at 8192^3. Spearman's
rank correlation with the paired ratios of (1) every committed study (rounds 1-9, problems
with at least 30 measured trials; in-sample: the values are read from it) and (2) the
measured 8192^3 table of bench/search_table (1,908 schedules, out of sample).

Not taken (round 10): at 250 + 25 x (CTAs - 1) ns the mean rank correlation over the 13
problems rises from 0.710 to 0.778 (the table 0.707 -> 0.704; round 10's studies included), but the survey of
``tsopt.search.evolve`` then drops the family measured best at 128x8192x8192 (64x128 tiles, a
2x1 cluster), and at 200 + 50 it keeps the family but still picks its tile_k-32 member (a
one-gene move from it to tile_k 64 must also cut the stages to fit SMEM). A floor that only
ranks better in aggregate did not make the first proposals better; not landed without a
measurement of what it does to a study.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench" / "tune_gpu" / "analysis"))

from round9_cluster_sync import STEP, patched_model, sweep  # noqa: E402

VALUES = [(0, 0), (100, 0), (150, 0), (200, 0), (250, 0), (250, 25), (150, 25), (150, 50), (200, 25),
          (200, 50), (100, 50), (250, 50), (200, 100)]


def variant(floor_ns: int, per_cta_ns: int):  # type: ignore[no-untyped-def]
    return patched_model(f"cost_model_floor_{floor_ns}_{per_cta_ns}", STEP[:-1]
                         + f", {floor_ns}e-9 + {per_cta_ns}e-9 * (cm * cn - 1))")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sweep(VALUES, "floor", variant, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
