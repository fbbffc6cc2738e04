"""The oracle's candidate chooser: per held-out problem, a frozen plan of legal candidates
spread over every family the space has (issue #28, item 2).

A plan is made here (the build machine, with the DSL: the space's knobs, its declared legal
set and the cheap predicting judge) and frozen under ``bench/oracle/plans/<name>.json``; the
GPU machine builds and measures it (``build_and_measure.py``), and ``summarise.py`` turns the
results into ``bench/oracle/<name>.md``.

How a plan is chosen (deterministic: the same held-out file, seed and space give the same plan):

- **Strata**: the decomposition (one tile per CTA, the persistent tile loop, split-K 2 / 3 / 4,
  stream-K) times swap-AB: twelve strata, the plan's count shared evenly among those that have
  a legal member (a stratum that yields none after :data:`STRATUM_FAILURES` tries gives its
  share to the others).
- **Coverage** inside a stratum: each draw forces the value of one family knob that the plan
  holds least of so far (tile_m, tile_n, tile_k, cluster, stages, epilogue, arrangement,
  consumers, raster, swizzle, placements, registers, warps...; ties broken by the seeded RNG),
  the other knobs drawn at random. A value that cannot be made legal in
  :data:`VALUE_FAILURES` tries is dropped for that stratum; a value no candidate holds is
  named in the plan (``uncovered``).
- **Model picks** (:data:`MODEL_SHARE` of each stratum): the best the analytical cost model
  ranks among :data:`MODEL_DRAWS` random drafts of the stratum, legal and new, so the region the
  model believes fastest is in the table as densely as the rest is spread (the oracle is the
  space's best only if its best is among the candidates).
- **Legality**: every draft goes through the space's couplings (``SearchSpace.coupled``), is
  completed as ``suggest`` completes it, repaired into the space's declared legal set with the
  forced knobs kept (``Proposer.nearest_legal``, as the driver repairs every proposal), and
  judged by ``predicting_judge`` (the verifier's gates; TS's exhaustive search only where the
  shipped TS search memo knows it). The GPU machine's builder judges each in full again; a
  margin of :data:`MARGIN` over the oracle's count covers the few the full verdict rejects.
- **Also in the plan**: the space's seed genome and the seed library's genomes for the problem
  (``lookup`` with exclude-self; a held-out problem has no entry of its own), which a tune
  starts from: the oracle holds what the search would find first.

Nothing here is measured or read from a measurement of a held-out problem.

**When the space grows** (``--grown``): a plan chosen before a knob gained a value holds no
candidate with it, so its oracle is no longer the space's best. ``--grown`` reads each
problem's committed plan (``plans/<name>.json``) and writes a supplement,
``plans/<name>.grown.json`` (plan name ``<name>.grown``): every candidate holds one of the
values the committed plan holds none of (placements aside), each such value crossed with the
twelve strata as a stratum of its own, chosen as above; none is a candidate of the committed
plan. The committed oracle's best (``--anchors``, default ``bench/regret/oracle-best.json``:
its top confirmed genomes) rides along as ``anchor`` candidates, so that one device call
measures the old best and the new values side by side. The anchors are the oracle's own
re-measurement, never a reason for any choice of the supplement.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/oracle/choose.py [--problem NAME ...] \
        [--seed 0] [--count N] [--out bench/oracle/plans] [--grown [--anchors FILE]]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PLAN_FORMAT = "tsopt-oracle-plan"
PLAN_VERSION = 1
ARCH = "sm_90a"
MARGIN = 0.1
"""Candidates planned beyond the oracle's count (the builder's full verdict rejects a few)."""
MODEL_SHARE = 0.3
MODEL_DRAWS = 48
VALUE_FAILURES = 6
STRATUM_FAILURES = 40
ATTEMPTS_PER_CANDIDATE = 12
DECOMPOSITIONS: dict[str, dict[str, Any]] = {
    "tile-per-cta": {"persistent": False, "stream_k": False, "split_k": 1},
    "persistent": {"persistent": True, "stream_k": False, "split_k": 1},
    "split-k2": {"persistent": False, "stream_k": False, "split_k": 2},
    "split-k3": {"persistent": False, "stream_k": False, "split_k": 3},
    "split-k4": {"persistent": False, "stream_k": False, "split_k": 4},
    "stream-k": {"persistent": True, "stream_k": True, "split_k": 1},
}
STRATUM_KNOBS = ("persistent", "stream_k", "split_k", "swap_ab")
"""The knobs a stratum fixes (decomposition and swap-AB)."""
GROWN_PER_STRATUM = 2
"""A supplement's candidates by default, per (grown value, stratum): the model's pick and a
coverage pick."""


def strata() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, values in DECOMPOSITIONS.items():
        for swap in (False, True):
            out.append((f"{name}{'+swap' if swap else ''}", {**values, "swap_ab": swap}))
    return out


def grown_strata(grown: Sequence[tuple[str, Any]],
                 space: Any = None) -> list[tuple[str, dict[str, Any]]]:
    """The supplement's strata: each grown (knob, value) crossed with the twelve strata, less
    those whose structure the space's couplings give another value of the knob (stream-K
    runs the cooperative arrangement, so no stream-K candidate can hold ``split_n``)."""
    out = []
    for knob, value in grown:
        for name, fixed in strata():
            wanted = {**fixed, knob: value}
            coupled = space.coupled(wanted, STRATUM_KNOBS) if space is not None else wanted
            if repr(coupled.get(knob)) != repr(value):
                continue
            out.append((f"{name} {knob}={value!r}", wanted))
    return out


def grown_values(plan: Mapping[str, Any],
                 choices: Mapping[str, Sequence[Any]]) -> list[tuple[str, Any]]:
    """The (knob, value) pairs of today's space that no candidate of ``plan`` holds, placement
    knobs aside (their values are named orders of ops, not new kernels), in the space's order."""
    held = {(name, repr(value)) for c in plan["candidates"]
            for name, value in c["params"].items()}
    return [(name, value) for name, values in choices.items() if ".placement" not in name
            for value in values if (name, repr(value)) not in held]


