"""How many states does TS's exhaustive search need to finish on a persistent two-warpgroup
GEMM schedule, and how long does it take? Genome ab0b61f4b4e4 (in the seed library when this ran;
now read from the committed studies by ``bench/stream_k/genomes.py``) on 1024³ (2x1
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

    from tsopt.core.genome import Genome
    from tsopt.core.problem import Problem
    from tsopt.core.registry import get_space
    from tsopt.verify import verifier

    verifier._install_bfs_memo()  # the bound is applied by the verifier's wrapper
    bounded = exhaustive_checker.check_all_interleavings
    runs: list[dict] = []

    def counting(*a, **k):  # the states each search explored, and whether the bound cut it
        result = bounded(*a, **k)
        runs.append({"states": result.states_explored, "cut": result.hit_state_limit})
        return result

    exhaustive_checker.check_all_interleavings = counting
    sys.path.insert(0, str(ROOT / "bench" / "stream_k"))
    from genomes import genome_doc, known_genomes

    found = Genome.from_dict(genome_doc(GENOME, known_genomes()))
    problem = Problem.of("gemm", "bf16", m=1024, n=1024, k=1024)  # its library entry's
    space = get_space("gemm")
    space.judge = verifier.judge_for(space)
    rows = []
    for stages in map(int, args.stages.split(",")):
        genome = found.replace(stages=stages)
        runs.clear()
        start = time.process_time()
        verdict = verifier.verify_genome(genome, problem, space=space,
                                         cache=verifier.VerdictCache())
        rows.append({"genome": genome.short_hash, "stages": stages, "valid": verdict.valid,
                     "rule": verdict.rule, "bound": BOUND,
                     "cut_by_bound": verifier.search_bound(verdict) is not None,
                     "searches": list(runs), "cpu_s": round(time.process_time() - start, 1)})
        print(rows[-1], flush=True)
    args.out.write_text(json.dumps({"problem": problem.key, "from": GENOME,
                                    "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
