"""How many states does TS's exhaustive search need to finish on a persistent two-warpgroup
GEMM schedule, and how long does it take? The library's genome ab0b61f4b4e4 (8192³, 2x1
cluster, TMA-store epilogue, persistent, two consumer warpgroups) at 4, 5 and 6 stages,
verified with the state bound raised far above TS's 1,000,000 (``TSOPT_TS_MAX_STATES``), on
one core.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/driver_scale/shared_searches/full_search.py \\
        --out bench/driver_scale/shared_searches/full_search.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
GENOME = "ab0b61f4b4e4"
BOUND = 60_000_000


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stages", default="4,5,6")
    args = parser.parse_args()
    os.environ["TSOPT_TS_MAX_STATES"] = str(BOUND)
    from cutlass.experimental.task_scheduling import exhaustive_checker

    from tsopt.core.registry import get_space
    from tsopt.search.library import PACKAGED, load_library
    from tsopt.verify import verifier

    verifier._install_bfs_memo()  # the bound is applied by the verifier's wrapper
    bounded = exhaustive_checker.check_all_interleavings
    runs: list[dict] = []

    def counting(*a, **k):  # the states each search explored, and whether the bound cut it
        result = bounded(*a, **k)
        runs.append({"states": result.states_explored, "cut": result.hit_state_limit})
        return result

    exhaustive_checker.check_all_interleavings = counting
    entry = next(e for e in load_library(PACKAGED) if e.genome.short_hash == GENOME)
    space = get_space("gemm")
    space.judge = verifier.judge_for(space)
    rows = []
    for stages in map(int, args.stages.split(",")):
        genome = entry.genome.replace(stages=stages)
        runs.clear()
        start = time.process_time()
        verdict = verifier.verify_genome(genome, entry.problem, space=space,
                                         cache=verifier.VerdictCache())
        rows.append({"genome": genome.short_hash, "stages": stages, "valid": verdict.valid,
                     "rule": verdict.rule, "bound": BOUND,
                     "cut_by_bound": verifier.search_bound(verdict) is not None,
                     "searches": list(runs), "cpu_s": round(time.process_time() - start, 1)})
        print(rows[-1], flush=True)
    args.out.write_text(json.dumps({"problem": entry.problem.key, "from": GENOME,
                                    "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