def decomposition_of(params: Mapping[str, Any]) -> str:
    """The stratum a candidate's params fall in (the table's family column)."""
    if params.get("stream_k"):
        name = "stream-k"
    elif int(params.get("split_k", 1)) > 1:
        name = f"split-k{int(params['split_k'])}"
    else:
        name = "persistent" if params.get("persistent") else "tile-per-cta"
    return name + ("+swap" if params.get("swap_ab") else "")


class MemoSearches:
    """The shipped TS search memo as the verifier's ``SearchBacking``, in memory: predictions
    use the exhaustive searches committed studies ran, as the driver's database does."""

    def __init__(self) -> None:
        from tsopt.search.ts_memo import load_memo

        self._known = {(s.space, s.schedule, s.aliasing, s.tool_version): s
                       for s in load_memo()}

    def find_search(self, space: str, schedule: str, aliasing: str, tool_version: str) -> Any:
        return self._known.get((space, schedule, aliasing, tool_version))

    def record_search(self, search: Any) -> None:
        self._known[(search.space, search.schedule, search.aliasing, search.tool_version)] = search


class Chooser:
    """The plan of one held-out problem (see the module doc)."""

    def __init__(self, space_name: str, problem: Any, seed: int,
                 exclude: Sequence[str] = ()) -> None:
        from tsopt.core.registry import get_space
        from tsopt.search.cost_model import CostModel
        from tsopt.search.evolve import space_completer
        from tsopt.search.proposals import Proposer
        from tsopt.search.samplers import KnobView
        from tsopt.verify.verifier import VerdictCache, judge_for, predicting_judge

        self.space = get_space(space_name)
        self.problem = problem
        self.space.check(problem)
        cache = VerdictCache(searches=MemoSearches())
        self.space.judge = judge_for(self.space, cache)
        self.predict = predicting_judge(self.space, cache)
        self.view = KnobView.of(self.space, problem, "evolve")
        self.proposer = Proposer(self.space, problem, self.view, self.predict)
        self.complete = space_completer(self.space, problem, self.view)
        self.choices = {k.name: tuple(self.view.choices(k.name, k.choices))
                        for k in self.view.knobs}
        self.model = CostModel(dict(problem.sizes))
        self.rng = random.Random(zlib.crc32(f"oracle:{seed}:{problem.key}".encode()))
        self.seed = seed
        self.picked: list[dict[str, Any]] = []
        self.hashes: set[str] = set(exclude)
        """Genomes the plan holds, and those it must not (another plan's, for a supplement)."""
        self.coverage: Counter[tuple[str, str]] = Counter()
        self.failures: Counter[tuple[str, str, str]] = Counter()
        self.unreachable: set[tuple[str, str, str]] = set()
        """(stratum, knob, value repr) that no draft of the stratum made legal."""
        self.tests = 0
        self.rejected: Counter[str] = Counter()

    # -- one candidate ----------------------------------------------------------------
    def _legal(self, draft: Mapping[str, Any], keep: Sequence[str]) -> dict[str, Any] | None:
        """``draft`` coupled (the kept knobs win), completed, and repaired into the declared
        legal set with the kept knobs unchanged; None when no legal params keep them."""
        coupled = self.space.coupled(draft, keep)
        rng = random.Random(zlib.crc32(repr(sorted(coupled.items(), key=str)).encode()))
        full = self.complete(coupled, rng)
        self.tests += 1
        if not self.proposer.legal(full):
            repaired = self.proposer.nearest_legal(full, keep=[k for k in keep if k in full])
            if repaired is None:
                return None
            full = self.complete(repaired, rng)
            if not self.proposer.legal(full):
                return None
        if any(repr(full.get(k)) != repr(draft[k]) for k in keep if k in full):
            return None
        return full

    def _accept(self, params: dict[str, Any], origin: str, stratum: str,
                forced: Mapping[str, Any]) -> bool:
        from tsopt.search.proposals import fixed_genome

        genome = fixed_genome(self.space, self.problem, params)
        if genome.hash in self.hashes:
            return False
        verdict = self.predict(genome, self.problem)
        if not verdict.valid:
            self.rejected[verdict.rule or verdict.stage or "invalid"] += 1
            return False
        self.hashes.add(genome.hash)
        self.picked.append({"genome_hash": genome.hash, "origin": origin, "stratum": stratum,
                            "family": decomposition_of(params),
                            "forced": {k: forced[k] for k in sorted(forced)},
                            "params": {k: params[k] for k in sorted(params)},
                            "genome": genome.to_dict()})
        for name, value in params.items():
            self.coverage[(name, repr(value))] += 1
        return True

    def _random_draft(self, fixed: Mapping[str, Any]) -> dict[str, Any]:
        draft = {name: self.rng.choice(list(values)) for name, values in self.choices.items()
                 if values}
        draft.update(fixed)
        return draft

    def _least_covered(self, stratum: str,
                       fixed: Mapping[str, Any]) -> tuple[str, Any] | None:
        """The (knob, value) the plan holds least of, among knobs the stratum leaves free and
        values not found unreachable in it."""
        options = []
        for name, values in self.choices.items():
            if name in STRATUM_KNOBS or name in fixed or len(values) < 2:
                continue
            for value in values:
                if (stratum, name, repr(value)) in self.unreachable:
                    continue
                if name in ("raster", "swizzle") and not fixed.get("persistent"):
                    continue  # asked of persistent schedules only
                options.append((self.coverage[(name, repr(value))], self.rng.random(),
                                name, value))
        if not options:
            return None
        _, _, name, value = min(options, key=lambda o: (o[0], o[1]))
        return name, value

    def coverage_pick(self, stratum: str, fixed: Mapping[str, Any]) -> bool:
        target = self._least_covered(stratum, fixed)
        forced = dict(fixed)
        if target is not None:
            forced[target[0]] = target[1]
        full = self._legal(self._random_draft(forced), list(forced))
        if full is None and target is not None:
            key = (stratum, target[0], repr(target[1]))
            self.failures[key] += 1
            if self.failures[key] >= VALUE_FAILURES:
                self.unreachable.add(key)
            return False
        return full is not None and self._accept(full, "coverage", stratum, forced)

    def model_pick(self, stratum: str, fixed: Mapping[str, Any]) -> bool:
        drafts = [self.space.coupled(self._random_draft(fixed), list(fixed))
                  for _ in range(MODEL_DRAWS)]
        # A coupling can overrule a fixed value (a grown one the stratum's structure refuses):
        # such a draft is not of this stratum.
        drafts = [d for d in drafts if all(repr(d.get(k)) == repr(v) for k, v in fixed.items())]
        if not drafts:
            return False
        predicted = self.model.predict(drafts)
        for i in sorted(range(len(drafts)), key=lambda i: (predicted[i], i))[:4]:
            full = self._legal(drafts[i], list(fixed))
            if full is not None and self._accept(full, "model", stratum, fixed):
                return True
        return False

    # -- the plan ---------------------------------------------------------------------
    def starts(self, count: int) -> None:
        """The seed genome and the seed library's genomes for the problem (exclude-self), at
        most ``count``."""
        from tsopt.search.library import load_library, lookup

        genomes = [("seed", self.space.seed_genome(self.problem))]
        genomes += [("library", e.genome) for e in lookup(
            load_library(), self.space.name, self.problem, ARCH, self.predict, limit=8,
            exclude_self=True)]
        for origin, genome in genomes:
            if len(self.picked) >= count:
                return
            try:
                params = self.view.decode(self.view.encode(self.space.params_of(genome)))
            except (ValueError, KeyError):
                continue
            if self.proposer.legal(params):
                self._accept(params, origin, decomposition_of(params), {})

    def anchor(self, genomes: Sequence[Mapping[str, Any]]) -> None:
        """Genomes re-measured beside the plan (a supplement's anchors), kept as they are."""
        from tsopt.core.genome import Genome

        for doc in genomes:
            genome = Genome.from_dict(dict(doc))
            params = self.view.decode(self.view.encode(self.space.params_of(genome)))
            self.hashes.add(genome.hash)
            self.picked.append({"genome_hash": genome.hash, "origin": "anchor",
                                "stratum": "anchor", "family": decomposition_of(params),
                                "forced": {}, "params": {k: params[k] for k in sorted(params)},
                                "genome": genome.to_dict()})

    def choose(self, count: int, say: Any = print,
               groups: Sequence[tuple[str, dict[str, Any]]] | None = None
               ) -> list[dict[str, Any]]:
        """``count`` candidates over ``groups`` (default: the twelve strata, after the seed
        and the library's genomes), beside any already picked (anchors)."""
        count += len(self.picked)
        if groups is None:
            self.starts(count)
            groups = strata()
        alive = {name for name, _ in groups}
        misses: Counter[str] = Counter()
        per_stratum: Counter[str] = Counter(c["stratum"] for c in self.picked)
        attempts = 0
        while len(self.picked) < count and alive and attempts < count * ATTEMPTS_PER_CANDIDATE:
            attempts += 1
            quota = count / len(alive)
            name, fixed = min(((n, f) for n, f in groups if n in alive),
                              key=lambda g: (per_stratum[g[0]] / quota, g[0]))
            modelled = sum(1 for c in self.picked if c["stratum"] == name
                           and c["origin"] == "model")
            use_model = modelled < MODEL_SHARE * max(1, per_stratum[name] + 1)
            ok = (self.model_pick if use_model else self.coverage_pick)(name, fixed)
            if ok:
                per_stratum[name] += 1
                misses[name] = 0
            else:
                misses[name] += 1
                if misses[name] >= STRATUM_FAILURES:
                    alive.discard(name)
                    say(f"  stratum {name}: no more legal candidates after "
                        f"{per_stratum[name]} ({STRATUM_FAILURES} tries in a row failed)")
        return self.picked


