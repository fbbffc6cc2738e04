"""Does re-fitting other shapes' library entries to a new shape help a study's round 1?
(issue #28, item 5) Leave-one-shape-out, on the measurement corpus and the held-out oracles.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/library_refit/evaluate.py \\
        --out bench/library_refit/summary.json [--picks bench/library_refit/picks.json]

For every target problem:

- **held-out** (``bench/oracle/*.table.json``, the problems of ``tsopt/data/heldout.json``
  measured so far): the library is the shipped one, which holds no held-out problem (the
  tests check it); the table is test data, read only to score.
- **corpus** (``corpus/``, every GEMM problem with at least :data:`MIN_GENOMES` measured
  genomes in the runner's isolated mode): the library is the shipped one less the target's
  own entries (``--library-exclude-self``); the table is the corpus's other measurements of
  the target (median paired ratio per genome).

Round 1 is simulated as a default GPU-less ``tsopt tune gemm --built 16`` makes it, with the
real space, predicting judge (the verifier's gates, the shipped TS memo) and cost model: the
library's copies (``lookup``, exclude-self), then (with re-fit) the re-fits
(``refit_library``), then the ``evolve`` sampler's proposals (its survey first, then moves
ranked by the analytical model: nothing is measured in round 1) until :data:`ROUND` picks the
predicting judge accepts; the space's seed genome (every condition's first build) aside.
Conditions: ``copies`` (today), ``copies+refit`` (re-fits alongside the copies),
``refit`` (instead of them), ``none`` (library off).

Scores per target and condition, over the picks: ``covered`` (how many are in the measured
table), the best covered pick's regret (1 - its ratio / the table's best: an upper bound on
round 1's regret over what was measured), and the same with every uncovered pick scored by
its nearest measured neighbour (``nn``: the mean ratio of the measured genomes at the least
knob distance, a shape gene counting :data:`SHAPE_WEIGHT`; a proxy, said as such, with the
distances reported); top-1 / top-8 / top-16 regret in enqueue order. A stricter proxy:
``same_shape_genes``, how many picks have a measured genome of exactly their tile, cluster,
decomposition, swap-AB and persistence (the genes a re-fit chooses), and the top-16 regret over
those picks alone, each scored by the nearest such genome. Per target also the
analytical model's Spearman rho over the table (the ranking a re-fit rests on).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "bench" / "oracle") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench" / "oracle"))

ARCH = "sm_90a"
ROUND = 16
MIN_GENOMES = 20
SHAPE_WEIGHT = 3
CONDITIONS = ("copies", "copies+refit", "refit", "none")


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    ra = np.argsort(np.argsort(np.asarray(a), kind="stable"), kind="stable").astype(float)
    rb = np.argsort(np.argsort(np.asarray(b), kind="stable"), kind="stable").astype(float)
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


class Table:
    """A target's measured genomes: hash -> (params, ratio)."""

    def __init__(self, name: str, kind: str, problem: Any,
                 rows: Mapping[str, tuple[dict[str, Any], float]]) -> None:
        self.name, self.kind, self.problem = name, kind, problem
        self.rows = dict(rows)
        self.best = max(r for _, r in self.rows.values())

    def same_shape_genes(self, params: Mapping[str, Any]) -> tuple[float, int] | None:
        """The mean ratio of the nearest measured genomes with ``params``' shape genes (tile,
        cluster, decomposition, swap-AB, persistence) exactly, and their distance; None where
        the table holds none of them."""
        key = _shape_key(params)
        best_d, ratios = None, []
        for other, ratio in self.rows.values():
            if _shape_key(other) != key:
                continue
            d = sum(1 for k in {*params, *other} if repr(params.get(k)) != repr(other.get(k)))
            if best_d is None or d < best_d:
                best_d, ratios = d, [ratio]
            elif d == best_d:
                ratios.append(ratio)
        return None if best_d is None else (float(statistics.mean(ratios)), int(best_d))

    def nearest(self, params: Mapping[str, Any]) -> tuple[float, int]:
        """The mean ratio of the measured genomes nearest ``params``, and their distance."""
        from tsopt.search.refit import REFIT_GENES

        shape = {*REFIT_GENES, "persistent"}
        best_d, ratios = None, []
        for other, ratio in self.rows.values():
            d = sum((SHAPE_WEIGHT if k in shape else 1)
                    for k in {*params, *other} if repr(params.get(k)) != repr(other.get(k)))
            if best_d is None or d < best_d:
                best_d, ratios = d, [ratio]
            elif d == best_d:
                ratios.append(ratio)
        return float(statistics.mean(ratios)), int(best_d or 0)


def _shape_key(params: Mapping[str, Any]) -> tuple[str, ...]:
    from tsopt.search.refit import REFIT_GENES

    return tuple(repr(params.get(k)) for k in (*REFIT_GENES, "persistent"))


