"""Round 1 with the analytical prior (measured 2026-12-04, ``results/r1.json``): each study's
best candidate with its whole genome, for a pair bundle beside today's default's round 1.

``results/r1.json`` names genomes by hash; the genomes come from the same studies rebuilt
with ``--cost-prior analytical`` (the default then), which propose the same 16 genomes each
(checked here, study by study: the same hashes, or the script stops):

    .venv/bin/python bench/regret/gpuless.py --work /work/regret-analytical round --round 1 \\
        --seed 1 --seed 2 --cost-prior analytical
    python3 bench/regret/old_best.py bench/regret/results/r1.json \\
        /work/regret-analytical/ship/r1 --out bench/regret/analytical-r1-best.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("results", type=Path)
    parser.add_argument("ship", type=Path, help="the rebuilt round's ship/r1 folder")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    doc = json.loads(args.results.read_text())
    studies = []
    for item in doc["bundles"]:
        measured = [m for m in item["results"]["measurements"]]
        manifest = json.loads((args.ship / item["path"] / "manifest.json").read_text())
        genomes = {c["genome_hash"]: c["genome"] for c in manifest["candidates"]}
        if set(genomes) != {m["genome_hash"] for m in measured}:
            sys.exit(f"error: {item['path']}: the rebuilt round proposes other genomes than "
                     "the measured one")
        ok = [m for m in measured if m.get("status") == "ok" and m.get("ratio")]
        best = max(ok, key=lambda m: m["ratio"])
        origin = next(c.get("origin") for c in manifest["candidates"]
                      if c["genome_hash"] == best["genome_hash"])
        studies.append({"study": item["path"], "genome_hash": best["genome_hash"],
                        "ratio": best["ratio"], "ratio_lo": best["ratio_lo"],
                        "ratio_hi": best["ratio_hi"], "origin": origin,
                        "genome": genomes[best["genome_hash"]]})
        print(f"{item['path']}: 16 of 16 the same; best {best['genome_hash'][:12]} "
              f"{best['ratio']:.3f}x ({origin})")
    args.out.write_text(json.dumps({
        "what": "round 1 of (a) with the analytical prior: each study's best, measured "
                "2026-12-04 on one H200 in one call (results/r1.json), genomes from the "
                "rebuilt studies",
        "studies": studies}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