def coverage_table(candidates: Sequence[Mapping[str, Any]],
                   choices: Mapping[str, Sequence[Any]]) -> dict[str, dict[str, int]]:
    """Per knob, how many candidates hold each of its values (0 for a value none holds)."""
    table: dict[str, dict[str, int]] = {}
    for name, values in choices.items():
        counts = Counter(str(c["params"].get(name)) for c in candidates if name in c["params"])
        table[name] = {str(v): counts.get(str(v), 0) for v in values}
    table["family"] = dict(sorted(Counter(c["family"] for c in candidates).items()))
    return table


def make_plan(item: Any, held_version: int, seed: int, count: int | None = None,
              say: Any = print) -> dict[str, Any]:
    from tsopt.verify.verifier import verifier_version

    wanted = count if count is not None else int(round(item.oracle * (1 + MARGIN)))
    start = time.process_time()
    chooser = Chooser(item.space, item.problem, seed)
    picked = chooser.choose(wanted, say)
    return {
        "format": PLAN_FORMAT, "version": PLAN_VERSION,
        "heldout_version": held_version, "name": item.name, "space": item.space,
        "problem": item.spec, "arch": ARCH, "seed": seed,
        "oracle": item.oracle, "wanted": wanted, "count": len(picked),
        "space_source": chooser.space.source_digest(),
        "verifier_version": verifier_version(chooser.space),
        "chooser": {"margin": MARGIN, "model_share": MODEL_SHARE, "model_draws": MODEL_DRAWS,
                    "value_failures": VALUE_FAILURES, "stratum_failures": STRATUM_FAILURES,
                    "strata": [n for n, _ in strata()]},
        "chooser_cpu_s": round(time.process_time() - start, 1),
        "predicted_rejections": dict(chooser.rejected.most_common()),
        "uncovered": sorted(f"{name}={value}" for name, values in chooser.choices.items()
                            for value in values
                            if not chooser.coverage[(name, repr(value))]),
        "coverage": coverage_table(picked, chooser.choices),
        "candidates": picked,
    }


