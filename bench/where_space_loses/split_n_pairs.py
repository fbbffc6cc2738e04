"""Does the N-split (arrangement ``split_n``, 192-row tiles) close the gap where the space loses?

At mid (bf16 1536x3072x2048) and fp16-wide (fp16 512x12288x2560) cuBLAS runs 192-row tiles
whose two consumer warpgroups split the tile along N (``profiles.md``); the space could not
express that until ``split_n``. Per problem, here (the DSL):

1. variants of each oracle pick (``bench/regret/oracle-best.json``, the oracle tables'
   three best): arrangement ``split_n`` with two consumers, every (tile_m, tile_n) of
   {128, 192, 256} x {128, 192, 256}, with the pick's register split and the seed's, the
   pick's other genes kept, stages lowered until the checks accept (the predicting judge:
   tsopt's checks and the verifier's cheap gates);
2. per tile, the analytical model's best of them, then built (judged in full first);
3. written with the three oracle picks into one pair bundle, twice in opposite orders
   (``bench/regret/sidebyside.py``), for the GPU machine to measure with
   ``python -m tsopt.workers.runner --bundle`` (torch only).

The oracle is test data: nothing here feeds the library, a constant or a coupling.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/where_space_loses/split_n_pairs.py \\
        --out carry/split_n_pairs
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "bench" / "regret"))
sys.path.insert(0, str(ROOT))

import sidebyside  # noqa: E402

PROBLEMS = ("mid", "fp16-wide")
TILES = tuple((m, n) for m in (128, 192, 256) for n in (128, 192, 256))
REGISTERS = ((40, 232),)
"""(producer, consumer) register budgets tried beside each pick's own: the seed's, which a
192-row split_n tile needs (192 x 96 per warpgroup: 144 accumulator registers)."""


def variants(space: Any, pick: dict[str, Any], problem: Any, judge: Any) -> list[Any]:
    """``pick``'s split_n variants the predicting judge accepts: per tile and register split
    (:data:`REGISTERS`, the pick's own too), the most stages that fit."""
    from search_spaces.gemm.config import NUMERIC_CHOICES
    from tsopt.core.genome import Genome

    base = space.params_of(Genome.from_dict(pick["genome"]))
    stage_choices = sorted(NUMERIC_CHOICES["stages"], reverse=True)
    registers = {(base["producer_regs"], base["consumer_regs"]), *REGISTERS}
    out = []
    for (tile_m, tile_n), (producer, consumer) in itertools.product(TILES, sorted(registers)):
        for stages in [s for s in stage_choices if s <= max(base["stages"], 8)]:
            params = space.coupled({**base, "arrangement": "split_n", "consumers": 2,
                                    "tile_m": tile_m, "tile_n": tile_n, "stages": stages,
                                    "producer_regs": producer, "consumer_regs": consumer},
                                   moved=("arrangement", "tile_m", "tile_n"))
            try:
                genome = space.genome(**{k: v for k, v in params.items()
                                         if not k.endswith(".placement")},
                                      load=pick_placement(base, "load"),
                                      mma=pick_placement(base, "mma"))
            except (KeyError, ValueError):
                break
            if judge(genome, problem).valid:
                out.append(genome)
                break
    return out


def pick_placement(params: dict[str, Any], task: str) -> tuple[Any, ...]:
    from search_spaces.gemm.config import parse_placement_name

    return parse_placement_name(task, str(params[f"{task}.placement"]))


def choose(space: Any, entry: dict[str, Any], judge: Any) -> list[dict[str, Any]]:
    """Per (tile_m, tile_n), the analytical model's best split_n variant of ``entry``'s picks."""
    from tsopt.core.problem import parse_problem_spec
    from tsopt.search.cost_model import analytical_log

    problem = parse_problem_spec(entry["problem"])
    best: dict[tuple[int, int], tuple[float, Any]] = {}
    for pick in entry["oracle"]:
        for genome in variants(space, pick, problem, judge):
            score = analytical_log(space.params_of(genome), problem.sizes)
            tile = (genome["tile_m"], genome["tile_n"])
            if tile not in best or score < best[tile][0]:
                best[tile] = (score, genome)
    ranked = [g for _, g in sorted(best.values(), key=lambda sg: sg[0])]
    print(f"{entry['name']}: split_n at {len(ranked)} tiles", flush=True)
    return [{"genome": g.to_dict(), "genome_hash": g.hash,
             "role": {"kind": "split_n", "rank": i + 1}} for i, g in enumerate(ranked)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import predicting_judge

    space = get_space("gemm")
    judge = predicting_judge(space)
    best = sidebyside.read_oracle_best()
    args.out.mkdir(parents=True, exist_ok=True)
    cache = ROOT / ".tsopt" / "artifacts"
    summary = {}
    for name in PROBLEMS:
        entry = best[name]
        slots = sidebyside.merge_items([*sidebyside.oracle_items(entry),
                                        *choose(space, entry, judge)])
        sidebyside.build_missing(slots, entry["problem"], cache, args.workers)
        bundles = sidebyside.write_pair_bundles(args.out, name, entry["problem"], slots)
        summary[name] = {"bundles": [b.name for b in bundles],
                         "built": sum(1 for s in slots if s.get("artifact_dir")),
                         "not_built": [s["genome_hash"][:12] for s in slots
                                       if not s.get("artifact_dir")]}
        print(json.dumps({name: summary[name]}), flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
