"""Search efficiency: candidates measured until within 2 % of the best, TPE vs random.

``studies`` (the figure) reads real studies recorded by ``tsopt tune`` (one long ``--sampler
random`` study, the reference, and a few shorter ones per sampler and ``--seed``), from their
databases (``URL:STUDY``) or from JSON dumps of them (``DUMP.json[.xz]:STUDY``, written by
``dump_studies.py``); the analysis is ``tsopt.search.efficiency`` (its docstring has the
counting rules)::

    python bench/search_efficiency_h200/search_efficiency.py studies \\
        --reference D/studies-random.json.xz:gemm-8192-random \\
        --run random=D/studies-random.json.xz:gemm-8192-random \\
        --run tpe=D/studies-tpe-s0.json.xz:gemm-8192-tpe-s0 ... [--within 0.02] \\
        [--shuffles 10000] [--remeasured D/search-top-remeasured.json] --out D/FIGURE.json

``LABEL`` names the sampler, and runs are grouped by it. The JSON goes to ``--out``, a markdown
summary (with the command line) beside it as ``.md``, and, when matplotlib is importable, a
plot as ``.png`` (best so far vs candidates measured, one line per run, the target as a dashed
line). ``--remeasured`` judges "within the target" on a paired re-measurement of the near-best
candidates (``search_remeasure.py``) instead of the recorded times.

The cheap surrogate (``table`` + ``replay``; no figure of it is committed): measuring thousands
of GEMM candidates per sampler and seed is what the GPU budget cannot pay for twice, so a
replay over one table of real measurements (genome -> median time, from a large random search)
compares many seeds:

    # 1. the table, from a measured study (e.g. `tsopt tune gemm ... --sampler random
    #    --trials 2000` on an H200, then ingested)
    python bench/search_efficiency_h200/search_efficiency.py table --db sqlite:///tsopt.db \\
        --study gemm-bf16-8192x8192x8192-sm_90a --out gemm-8192-table.json
    # 2. the replay: each sampler proposes through the space's real knobs; a proposal is
    #    answered with the measured time of the table's nearest genome
    python bench/search_efficiency_h200/search_efficiency.py replay gemm-8192-table.json \\
        --samplers tpe,random --seeds 10 --out replay.json

Replay rules. Each proposal is judged by the real verifier first: a rejected one is
told PRUNED and costs no measurement, as in the driver (``--no-verify`` skips this).
A valid proposal's knob values are matched to a row of the table:
``--match nearest`` (default) takes the row differing in the fewest knobs (ties:
the smaller genome hash), so the table is a piecewise-constant surrogate of the
space; ``--match exact`` answers only exact matches and tells the others FAIL
(they cost nothing). A row's first match counts as one candidate measured;
proposing it again costs nothing (the driver never re-measures a genome). Rows
measured ``wrong``/``hang``/... cost a measurement and are told FAIL. The target
is the best time in the table (the long random search's best) x (1 + 2 %). The
result per sampler: candidates measured until the best so far is within the
target, per seed, their median and quartiles, and how many seeds got there
within ``--budget`` candidates; plus the expectation for drawing the table's
rows uniformly without replacement, (T + 1) / (m + 1) for m of T rows on target.

GEMM: if random proposals over the whole knob product are rarely valid (with raw
placement knobs, 0 of 300 sampled were: three in four failed the dataflow gate), run the
random study and the replay on a narrower family with ``--knob`` (the study's restrictions
are recorded and the replay uses them), e.g.:

    tsopt tune gemm --m 8192 --n 8192 --k 8192 --sampler random --trials 3000 \\
        --study gemm-8192-random --workers 14 [--knob NAME=V ...]

Verification dominates a replay's own cost (a deep pipeline takes seconds in the BFS
checker), hence ``--jobs``.

``synthetic`` writes a SYNTHETIC table (made-up times over a random sample of the
space's knobs) so that the replay can be run before real data exists. It is
marked synthetic in the table and in every result made from it, and is never a
figure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tsopt.search import efficiency  # noqa: E402
from tsopt.search.efficiency import quantile  # noqa: E402

DEFAULT_PROBLEMS = {"copy": "copy:fp16:4096x4096", "gemm": "gemm:bf16:8192x8192x8192"}


@dataclass(frozen=True)
class Row:
    genome_hash: str
    params: dict[str, Any]
    median_us: float | None  # None: measured, but not correct/timed


def load_table(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    doc["rows"] = [Row(r["genome_hash"], dict(r["params"]), r.get("median_us"))
                   for r in doc["rows"]]
    return doc


def _space_and_problem(space_name: str, problem_spec: str) -> tuple[Any, Any]:
    from tsopt.core.registry import get_space, problem_for

    return get_space(space_name), problem_for(problem_spec, space_name)


# -- table from a study --------------------------------------------------------------------


def table_from_study(db_url: str, study: str) -> dict[str, Any]:
    """Rows of every measured candidate of ``study``: params from its Optuna trial (decoded),
    else from ``SearchSpace.params_of``; the best correct median, or None."""
    import optuna

    from tsopt.db.store import Store
    from tsopt.search.samplers import KnobView

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with Store(db_url) as store:
        info = store.get_study(study)
        if info is None:
            raise SystemExit(f"no study {study!r} in {db_url}")
        candidates = store.candidates(study)
        trials = {t.number: t for t in optuna.load_study(
            study_name=info.optuna_study_name, storage=store.optuna_storage()).get_trials()}
    space, problem = _space_and_problem(info.space, _spec(info.problem))
    view = KnobView.of(space, problem, "cmaes")  # decodes `<knob>#index` parameters too
    rows = []
    for c in candidates:
        if not c.measurements:
            continue
        trial = trials.get(c.trial_number) if c.trial_number is not None else None
        if trial is not None and trial.params:
            params = view.decode(trial.params)
        else:
            try:
                params = space.params_of(c.genome)
            except (ValueError, KeyError):
                continue
        best = c.best
        rows.append({"genome_hash": c.genome_hash, "params": params,
                     "median_us": best.measurement.median_us if best else None,
                     "status": best.measurement.status if best
                     else c.measurements[-1].measurement.status})
    return {"space": info.space, "problem": _spec(info.problem), "synthetic": False,
            "knobs": list(info.config.get("knobs", [])),
            "source": f"study {study} in {db_url}", "rows": rows}


def _spec(problem: Any) -> str:
    return f"{problem.op}:{problem.dtype}:" + "x".join(str(v) for v in problem.sizes.values())


# -- SYNTHETIC table -----------------------------------------------------------------------


def _unit(*parts: Any) -> float:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def synthetic_table(space_name: str, problem_spec: str, n: int, seed: int,
                    knobs: list[str]) -> dict[str, Any]:
    """SYNTHETIC: ``n`` random genomes of the space's knobs that the real verifier accepts,
    with made-up times (a product of per-knob-value effects, a few pairwise interactions and
    1 % noise); 3 % are 'wrong'."""
    import random

    import optuna

    from tsopt.search.samplers import KnobView, parse_restrictions
    from tsopt.verify.verifier import VerdictCache, verify_genome

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space, problem = _space_and_problem(space_name, problem_spec)
    view = KnobView.of(space, problem, "random",
                       parse_restrictions(knobs, space.knobs(problem)))
    cache = VerdictCache()
    names = [k.name for k in view.knobs]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    rng = random.Random(seed)
    rows: dict[str, dict[str, Any]] = {}
    for _ in range(n * 200):
        trial = study.ask()
        genome = space.suggest(view.wrap(trial), problem)
        study.tell(trial, 0.0)
        params = view.decode(trial.params)
        if genome.hash in rows or not verify_genome(genome, problem, space=space,
                                                    cache=cache).valid:
            continue
        time_us = 1000.0
        for name, value in params.items():
            time_us *= 0.75 + 0.5 * _unit("effect", seed, name, value)
        for a, b in zip(names[:-1:3], names[1::3], strict=False):
            if a in params and b in params:
                time_us *= 0.85 + 0.3 * _unit("pair", seed, a, params[a], b, params[b])
        time_us *= rng.uniform(0.99, 1.01)
        wrong = rng.random() < 0.03
        rows[genome.hash] = {"genome_hash": genome.hash, "params": params,
                             "median_us": None if wrong else time_us,
                             "status": "wrong" if wrong else "ok"}
        if len(rows) == n:
            break
    return {"space": space_name, "problem": problem_spec, "synthetic": True, "knobs": knobs,
            "source": f"SYNTHETIC: made-up times over {len(rows)} random valid genomes (seed "
                      f"{seed}); not a measurement", "rows": list(rows.values())}


# -- replay --------------------------------------------------------------------------------


class Lookup:
    """Knob values -> the table's nearest (or exact) row."""

    def __init__(self, names: list[str], rows: list[Row]) -> None:
        import numpy as np

        self.names = names
        self.rows = rows
        self.values: list[dict[Any, int]] = [{} for _ in names]
        codes = np.full((len(rows), len(names)), -1, dtype=np.int64)
        for i, row in enumerate(rows):
            for j, name in enumerate(names):
                if name in row.params:
                    codes[i, j] = self._code(j, row.params[name])
        self.codes = codes
        self.order = np.argsort([r.genome_hash for r in rows], kind="stable")
        self.exact = {tuple(c): i for i, c in enumerate(codes.tolist())}

    def _code(self, j: int, value: Any) -> int:
        return self.values[j].setdefault(json.dumps(value), len(self.values[j]))

    def find(self, params: dict[str, Any], match: str) -> int | None:
        import numpy as np

        code = np.array([self._code(j, params[n]) if n in params else -1
                         for j, n in enumerate(self.names)], dtype=np.int64)
        if match == "exact":
            return self.exact.get(tuple(code.tolist()))
        distance = (self.codes != code).sum(axis=1)
        best = distance.min()
        # Ties: the smallest genome hash (deterministic).
        for i in self.order:
            if distance[i] == best:
                return int(i)
        return None


