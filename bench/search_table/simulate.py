"""Searches replayed on a measured table, as Kernel Tuner's simulation mode replays a
brute-forced cache: many seeds per strategy for the price of measuring the table once.

The table (``table`` subcommand) is every point of a narrowed GEMM sub-space
(``table_space.RESTRICT``): its verdict, its build and, for the built ones, its paired
measurement on the H200 (ratio = cuBLAS time / candidate time, with its 95 % interval and
rounds). A replay runs a real Optuna study (in memory) per strategy and seed, with the
driver's own proposal path: ``KnobView.of(space, problem, sampler, restriction)``,
``make_sampler`` and ``space.suggest(view.wrap(trial), problem)``, and is told what the
driver tells (``tsopt.search.outcomes.tell``):

- a point the verifier rejected: PRUNED, no measurement;
- a point that failed to build, or that the table holds no measurement of: FAIL, no
  measurement (fair to every strategy alike);
- a point measured but not correct: FAIL, one measurement;
- a correct point: one measurement, its relative time 1 / r, where r is drawn from a
  normal around the measured ratio with the sigma of its 95 % interval (halfwidth / 1.96):
  the sampler sees noise as it would on the GPU;
- a genome measured before in the run: its earlier value again, no measurement (the driver
  never re-measures a genome).

Proposals are restricted to the table: every knob is narrowed to the table's values, so
every proposal is a point of the table.

What is scored is the best TRUE (table) ratio among the candidates measured so far (a
confirmation round re-measures the near-best; the noise only steers the sampler). Per
strategy: best-so-far vs measurements (median and quartiles over seeds), the "Tuning the
Tuner" score P at a stated budget B (Willemsen et al.: at each budget b, P(b) = (S(b) -
R(b)) / (opt - R(b)), S the strategy's mean best-so-far, R random search's exact expected
best-so-far drawing the table's measured points without replacement, opt the table's best;
P = mean of P(b) over b = 1..B: 0 is random search, 1 finds the optimum at once), and
measurements to within 2 % of the table's best, vs random's exact expectation (T+1)/(m+1).

    python bench/search_table/simulate.py table --out bench/search_table/table-8192.json
    python bench/search_table/simulate.py synthetic --out /tmp/table-SYNTHETIC.json
    python bench/search_table/simulate.py simulate TABLE --samplers random,tpe,default \\
        --seeds 20 --budget 200 --out bench/search_table/sim-8192.json   # + .png, .md
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import math
import random
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from table_space import CORE, PROBLEM_SPEC, RESTRICT, SMALL, genome_of, in_product, points  # noqa: E402

PRODUCTS = {"full": RESTRICT, "core": CORE, "small": SMALL}

ROOT = Path(__file__).resolve().parents[2]
CARRY = ROOT / "carry" / "table-8192"
Z95 = 1.959964
WITHIN = 0.02


# -- the table -------------------------------------------------------------------------------


def read_text(path: Path) -> str:
    """A file's text, xz-compressed or not (the committed table is)."""
    import lzma

    return lzma.open(path, "rt").read() if path.suffix == ".xz" else path.read_text()


def write_text(path: Path, text: str) -> None:
    import lzma

    if path.suffix == ".xz":
        with lzma.open(path, "wt", preset=9) as f:
            f.write(text)
    else:
        path.write_text(text)


def point_key(params: dict[str, Any]) -> str:
    """A point of the product by its knob values (the table's knobs only: a knob added to the
    space later is fixed at its default and does not name a point)."""
    return json.dumps({n: params.get(n) for n in RESTRICT}, sort_keys=True)


def params_of_genome(space: Any, genome: Any) -> dict[str, Any]:
    return space.params_of(genome)