def make_grown_plan(item: Any, held_version: int, seed: int, base: Mapping[str, Any],
                    base_sha256: str, anchors: Sequence[Mapping[str, Any]],
                    count: int | None = None, say: Any = print) -> dict[str, Any] | None:
    """The supplement to ``base`` (the committed plan of ``item``): ``count`` candidates
    (default :data:`GROWN_PER_STRATUM` a stratum) holding the values today's space has and
    ``base`` holds none of, with ``anchors`` (genome dicts) beside them; None when ``base``
    holds every value already."""
    from tsopt.verify.verifier import verifier_version

    start = time.process_time()
    base_hashes = [c["genome_hash"] for c in base["candidates"]]
    chooser = Chooser(item.space, item.problem, seed, exclude=base_hashes)
    grown = grown_values(base, chooser.choices)
    if not grown:
        return None
    groups = grown_strata(grown, chooser.space)
    count = count if count is not None else GROWN_PER_STRATUM * len(groups)
    chooser.anchor(anchors)
    picked = chooser.choose(count, say, groups)
    added = [c for c in picked if c["origin"] != "anchor"]
    return {
        "format": PLAN_FORMAT, "version": PLAN_VERSION,
        "heldout_version": held_version, "name": f"{item.name}.grown", "space": item.space,
        "problem": item.spec, "arch": ARCH, "seed": seed,
        "supplements": {"plan": f"{item.name}.json", "sha256": base_sha256,
                        "grown": [f"{k}={v!r}" for k, v in grown],
                        "anchors": [c["genome_hash"] for c in picked
                                    if c["origin"] == "anchor"]},
        "oracle": count, "wanted": count, "count": len(added),
        "space_source": chooser.space.source_digest(),
        "verifier_version": verifier_version(chooser.space),
        "chooser": {"model_share": MODEL_SHARE, "model_draws": MODEL_DRAWS,
                    "value_failures": VALUE_FAILURES, "stratum_failures": STRATUM_FAILURES,
                    "strata": [n for n, _ in groups]},
        "chooser_cpu_s": round(time.process_time() - start, 1),
        "predicted_rejections": dict(chooser.rejected.most_common()),
        "uncovered": [f"{k}={v!r}" for k, v in grown
                      if not any(repr(c["params"].get(k)) == repr(v) for c in added)],
        "coverage": coverage_table(added, chooser.choices),
        "candidates": picked,
    }