def replay_one(space: Any, problem: Any, lookup: Lookup, sampler: str, seed: int,
               target: float, budget: int, match: str, restrict: dict[str, Any],
               cache: Any) -> dict[str, Any]:
    import optuna
    from optuna.trial import TrialState

    from tsopt.search.samplers import KnobView, make_sampler
    from tsopt.verify.verifier import verify_genome

    view = KnobView.of(space, problem, sampler, restrict)
    study = optuna.create_study(sampler=make_sampler(sampler, seed, view))
    measured: dict[int, float | None] = {}
    best = math.inf
    curve: list[float] = []
    reached: int | None = None
    proposals = rejected = 0
    while len(measured) < budget and proposals < 200 * budget:
        proposals += 1
        trial = study.ask()
        genome = space.suggest(view.wrap(trial), problem)
        if cache is not None and not verify_genome(genome, problem, space=space,
                                                   cache=cache).valid:
            rejected += 1  # the real verifier's verdict: no measurement, as in the driver
            study.tell(trial, state=TrialState.PRUNED)
            continue
        index = lookup.find(view.decode(trial.params), match)
        if index is None:
            study.tell(trial, state=TrialState.FAIL)
            continue
        value = lookup.rows[index].median_us
        if index not in measured:
            measured[index] = value
            if value is not None:
                best = min(best, value)
            curve.append(best)
            if reached is None and best <= target:
                reached = len(measured)
                break
        if value is None:
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, value)
    return {"sampler": sampler, "seed": seed, "candidates_to_target": reached,
            "measured": len(measured), "proposals": proposals, "rejected": rejected,
            "best_us": best,
            "curve": curve}