def heldout_tables(space: Any) -> list[Table]:
    from tsopt.core.problem import parse_problem_spec

    out = []
    for path in sorted((ROOT / "bench" / "oracle").glob("*.table.json")):
        doc = json.loads(path.read_text())
        plan = json.loads((ROOT / "bench" / "oracle" / "plans" / f"{doc['name']}.json")
                          .read_text())
        params = {c["genome_hash"]: c["params"] for c in plan["candidates"]}
        rows = {r["genome_hash"]: (params[r["genome_hash"]], float(r["ratio"]))
                for r in doc["rows"] if r.get("status") == "ok" and r.get("ratio")}
        out.append(Table(doc["name"], "held-out", parse_problem_spec(doc["problem"]), rows))
    return out


def corpus_tables(space: Any) -> list[Table]:
    from tsopt.app.corpus import load_corpus
    from tsopt.core.corpus import LAUNCH_ISOLATED
    from tsopt.core.genome import Genome

    records, _ = load_corpus(ROOT / "corpus")
    by: dict[str, dict[str, tuple[dict[str, Any], list[float]]]] = {}
    problems: dict[str, Any] = {}
    for r in records:
        if (r.space != "gemm" or r.arch != ARCH or not r.ok or not r.paired
                or r.genome is None or r.launch != LAUNCH_ISOLATED):
            continue
        held = by.setdefault(r.problem.key, {})
        if r.genome_hash not in held:
            try:
                params = space.params_of(Genome.from_dict(r.genome))
            except (ValueError, KeyError):
                continue
            held[r.genome_hash] = (params, [])
        held[r.genome_hash][1].append(float(r.ratio or 0.0))
        problems[r.problem.key] = r.problem
    out = []
    for key in sorted(by):
        if len(by[key]) < MIN_GENOMES:
            continue
        rows = {h: (p, float(statistics.median(v))) for h, (p, v) in by[key].items()}
        out.append(Table(key.removeprefix("gemm-"), "corpus", problems[key], rows))
    return out


class Simulation:
    """One target's round 1 under each condition (see the module doc)."""

    def __init__(self, problem: Any, library: Sequence[Any]) -> None:
        from choose import MemoSearches

        from tsopt.core.registry import get_space
        from tsopt.search.cost_model import CostModel
        from tsopt.search.proposals import Proposer
        from tsopt.search.refit import Refitter
        from tsopt.search.samplers import KnobView
        from tsopt.verify.verifier import VerdictCache, judge_for, predicting_judge

        self.space = get_space("gemm")
        self.problem = problem
        cache = VerdictCache(searches=MemoSearches())
        self.space.judge = judge_for(self.space, cache)
        self.predict = predicting_judge(self.space, cache)
        self.view = KnobView.of(self.space, problem, "evolve")
        self.proposer = Proposer(self.space, problem, self.view, self.predict)
        self.model = CostModel(dict(problem.sizes), device=self.space.device)
        self.refitter = Refitter(self.space, problem, self.view, self.predict, self.model,
                                 proposer=self.proposer)
        self.library = list(library)

    def _evolution(self, seed: int) -> Any:
        from tsopt.search.cost_model import CostModel
        from tsopt.search.evolve import Evolution, declared_legal, space_completer

        choices = {k.name: tuple(self.view.choices(k.name, k.choices)) for k in self.view.knobs}
        return Evolution(choices, seed, complete=space_completer(self.space, self.problem,
                                                                 self.view),
                         legal=declared_legal(self.space, self.problem, self.predict),
                         model=CostModel(dict(self.problem.sizes), device=self.space.device),
                         couple=self.space.coupled, repair=self.proposer.nearest_legal)

    def picks(self, condition: str, seed: int = 0) -> list[dict[str, Any]]:
        from tsopt.search.library import lookup, refit_library
        from tsopt.search.proposals import fixed_genome

        out: list[dict[str, Any]] = []
        copies = [] if condition in ("refit", "none") else lookup(
            self.library, "gemm", self.problem, ARCH, self.predict, exclude_self=True)
        for entry in copies:
            out.append({"origin": "copy", "genome": entry.genome,
                        "params": self.space.params_of(entry.genome),
                        "from": entry.problem.key})
        if "refit" in condition:
            for entry, refit in refit_library(self.library, self.space, self.problem, ARCH,
                                              self.view, self.predict,
                                              skip=[e.genome.hash for e in copies],
                                              refitter=self.refitter):
                out.append({"origin": "refit", "genome": refit.genome, "params": refit.params,
                            "from": entry.problem.key, "changed": refit.changed})
        evolution = self._evolution(seed)
        pending = [dict(p["params"]) for p in out]
        seen = {p["genome"].hash for p in out}
        tries = 0
        while len(out) < ROUND and tries < ROUND * 4:
            tries += 1
            params = evolution.propose([], pending)
            pending.append(params)
            genome = fixed_genome(self.space, self.problem, params)
            if genome.hash in seen or not self.predict(genome, self.problem).valid:
                continue
            seen.add(genome.hash)
            out.append({"origin": f"evolve:{evolution.last.get('how')}", "genome": genome,
                        "params": dict(params)})
        return out[:ROUND]