def table_from_build(index: Path, parts: Sequence[Path], product: str = "full"
                     ) -> dict[str, Any]:
    """The measured table: every point of the product (``full`` or ``core``) judged so far,
    with its verdict, its build and its paired measurement (each bundle's ``results.json``)."""
    restrict = PRODUCTS[product]
    from tsopt.core.genome import Genome
    from tsopt.core.registry import get_space

    space = get_space("gemm")
    rows: dict[str, dict[str, Any]] = {}
    for line in read_text(index).splitlines():
        if line.strip():
            r = json.loads(line)
            rows[r["genome_hash"]] = r  # the last row of a genome stands
    measured: dict[str, dict[str, Any]] = {}
    devices = set()
    for part in parts:
        # a bundle directory (its results.json) or a results file brought back alone
        path = part / "results.json" if part.is_dir() else part
        if not path.exists():
            continue
        doc = json.loads(read_text(path))
        for m in doc["measurements"]:
            measured[m["genome_hash"]] = m
            devices.add(m.get("device") or "")
    table = []
    judged_values: dict[str, set[str]] = {n: set() for n in restrict}
    for h, r in rows.items():
        params = params_of_genome(space, Genome.from_dict(r["genome"]))
        if not in_product(params, restrict):
            continue  # a known-good schedule outside the product: no proposal reaches it
        for n in restrict:
            if n in params:
                judged_values[n].add(json.dumps(params[n]))
        m = measured.get(h)
        row = {"genome_hash": h, "key": point_key(params), "origin": r["origin"],
               "valid": r["valid"], "verdict": r["verdict"][:200],
               "built": bool(r.get("build_ok")), "status": None, "ratio": None,
               "ratio_lo": None, "ratio_hi": None, "rounds": None, "median_us": None}
        if m is not None:
            row.update(status=m["status"], ratio=m.get("ratio"), ratio_lo=m.get("ratio_lo"),
                       ratio_hi=m.get("ratio_hi"), rounds=m.get("rounds"),
                       median_us=m.get("median_us"))
        table.append(row)
    # One row per point (two genomes of one point, should the genes change under the build):
    # the measured one first, then the built one.
    rank = {"ok": 0}
    by_key: dict[str, dict[str, Any]] = {}
    for row in sorted(table, key=lambda r: (rank.get(r["status"], 1 if r["status"] else 2),
                                            not r["built"], r["genome_hash"])):
        by_key.setdefault(row["key"], row)
    table = list(by_key.values())
    # The product as judged: a knob value no judged point has (a value added to table_space
    # after the table was built) is left out, so that every proposal is a point of the table.
    restrict = {n: tuple(v for v in c if json.dumps(v) in judged_values[n])
                for n, c in restrict.items()}
    table = [r for r in table if in_product(json.loads(r["key"]), restrict)]
    provenance = sorted({(r.get("commit", ""), r.get("kernel_sha256", ""))
                         for r in rows.values() if r.get("build_ok")})
    return {"synthetic": False, "problem": PROBLEM_SPEC, "space": "gemm", "product": product,
            "product_points": len(points(restrict)),
            "restrict": {k: list(v) for k, v in restrict.items()},
            "source": f"{index} + {', '.join(str(p) for p in parts)}",
            "devices": sorted(devices - {""}),
            "built_from": [{"commit": c, "kernel_sha256": k} for c, k in provenance],
            "rows": sorted(table, key=lambda r: r["key"])}


