"""The H200 results of the issue-13 bundles as one table per problem (README.md's Result).

Reads each ``gemm-small-<problem>.results.json`` here (``tsopt measure`` on the H200) and,
for the genomes, the bundle's ``manifest.json`` under ``.tsopt/bundles/gemm-small-<problem>``
(git-ignored: the genome summaries are kept in ``gemm-small-summary.json`` beside this file,
which is read instead when the bundles are gone)::

    .venv/bin/python bench/gemm_small_h200/summarise.py          # prints the Markdown tables

Bandwidth: bytes = 2 (M K + N K + M N) for bf16 (A, B read once, D written once), over the
candidate's median time, as a fraction of the H200's 4.30 TB/s; shown for the skinny
problems (M <= 128), where the GEMM is memory-bound.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUNDLES = ROOT / ".tsopt" / "bundles"
SUMMARY = HERE / "gemm-small-summary.json"
HBM_BYTES_PER_S = 4.30e12
SKINNY_M = 128
TARGETS = {  # issue 13: paired ratio vs cuBLAS to reach (None: no target, a control)
    "gemm-bf16-128x8192x8192": 1.00, "gemm-bf16-16x8192x8192": 1.00,
    "gemm-bf16-64x4096x4096": 1.00, "gemm-bf16-16x4096x4096": 1.00,
    "gemm-bf16-32x4096x4096": None, "gemm-bf16-3000x2008x1000": 0.95,
    "gemm-bf16-1024x1024x1024": 0.90, "gemm-bf16-8192x8192x8192": 0.99,
}
ORDER = list(TARGETS)


def genome_summary(genome: dict[str, Any]) -> dict[str, Any]:
    s, n = genome["structure"], genome["numeric"]
    separate = s.get("arrangement") == "separate"
    cta_m = n["tile_m"] * (n["consumers"] if separate else 1)
    return {"tile": f"{cta_m}x{n['tile_n']}x{n['tile_k']}", "consumers": n["consumers"],
            "arrangement": s.get("arrangement", "cooperative"), "stages": n["stages"],
            "swap_ab": bool(s.get("swap_ab", False)), "split_k": int(n.get("split_k", 1)),
            "cluster": s["cluster"], "epilogue": s["epilogue"], "persistent": s["persistent"]}


def load_genomes() -> dict[str, dict[str, Any]]:
    """genome hash -> summary, from the bundles if here, else from the kept summary."""
    found: dict[str, dict[str, Any]] = {}
    for manifest in sorted(BUNDLES.glob("gemm-small-*/manifest.json")):
        for c in json.loads(manifest.read_text())["candidates"]:
            found[c["genome_hash"]] = genome_summary(c["genome"])
    if not found and SUMMARY.exists():
        found = json.loads(SUMMARY.read_text())["genomes"]
    return found


def sizes(key: str) -> tuple[int, int, int]:
    m, n, k = (int(v) for v in key.rsplit("-", 1)[1].split("x"))
    return m, n, k


def rows_of(doc: dict[str, Any], genomes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for meas in doc["measurements"]:
        m, n, k = sizes(meas["problem_key"])
        moved = 2 * (m * k + n * k + m * n)
        row = {"genome_hash": meas["genome_hash"], "status": meas["status"],
               "ratio": meas.get("ratio"), "ratio_lo": meas.get("ratio_lo"),
               "ratio_hi": meas.get("ratio_hi"), "median_us": meas.get("median_us"),
               "baseline_median_us": meas.get("baseline_median_us"),
               "rel_err": meas.get("rel_err"),
               "throttle": ",".join((meas.get("conditions") or {}).get("reasons") or []),
               **genomes.get(meas["genome_hash"], {})}
        if meas.get("median_us"):
            row["hbm_fraction"] = moved / (meas["median_us"] * 1e-6) / HBM_BYTES_PER_S
            row["baseline_hbm_fraction"] = (moved / (meas["baseline_median_us"] * 1e-6)
                                            / HBM_BYTES_PER_S)
        rows.append(row)
    rows.sort(key=lambda r: -(r["ratio"] or 0))
    return rows


def table(key: str, rows: list[dict[str, Any]]) -> str:
    m = sizes(key)[0]
    skinny = m <= SKINNY_M
    target = TARGETS.get(key)
    best = rows[0] if rows else None
    head = (f"**{key.removeprefix('gemm-bf16-')}** (target "
            f"{'>= ' + format(target, '.2f') if target else 'none'}; cuBLAS median "
            f"{rows[0]['baseline_median_us']:.1f} us next to the best")
    if skinny:
        head += f", {rows[0]['baseline_hbm_fraction']:.0%} of 4.30 TB/s"
    verdict = ("met" if best and target and best["ratio"] >= target
               else "not met" if target else "-")
    head += f"): best {best['ratio']:.3f}x, target {verdict}"
    cols = ["genome", "tile MxNxK (cons.)", "stages", "swap_ab", "split_k", "cluster",
            "epilogue", "persistent", "status", "ratio [95 % CI]", "median us",
            "cuBLAS us", "throttle"]
    if skinny:
        cols.append("HBM fraction")
    lines = [head, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        ratio = (f"{r['ratio']:.3f} [{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}]"
                 if r["ratio"] is not None else "-")
        cells = [r["genome_hash"][:12], f"{r.get('tile', '?')} ({r.get('consumers', '?')}"
                 f"{', sep.' if r.get('arrangement') == 'separate' else ''})",
                 str(r.get("stages", "?")), "yes" if r.get("swap_ab") else "-",
                 str(r.get("split_k", "?")), r.get("cluster", "?"), r.get("epilogue", "?"),
                 "yes" if r.get("persistent") else "-", r["status"], ratio,
                 f"{r['median_us']:.1f}" if r["median_us"] else "-",
                 f"{r['baseline_median_us']:.1f}" if r["baseline_median_us"] else "-",
                 r["throttle"] or "-"]
        if skinny:
            cells.append(f"{r['hbm_fraction']:.0%}" if "hbm_fraction" in r else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    genomes = load_genomes()
    docs = {}
    for path in sorted(HERE.glob("gemm-small-*.results.json")):
        doc = json.loads(path.read_text())
        docs[doc["measurements"][0]["problem_key"]] = doc
    missing = sorted({m["genome_hash"] for d in docs.values() for m in d["measurements"]}
                     - set(genomes))
    if missing:
        print(f"no genome for {len(missing)} measured hash(es), e.g. {missing[0][:12]}",
              file=sys.stderr)
    SUMMARY.write_text(json.dumps({"genomes": genomes}, indent=1, sort_keys=True) + "\n")
    for key in sorted(docs, key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER)):
        print(table(key, rows_of(docs[key], genomes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