def read_anchors(path: Path, name: str) -> list[dict[str, Any]]:
    """The committed oracle's best genomes of held-out problem ``name`` (``oracle_best.py``'s
    file); none when the file does not name the problem."""
    from tsopt.core.errors import UserInputError

    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserInputError(f"--anchors {path}: cannot be read ({exc})") from None
    for problem in doc.get("problems", []):
        if problem.get("name") == name:
            return [pick["genome"] for pick in problem["oracle"]]
    return []


def write_plan(plan: dict[str, Any], path: Path) -> None:
    """The plan as JSON with one candidate a line (a diff shows which candidates changed)."""
    head = {k: v for k, v in plan.items() if k != "candidates"}
    text = json.dumps(head, indent=1)[:-2] + ',\n "candidates": [\n'
    text += ",\n".join(json.dumps(c, separators=(",", ":")) for c in plan["candidates"])
    text += "\n ]\n}\n"
    assert json.loads(text) == plan
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    from tsopt.app.heldout import check_spaces, load_heldout
    from tsopt.core.errors import UserInputError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heldout", type=Path, default=None,
                        help="held-out set (default: tsopt/data/heldout.json)")
    parser.add_argument("--problem", action="append", default=None,
                        help="only this held-out problem (its name; repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=None,
                        help="candidates per plan (default: the problem's oracle count + 10%%)")
    parser.add_argument("--out", type=Path, default=HERE / "plans")
    parser.add_argument("--grown", action="store_true",
                        help="a supplement to each committed plan under --out: candidates "
                             "holding the values the space has gained since (<name>.grown.json)")
    parser.add_argument("--anchors", type=Path, default=ROOT / "bench" / "regret" /
                        "oracle-best.json",
                        help="with --grown: the committed oracle's best genomes, measured beside")
    args = parser.parse_args(argv)
    try:
        held = load_heldout(args.heldout)
        check_spaces(held)
        items = [held.by_name(n) for n in args.problem] if args.problem else list(held.problems)
        if args.count is not None and args.count < 1:
            raise UserInputError(f"--count {args.count} must be at least 1")
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.grown:
        return main_grown(items, held.version, args)
    args.out.mkdir(parents=True, exist_ok=True)
    for item in items:
        print(f"{item.name} ({item.spec}): choosing", flush=True)
        plan = make_plan(item, held.version, args.seed, args.count)
        write_plan(plan, args.out / f"{item.name}.json")
        families = plan["coverage"]["family"]
        uncovered = [u for u in plan["uncovered"] if ".placement=" not in u]
        placements = len(plan["uncovered"]) - len(uncovered)
        print(f"  {plan['count']} of {plan['wanted']} in {plan['chooser_cpu_s']} CPU-s; "
              f"families {families}; values no candidate holds: {uncovered or 'none'}"
              f" (and {placements} placements)", flush=True)
    return 0