def synthetic_table(seed: int, restrict: dict[str, tuple[Any, ...]] | None = None,
                    ) -> dict[str, Any]:
    """SYNTHETIC (made-up ratios, never a figure): every point of the product, judged by
    tsopt's own checks only (no TS BFS: cheap), with ratios from per-knob-value effects, a
    few pairwise interactions, and a made-up 95 % interval of +-0.5..2 %."""
    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space

    space = get_space("gemm")
    problem = parse_problem_spec(PROBLEM_SPEC)
    rng = random.Random(seed)
    restrict = dict(RESTRICT if restrict is None else restrict)
    names = list(restrict)
    rows = []
    for values in points(restrict):
        genome = genome_of(space, values)
        findings = space.tsopt_checks(genome, problem)
        params = {**values}
        ratio = 1.0
        for name, value in params.items():
            ratio *= 0.8 + 0.3 * _unit("effect", seed, name, value)
        for a, b in zip(names[:-1:2], names[1::2], strict=False):
            ratio *= 0.9 + 0.15 * _unit("pair", seed, a, params.get(a), b, params.get(b))
        half = ratio * rng.uniform(0.005, 0.02)
        wrong = rng.random() < 0.02
        rows.append({"genome_hash": genome.hash, "key": point_key(params), "origin": "table",
                     "valid": not findings,
                     "verdict": "valid" if not findings else f"rejected: {findings[0].rule}",
                     "built": not findings, "status": None if findings else
                     ("wrong" if wrong else "ok"),
                     "ratio": None if findings or wrong else ratio,
                     "ratio_lo": None if findings or wrong else ratio - half,
                     "ratio_hi": None if findings or wrong else ratio + half,
                     "rounds": None if findings else 8, "median_us": None})
    return {"synthetic": True, "problem": PROBLEM_SPEC, "space": "gemm", "product": "synthetic",
            "product_points": len(rows), "restrict": {k: list(v) for k, v in restrict.items()},
            "source": f"SYNTHETIC: made-up ratios over the table's product (seed {seed}); "
                      "not a measurement", "devices": [], "built_from": [],
            "rows": sorted(rows, key=lambda r: r["key"])}


