"""The oracle tables: ``oracle-results.json`` files (``build_and_measure.py``, one per GPU call)
and the plans they measured, into ``bench/oracle/<name>.md`` (the table a person reads) and
``bench/oracle/<name>.table.json`` (every measured candidate, compact: the test data a search's
regret is computed against; never library input).

Per candidate, the confirmation's measurement (runner defaults) is its figure where it has one,
else the screen's (short cap); the oracle's best is the best confirmed ratio (the best screened
one where nothing was confirmed, said so). Several results files may name the same plan (calls
that resumed): the last file's measurement of a genome wins, in the order given.

    .venv/bin/python bench/oracle/summarise.py RESULTS.json [RESULTS.json ...] \
        [--plans bench/oracle/plans] [--out bench/oracle]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TABLE_FORMAT = "tsopt-oracle-table"
TOP = 10  # the markdown's best list; every row is in the table
SIGNIFICANT = 6  # a ratio's interval is ~1e-3 wide: digits past the sixth are noise
GENES = ("tile_m", "tile_n", "tile_k", "cluster", "stages", "epilogue", "arrangement",
         "consumers", "swap_ab")


def _genes(params: Mapping[str, Any]) -> str:
    tile = f"{params.get('tile_m')}x{params.get('tile_n')}x{params.get('tile_k')}"
    parts = [tile, f"c{params.get('cluster')}", f"s{params.get('stages')}",
             str(params.get("epilogue")), str(params.get("arrangement")),
             f"{params.get('consumers')}wg"]
    return " ".join(parts)


def _ratio(m: Mapping[str, Any] | None) -> str:
    if not m or m.get("ratio") is None:
        return "-"
    lo, hi = m.get("ratio_lo"), m.get("ratio_hi")
    return (f"{m['ratio']:.3f} [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None
            else f"{m['ratio']:.3f}")


def merge(results: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per plan name: its index rows, screen and confirm measurements by genome, devices."""
    merged: dict[str, dict[str, Any]] = {}
    for doc in results:
        if doc.get("format") != "tsopt-oracle-results":
            raise ValueError("not a tsopt-oracle-results file")
        for plan in doc.get("plans", []):
            into = merged.setdefault(plan["name"], {
                "problem": plan["problem"], "plan_sha256": set(), "index": {},
                "screen": {}, "confirm": {}, "devices": set(), "baselines": [],
                "calls": 0})
            into["plan_sha256"].add(plan["plan_sha256"])
            into["calls"] += 1
            for row in plan.get("index", []):
                into["index"][row["genome_hash"]] = row
            for part in ("screen", "confirm"):
                run = plan.get(part) or {}
                if run.get("device"):
                    into["devices"].add(run["device"])
                for m in run.get("measurements", []):
                    into[part][m["genome_hash"]] = m
                for b in run.get("baselines", []):
                    if b.get("median_us"):
                        into["baselines"].append(float(b["median_us"]))
    return merged


