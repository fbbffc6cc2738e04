"""Search efficiency: candidates measured until within 2 % of the best, TPE vs random.

The figure (``studies``) comes from real studies recorded by ``tsopt tune`` (each possibly in
its own database): one long ``--sampler random`` study, the reference, and a few shorter ones
per sampler and ``--seed``:

    python bench/search_efficiency.py studies --reference sqlite:///R.db:STUDY_R \
        --run tpe=sqlite:///T0.db:STUDY_T0 --run tpe=sqlite:///T1.db:STUDY_T1 \
        --run random=sqlite:///R.db:STUDY_R [--within 0.02] [--shuffles 10000] \
        --out bench/results/search_efficiency_h200.json

``URL:STUDY`` splits at the last colon (a study name has no ``:`` or ``/``); ``LABEL`` names
the sampler, and runs are grouped by it. The target is the reference's best correct median x
(1 + ``--within``). A run's count is its candidates measured, in the order they were measured
(the store's ``measured_at`` of each candidate's first measurement; ties by trial number), up
to and including the first correct one within the target; every measured candidate counts one,
correct or not (``wrong``, ``timeout`` ...); candidates the verifier rejected or that failed to
build cost no measurement and do not count. A run that never gets there reports null with the
number it measured. Each run also reports its best, best / reference best and the best-so-far
series. For the reference, the count is also given for measuring its candidates in a uniformly
random order without replacement: exactly (T + 1) / (m + 1) on average for m of T measured
candidates on target, with exact quartiles and those of ``--shuffles`` seeded shuffles; since a
random sampler's order is exchangeable, this is the proper "random search" figure (the single
order of a real random run is one draw of it). The JSON goes to ``--out``, a markdown summary
(with the command line) beside it as ``.md``, and, when matplotlib is importable, a plot as
``.png`` (best so far vs candidates measured, one line per run, the target as a dashed line).

``--remeasured HEADLINE_JSON`` judges "within the target" on a paired re-measurement instead of
the recorded times, for a GPU whose drift between studies exceeds the target
(``bench/search_remeasure.py``: the near-best candidates timed back to back, alternating with
cuBLAS; the cost is their time over cuBLAS's, the target the reference's best cost x (1 +
``--within``); a candidate not re-measured is off target).

The cheap surrogate (``table`` + ``replay``): measuring thousands of GEMM candidates per
sampler and seed is what the GPU budget cannot pay for twice, so a replay over one table of
real measurements (genome -> median time, from a large random search) compares many seeds:

    # 1. the table, from a measured study (e.g. `tsopt tune gemm ... --sampler random
    #    --trials 2000` on an H200, then ingested)
    python bench/search_efficiency.py table --db sqlite:///tsopt.db \\
        --study gemm-bf16-8192x8192x8192-sm_90a --out bench/results/gemm-8192-table.json
    # 2. the replay: each sampler proposes through the space's real knobs; a proposal is
    #    answered with the measured time of the table's nearest genome
    python bench/search_efficiency.py replay bench/results/gemm-8192-table.json \\
        --samplers tpe,random --seeds 10 --out bench/results/search_efficiency.json

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

    tsopt tune gemm --m 8192 --n 8192 --k 8192 --sampler random --trials 3000 \
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
import re
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

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
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import parse_problem_spec

    return get_space(space_name), parse_problem_spec(problem_spec, space_name)


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
            "median": statistics.median(bounded), "q1": _quantile(bounded, 0.25),
            "q3": _quantile(bounded, 0.75), "runs": runs,
        }
    return {
        "synthetic": bool(table.get("synthetic")), "source": table.get("source", ""),
        "space": table["space"], "problem": table["problem"], "rows": len(rows),
        "timed_rows": len(timed), "best_us": best, "within": within, "target_us": target,
        "rows_on_target": on_target, "match": match, "verify": verify,
        "knobs": table.get("knobs", []), "budget": budget, "seeds": seeds,
        "uniform_expected": (len(rows) + 1) / (on_target + 1), "samplers": results,
    }


def _quantile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * p
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


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


# -- real studies --------------------------------------------------------------------------

_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9_.+-]*")


@dataclass(frozen=True)
class StudySource:
    """A study named on the command line: ``[LABEL=]URL:STUDY``."""

    text: str  # as given
    option: str  # the option that gave it, for messages
    label: str | None
    url: str
    study: str

    def where(self) -> str:
        return f"{self.option} {self.text!r}"


def parse_source(value: str, option: str, labelled: bool) -> StudySource:
    """``URL:STUDY`` (split at the last colon), after ``LABEL=`` when ``labelled``.

    Raises ValueError naming the option and the bad value."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    form = "LABEL=URL:STUDY (e.g. tpe=sqlite:///t0.db:gemm-tpe-0)" if labelled else \
        "URL:STUDY (e.g. sqlite:///r.db:gemm-random)"

    def bad(why: str) -> ValueError:
        return ValueError(f"{option} {value!r}: {why}; expected {form}")

    label = None
    rest = value.strip()
    if labelled:
        label, sep, rest = rest.partition("=")
        if not sep or not _LABEL.fullmatch(label):
            raise bad("no sampler label before '='" if not sep or ":" in label or "/" in label
                      else f"label {label!r} is not a name (letters, digits, _ . + -)")
    url, sep, study = rest.rpartition(":")
    if "://" in rest and "://" not in url:  # the last colon is the URL's own
        raise bad("no study name: nothing like ':STUDY' after the URL")
    if not sep or "://" not in url:
        raise bad("no database URL before the last ':' (a URL looks like sqlite:///tsopt.db)")
    if not study.strip() or "/" in study:
        raise bad(f"no study name after the last ':' (got {study!r}); did you forget :STUDY?")
    try:
        make_url(url)
    except ArgumentError as exc:
        raise bad(f"{url!r} is not a database URL ({exc})") from None
    return StudySource(value, option, label, url, study)


@dataclass(frozen=True)
class Measured:
    """A measured candidate of a study as the search saw it: its first measurement."""

    candidate_id: int
    genome_hash: str
    trial_number: int | None
    measured_at: Any  # datetime
    status: str
    median_us: float | None  # None unless status == "ok"
    measurements: int
    device: str

    @property
    def correct(self) -> bool:
        return self.median_us is not None


def _open(source: StudySource, stores: dict[str, Any]) -> Any:
    from tsopt.db.engine import parse_url, sqlite_path
    from tsopt.db.store import Store

    if source.url not in stores:
        path = sqlite_path(parse_url(source.url))
        if path is not None and not path.exists():
            # Store() would create an empty database there: a typo must not look like no data.
            raise ValueError(f"{source.where()}: no database file {str(path)!r}")
        stores[source.url] = Store(source.url)
    return stores[source.url]


def load_measured(source: StudySource, stores: dict[str, Any]) -> tuple[Any, list[Measured], int]:
    """The study's info, its measured candidates in the order they were measured, and how many
    candidates it proposed in all.

    Order: a candidate's first recorded measurement time (``measured_at``, recorded by the store
    when the result reached it), ties by trial number, then candidate id. Each candidate counts
    once, with its first measurement's outcome (what the search was told); candidates the
    verifier rejected or that failed to build have no measurement and do not count."""
    store = _open(source, stores)
    info = store.get_study(source.study)
    if info is None:
        names = ", ".join(s.name for s in store.list_studies()) or "none"
        raise ValueError(f"{source.where()}: no study {source.study!r} in that database "
                         f"(studies there: {names})")
    candidates = store.candidates(source.study)
    measured = []
    for c in candidates:
        if not c.measurements:
            continue
        first = min(c.measurements, key=lambda r: r.measured_at)
        m = first.measurement
        measured.append(Measured(
            c.id, c.genome_hash, c.trial_number, first.measured_at, m.status,
            m.median_us if m.status == "ok" else None, len(c.measurements), m.device))
    measured.sort(key=lambda r: (r.measured_at, math.inf if r.trial_number is None
                                 else r.trial_number, r.candidate_id))
    return info, measured, len(candidates)


def run_figure(measured: list[Measured], target: float, reference_best: float,
               score: dict[str, float] | None = None) -> dict[str, Any]:
    """Candidates measured until the first correct one within ``target`` (None: never), the
    best time and the best-so-far series ``[n_measured, best_us or None]``. With ``score``
    (genome hash -> re-measured cost, see :func:`remeasured_scores`), "within the target" is
    judged on that instead of the recorded time; a candidate without one is off target."""
    best: float | None = None
    reached: int | None = None
    series: list[list[Any]] = []
    for n, row in enumerate(measured, 1):
        if row.correct and (best is None or row.median_us < best):  # type: ignore[operator]
            best = row.median_us
        cost = row.median_us if score is None else score.get(row.genome_hash)
        if reached is None and row.correct and cost is not None and cost <= target:
            reached = n
        series.append([n, best])
    return {"candidates_to_target": reached, "measured": len(measured),
            "correct": sum(r.correct for r in measured),
            "statuses": dict(sorted(_count(r.status for r in measured).items())),
            "remeasured_candidates": sum(r.measurements > 1 for r in measured),
            "best_us": best, "best_vs_reference": best / reference_best if best else None,
            "devices": sorted({r.device for r in measured if r.device}), "series": series}


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def random_order(total: int, on_target: int, shuffles: int, seed: int) -> dict[str, Any]:
    """Candidates measured to the first on-target one when ``total`` candidates (``on_target``
    of them on target) are measured in a uniformly random order, without replacement: the
    exact expectation (T + 1) / (m + 1), exact quartiles, and quartiles over ``shuffles``
    seeded random orders. None throughout when no candidate is on target."""
    import random

    out: dict[str, Any] = {"total": total, "on_target": on_target, "shuffles": shuffles,
                           "seed": seed}
    if on_target == 0 or total == 0:
        return out | {"expected": None, "exact": None, "shuffled": None}
    # P(count > k) = C(T - k, m) / C(T, m): the first k draws all miss.
    cdf = []
    survive = 1.0
    for k in range(1, total - on_target + 2):
        survive *= (total - on_target - (k - 1)) / (total - (k - 1))
        cdf.append(1.0 - survive)

    def exact(p: float) -> int:
        return next(k for k, c in enumerate(cdf, 1) if c >= p - 1e-12)

    rng = random.Random(seed)
    counts: list[float] = sorted(min(rng.sample(range(total), on_target)) + 1.0
                                 for _ in range(shuffles))
    return out | {
        "expected": (total + 1) / (on_target + 1),
        "exact": {"q1": exact(0.25), "median": exact(0.5), "q3": exact(0.75)},
        "shuffled": {"mean": statistics.fmean(counts), "q1": _quantile(counts, 0.25),
                     "median": statistics.median(counts), "q3": _quantile(counts, 0.75)}
        if counts else None,
    }


def _label_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    costs = [r["candidates_to_target"] for r in runs]
    got = [c for c in costs if c is not None]
    # A run that never got there would have needed more than it measured: its count is at
    # least measured + 1 (a lower bound on the median) and at most unbounded (an upper one).
    low = statistics.median([c if c is not None else r["measured"] + 1
                             for c, r in zip(costs, runs, strict=True)])
    high = statistics.median([c if c is not None else math.inf for c in costs])
    return {"studies": [r["study"] for r in runs], "seeds": [r["seed"] for r in runs],
            "candidates_to_target": costs, "measured": [r["measured"] for r in runs],
            "reached": f"{len(got)}/{len(costs)}",
            "median": low if low == high else None,
            "median_bounds": [low, None if math.isinf(high) else high],
            "best_us": min((r["best_us"] for r in runs if r["best_us"] is not None), default=None)}


def remeasured_scores(path: Path) -> dict[str, float]:
    """Genome hash -> cost from a paired A/B re-measurement (``bench/gemm_h200.py headline``,
    e.g. of ``bench/search_remeasure.py``'s candidates): cuBLAS's time over the candidate's is
    the drift-free speed, so the cost is its inverse (1.0 = cuBLAS's time). Incorrect
    candidates are left out."""
    doc = json.loads(path.read_text())
    out = {r["genome_hash"]: 1.0 / r["median_ratio"] for r in doc.get("results", [])
           if r.get("correct") and r.get("median_ratio")}
    if not out:
        raise ValueError(f"--remeasured {str(path)!r}: no correct re-measured candidate in it")
    return out


def studies(reference: str, runs: list[str], within: float = 0.02, shuffles: int = 10000,
            seed: int = 0, remeasured: Path | None = None) -> dict[str, Any]:
    """The search-efficiency figure from measured studies (see the module docstring).

    ``reference``: ``URL:STUDY`` of the long random study that sets the target (its best correct
    median x (1 + ``within``)); ``runs``: ``LABEL=URL:STUDY`` each. Raises ValueError naming a
    bad argument."""
    from tsopt.db.engine import display_url, parse_url

    ref_source = parse_source(reference, "--reference", labelled=False)
    run_sources = [parse_source(r, "--run", labelled=True) for r in runs]
    if not run_sources:
        raise ValueError("--run: give at least one LABEL=URL:STUDY")
    if within < 0:
        raise ValueError(f"--within {within}: must be >= 0")
    stores: dict[str, Any] = {}
    try:
        ref_info, ref_measured, ref_proposed = load_measured(ref_source, stores)
        timed = [r.median_us for r in ref_measured if r.median_us is not None]
        if not timed:
            raise ValueError(f"{ref_source.where()}: the study has no correct, timed candidate "
                             f"({len(ref_measured)} measured)")
        base = min(timed)
        target = base * (1 + within)
        on_target = sum(1 for t in timed if t <= target)
        score = remeasured_scores(remeasured) if remeasured is not None else None
        paired: dict[str, Any] | None = None
        if score is not None:
            ref_scores = [score[r.genome_hash] for r in ref_measured
                          if r.median_us is not None and r.genome_hash in score]
            if not ref_scores:
                raise ValueError(f"--remeasured {str(remeasured)!r}: none of the reference's "
                                 "candidates was re-measured")
            paired_target = min(ref_scores) * (1 + within)
            paired = {"file": str(remeasured), "candidates": len(score),
                      "reference_best_cost": min(ref_scores), "target_cost": paired_target,
                      "reference_on_target": sum(1 for c in ref_scores if c <= paired_target)}
            on_target = paired["reference_on_target"]
        loaded = [(s, *load_measured(s, stores)) for s in run_sources]
    finally:
        for store in stores.values():
            store.close()

    def describe(source: StudySource, info: Any) -> dict[str, Any]:
        return {"study": source.study, "source": display_url(parse_url(source.url)),
                "recorded_sampler": info.sampler, "seed": info.config.get("seed"),
                "knobs": list(info.config.get("knobs", []))}

    ref_best = next(r for r in ref_measured if r.median_us == base)
    result_runs = []
    for source, info, measured, proposed in loaded:
        clash = [f"{f} {have!r} (reference: {want!r})" for f, have, want in (
            ("space", info.space, ref_info.space), ("problem", info.problem_key,
                                                    ref_info.problem_key),
            ("arch", info.arch, ref_info.arch)) if have != want]
        if clash:
            raise ValueError(f"{source.where()}: not comparable with the reference: "
                             + ", ".join(clash))
        result_runs.append({"label": source.label, **describe(source, info),
                            "proposed": proposed,
                            **run_figure(measured, paired["target_cost"] if paired else target,
                                         base, score)})
    labels: dict[str, list[dict[str, Any]]] = {}
    for run in result_runs:
        labels.setdefault(run["label"], []).append(run)
    return {
        "kind": "studies", "synthetic": False, "space": ref_info.space,
        "problem": ref_info.problem_key, "arch": ref_info.arch, "within": within,
        "target_us": target,
        "reference": {**describe(ref_source, ref_info), "proposed": ref_proposed,
                      "measured": len(ref_measured), "correct": len(timed), "best_us": base,
                      "best_genome": ref_best.genome_hash, "on_target": on_target,
                      "devices": sorted({r.device for r in ref_measured if r.device}),
                      "random_order": random_order(len(ref_measured), on_target, shuffles,
                                                   seed)},
        "runs": result_runs,
        "by_label": {label: _label_summary(group) for label, group in labels.items()},
        "remeasured": paired,
    }


def _fmt(value: Any, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def studies_markdown(result: dict[str, Any], command: str) -> str:
    ref = result["reference"]
    order = ref["random_order"]
    lines = [
        f"# Search efficiency (measured studies): {result['space']} {result['problem']} "
        f"{result['arch']}", "", f"Command: `{command}`  ",
        f"Reference: study `{ref['study']}` ({ref['recorded_sampler']}, seed {ref['seed']}) in "
        f"{ref['source']}: {ref['measured']} candidates measured ({ref['correct']} correct) of "
        f"{ref['proposed']} proposed; best {ref['best_us']:.2f} us; target "
        f"{result['target_us']:.2f} us (+{100 * result['within']:g} %), met by "
        f"{ref['on_target']} candidates. Devices: {', '.join(ref['devices']) or '?'}.  ",
        "A count is the candidates measured (correct or not; verifier rejections and failed "
        "builds cost none) up to and including the first correct one within the target.", "",
        *_remeasured_lines(result.get("remeasured")),
        "| sampler | study | seed | measured | candidates measured to target | best (us) "
        "| best / reference best |", "|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        cost = r["candidates_to_target"]
        lines.append(f"| {r['label']} | `{r['study']}` | {r['seed']} | {r['measured']} | "
                     f"{cost if cost is not None else 'not reached'} | {_fmt(r['best_us'], '.2f')} "
                     f"| {_fmt(r['best_vs_reference'], '.3f')} |")
    lines += ["", "| sampler | runs reaching target | candidates measured to target, per run "
              "| median |", "|---|---|---|---|"]
    for label, s in result["by_label"].items():
        per = ", ".join(str(c) if c is not None else f">{m}" for c, m in
                        zip(s["candidates_to_target"], s["measured"], strict=True))
        lo, hi = s["median_bounds"]
        median = _fmt(s["median"], "g") if s["median"] is not None else \
            f">= {lo:g}" + (f", <= {hi:g}" if hi is not None else "")
        lines.append(f"| {label} | {s['reached']} | {per} | {median} |")
    if order["expected"] is not None:
        shuffled = order["shuffled"]
        lines.append(
            f"| random order over the reference's {order['total']} measured candidates "
            f"(exact; {order['shuffles']} shuffles) | - | expected {order['expected']:.1f}; "
            f"exact quartiles {order['exact']['q1']}-{order['exact']['q3']}"
            + (f"; shuffled mean {shuffled['mean']:.1f}, q1-q3 {shuffled['q1']:g}-"
               f"{shuffled['q3']:g}" if shuffled else "")
            + f" | {order['exact']['median']} |")
    if result.get("plot"):
        lines += ["", f"![best so far vs candidates measured]({result['plot']})"]
    return "\n".join(lines) + "\n"


def _remeasured_lines(paired: dict[str, Any] | None) -> list[str]:
    if not paired:
        return []
    return [f"**Within the target is judged on a paired re-measurement** (`{paired['file']}`): "
            f"{paired['candidates']} near-best candidates timed back to back in one process, "
            "each in rounds alternating with cuBLAS; cost = candidate time / cuBLAS time. "
            f"Reference best cost {paired['reference_best_cost']:.3f}, target "
            f"{paired['target_cost']:.3f}, met by {paired['reference_on_target']} of the "
            "reference's candidates. A candidate not re-measured (its recorded time was further "
            "from the best) counts as off target. The times in the table are the recorded ones.",
            ""]


def studies_plot(result: dict[str, Any], path: Path) -> bool:
    """Best so far vs candidates measured, one line per run; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in result["runs"]:
        points = [(n, b) for n, b in r["series"] if b is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.step(xs, ys, where="post", label=f"{r['label']} ({r['study']})")
    if not result.get("remeasured"):  # else the target is a re-measured cost, not these times
        ax.axhline(result["target_us"], color="k", linestyle="--", linewidth=1,
                   label=f"target (+{100 * result['within']:g} % of reference best)")
    ax.set_xscale("log")
    ax.set_xlabel("candidates measured")
    ax.set_ylabel("best correct median (us)")
    top = max((b for r in result["runs"] for _, b in r["series"] if b is not None), default=0.0)
    if top > 2 * result["target_us"]:  # slow first candidates would flatten the approach
        ax.set_ylim(top=2 * result["target_us"])
        ax.set_ylabel("best correct median (us; clipped at 2 x target)")
    ax.set_title(f"{result['problem']} {result['arch']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


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
                    help="the long random study that sets the target (its best x (1 + within))")
    st.add_argument("--run", action="append", default=[], required=True,
                    metavar="LABEL=URL:STUDY", help="a measured study, labelled by its sampler "
                    "(repeatable; the reference may be one of them)")
    st.add_argument("--within", type=float, default=0.02)
    st.add_argument("--shuffles", type=int, default=10000,
                    help="random orders of the reference's measured candidates")
    st.add_argument("--seed", type=int, default=0, help="seed of the shuffles")
    st.add_argument("--remeasured", type=Path, default=None, metavar="HEADLINE_JSON",
                    help="judge 'within the target' on a paired re-measurement of the near-best "
                    "candidates (bench/search_remeasure.py) instead of the recorded times")
    st.add_argument("--out", type=Path, default=None,
                    help="JSON (and .md, and .png if matplotlib is importable, beside it)")
    args = parser.parse_args()
    if args.command == "studies":
        command = shlex.join(["python", "bench/search_efficiency.py", *sys.argv[1:]])
        try:
            result = studies(args.reference, args.run, args.within, args.shuffles, args.seed,
                             args.remeasured)
        except ValueError as exc:  # UserInputError too
            parser.error(str(exc))
        result["command"] = command
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            plot = args.out.with_suffix(".png")
            if studies_plot(result, plot):
                result["plot"] = plot.name
        text = studies_markdown(result, command)
        print(text)
        if args.out:
            args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
            args.out.with_suffix(".md").write_text(text)
        return
    if args.command == "table":
        doc = table_from_study(args.db, args.study)
    elif args.command == "synthetic":
        doc = synthetic_table(args.space, args.problem or DEFAULT_PROBLEMS[args.space],
                              args.n, args.seed, args.knob)
    else:
        command = "python bench/search_efficiency.py " + " ".join(sys.argv[1:])
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
