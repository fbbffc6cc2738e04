"""Leave-one-shape-out: does a cost model trained on the corpus's other shapes rank a new
shape's candidates better than the analytical estimate alone? (issue #28 item 5)

    CUTE_DSL_ARCH=sm_90a PYTHONPATH=<a folder holding nvidia-matmul-heuristics> \\
        .venv/bin/python bench/transfer_model/loso.py --out bench/transfer_model/loso.json

For every GEMM shape of the measurement corpus (corpus/) with at least 20 measured genomes:
fit on all the other shapes, rank the shape's measured genomes, and score the ranking
against their measured paired ratios (median over every pass): Spearman's rho between the
predicted time and the measured one, and the regret of the model's top 1 and top 8 (1 - the
best measured among them / the shape's best measured). Rankers:

- ``analytical``: tsopt.search.cost_model.gemm_estimate alone (what a study starts from now);
- ``transfer``: tsopt.search.transfer fitted on the other shapes;
- ``nvmmh``: nvidia-matmul-heuristics' proposals for the shape (CUTLASS3 backend,
  PERF_MODEL_BASED_AUTO_TUNING, H200_SXM), a genome ranked by how near its CTA tile,
  cluster and stages are to the best-ranked proposal it matches;
- ``transfer+nvmmh``: the transfer model with those nearness terms as features.

The held-out problems of issue #28 are not in the corpus (they are chosen outside the
committed evidence), so nothing here is derived from them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tsopt.app.corpus import load_corpus  # noqa: E402
from tsopt.search.cost_model import analytical_log  # noqa: E402
from tsopt.search.evolve import FAMILY  # noqa: E402
from tsopt.search.transfer import fit_tables, shape_tables  # noqa: E402

TOP = 8
PROPOSALS = 16
METRICS = ("spearman", "regret_top1", "regret_top8", "regret_survey8")


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(float)
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(float)
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def survey_picks(predicted: np.ndarray, genes: list[dict[str, Any]]) -> list[int]:
    """What ``evolve``'s survey takes from this table: the best-ranked genome of each schedule
    family (``tsopt.search.evolve.FAMILY``: tile, cluster, swap-AB, split-K, stream-K), the
    best :data:`TOP` families."""
    best: dict[tuple[str, ...], int] = {}
    for i in np.argsort(predicted, kind="stable"):
        best.setdefault(tuple(repr(genes[i].get(name)) for name in FAMILY), int(i))
    return list(best.values())[:TOP]


def score(predicted: np.ndarray, ratios: np.ndarray,
          genes: list[dict[str, Any]]) -> dict[str, float]:
    """Lower predicted = faster; ratio higher = faster."""
    order = np.argsort(predicted, kind="stable")
    best = float(ratios.max())
    return {"spearman": spearman(predicted, -np.log(ratios)),
            "regret_top1": 1.0 - float(ratios[order[0]]) / best,
            "regret_top8": 1.0 - float(ratios[order[:TOP]].max()) / best,
            "regret_survey8": 1.0 - float(ratios[survey_picks(predicted, genes)].max()) / best}


class Heuristic:
    """nvidia-matmul-heuristics' proposals per shape, and a genome's nearness to them."""

    def __init__(self) -> None:
        from nvMatmulHeuristics import (
            NvMatmulHeuristicsFlags,
            NvMatmulHeuristicsInterfaceEx,
            NvMatmulHeuristicsMatmulLayout,
            NvMatmulHeuristicsNvidiaGpu,
            NvMatmulHeuristicsTarget,
        )

        self.layout = NvMatmulHeuristicsMatmulLayout.TN_ROW_MAJOR
        self.h = NvMatmulHeuristicsInterfaceEx(
            backend=NvMatmulHeuristicsTarget.CUTLASS3,
            flags=NvMatmulHeuristicsFlags.PERF_MODEL_BASED_AUTO_TUNING,
            gpu=NvMatmulHeuristicsNvidiaGpu.H200_SXM)
        self.cache: dict[tuple[int, int, int], list[dict[str, int]]] = {}

    def proposals(self, sizes: Mapping[str, int]) -> list[dict[str, int]]:
        key = (sizes["m"], sizes["n"], sizes["k"])
        if key not in self.cache:
            found = self.h.get_with_mnk(*key, self.layout, PROPOSALS)
            self.cache[key] = [{"m": c["kernel"].cta_tile_m, "n": c["kernel"].cta_tile_n,
                                "k": c["kernel"].cta_tile_k, "cm": c["kernel"].cluster_m,
                                "cn": c["kernel"].cluster_n, "stages": c["kernel"].stages,
                                "split": c["kernel"].split_k} for c in found]
        return self.cache[key]

    def features(self, genes: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, float]:
        chains = int(genes.get("consumers", 1)) if genes.get("arrangement") == "separate" else 1
        tm, tn = int(genes.get("tile_m", 128)) * chains, int(genes.get("tile_n", 128))
        cm, cn = (int(v) for v in str(genes.get("cluster", "1x1")).split("x"))
        if genes.get("swap_ab") is True:  # the kernel's M is the problem's N
            tm, tn, cm, cn = tn, tm, cn, cm
        stages = int(genes.get("stages", 4))
        best = math.inf
        rank = float(PROPOSALS)
        for i, p in enumerate(self.proposals(sizes)):
            d = (abs(math.log2(tm / p["m"])) + abs(math.log2(tn / p["n"]))
                 + 0.5 * abs(math.log2(int(genes.get("tile_k", 64)) / p["k"]))
                 + 0.5 * (abs(math.log2(cm / p["cm"])) + abs(math.log2(cn / p["cn"])))
                 + 0.25 * abs(math.log2(stages / max(1, p["stages"])))
                 + 0.5 * abs(math.log2(int(genes.get("split_k", 1) or 1) / max(1, p["split"]))))
            if d < best - 1e-9:
                best, rank = d, float(i)
        return {"nv.distance": best, "nv.rank": rank}


def table(doc: dict[str, Any]) -> str:
    """The README's table from a loso.json: per shape, each ranker's rho / top-1 / top-8 /
    survey regret."""
    names = [k for k in doc["rows"][0] if isinstance(doc["rows"][0][k], dict)]
    lines = ["| shape | genomes | best | " + " | ".join(
        f"{n}: rho / top-1 / top-8 / survey regret" for n in names) + " |",
             "|---|---|---|" + "---|" * len(names)]

    def cell(s: Mapping[str, float]) -> str:
        return (f"{s['spearman']:.2f} / {100 * s['regret_top1']:.1f} % / "
                f"{100 * s['regret_top8']:.1f} % / {100 * s['regret_survey8']:.1f} %")

    for row in doc["rows"]:
        lines.append(f"| {row['problem'].removeprefix('gemm-')} | {row['genomes']} | "
                     f"{row['best_ratio']:.3f}x | " + " | ".join(cell(row[n]) for n in names)
                     + " |")
    lines.append(f"| **mean of {doc['shapes']}** | | | "
                 + " | ".join(f"**{cell(doc['mean'][n])}**" for n in names) + " |")
    return "\n".join(lines)


def oracle_tables(folder: Path) -> list[tuple[str, str, Any]]:
    """(name, problem spec, ShapeTable) per oracle plan of issue #28 (``bench/oracle``: the
    table's correct measured ratios, each genome's genes from its plan; ``python3 -m
    scripts.evidence unpack oracle`` puts the plans back). Test data only: nothing is
    fitted on them."""
    from tsopt.core.problem import parse_problem_spec
    from tsopt.search.transfer import ShapeTable, genes_of

    found = []
    for path in sorted(folder.glob("*.table.json")):
        doc = json.loads(path.read_text())
        plan_path = folder / "plans" / f"{doc['name']}.json"
        if not plan_path.exists():
            raise SystemExit(f"error: {plan_path} is missing: run "
                             "`python3 -m scripts.evidence unpack oracle` first")
        genomes = {c["genome_hash"]: c["genome"]
                   for c in json.loads(plan_path.read_text())["candidates"]}
        rows = [r for r in doc["rows"] if r.get("status") == "ok" and r.get("ratio")
                and r["genome_hash"] in genomes]
        problem = parse_problem_spec(doc["problem"])
        found.append((doc["name"], problem.key, ShapeTable(
            problem_key=problem.key, sizes=dict(problem.sizes),
            genes=[genes_of(genomes[r["genome_hash"]]) for r in rows],
            ratios=[float(r["ratio"]) for r in rows])))
    return found


def rank_all(held: Any, others: list[Any], heuristic: Heuristic | None) -> dict[str, np.ndarray]:
    ranked: dict[str, np.ndarray] = {
        "analytical": np.array([analytical_log(g, held.sizes) for g in held.genes]),
        "transfer": fit_tables(others).predict(held.genes, held.sizes),
    }
    if heuristic is not None:
        extra = heuristic.features
        ranked["nvmmh"] = np.array([extra(g, held.sizes)["nv.distance"] for g in held.genes])
        ranked["transfer+nvmmh"] = fit_tables(others, extra=extra).predict(
            held.genes, held.sizes, extra=extra)
    return ranked


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-heuristic", action="store_true")
    parser.add_argument("--oracle", type=Path, default=None,
                        help="judge on issue #28's oracle tables in this folder (bench/oracle) "
                             "instead: fitted on every corpus shape, which holds none of them")
    parser.add_argument("--table", action="store_true",
                        help="print the README's table from --out, compute nothing")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return 0
    records, _ = load_corpus(ROOT / "corpus")
    tables = shape_tables(records)
    heuristic = None if args.no_heuristic else Heuristic()
    if args.oracle is not None:
        judged = oracle_tables(args.oracle)
        corpus_keys = {t.problem_key for t in tables}
        leaked = [key for _, key, _ in judged if key in corpus_keys]
        if leaked:
            raise SystemExit(f"error: the corpus holds held-out problems {leaked}")
        cases = [(t, tables) for _, _, t in judged]
        question = ("each oracle table of issue #28 ranked by models fitted on every corpus "
                    "shape (none of them held out)")
    else:
        cases = [(t, [o for o in tables if o.problem_key != t.problem_key]) for t in tables]
        question = "leave-one-shape-out ranking of each shape's measured genomes"
    rows = []
    for held, others in cases:
        ratios = np.array(held.ratios)
        ranked = rank_all(held, others, heuristic)
        row: dict[str, Any] = {"problem": held.problem_key, "genomes": len(held.genes),
                               "best_ratio": round(float(ratios.max()), 4)}
        for name, predicted in ranked.items():
            row[name] = {k: round(v, 4) for k, v in score(predicted, ratios, held.genes).items()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    names = [k for k in rows[0] if isinstance(rows[0][k], dict)]
    summary = {name: {metric: round(float(np.mean([r[name][metric] for r in rows])), 4)
                      for metric in METRICS}
               for name in names}
    versus = {name: {metric: {
        "better": sum(r[name][metric] < r["analytical"][metric] - 1e-9 for r in rows),
        "worse": sum(r[name][metric] > r["analytical"][metric] + 1e-9 for r in rows)}
        for metric in METRICS if metric != "spearman"} for name in names if name != "analytical"}
    doc = {"question": question,
           "command": "python bench/transfer_model/loso.py " + " ".join(sys.argv[1:]),
           "shapes": len(rows), "top": TOP, "rows": rows, "mean": summary,
           "shapes_against_analytical": versus}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
