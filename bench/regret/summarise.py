"""Side-by-side documents -> the per-problem regret table (markdown and JSON).

    python3 bench/regret/summarise.py bench/regret/results/*.json --out bench/regret/regret

Each input is a side-by-side document (``regret.FORMAT``: ``gpuless.py sidebyside`` or
``gpu_tune.py`` writes it). Writes ``<out>.json`` (every problem: the oracle best per pass,
each winner's ratio and regret per pass, the goals, the seed pairs, the winner-flip rate)
and ``<out>.md`` (the tables). Every row states its protocol, its library mode
(``exclude-self``: leave-one-shape-out), its passes and its machines; a document made of
SYNTHETIC timings is marked so in every row and in the title. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from regret import RegretError, summarise_documents  # noqa: E402

LIBRARY_WORDS = {"exclude-self": "leave-one-shape-out", "off": "library off", "on": "library on"}


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f} %"


def _mark(flag: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "-"}[flag]


def _winner_row(problem: Mapping[str, Any], w: Mapping[str, Any]) -> str:
    stage = "end" if w["round"] is None else f"round {w['round']}"
    if w.get("retimed"):
        stage += ", timed again beside the other seed"
    elif w["round"] is None and w.get("budget"):
        stage += f" of {w['budget']}"
    ratios = " / ".join(_f(r) for r in w["ratio_per_pass"])
    oracle = " / ".join(_f(b) for b in problem["oracle_best_per_pass"])
    regrets = " / ".join(_pct(r) for r in w["regret_per_pass"])
    machines = ", ".join(problem["device"]) or "-"
    if problem["host"] and not problem["synthetic"]:
        machines += f" (host {problem['host']})"
    return (f"| {problem['name']} | {w['protocol']} | "
            f"{LIBRARY_WORDS.get(str(problem['library']), problem['library'])} | {w['seed']} | "
            f"{stage} | `{w['genome_hash'][:12]}`{' (an oracle pick)' if w['is_oracle_pick'] else ''} "
            f"| {ratios} | {oracle} | {regrets} | {_pct(w['goal']).lstrip('+')} | "
            f"{_mark(w['meets_goal'])} | {_mark(w['vendor_ok'])} | {problem['passes']} | "
            f"{machines} |")


def markdown(summary: Mapping[str, Any], sources: Sequence[str]) -> str:
    problems = summary["problems"]
    synthetic = any(p["synthetic"] for p in problems)
    lines = [f"# Regret of `tsopt tune gemm` on the held-out problems"
             f"{' (SYNTHETIC timings: a rehearsal, not a measurement)' if synthetic else ''}",
             "",
             "Made by `bench/regret/summarise.py` from " + ", ".join(f"`{s}`" for s in sources)
             + ". Regret = 1 - winner / oracle best, both paired against cuBLAS in the same "
             "runner call (a pass); the oracle best of a pass is the fastest of the oracle's "
             "picks in it. Negative: the winner is faster than every oracle pick.",
             "",
             "| problem | protocol | library | seed | after | winner | ratio per pass | "
             "oracle best per pass | regret per pass | goal | met | >= cuBLAS where the "
             "oracle is | passes | machines |",
             "|---|---|---|---:|---|---|---|---|---|---:|---|---|---:|---|"]
    for p in problems:
        lines += [_winner_row(p, w) for w in p["winners"]]
    lines += ["", "## Seeds (goal d)", "",
              "| problem | protocol | after | seeds | same winner | gap | pass-to-pass spread "
              "| within it | order flips |", "|---|---|---|---|---|---:|---:|---|---|"]
    for p in problems:
        for s in p["seed_pairs"]:
            after = "end" if s["round"] is None else f"round {s['round']}"
            lines.append(f"| {p['name']} | {s['protocol']} | {after} | "
                         f"{s['seeds'][0]}, {s['seeds'][1]} | {_mark(s['same_genome'])} | "
                         f"{_pct(s['gap']).lstrip('+')} | {_pct(s['pass_spread']).lstrip('+')} | "
                         f"{_mark(s['within_spread'])} | {_mark(s['order_flips'])} |")
    flips = summary["winner_flip_rate"]
    lines += ["", f"Winner flips: {flips['distinct_winners']} of {flips['pairs']} seed pairs "
              f"name different genomes; the passes disagree on the pair's order in "
              f"{flips['order_flips']} of {flips['pairs']}.", ""]
    goals = [w for p in problems for w in p["winners"]
             if w["meets_goal"] is not None and not w.get("retimed")]
    lines.append(f"Goals met: {sum(1 for w in goals if w['meets_goal'])} of {len(goals)} "
                 "winners within their bound (gpuless: 4 % after round 1, 2 % after round 2; "
                 "gpu-inline: 2 % at the end of its study, 5 minutes unless the row says "
                 "otherwise), judged on each winner's worst pass; a winner timed again beside "
                 "another seed counts once, in its own study's document.")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("documents", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, required=True,
                        help="path stem: <out>.json and <out>.md are written")
    args = parser.parse_args(argv)
    docs = []
    for path in args.documents:
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"error: {path}: cannot be read as JSON ({exc})", file=sys.stderr)
            return 2
        doc["_source"] = path.name
        docs.append(doc)
    try:
        summary = summarise_documents(docs)
    except (RegretError, KeyError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary["sources"] = [p.name for p in args.documents]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(summary, sort_keys=True) + "\n")
    args.out.with_suffix(".md").write_text(markdown(summary, summary["sources"]))
    print(args.out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