def table_rows(plan: Mapping[str, Any], merged: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per planned candidate: its family, genes and figure (confirm, else screen)."""
    rows = []
    for order, cand in enumerate(plan["candidates"]):
        h = cand["genome_hash"]
        index = merged["index"].get(h, {})
        screen, confirm = merged["screen"].get(h), merged["confirm"].get(h)
        figure = confirm if confirm and confirm.get("status") == "ok" else screen
        rows.append({
            "genome_hash": h, "order": order, "origin": cand["origin"],
            "family": cand["family"], "params": cand["params"],
            "valid": index.get("valid"), "verdict": index.get("verdict"),
            "built": bool(index.get("build_ok")) if index else None,
            "status": (figure or {}).get("status"),
            "ratio": (figure or {}).get("ratio"),
            "ratio_lo": (figure or {}).get("ratio_lo"),
            "ratio_hi": (figure or {}).get("ratio_hi"),
            "median_us": (figure or {}).get("median_us"),
            "screen_ratio": (screen or {}).get("ratio"),
            "confirmed": bool(confirm and confirm.get("status") == "ok"),
        })
    return rows


def markdown(plan: Mapping[str, Any], merged: Mapping[str, Any],
             rows: Sequence[Mapping[str, Any]], top: int = TOP) -> str:
    timed = [r for r in rows if r["status"] == "ok" and r["ratio"]]
    timed.sort(key=lambda r: -r["ratio"])
    confirmed = [r for r in timed if r["confirmed"]]
    best = confirmed[0] if confirmed else (timed[0] if timed else None)
    statuses: dict[str, int] = defaultdict(int)
    for r in rows:
        statuses[r["status"] or ("not valid" if r["valid"] is False else
                                 "not built" if r["built"] is False else "not measured")] += 1
    base = merged["baselines"]
    lines = [
        f"# Oracle: {plan['name']} ({plan['problem']})",
        "",
        f"Held-out set v{plan.get('heldout_version')}; plan seed {plan.get('seed')}, "
        f"{len(plan['candidates'])} candidates over {len(plan['coverage']['family'])} "
        f"families (plan sha256 {', '.join(sorted(s[:12] for s in merged['plan_sha256']))}); "
        f"{merged['calls']} GPU call(s) on {', '.join(sorted(merged['devices'])) or '-'}.",
        "Test data for the search (regret = 1 - winner / oracle best, paired in one call); "
        "never library input.",
        "",
        "Statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) + ".",
        f"cuBLAS median over the calls' baselines: "
        f"{statistics.median(base):.2f} us." if base else "cuBLAS: no baseline recorded.",
        "",
    ]
    if best is None:
        lines += ["No candidate measured correct yet.", ""]
    else:
        lines += [f"**Oracle best**: `{best['genome_hash'][:12]}` ({best['family']}, "
                  f"{_genes(best['params'])}): {_ratio(best)}x cuBLAS"
                  + ("" if best["confirmed"] else " (screen only: not confirmed)")
                  + f", {best['median_us']:.2f} us.", ""]
    lines += ["## Per family", "",
              "| family | planned | timed | best ratio | median ratio | best genome |",
              "|---|---:|---:|---:|---:|---|"]
    by_family: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_family[r["family"]].append(r)
    for family in sorted(by_family):
        members = by_family[family]
        ok = sorted((r for r in members if r["status"] == "ok" and r["ratio"]),
                    key=lambda r: -r["ratio"])
        lines.append(f"| {family} | {len(members)} | {len(ok)} | "
                     f"{ok[0]['ratio']:.3f} | {statistics.median(r['ratio'] for r in ok):.3f} | "
                     f"`{ok[0]['genome_hash'][:12]}` {_genes(ok[0]['params'])} |" if ok else
                     f"| {family} | {len(members)} | 0 | - | - | - |")
    lines += ["", f"## Top {top}", "",
              "| rank | genome | family | origin | genes | ratio [95 %] | screen | us |",
              "|---:|---|---|---|---|---|---:|---:|"]
    for rank, r in enumerate(timed[:top], 1):
        lines.append(f"| {rank} | `{r['genome_hash'][:12]}` | {r['family']} | {r['origin']} | "
                     f"{_genes(r['params'])} | {_ratio(r)}{'' if r['confirmed'] else ' (s)'} | "
                     f"{r['screen_ratio'] or 0:.3f} | {r['median_us']:.2f} |")
    lines += ["", "(s): screen only (short cap); the others confirmed with the runner's "
              "defaults.", "", "## Best ratio per knob value", "",
              "| knob | value: best ratio (timed) |", "|---|---|"]
    for gene in GENES:
        cells = []
        values = sorted({str(r["params"].get(gene)) for r in rows}, key=lambda v: (len(v), v))
        for value in values:
            ok = [r["ratio"] for r in timed if str(r["params"].get(gene)) == value]
            cells.append(f"{value}: {max(ok):.3f} ({len(ok)})" if ok else f"{value}: - (0)")
        lines.append(f"| {gene} | {'; '.join(cells)} |")
    return "\n".join(lines) + "\n"


def _rounded(value: Any) -> Any:
    return float(f"{value:.{SIGNIFICANT}g}") if isinstance(value, float) else value


def compact_table(table: dict) -> str:
    """The table as JSON with each row on its own line, no spaces, floats to six
    significant digits."""
    head = {k: v for k, v in table.items() if k != "rows"}
    text = json.dumps(head, separators=(",", ":"))[:-1]
    rows = ",\n".join(json.dumps({k: _rounded(v) for k, v in r.items()}, separators=(",", ":"))
                       for r in table["rows"])
    return f'{text},"rows":[\n{rows}\n]}}\n'


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--plans", type=Path, default=HERE / "plans")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--top", type=int, default=TOP,
                        help="rows of the markdown's best list (the table keeps every row)")
    args = parser.parse_args(argv)
    if args.top < 1:
        print(f"error: --top {args.top}: must be at least 1", file=sys.stderr)
        return 2
    try:
        docs = [json.loads(p.read_text()) for p in args.results]
        merged = merge(docs)
    except (OSError, json.JSONDecodeError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, into in sorted(merged.items()):
        plan_path = args.plans / f"{name}.json"
        if not plan_path.exists():
            print(f"error: no plan {plan_path} for the results of {name!r}", file=sys.stderr)
            return 2
        plan = json.loads(plan_path.read_text())
        rows = table_rows(plan, into)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{name}.md").write_text(markdown(plan, into, rows, args.top))
        table = {"format": TABLE_FORMAT, "version": 1, "name": name, "problem": plan["problem"],
                 "heldout_version": plan.get("heldout_version"),
                 "plan_sha256": sorted(into["plan_sha256"]), "devices": sorted(into["devices"]),
                 "rows": [{k: v for k, v in r.items() if k != "params"} for r in rows]}
        # one row a line, no padding: ten tables of 110-330 rows stay small in bench/
        (args.out / f"{name}.table.json").write_text(compact_table(table))
        timed = sum(1 for r in rows if r["status"] == "ok")
        print(f"{name}: {timed} of {len(rows)} timed -> {args.out / (name + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
