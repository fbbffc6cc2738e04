"""Round 2 of bench/launch_modes: per script variant, its gap to the runner's graph ratio.

Reads what ``factorial.sh`` brought back (the folder or ``launch_modes_factorial.tar.gz``):
``runner.pass{1,2}.json`` and ``script-<variant>.pass{1,2}.json`` (``c20-wait``, ..., and any
other variant ``factorial.sh`` ran, e.g. ``c20-wait-regions``). Per kernel and
variant: R and S (means of two passes), G = |R - S| / S, and P, the pass-to-pass spread (the
larger of |R1 - R2| / R and |S1 - S2| / S); "agrees" when G <= P, the rule of round 1
(``summarise.py``). Prints a table per variant and the agreement counts.

    python3 bench/launch_modes/factorial_summarise.py RESULTS_DIR_OR_TAR [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

VARIANTS = ("c20-wait", "c32-wait", "c20-queued", "c32-queued", "c32-queued-b10")


def folder(path: Path) -> Path:
    if path.is_file():
        tmp = Path(tempfile.mkdtemp())
        with tarfile.open(path) as tar:
            tar.extractall(tmp, filter="data")
        return tmp
    return path


def rows(path: Path, key: str) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    return {r["genome_hash"]: r for r in doc[key] if r.get("ratio") is not None}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("results", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    base = folder(args.results)
    runner = [rows(base / f"runner.pass{p}.json", "measurements") for p in (1, 2)]
    out: dict[str, Any] = {}
    found = sorted(f.name[len("script-"):-len(".pass1.json")]
                   for f in base.glob("script-*.pass1.json"))
    for variant in [*VARIANTS, *(v for v in found if v not in VARIANTS)]:
        script = [rows(base / f"script-{variant}.pass{p}.json", "kernels") for p in (1, 2)]
        if not script[0]:
            continue
        table, agree, gaps = [], 0, []
        for genome in sorted(set(runner[0]) & set(script[0])):
            r = [d[genome]["ratio"] for d in runner if genome in d]
            s = [d[genome]["ratio"] for d in script if genome in d]
            if len(r) < 2 or len(s) < 2:
                continue
            rm, sm = statistics.fmean(r), statistics.fmean(s)
            gap = abs(rm - sm) / sm
            spread = max(abs(r[0] - r[1]) / rm, abs(s[0] - s[1]) / sm)
            agree += gap <= spread
            gaps.append(gap)
            us = [d[genome] for d in script]
            table.append({"genome": genome[:12], "runner": r, "script": s, "gap": gap,
                          "spread": spread, "agrees": gap <= spread,
                          "script_us": [u["median_us"] for u in us],
                          "script_base_us": [u["baseline_median_us"] for u in us]})
        out[variant] = {"kernels": table, "agree": agree, "of": len(table),
                        "median_gap": statistics.median(gaps) if gaps else None,
                        "max_gap": max(gaps) if gaps else None}
        summary = out[variant]
        print(f"\n## script {variant}: {agree} of {len(table)} agree; gap median "
              f"{100 * (summary['median_gap'] or 0):.2f} %, "
              f"max {100 * (summary['max_gap'] or 0):.2f} %\n")
        print("| genome | runner R1, R2 | script S1, S2 | gap G | spread P | agrees |")
        print("|---|---|---|---|---|---|")
        for t in table:
            print(f"| {t['genome']} | {t['runner'][0]:.3f}, {t['runner'][1]:.3f} | "
                  f"{t['script'][0]:.3f}, {t['script'][1]:.3f} | {100 * t['gap']:.2f} % | "
                  f"{100 * t['spread']:.2f} % | {'yes' if t['agrees'] else 'no'} |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
