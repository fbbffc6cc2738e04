"""How many proposals the evolve sampler's survey yields per problem and seed, bound as the
driver binds it (its declared legal set and the proposer's repair), so that the README's
"at most 8, fewer where ..." is a count, not a guess.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/proposals/survey_size.py \
        --out bench/proposals/survey_size.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PROBLEMS = ("gemm:bf16:8192x8192x8192", "gemm:bf16:4096x4096x4096", "gemm:bf16:128x8192x8192",
            "gemm:bf16:64x4096x4096")


def survey_sizes(spec: str, seeds: range) -> list[int]:
    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space
    from tsopt.search.evolve import declared_legal
    from tsopt.search.evolve_sampler import evolve_sampler
    from tsopt.search.proposals import Proposer
    from tsopt.search.samplers import KnobView
    from tsopt.verify.verifier import predicting_judge

    space = get_space("gemm")
    problem = parse_problem_spec(spec)
    view = KnobView.of(space, problem, "evolve")
    judge = predicting_judge(space)
    legal = declared_legal(space, problem, judge)
    sizes = []
    for seed in seeds:
        sampler = evolve_sampler(view, seed)
        sampler.bind(space, problem, legal, Proposer(space, problem, view, judge).nearest_legal)
        sizes.append(len(sampler.evolution.surveyed()))
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = {spec: survey_sizes(spec, range(1, args.seeds + 1)) for spec in PROBLEMS}
    args.out.write_text(json.dumps({"seeds": list(range(1, args.seeds + 1)), "survey": rows},
                                   indent=1) + "\n")
    for spec, sizes in rows.items():
        print(f"{spec}: {sizes}")


if __name__ == "__main__":
    main()