def main_grown(items: Sequence[Any], held_version: int, args: argparse.Namespace) -> int:
    import hashlib

    from tsopt.core.errors import UserInputError

    try:
        bases = {}
        for item in items:
            path = args.out / f"{item.name}.json"
            if not path.is_file():
                raise UserInputError(f"--grown: {path} is missing (python3 -m scripts.evidence "
                                     "unpack oracle)")
            bases[item.name] = (json.loads(path.read_text()),
                                hashlib.sha256(path.read_bytes()).hexdigest())
            if bases[item.name][0].get("problem") != item.spec:
                raise UserInputError(f"--grown: {path} is a plan of "
                                     f"{bases[item.name][0].get('problem')}, not {item.spec}")
        anchors = {item.name: read_anchors(args.anchors, item.name) for item in items}
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for item in items:
        base, sha = bases[item.name]
        print(f"{item.name} ({item.spec}): choosing a supplement", flush=True)
        plan = make_grown_plan(item, held_version, args.seed, base, sha, anchors[item.name],
                               args.count)
        if plan is None:
            print("  its plan holds every value the space has: no supplement", flush=True)
            continue
        write_plan(plan, args.out / f"{item.name}.grown.json")
        print(f"  {plan['count']} of {plan['wanted']} holding "
              f"{', '.join(plan['supplements']['grown'])}, beside "
              f"{len(plan['supplements']['anchors'])} anchors, in {plan['chooser_cpu_s']} CPU-s;"
              f" families {plan['coverage']['family']}; grown values no candidate holds: "
              f"{plan['uncovered'] or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