def _say(run: dict[str, Any]) -> None:
    print(f"  {run['sampler']} seed {run['seed']}: {run['candidates_to_target']} candidates to "
          f"target ({run['proposals']} proposals, {run['rejected']} rejected by the verifier, "
          f"{run['seconds']:.0f} s)", flush=True)


def _replay_job(table: dict[str, Any], sampler: str, seed: int, target: float, budget: int,
                match: str, verify: bool) -> dict[str, Any]:
    """One (sampler, seed) replay in a worker process."""
    import optuna

    from tsopt.search.samplers import KnobView, parse_restrictions
    from tsopt.verify.verifier import VerdictCache

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space, problem = _space_and_problem(table["space"], table["problem"])
    restrict = parse_restrictions(table.get("knobs", []), space.knobs(problem))
    names = [k.name for k in KnobView.of(space, problem, "random").knobs]
    start = time.perf_counter()
    run = replay_one(space, problem, Lookup(names, table["rows"]), sampler, seed, target,
                     budget, match, restrict, VerdictCache() if verify else None)
    run["seconds"] = time.perf_counter() - start
    return run


def replay(table: dict[str, Any], samplers: list[str], seeds: int, budget: int, within: float,
           match: str, verify: bool = True, jobs: int = 1) -> dict[str, Any]:
    import optuna

    from tsopt.search.samplers import KnobView, parse_restrictions
    from tsopt.verify.verifier import VerdictCache

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows: list[Row] = table["rows"]
    space, problem = _space_and_problem(table["space"], table["problem"])
    # The samplers search the space the table's study searched (its --knob restrictions).
    restrict = parse_restrictions(table.get("knobs", []), space.knobs(problem))
    cache = VerdictCache() if verify else None
    names = [k.name for k in KnobView.of(space, problem, "random").knobs]
    lookup = Lookup(names, rows)
    timed = [r.median_us for r in rows if r.median_us is not None]
    best = min(timed)
    target = best * (1 + within)
    on_target = sum(1 for t in timed if t <= target)
    results: dict[str, Any] = {}
    pairs = [(sampler, seed) for sampler in samplers for seed in range(seeds)]
    done: dict[tuple[str, int], dict[str, Any]] = {}
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_replay_job, table, sampler, seed, target, budget, match,
                                   verify): (sampler, seed) for sampler, seed in pairs}
            for future, pair in futures.items():
                done[pair] = future.result()
                _say(done[pair])
    else:
        for sampler, seed in pairs:
            start = time.perf_counter()
            run = replay_one(space, problem, lookup, sampler, seed, target, budget, match,
                             restrict, cache)
            run["seconds"] = time.perf_counter() - start
            done[(sampler, seed)] = run
            _say(run)
    for sampler in samplers:
        runs = [done[(sampler, seed)] for seed in range(seeds)]
        costs = [r["candidates_to_target"] for r in runs]
        got = sorted(c for c in costs if c is not None)
        # Seeds that never reached the target count as the budget (a lower bound).
        bounded = sorted(c if c is not None else budget for c in costs)
        results[sampler] = {
            "candidates_to_target": costs, "reached": f"{len(got)}/{len(costs)}",
            "median": statistics.median(bounded), "q1": quantile(bounded, 0.25),
            "q3": quantile(bounded, 0.75), "runs": runs,
        }
    return {
        "synthetic": bool(table.get("synthetic")), "source": table.get("source", ""),
        "space": table["space"], "problem": table["problem"], "rows": len(rows),
        "timed_rows": len(timed), "best_us": best, "within": within, "target_us": target,
        "rows_on_target": on_target, "match": match, "verify": verify,
        "knobs": table.get("knobs", []), "budget": budget, "seeds": seeds,
        "uniform_expected": (len(rows) + 1) / (on_target + 1), "samplers": results,
    }