def score(table: Table, picks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    covered, nn, dist = [], [], []
    same: list[float | None] = []
    for p in picks:
        measured = table.rows.get(p["genome"].hash)
        found = ((measured[1], 0) if measured is not None
                 else table.same_shape_genes(p["params"]))
        same.append(None if found is None else found[0])
    for p in picks:
        measured = table.rows.get(p["genome"].hash)
        if measured is not None:
            covered.append(measured[1])
            nn.append(measured[1])
            dist.append(0)
        else:
            ratio, d = table.nearest(p["params"])
            nn.append(ratio)
            dist.append(d)

    def regret(values: Sequence[float]) -> float | None:
        return None if not values else round(1.0 - max(values) / table.best, 4)

    by_origin: dict[str, dict[str, int]] = {}
    for p, d in zip(picks, dist, strict=True):
        kind = p["origin"].split(":")[0]
        held = by_origin.setdefault(kind, {"picks": 0, "covered": 0})
        held["picks"] += 1
        held["covered"] += int(d == 0 and p["genome"].hash in table.rows)
    return {"picks": len(picks), "covered": len(covered), "by_origin": by_origin,
            "regret_covered": regret(covered),
            "regret_nn_top1": regret(nn[:1]), "regret_nn_top8": regret(nn[:8]),
            "regret_nn_top16": regret(nn[:16]),
            "nn_distance_mean": round(float(np.mean(dist)), 2) if dist else None,
            "same_shape_genes": sum(v is not None for v in same),
            "regret_same_shape_genes_top16": regret([v for v in same[:16] if v is not None])}


def _mean(rows: Sequence[Mapping[str, Any]], condition: str, key: str) -> float:
    return round(float(np.mean([r[condition][key] for r in rows])), 4)


def _versus(rows: Sequence[Mapping[str, Any]], condition: str, key: str) -> list[int]:
    """On how many rows ``condition``'s ``key`` is below, and above, ``copies``'."""
    return [sum(r[condition][key] < r["copies"][key] - 1e-9 for r in rows),
            sum(r[condition][key] > r["copies"][key] + 1e-9 for r in rows)]


def means(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per kind of target and condition: the mean nearest-neighbour regrets, the picks in the
    tables, and on how many targets the top-8 / top-16 regret is below / above ``copies``'."""
    out: dict[str, Any] = {}
    for kind in sorted({r["kind"] for r in rows}):
        part = [r for r in rows if r["kind"] == kind]
        held: dict[str, Any] = {"targets": len(part)}
        for c in CONDITIONS:
            held[c] = {"regret_nn_top1": _mean(part, c, "regret_nn_top1"),
                       "regret_nn_top8": _mean(part, c, "regret_nn_top8"),
                       "regret_nn_top16": _mean(part, c, "regret_nn_top16"),
                       "covered": sum(r[c]["covered"] for r in part),
                       "picks": sum(r[c]["picks"] for r in part),
                       "top8_better_worse_than_copies": _versus(part, c, "regret_nn_top8"),
                       "top16_better_worse_than_copies": _versus(part, c, "regret_nn_top16")}
        out[kind] = held
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--picks", type=Path, help="also write every pick (genomes) here")
    parser.add_argument("--only", nargs="*", help="target names to run (default: all)")
    args = parser.parse_args()

    from tsopt.app.heldout import load_heldout
    from tsopt.core.registry import get_space
    from tsopt.search.cost_model import analytical_log
    from tsopt.search.library import PACKAGED, load_library

    space = get_space("gemm")
    shipped = [e for e in load_library(PACKAGED) if e.space == "gemm" and e.arch == ARCH]
    targets = heldout_tables(space) + corpus_tables(space)
    held_keys = {p.problem.key for p in load_heldout().problems}
    assert not [e for e in shipped if e.problem.key in held_keys], "library holds a held-out"
    if args.only:
        targets = [t for t in targets if t.name in args.only]
    rows, all_picks = [], {}
    for table in targets:
        started = time.time()
        library = [e for e in shipped if e.problem != table.problem]  # exclude-self
        sim = Simulation(table.problem, library)
        measured = list(table.rows.values())
        rho = spearman([analytical_log(p, table.problem.sizes) for p, _ in measured],
                       [-np.log(r) for _, r in measured])
        row: dict[str, Any] = {"target": table.name, "kind": table.kind,
                               "problem": table.problem.key, "measured": len(table.rows),
                               "best_ratio": round(table.best, 4),
                               "analytical_rho": round(rho, 3)}
        for condition in CONDITIONS:
            picks = sim.picks(condition)
            row[condition] = score(table, picks)
            all_picks[f"{table.name}/{condition}"] = [
                {"origin": p["origin"], "genome_hash": p["genome"].hash,
                 "from": p.get("from"), "params": p["params"],
                 "changed": {k: list(v) for k, v in p.get("changed", {}).items()},
                 "genome": p["genome"].to_dict()} for p in picks]
        row["cpu_s"] = round(time.time() - started, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {"question": "does re-fitting other shapes' library entries help round 1?",
               "command": "python bench/library_refit/evaluate.py --out "
                          "bench/library_refit/summary.json --picks PICKS.json",
               "round": ROUND, "shape_weight": SHAPE_WEIGHT, "mean": means(rows),
               "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    if args.picks:
        args.picks.write_text(json.dumps(all_picks, indent=0) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
