"""Regret arithmetic (issue #28 item 6): side-by-side runner passes -> regret per winner.

Standard library only: the GPU machine prints a call's regrets with it, and
``summarise.py`` makes the tables with it.

A *side-by-side document* (``FORMAT``) is what one device call measured: per problem, the
genomes of one bundle with their roles (a tune's winner, an oracle pick), and one or more
passes, each the runner's ``results.json`` of that bundle (one runner call each; a second
pass holds the same genomes in the reverse order). Within a pass:

* the oracle best is the highest paired ratio of the pass's oracle picks (a winner that is an
  oracle pick counts as both);
* a winner's regret is ``1 - winner_ratio / oracle_best`` (negative: faster than the oracle);
* the vendor check (goal c) holds where the oracle best is at least 1.00x cuBLAS only if the
  winner is too.

Across passes: the mean and the range of each figure, and the problem's pass-to-pass spread,
the widest range ``(max - min) / mean`` of any genome's ratio over the passes (unknown with
one pass). Two seeds' winners agree (goal d) when their mean ratios differ by no more than
that spread; their order *flips* when the passes disagree on which is faster.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

FORMAT = "tsopt-regret-sidebyside"
GOALS = {"gpuless": {1: 0.04, 2: 0.02}, "gpu-inline": {None: 0.02}}
"""Issue #28 item 6: regret bound per protocol and round (None: the run's end)."""


class RegretError(ValueError):
    """A side-by-side document that cannot be read as one; the message names what."""


def ratios_of(results: Mapping[str, Any]) -> dict[str, float]:
    """genome hash -> paired ratio of every correct (status ok) measurement of one pass."""
    out: dict[str, float] = {}
    for m in results.get("measurements", []):
        if m.get("status") == "ok" and isinstance(m.get("ratio"), (int, float)):
            out[m["genome_hash"]] = float(m["ratio"])
    return out


def regret(winner_ratio: float, oracle_best: float) -> float:
    """1 - winner / oracle best (both paired ratios to the vendor, higher is faster)."""
    if oracle_best <= 0 or winner_ratio <= 0:
        raise RegretError(f"ratios must be positive (winner {winner_ratio}, oracle {oracle_best})")
    return 1.0 - winner_ratio / oracle_best


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / mean of one genome's ratios over passes; None with fewer than two."""
    if len(values) < 2:
        return None
    return (max(values) - min(values)) / statistics.fmean(values)


def _role_key(role: Mapping[str, Any]) -> str:
    if role["kind"] == "oracle":
        return f"oracle#{role['rank']}"
    parts = [f"winner:{role['protocol']}", f"s{role['seed']}"]
    if role.get("round") is not None:
        parts.append(f"r{role['round']}")
    return ":".join(parts)


def check_problem(entry: Mapping[str, Any]) -> None:
    name = entry.get("name", "?")
    if not entry.get("passes"):
        raise RegretError(f"problem {name}: no passes")
    roles = [r for e in entry.get("entries", []) for r in e.get("roles", [])]
    if not any(r.get("kind") == "oracle" for r in roles):
        raise RegretError(f"problem {name}: no oracle pick among its entries")
    for r in roles:
        if r.get("kind") not in ("oracle", "winner"):
            raise RegretError(f"problem {name}: role kind {r.get('kind')!r} is not oracle or winner")