def markdown(result: dict[str, Any], command: str) -> str:
    banner = ("**SYNTHETIC TABLE — exercises the replay; not a figure.**\n\n"
              if result["synthetic"] else "")
    lines = [f"# Search efficiency: {result['space']} {result['problem']}", "", banner
             + f"Command: `{command}`  ", f"Table: {result['source']}: {result['rows']} genomes, "
             f"{result['timed_rows']} timed; best {result['best_us']:.2f} us; target "
             f"{result['target_us']:.2f} us (+{100 * result['within']:.0f} %), met by "
             f"{result['rows_on_target']} rows. Knobs: {result['knobs'] or 'all'}; verifier: "
             f"{'on' if result['verify'] else 'off'}; match: {result['match']}; budget "
             f"{result['budget']} candidates; {result['seeds']} seeds.", "",
             "| sampler | candidates measured to target: median (q1-q3) | seeds reaching it |",
             "|---|---|---|"]
    for name, r in result["samplers"].items():
        lines.append(f"| {name} | {r['median']:.0f} ({r['q1']:.0f}-{r['q3']:.0f}) | "
                     f"{r['reached']} |")
    lines.append(f"| uniform draws from the table (expected) | "
                 f"{result['uniform_expected']:.0f} | - |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("table", help="a replay table from a measured study")
    t.add_argument("--db", required=True)
    t.add_argument("--study", required=True)
    t.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("synthetic", help="a SYNTHETIC table (never a figure)")
    s.add_argument("--space", default="gemm")
    s.add_argument("--problem", default=None)
    s.add_argument("--n", type=int, default=2000)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--knob", action="append", default=[],
                   help="restrict a knob as `tsopt tune --knob` does (repeatable)")
    s.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("replay", help="replay samplers over a table")
    r.add_argument("table", type=Path)
    r.add_argument("--samplers", default="tpe,random")
    r.add_argument("--seeds", type=int, default=10)
    r.add_argument("--budget", type=int, default=500)
    r.add_argument("--within", type=float, default=0.02)
    r.add_argument("--match", choices=("nearest", "exact"), default="nearest")
    r.add_argument("--jobs", type=int, default=1,
                   help="(sampler, seed) replays run in this many processes")
    r.add_argument("--no-verify", action="store_true",
                   help="answer every proposal from the table (no verifier: rejected "
                   "proposals then borrow a valid neighbour's time)")
    r.add_argument("--out", type=Path, default=None, help="JSON (and .md beside it)")
    st = sub.add_parser("studies", help="the figure from measured studies (the primary one)")
    st.add_argument("--reference", required=True, metavar="URL:STUDY",
                    help="the long random study that sets the target (its best x (1 + within)); "
                    "a JSON dump (DUMP.json[.xz]:STUDY) may stand in for the URL")
    st.add_argument("--run", action="append", default=[], required=True,
                    metavar="LABEL=URL:STUDY", help="a measured study, labelled by its sampler "
                    "(repeatable; the reference may be one of them)")
    st.add_argument("--within", type=float, default=0.02)
    st.add_argument("--shuffles", type=int, default=10000,
                    help="random orders of the reference's measured candidates")
    st.add_argument("--seed", type=int, default=0, help="seed of the shuffles")
    st.add_argument("--remeasured", type=Path, default=None, metavar="HEADLINE_JSON",
                    help="judge 'within the target' on a paired re-measurement of the near-best "
                    "candidates (search_remeasure.py beside this script) instead of the recorded times")
    st.add_argument("--out", type=Path, default=None,
                    help="JSON (and .md, and .png if matplotlib is importable, beside it)")
    args = parser.parse_args()
    if args.command == "studies":
        command = shlex.join(["python", "bench/search_efficiency_h200/search_efficiency.py",
                              *sys.argv[1:]])
        try:
            result = efficiency.studies(args.reference, args.run, args.within, args.shuffles,
                                        args.seed, args.remeasured)
        except ValueError as exc:  # UserInputError too
            parser.error(str(exc))
        if args.out:
            text = efficiency.write_figure(result, args.out, command)
        else:
            result["command"] = command
            text = efficiency.markdown(result, command)
        print(text)
        return
    if args.command == "table":
        doc = table_from_study(args.db, args.study)
    elif args.command == "synthetic":
        doc = synthetic_table(args.space, args.problem or DEFAULT_PROBLEMS[args.space],
                              args.n, args.seed, args.knob)
    else:
        command = "python bench/search_efficiency_h200/search_efficiency.py " + " ".join(sys.argv[1:])
        result = replay(load_table(args.table), args.samplers.split(","), args.seeds,
                        args.budget, args.within, args.match, verify=not args.no_verify,
                        jobs=args.jobs)
        result["command"] = command
        text = markdown(result, command)
        print(text)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
            args.out.with_suffix(".md").write_text(text)
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(doc['rows'])} rows -> {args.out}" + (" (SYNTHETIC)" if doc["synthetic"] else ""))


if __name__ == "__main__":
    main()
