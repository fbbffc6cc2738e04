"""Where the shipped cross-shape model (the studies' prior) ranks each problem's oracle picks
among what the two seeds' studies built: a diagnosis of the regret, read on the CPU. The
held-out problems are not fitted on here (nor anywhere); this only reads the model.

    python3 -m scripts.evidence unpack regret
    mkdir -p /tmp/r2 && tar -xJf bench/regret/state-r2-transfer.tar.xz -C /tmp/r2
    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/regret/prior_ranks.py --work /tmp/r2 \\
        --out bench/regret/prior-ranks.md

Per problem: the candidates of both seeds' study databases (each genome once) and the three
oracle picks, ranked by the model's predicted log time (lower first; equal predictions share
the best rank of their group, so a tie is visible as one), and how many distinct predictions
the lot has. A pick ranked far down is one the prior steers away from; many ties say the
model cannot tell those candidates apart and the study's own measurements must.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from tsopt.app.heldout import load_heldout  # noqa: E402
from tsopt.search.transfer import genes_of, load_model  # noqa: E402


def built_genomes(work: Path, name: str) -> dict[str, tuple[dict, float | None]]:
    """hash -> (genome, best measured ratio or None) over both seeds' databases."""
    found: dict[str, tuple[dict, float | None]] = {}
    for db in sorted(work.glob(f"s*/{name}.db")):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        rows = con.execute(
            "select c.genome_hash, c.genome_json, max(m.ratio) from tsopt_candidate c "
            "left join tsopt_measurement m on m.candidate_id = c.id and m.status = 'ok' "
            "where c.build_id is not null group by c.id").fetchall()
        con.close()
        for h, genome, ratio in rows:
            old = found.get(h)
            best = max((r for r in (ratio, old[1] if old else None) if r is not None),
                       default=None)
            found[h] = (json.loads(genome), best)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True,
                        help="the studies (state-r2-transfer.tar.xz unpacked)")
    parser.add_argument("--oracle", type=Path, default=HERE / "oracle-best.json")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    model = load_model()
    if model is None:
        print("error: no shipped cross-shape model", file=sys.stderr)
        return 2
    oracle = {p["name"]: p for p in json.loads(args.oracle.read_text())["problems"]}
    lines = ["| problem | built (both seeds) | distinct predictions | oracle pick: model rank "
             "(its H200 table ratio) | best built: model rank (measured) |",
             "|---|---:|---:|---|---|"]
    for problem in load_heldout().problems:
        sizes = dict(problem.problem.sizes)
        built = built_genomes(args.work, problem.name)
        picks = {o["genome_hash"]: o for o in oracle[problem.name]["oracle"]}
        hashes = list(dict.fromkeys([*built, *picks]))
        genomes = [built[h][0] if h in built else picks[h]["genome"] for h in hashes]
        pred = [round(float(v), 6) for v in model.predict([genes_of(g) for g in genomes], sizes)]
        rank = {h: 1 + sum(q < p for q in pred) for h, p in zip(hashes, pred, strict=True)}
        pick_cells = ", ".join(f"`{h[:8]}` {rank[h]} ({o['ratio']:.3f}x)"
                               for h, o in picks.items())
        timed = [(r, h) for h, (_, r) in built.items() if r is not None]
        best = max(timed) if timed else None
        best_cell = f"`{best[1][:8]}` {rank[best[1]]} ({best[0]:.3f}x)" if best else "-"
        lines.append(f"| {problem.name} | {len(built)} | {len(set(pred))} | {pick_cells} "
                     f"| {best_cell} |")
    doc = ("# Where the prior ranks the oracle picks among what the studies built\n\n"
           "Made by `bench/regret/prior_ranks.py` (its docstring has the command) from "
           "`state-r2-transfer.tar.xz` and `oracle-best.json`. Rank among the built "
           "candidates of both seeds and the picks together (1: the model's first); a pick "
           "the studies also built is counted once. Measured ratios are the studies' "
           "(one H100); the picks' are their oracle tables' (one H200).\n\n"
           + "\n".join(lines) + "\n")
    args.out.write_text(doc)
    print(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
