"""Proposals legal by construction: what share of each sampler's proposals the real verifier
passes, and what a proposal and a valid one cost in CPU.

    .venv/bin/python bench/proposals/proposals.py --trials 200   # writes proposals.json beside it

For each space (GEMM bf16 8192^3, copy fp16 4096x4096) and sampler, an in-memory Optuna
study asks ``--trials`` trials; each proposal goes through ``tsopt.search.proposals.Proposer``
(repaired into the space's declared factorisation) and then the real verifier (dataflow, TS
skeleton + BFS checker, tsopt's checks) with one verdict cache over the study, as a study
has. No GPU here: a valid trial is told a synthetic objective (a digest of its genome, the
same for every sampler) and an invalid one fails, so TPE models the legal region, not speed.
``--raw`` also runs the samplers without repair (the proposals as before).

CPU seconds are the process's (``time.process_time``): proposing (the factors' own cheap
verdicts included) and verifying, per proposal and per valid proposal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

PROBLEMS = {"gemm": "gemm:bf16:8192x8192x8192", "copy": "copy:fp16:4096x4096"}


def run(space_name: str, sampler_name: str, trials: int, seed: int, repair: bool) -> dict[str, Any]:
    import optuna

    from tsopt.core.registry import get_space, problem_for
    from tsopt.search.proposals import Proposer
    from tsopt.search.samplers import KnobView, make_sampler
    from tsopt.verify.verifier import VerdictCache, judge_for, verify_genome

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = get_space(space_name)
    problem = problem_for(PROBLEMS[space_name], space_name)
    cache = VerdictCache()
    space.judge = judge_for(space, cache)
    space.knobs(problem)  # the shipped screens, checked once (not a proposal's cost)
    view = KnobView.of(space, problem, sampler_name)
    proposer = Proposer(space, problem, view, space.judge)
    if not repair:
        proposer.factors = ()
    study = optuna.create_study(sampler=make_sampler(sampler_name, seed, view))
    outcomes: dict[str, int] = {}
    valid = legal = repaired = 0
    distinct: dict[str, bool] = {}
    propose_cpu = verify_cpu = 0.0
    verdict_cpu: list[float] = []
    start = time.perf_counter()
    for _ in range(trials):
        trial = study.ask()
        c = time.process_time()
        proposal = proposer.propose(trial)
        propose_cpu += time.process_time() - c
        legal += proposal.legal and proposer.legal(proposal.params)
        repaired += bool(proposal.repaired)
        c = time.process_time()
        verdict = verify_genome(proposal.genome, problem, space=space, cache=cache)
        verdict_cpu.append(time.process_time() - c)
        verify_cpu += verdict_cpu[-1]
        key = "valid" if verdict.valid else f"{verdict.stage}:{verdict.rule}"
        outcomes[key] = outcomes.get(key, 0) + 1
        valid += verdict.valid
        distinct[proposal.genome.hash] = verdict.valid
        if verdict.valid:
            study.tell(trial, zlib.crc32(proposal.genome.hash.encode()) / 2**32)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    wall = time.perf_counter() - start
    cpu = propose_cpu + verify_cpu
    verdict_cpu.sort()
    return {
        "space": space_name, "problem": PROBLEMS[space_name], "sampler": sampler_name,
        "repair": repair, "seed": seed, "proposals": trials,
        "valid": valid, "pass_rate": valid / trials,
        "distinct_genomes": len(distinct), "distinct_valid": sum(distinct.values()),
        "distinct_pass_rate": sum(distinct.values()) / max(1, len(distinct)),
        "inside_declared_legal_set": legal, "repaired": repaired,
        "outcomes": dict(sorted(outcomes.items())),
        "cpu_s": {"propose": propose_cpu, "verify": verify_cpu,
                  "per_proposal": cpu / trials,
                  "per_valid": cpu / valid if valid else None,
                  "verdict_median": verdict_cpu[len(verdict_cpu) // 2],
                  "verdict_p90": verdict_cpu[int(0.9 * (len(verdict_cpu) - 1))]},
        "wall_s": wall,
        "memo": {"whole_verdict_hits": cache.judged_hits, "verified": cache.verified,
                 "ts_gate_hits": cache.hits, "bfs_runs": cache.bfs_runs,
                 "bfs_hits": cache.bfs_hits},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", default="gemm,copy")
    parser.add_argument("--samplers", default="random,tpe")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--raw", action="store_true", help="also the samplers without repair")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "proposals.json")
    args = parser.parse_args()
    command = "python bench/proposals/proposals.py " + " ".join(sys.argv[1:])
    doc: dict[str, Any] = {"command": command.strip(), "machine": f"{os.cpu_count()} CPUs",
                           "load_start": [round(x, 2) for x in os.getloadavg()], "runs": []}
    for space in args.spaces.split(","):
        for sampler in args.samplers.split(","):
            for repair in ((True, False) if args.raw else (True,)):
                result = run(space, sampler, args.trials, args.seed, repair)
                doc["runs"].append(result)
                doc["load_end"] = [round(x, 2) for x in os.getloadavg()]
                args.out.write_text(json.dumps(doc, indent=2) + "\n")  # after every run
                print(f"{space:5s} {sampler:7s} repair={repair!s:5s} pass "
                      f"{result['valid']}/{result['proposals']} ({result['pass_rate']:.0%}), "
                      f"distinct {result['distinct_valid']}/{result['distinct_genomes']}, "
                      f"CPU/proposal {result['cpu_s']['per_proposal']:.3f} s, CPU/valid "
                      f"{result['cpu_s']['per_valid'] or float('nan'):.3f} s {result['outcomes']}",
                      flush=True)
    doc["load_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