def problem_regret(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One problem of a side-by-side document -> its oracle best and each winner's regret,
    per pass and across passes."""
    check_problem(entry)
    passes = [ratios_of(p["results"]) for p in entry["passes"]]
    holders: dict[str, list[str]] = {}
    roles: dict[str, Mapping[str, Any]] = {}
    for e in entry["entries"]:
        for role in e["roles"]:
            key = _role_key(role)
            holders.setdefault(key, []).append(e["genome_hash"])
            roles[key] = role
    oracle_hashes = [h for k, hs in holders.items() if k.startswith("oracle#") for h in hs]
    oracle_best: list[float | None] = []
    oracle_genome: list[str | None] = []
    for ratios in passes:
        timed = [(ratios[h], h) for h in oracle_hashes if h in ratios]
        best = max(timed) if timed else None
        oracle_best.append(best[0] if best else None)
        oracle_genome.append(best[1] if best else None)
    genomes = sorted({e["genome_hash"] for e in entry["entries"]})
    per_genome = {h: [p[h] for p in passes if h in p] for h in genomes}
    spreads = [s for s in (spread(v) for v in per_genome.values()) if s is not None]
    winners = []
    for key, hashes in sorted(holders.items()):
        if key.startswith("oracle#"):
            continue
        genome = hashes[0]
        per_pass = []
        for ratios, best in zip(passes, oracle_best, strict=True):
            w = ratios.get(genome)
            per_pass.append(None if w is None or best is None else regret(w, best))
        known = [r for r in per_pass if r is not None]
        ratios_w = per_genome[genome]
        vendor = [None if (b is None or w is None) else (w >= 1.0 if b >= 1.0 else None)
                  for w, b in zip([p.get(genome) for p in passes], oracle_best, strict=True)]
        winners.append({
            "role": key, **{k: roles[key].get(k) for k in ("protocol", "seed", "round")},
            "genome_hash": genome, "ratio_per_pass": [p.get(genome) for p in passes],
            "ratio_mean": statistics.fmean(ratios_w) if ratios_w else None,
            "regret_per_pass": per_pass,
            "regret_mean": statistics.fmean(known) if known else None,
            "regret_max": max(known) if known else None,
            "is_oracle_pick": genome in oracle_hashes,
            "vendor_per_pass": vendor,
        })
    return {"name": entry["name"], "problem": entry["problem"], "passes": len(passes),
            "orders": [p.get("order") for p in entry["passes"]],
            "oracle_best_per_pass": oracle_best, "oracle_genome_per_pass": oracle_genome,
            "oracle_best_mean": (statistics.fmean([b for b in oracle_best if b is not None])
                                 if any(b is not None for b in oracle_best) else None),
            "pass_spread": max(spreads) if spreads else None,
            "failed": sorted(h for h in genomes if not per_genome[h]),
            "winners": winners}


def goal_for(winner: Mapping[str, Any]) -> float | None:
    bounds = GOALS.get(str(winner.get("protocol")), {})
    return bounds.get(winner.get("round"), bounds.get(None))


def meets(winner: Mapping[str, Any]) -> bool | None:
    """Goal a/b for one winner: its worst pass's regret within its protocol's bound."""
    bound = goal_for(winner)
    if bound is None or winner.get("regret_max") is None:
        return None
    return winner["regret_max"] <= bound


def vendor_holds(winner: Mapping[str, Any]) -> bool | None:
    """Goal c: None where the oracle is below cuBLAS in every pass (nothing to hold)."""
    marks = [v for v in winner["vendor_per_pass"] if v is not None]
    return all(marks) if marks else None


def seed_pairs(problem: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Goal d: each pair of winners of one protocol and round but different seeds, measured
    in the same passes: their gap against the problem's pass-to-pass spread, and whether
    their order flips between passes."""
    groups: dict[tuple[Any, Any], list[Mapping[str, Any]]] = {}
    for w in problem["winners"]:
        groups.setdefault((w["protocol"], w["round"]), []).append(w)
    out = []
    for (protocol, rnd), members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        members = sorted(members, key=lambda w: w["seed"])
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                out.append(_pair(problem, protocol, rnd, a, b))
    return out


def _pair(problem: Mapping[str, Any], protocol: Any, rnd: Any, a: Mapping[str, Any],
          b: Mapping[str, Any]) -> dict[str, Any]:
    both = [(x, y) for x, y in zip(a["ratio_per_pass"], b["ratio_per_pass"], strict=True)
            if x is not None and y is not None]
    gap = (abs(statistics.fmean([x for x, _ in both]) - statistics.fmean([y for _, y in both]))
           / statistics.fmean([v for pair in both for v in pair])) if both else None
    signs = {(x > y) - (x < y) for x, y in both}
    flips = len(signs - {0}) > 1
    same = a["genome_hash"] == b["genome_hash"]
    limit = problem["pass_spread"]
    return {"problem": problem["name"], "protocol": protocol, "round": rnd,
            "seeds": [a["seed"], b["seed"]], "same_genome": same, "gap": 0.0 if same else gap,
            "pass_spread": limit,
            "within_spread": True if same else (None if gap is None or limit is None
                                                 else gap <= limit),
            "order_flips": False if same else flips}


BULKY = ("trajectory", "log_tail")
"""A study's parts left in the device's raw document (evidence/regret.tar.xz), out of the
committed summary: every measurement's time and the log, ~100 KB a study."""


def study_summary(study: Mapping[str, Any]) -> dict[str, Any]:
    """A study of a ``gpu-inline`` document, less its bulky parts; with when its best was
    first measured (seconds from the run's start) and how many measurements it had by then."""
    kept = {k: v for k, v in study.items() if k not in BULKY}
    trajectory = study.get("trajectory") or []
    if trajectory:
        best = max(t["best"] for t in trajectory)
        first = next(i for i, t in enumerate(trajectory) if t["best"] >= best)
        kept.update(best_at_s=trajectory[first]["t"], best_after_measurements=first + 1,
                    study_best=best)
    return kept


def summarise_documents(docs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Every problem of every document, its winners' regrets, the goals and the seed pairs."""
    problems = []
    for doc in docs:
        if doc.get("format") != FORMAT:
            raise RegretError(f"not a {FORMAT} document (format {doc.get('format')!r})")
        for entry in doc["problems"]:
            row = problem_regret(entry)
            row.update(protocol=doc.get("protocol"), library=doc.get("library"),
                       host=doc.get("host"), device=_device(entry), started=doc.get("started"),
                       synthetic=bool(doc.get("synthetic")), source=doc.get("_source"),
                       studies=[study_summary(s) for s in entry.get("studies", [])])
            budgets = {s.get("seed"): s.get("budget") for s in row["studies"]}
            for w in row["winners"]:
                w["meets_goal"], w["goal"], w["vendor_ok"] = meets(w), goal_for(w), vendor_holds(w)
                # A gpu-inline winner whose study is not in this document was brought in from
                # an earlier one (gpu_tune.py --beside) and timed again beside this seed's.
                w["budget"] = budgets.get(w["seed"])
                w["retimed"] = bool(row["studies"]) and w["seed"] not in budgets
            row["seed_pairs"] = seed_pairs(row)
            problems.append(row)
    pairs = [p for row in problems for p in row["seed_pairs"]]
    distinct = [p for p in pairs if not p["same_genome"]]
    return {"problems": problems,
            "winner_flip_rate": {
                "pairs": len(pairs),
                "distinct_winners": len(distinct),
                "distinct_rate": len(distinct) / len(pairs) if pairs else None,
                "order_flips": sum(1 for p in pairs if p["order_flips"]),
                "order_flip_rate": (sum(1 for p in pairs if p["order_flips"]) / len(pairs)
                                    if pairs else None)}}


def _device(entry: Mapping[str, Any]) -> list[str]:
    return sorted({str(p["results"].get("device")) for p in entry["passes"]
                   if p["results"].get("device")})