def _unit(*parts: Any) -> float:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class Table:
    """A table read for replay: rows by point key, the measured ones, the optimum."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.synthetic = bool(doc["synthetic"])
        self.restrict = {k: tuple(v) for k, v in doc["restrict"].items()}
        self.rows = {r["key"]: r for r in doc["rows"]}
        self.measured = [r for r in doc["rows"] if r["status"] is not None]
        ok = [r["ratio"] for r in self.measured if r["status"] == "ok" and r["ratio"]]
        if not ok:
            raise ValueError("the table holds no correct measurement")
        self.best = max(ok)
        self.target = self.best / (1 + WITHIN)  # within 2 % of the best time
        self.on_target = sum(1 for r in ok if r >= self.target)
        # A failed measurement is never a best: 0 for the best-so-far.
        self.values = sorted(self.true_ratio(r) for r in self.measured)

    @staticmethod
    def true_ratio(row: dict[str, Any]) -> float:
        return float(row["ratio"]) if row["status"] == "ok" and row["ratio"] else 0.0

    @staticmethod
    def sigma(row: dict[str, Any]) -> float:
        lo, hi = row.get("ratio_lo"), row.get("ratio_hi")
        if lo is None or hi is None:
            return 0.0
        return max(0.0, (float(hi) - float(lo)) / (2 * Z95))

    def random_expected_best(self, budget: int) -> list[float]:
        """E[best of b measured points drawn without replacement], b = 1..budget (exact):
        the i-th smallest of T is the best of b with probability C(i-1, b-1) / C(T, b)."""
        v, total = self.values, len(self.values)
        out = []
        for b in range(1, budget + 1):
            if b >= total:
                out.append(v[-1])
                continue
            log_all = _log_comb(total, b)
            out.append(sum(v[i - 1] * math.exp(_log_comb(i - 1, b - 1) - log_all)
                           for i in range(b, total + 1)))
        return out


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


# -- strategies -------------------------------------------------------------------------------


def default_sampler() -> str:
    """What ``tsopt tune`` uses when no ``--sampler`` is given, at run time."""
    from dataclasses import fields

    from tsopt.search.request import TuneRequest

    return next(f.default for f in fields(TuneRequest) if f.name == "sampler")


def oracle_sampler(params: dict[str, Any], view: Any) -> Any:
    """A sampler that always proposes ``params`` (the table's optimum, by knob name): P = 1 by
    definition, the check that the score is computed right."""
    import optuna

    class Oracle(optuna.samplers.BaseSampler):
        def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
            return {}

        def sample_relative(self, study: Any, trial: Any, space: Any) -> dict[str, Any]:
            return {}

        def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
            return params[view.knob_name(name)]

    return Oracle()


def make_strategy(name: str, seed: int, view: Any, space: Any, problem: Any,
                  table: Table) -> Any:
    """``make_sampler(name, seed, view)`` as the driver calls it; ``oracle`` is the test's."""
    from tsopt.search.samplers import make_sampler

    if name == "oracle":
        best = next(r for r in table.measured if Table.true_ratio(r) == table.best)
        return oracle_sampler(json.loads(best["key"]), view)
    accepted = inspect.signature(make_sampler).parameters
    extra = {k: v for k, v in (("space", space), ("problem", problem)) if k in accepted}
    return make_sampler(name, seed, view, **extra)


def proposer(space: Any, problem: Any, restrict: dict[str, tuple[Any, ...]]) -> Any:
    """The space the replay proposes through: the real one, as the driver's. Its knobs need
    its placement screen; a stale one (the kernel edited since it was screened) stops the
    replay as it stops ``tsopt tune``, with the error saying how to recompute it."""
    from tsopt.core.errors import UserInputError

    try:
        space.knobs(problem)
    except UserInputError as exc:
        raise SystemExit(f"simulate: {exc}") from None
    return space


_JUDGE: dict[str, Any] = {}


def shared_judge(space: Any) -> Any:
    """One verifier with one verdict cache for every replay of this process (the driver shares
    verdicts across studies through its database)."""
    from tsopt.verify.verifier import VerdictCache, judge_for

    if "judge" not in _JUDGE:
        _JUDGE["judge"] = judge_for(space, VerdictCache())
    return _JUDGE["judge"]


def proposal_path(live: Any, problem: Any, view: Any) -> Any:
    """``trial -> knob values`` as the driver derives a trial's genome: through
    ``tsopt.search.proposals.Proposer`` (every sampler's proposal repaired into the space's
    declared legal set) where this tree has it, else ``space.suggest``."""
    try:
        from tsopt.search.proposals import Proposer
    except ImportError:
        Proposer = None
    if Proposer is not None:
        judge = getattr(live, "judge", None) or shared_judge(live)
        proposer = Proposer(live, problem, view, judge)
        return lambda trial: dict(proposer.propose(trial).params)

    def suggest(trial: Any) -> dict[str, Any]:
        live.suggest(view.wrap(trial), problem)
        return view.decode(trial.params)

    return suggest


def warm_verdicts(table: Table) -> set[str]:
    """The points the space declares legal (the driver's ``Proposer`` draws inside them),
    judging the proposal factors of every point once, in this process, so that forked
    replays share the verdicts (TS's BFS takes ~1 s a factor)."""
    try:
        from tsopt.search.proposals import Proposer
    except ImportError:
        return set(table.rows)
    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space
    from tsopt.search.samplers import KnobView

    space = get_space("gemm")
    problem = parse_problem_spec(PROBLEM_SPEC)
    live = proposer(space, problem, table.restrict)
    restrict = {k.name: table.restrict.get(k.name, k.choices[:1]) for k in live.knobs(problem)}
    view = KnobView.of(live, problem, "random", restrict)
    prop = Proposer(live, problem, view, getattr(live, "judge", None) or shared_judge(live))
    legal = set()
    for key in table.rows:
        params = {k: v for k, v in json.loads(key).items() if v is not None}
        for k in view.knobs:
            params.setdefault(k.name, view.choices(k.name, k.choices)[0])
        if prop.legal(params):
            legal.add(key)
    return legal


def replay_one(table: Table, strategy: str, seed: int, budget: int, max_proposals: int,
               noise: bool = True) -> dict[str, Any]:
    """One seeded search on the table: proposals through the driver's path, told what the
    driver tells. Stops at ``budget`` measurements (or ``max_proposals`` proposals)."""
    import optuna

    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space
    from tsopt.search.outcomes import Outcome, tell
    from tsopt.search.samplers import KnobView

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = get_space("gemm")
    problem = parse_problem_spec(PROBLEM_SPEC)
    live = proposer(space, problem, table.restrict)
    restrict = {k.name: table.restrict.get(k.name, k.choices[:1]) for k in live.knobs(problem)}
    view = KnobView.of(live, problem, "cmaes" if strategy == "cmaes" else strategy, restrict)
    sampler = make_strategy(strategy, seed, view, live, problem, table)
    propose = proposal_path(live, problem, view)
    if hasattr(sampler, "bind"):  # as the driver does (evolve: plans completed in the space,
        # kept in its declared legal set, judged by the replay's one verifier; the proposer's
        # repair for its survey, where this tree's sampler takes one)
        from tsopt.search.evolve import declared_legal
        from tsopt.search.proposals import Proposer

        judge = getattr(live, "judge", None) or shared_judge(live)
        legal = declared_legal(live, problem, judge)
        repair = getattr(Proposer(live, problem, view, judge), "nearest_legal", None)
        if repair is not None and "repair" in inspect.signature(sampler.bind).parameters:
            sampler.bind(live, problem, legal, repair)
        else:
            sampler.bind(live, problem, legal)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    rng = random.Random(f"noise-{strategy}-{seed}")
    told: dict[str, float | None] = {}  # point -> value told when first measured
    best_true = 0.0
    incumbent_obs, incumbent_true = math.inf, 0.0
    curve: list[float] = []
    incumbent_curve: list[float] = []
    reached: int | None = None
    proposals = pruned = failed = duplicates = 0
    t0 = time.perf_counter()
    while len(curve) < budget and proposals < max_proposals:
        proposals += 1
        trial = study.ask()
        try:
            params = propose(trial)
        except (ValueError, KeyError) as exc:
            tell(study, trial, Outcome(state="fail", attrs={"suggest_error": str(exc)[:200]}))
            failed += 1
            continue
        key = point_key(params)
        row = table.rows.get(key)
        if key in told:
            duplicates += 1
            value = told[key]
            tell(study, trial, Outcome(value=value) if value is not None
                 else Outcome(state="fail"))
            continue
        if row is None:
            failed += 1  # not judged yet: no measurement, for every strategy alike
            tell(study, trial, Outcome(state="fail", attrs={"not_in_table": True}))
            continue
        if not row["valid"]:
            pruned += 1
            tell(study, trial, Outcome(state="pruned", attrs={"rejected": "verifier"}))
            continue
        if not row["built"] or row["status"] is None:
            failed += 1  # not built / not measured: no measurement, for every strategy alike
            tell(study, trial, Outcome(state="fail", attrs={"not_in_table": True}))
            continue
        true = Table.true_ratio(row)
        if true > 0:
            sigma = Table.sigma(row) if noise else 0.0
            seen = max(1e-6, rng.gauss(true, sigma))
            value: float | None = 1.0 / seen
        else:
            value = None
        told[key] = value
        tell(study, trial, Outcome(value=value) if value is not None else Outcome(state="fail"))
        best_true = max(best_true, true)
        if value is not None and value < incumbent_obs:
            incumbent_obs, incumbent_true = value, true
        curve.append(best_true)
        incumbent_curve.append(incumbent_true)
        if reached is None and best_true >= table.target:
            reached = len(curve)
    return {"strategy": strategy, "seed": seed, "measured": len(curve), "proposals": proposals,
            "pruned": pruned, "failed": failed, "duplicates": duplicates,
            "to_within": reached, "best": best_true, "curve": curve,
            "incumbent_curve": incumbent_curve, "seconds": round(time.perf_counter() - t0, 2)}


# -- scoring --------------------------------------------------------------------------------


def _at(curve: list[float], b: int) -> float:
    """Best-so-far after ``b`` measurements; a run that stopped earlier keeps its last."""
    return curve[min(b, len(curve)) - 1] if curve else 0.0


def p_score(table: Table, runs: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """Tuning the Tuner's P over b = 1..budget (see the module docstring), with P(b) at a few
    budgets."""
    expected = table.random_expected_best(budget)
    per_b = []
    for b in range(1, budget + 1):
        mean = statistics.fmean(_at(r["curve"], b) for r in runs)
        gap = table.best - expected[b - 1]
        per_b.append(1.0 if gap <= 1e-12 else (mean - expected[b - 1]) / gap)
    return {"budget": budget, "P": statistics.fmean(per_b),
            "P_at": {str(b): per_b[b - 1] for b in (10, 25, 50, 100, 200, 400) if b <= budget}}


def quartiles(values: list[float]) -> dict[str, float]:
    from tsopt.search.efficiency import quantile

    return {"q1": quantile(values, 0.25), "median": quantile(values, 0.5),
            "q3": quantile(values, 0.75)}


def summarise(table: Table, runs: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    counts = [r["to_within"] for r in runs]
    got = [c for c in counts if c is not None]
    bounded = [c if c is not None else r["measured"] + 1 for c, r in zip(counts, runs,
                                                                        strict=True)]
    curves = {"q1": [], "median": [], "q3": []}
    for b in range(1, budget + 1):
        q = quartiles([_at(r["curve"], b) for r in runs])
        for k in curves:
            curves[k].append(q[k])
    return {"seeds": len(runs), "reached": f"{len(got)}/{len(runs)}",
            "to_within": counts,
            "to_within_median": statistics.median(bounded) if len(got) * 2 > len(runs) else None,
            "to_within_median_lower_bound": statistics.median(bounded),
            "to_within_quartiles": quartiles([float(c) for c in bounded]),
            "proposals_median": statistics.median(r["proposals"] for r in runs),
            "pruned_median": statistics.median(r["pruned"] for r in runs),
            "best_median": statistics.median(r["best"] for r in runs),
            "score": p_score(table, runs, budget), "curve": curves,
            "seconds": sum(r["seconds"] for r in runs)}


def _said(strategy: str, run: dict[str, Any]) -> dict[str, Any]:
    print(f"  {strategy}({run['strategy']}) seed {run['seed']}: within 2 % after "
          f"{run['to_within']} measured; {run['measured']} measured of {run['proposals']} "
          f"proposals ({run['pruned']} rejected), best {run['best']:.4f}, "
          f"{run['seconds']:.0f} s", flush=True)
    return run


def simulate(doc: dict[str, Any], strategies: list[str], seeds: int, budget: int,
             max_proposals: int, noise: bool = True, jobs: int = 1) -> dict[str, Any]:
    from tsopt.search.efficiency import random_order

    table = Table(doc)
    default = default_sampler()
    result: dict[str, Any] = {
        "synthetic": table.synthetic, "source": doc["source"], "problem": doc["problem"],
        "devices": doc.get("devices", []), "built_from": doc.get("built_from", []),
        "product": doc.get("product"), "product_points": doc.get("product_points"),
        "points": len(doc["rows"]), "valid": sum(r["valid"] for r in doc["rows"]),
        "measured": len(table.measured),
        "correct": sum(1 for r in table.measured if r["status"] == "ok"),
        "best_ratio": table.best, "target_ratio": table.target, "within": WITHIN,
        "on_target": table.on_target, "default_sampler": default, "noise": noise,
        "budget": budget, "max_proposals": max_proposals,
        "random_expected_to_within": random_order(len(table.measured), table.on_target,
                                                  10000, 0),
        "random_expected_best": table.random_expected_best(budget),
        "strategies": {},
    }
    jobs_list = [(strategy, default if strategy == "default" else strategy, seed)
                 for strategy in strategies for seed in range(seeds)]
    done: dict[tuple[str, int], dict[str, Any]] = {}
    start = time.perf_counter()
    result["declared_legal_points"] = len(warm_verdicts(table))
    print(f"  proposal factors judged for every point ({time.perf_counter() - start:.0f} s): "
          f"{result['declared_legal_points']} of {len(table.rows)} points declared legal",
          flush=True)
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {(strategy, seed): pool.submit(replay_one, table, name, seed, budget,
                                                     max_proposals, noise)
                       for strategy, name, seed in jobs_list}
            for (strategy, seed), future in futures.items():
                done[strategy, seed] = _said(strategy, future.result())
    else:
        for strategy, name, seed in jobs_list:
            done[strategy, seed] = _said(strategy, replay_one(table, name, seed, budget,
                                                              max_proposals, noise))
    for strategy in strategies:
        name = default if strategy == "default" else strategy
        runs = [done[strategy, seed] for seed in range(seeds)]
        label = f"default ({name})" if strategy == "default" else strategy
        result["strategies"][label] = {"sampler": name, **summarise(table, runs, budget),
                                       "runs": [{k: v for k, v in r.items()
                                                 if k not in ("curve", "incumbent_curve")}
                                                for r in runs],
                                       "curves": [r["curve"] for r in runs]}
    expected = result["random_expected_to_within"]["expected"]
    for s in result["strategies"].values():
        median = s["to_within_median"]
        s["vs_random_expected"] = (median / expected if median is not None and expected
                                   else None)
    return result


# -- rendering --------------------------------------------------------------------------------


def markdown(result: dict[str, Any], command: str) -> str:
    tag = "SYNTHETIC table (made-up ratios): not a measurement. " if result["synthetic"] else ""
    exp = result["random_expected_to_within"]
    lines = [
        f"# Search efficiency on a measured table: {result['problem']}", "",
        f"{tag}Table: product '{result['product']}' ({result['product_points']} points), "
        f"{result['points']} judged, {result['valid']} "
        f"verifier-valid, {result['measured']} measured ({result['correct']} correct); "
        f"best paired ratio {result['best_ratio']:.4f} (x cuBLAS speed); within 2 %: ratio >= "
        f"{result['target_ratio']:.4f}, {result['on_target']} points. Devices: "
        f"{', '.join(result['devices']) or '-'}.", "",
        f"Random search's exact expectation to within 2 %: {exp['expected']:.1f} measurements "
        f"(quartiles {exp['exact']['q1']}/{exp['exact']['median']}/{exp['exact']['q3']})."
        if exp["expected"] else "No point is within 2 %.", "",
        f"P = Tuning the Tuner score over budget 1..{result['budget']} measurements (0: random "
        "search, 1: the optimum at once), from the mean best-so-far over seeds; measurements "
        "to within 2 %: median over seeds (quartiles).", "",
        "| strategy | seeds | P | P@25 | P@100 | to within 2 % (median, q1-q3) | reached | "
        "vs random's expectation | median proposals |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, s in result["strategies"].items():
        q = s["to_within_quartiles"]
        median = s["to_within_median"]
        shown = f"{median:g}" if median is not None else f">= {s['to_within_median_lower_bound']:g}"
        ratio = f"{s['vs_random_expected']:.2f}x" if s["vs_random_expected"] else "-"
        p_at = s["score"]["P_at"]
        lines.append(
            f"| {label} | {s['seeds']} | {s['score']['P']:.3f} | "
            f"{p_at.get('25', float('nan')):.3f} | {p_at.get('100', float('nan')):.3f} | "
            f"{shown} ({q['q1']:g}-{q['q3']:g}) | {s['reached']} | {ratio} | "
            f"{s['proposals_median']:g} |")
    noise = ("each measurement drawn from a normal with its measured interval"
             if result["noise"] else "none")
    lines += ["", f"Noise: {noise}.",
              "", "Command:", "", f"    {command}", ""]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = list(range(1, result["budget"] + 1))
    ax.plot(xs, result["random_expected_best"], color="0.4", linestyle=":",
            label="random, exact expectation")
    for label, s in result["strategies"].items():
        c = s["curve"]
        median = s["to_within_median"]
        reach = f"{median:g}" if median is not None else f">{s['to_within_median_lower_bound']:g}"
        line, = ax.step(xs, c["median"], where="post",
                        label=f"{label}: P={s['score']['P']:.2f}, to 2 %: {reach}")
        ax.fill_between(xs, c["q1"], c["q3"], step="post", alpha=0.2, color=line.get_color())
    ax.axhline(result["best_ratio"], color="k", linewidth=0.8, label="table best")
    ax.axhline(result["target_ratio"], color="k", linestyle="--", linewidth=0.8,
               label="within 2 % of best")
    exp = result["random_expected_to_within"]["expected"]
    if exp:
        ax.axvline(exp, color="0.4", linestyle="-.", linewidth=0.8,
                   label=f"random's expected measurements to 2 % ({exp:.0f})")
    ax.set_xscale("log")
    ax.set_xlabel("candidates measured")
    ax.set_ylabel("best so far: paired ratio (cuBLAS time / candidate time)")
    low = min(result["random_expected_best"][0], result["target_ratio"] * 0.8)
    ax.set_ylim(max(0.0, low), result["best_ratio"] * 1.02)
    seeds = max(s["seeds"] for s in result["strategies"].values())
    title = f"{result['problem']}: searches replayed on {result['measured']} measured points"
    if result["synthetic"]:
        title = "SYNTHETIC TABLE (made-up ratios) - " + title
    ax.set_title(f"{title}\n(median and quartiles over {seeds} seeds)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# -- command line -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table", help="the measured table from the build index and results")
    t.add_argument("--index", type=Path, default=CARRY / "device" / "index.jsonl")
    t.add_argument("--parts", type=Path, nargs="*", default=None)
    t.add_argument("--product", choices=sorted(PRODUCTS), default="full")
    t.add_argument("--note", default="", help="how the table was built (recorded)")
    t.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("synthetic", help="a SYNTHETIC table (made-up ratios), never a figure")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("simulate", help="replay strategies on a table")
    r.add_argument("table", type=Path)
    r.add_argument("--samplers", default="random,tpe,default",
                   help="comma-separated make_sampler names; 'default' = tsopt tune's default")
    r.add_argument("--seeds", type=int, default=20)
    r.add_argument("--budget", type=int, default=200, help="measurements per run (and P's B)")
    r.add_argument("--max-proposals", type=int, default=20000)
    r.add_argument("--no-noise", action="store_true")
    r.add_argument("--jobs", type=int, default=1, help="replays in parallel processes")
    r.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.cmd == "table":
        parts = (args.parts if args.parts is not None
                 else sorted((CARRY / "device").glob("part*.results.json")))
        doc = table_from_build(args.index, parts, args.product)
        doc["note"] = args.note
    elif args.cmd == "synthetic":
        doc = synthetic_table(args.seed)
    else:
        doc = json.loads(read_text(args.table))
        result = simulate(doc, [x for x in args.samplers.split(",") if x], args.seeds,
                          args.budget, args.max_proposals, noise=not args.no_noise,
                          jobs=args.jobs)
        command = "python " + shlex.join([str(Path(sys.argv[0]).relative_to(ROOT))
                                          if Path(sys.argv[0]).is_absolute() else sys.argv[0],
                                          *(argv if argv is not None else sys.argv[1:])])
        result["command"] = command
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(markdown(result, command))
        drew = plot(result, args.out.with_suffix(".png"))
        print(f"wrote {args.out}, {args.out.with_suffix('.md')}"
              + (f", {args.out.with_suffix('.png')}" if drew else " (no matplotlib: no plot)"))
        return
    write_text(args.out, json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}: {len(doc['rows'])} points, "
          f"{sum(1 for r in doc['rows'] if r['status'] is not None)} measured")


if __name__ == "__main__":
    main()
