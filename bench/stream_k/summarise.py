"""The stream-K bundles' results as a table: each candidate's paired ratio to cuBLAS (cuBLAS
time over ours, median of alternating rounds, 95 % interval), its time and the HBM fraction
of the compulsory traffic at the measured copy bandwidth.

    python bench/stream_k/summarise.py DIR [DIR ...] [--md OUT.md]   # DIR: unpacked r/ folders
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

COPY_TBPS = 4.30
"""Device-to-device copy of 8 GiB on the H200 (read + write), bench/hbm_copy."""


def rows(folder: Path) -> list[dict[str, object]]:
    out = []
    for results in sorted(folder.glob("sk-*.results.json")):
        name = results.name.removesuffix(".results.json")
        labels = {}
        tsv = folder / f"{name}.labels.tsv"
        if tsv.exists():
            labels = dict(line.split("\t", 1) for line in tsv.read_text().splitlines() if line)
        shape = name.removeprefix("sk-")
        m, n, k = (int(x) for x in shape.split("x"))
        hbm = (m * k + n * k + m * n) * 2
        for meas in json.loads(results.read_text())["measurements"]:
            row: dict[str, object] = {"problem": shape, "genome": meas["genome_hash"][:12],
                                      "label": labels.get(meas["genome_hash"], "").strip(),
                                      "status": meas["status"]}
            if meas["status"] == "ok":
                row.update(ratio=meas["ratio"], lo=meas["ratio_lo"], hi=meas["ratio_hi"],
                           us=meas["median_us"], cublas_us=meas["baseline_median_us"],
                           hbm=hbm / (meas["median_us"] * 1e-6) / (COPY_TBPS * 1e12),
                           rel_err=meas["rel_err"], rounds=meas["rounds"])
            else:
                row["error"] = (meas.get("error") or "")[:200]
            out.append(row)
    return out


def table(all_rows: list[dict[str, object]]) -> str:
    lines = ["| problem | genome | what | ratio to cuBLAS [95 %] | us (cuBLAS us) | HBM of 4.30 TB/s |",
             "|---|---|---|---|---|---|"]
    for r in all_rows:
        if r["status"] == "ok":
            lines.append(f"| {r['problem']} | {r['genome']} | {r['label']} | {r['ratio']:.3f} "
                         f"[{r['lo']:.3f}, {r['hi']:.3f}] | {r['us']:.1f} ({r['cublas_us']:.1f}) | "
                         f"{r['hbm']:.0%} |")
        else:
            lines.append(f"| {r['problem']} | {r['genome']} | {r['label']} | **{r['status']}** "
                         f"{r.get('error', '')} | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--md", default=None)
    args = parser.parse_args()
    all_rows = [r for f in args.folders for r in rows(Path(f))]
    text = table(all_rows)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")


if __name__ == "__main__":
    main()
