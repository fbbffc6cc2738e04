"""On the GPU machine, right after the runner measured a workload's bundles: each bundle's best
correct kernel by the runner's paired ratio, made into one package (``check_dispatch``'s
``make_package``), so ``layer.py`` and ``check_dispatch.py`` can run in the same call, before
the results have travelled back, been ingested and exported (which saves a machine start).

    python3 bench/llama_layer/best_artifacts.py BUNDLES_DIR --package /tmp/pkg --json picks.json

The pick is the one ``tsopt export`` makes from the database after ingest (rank 1: the
greatest paired ratio of a correct, timed measurement, ties by genome hash: ``store.ranked``'s
rule for candidates measured once, as ``bench/regret/device_pairs.py`` applies it);
``picks.json`` names each bucket's genome so that the export made here afterwards can be
checked against it. A bundle with no ``ok``
measurement gives no kernel: its bucket falls back to torch.matmul, and picks.json says so.
Torch, the standard library and ``bench/serving/check_dispatch.py`` only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "serving"))
sys.path.insert(0, str(ROOT / "bench" / "regret"))

from device_pairs import best, ratios  # noqa: E402  (store.ranked's rule, measured once)


def best_of(bundle: Path) -> dict:
    """The bundle's best ``ok`` measurement: its genome, ratio and artifact directory."""
    pick = {"bundle": bundle.name, "genome_hash": None, "ratio": None, "artifact": None,
            "measured": 0}
    results_path = bundle / "results.json"
    if not results_path.exists():
        return pick
    results = json.loads(results_path.read_text())
    pick["measured"] = len(results["measurements"])
    standings = ratios(results)
    winner = best(standings)
    if winner is None:
        return pick
    manifest = json.loads((bundle / "manifest.json").read_text())
    artifact = next(c["artifact"] for c in manifest["candidates"] if c["genome_hash"] == winner)
    pick.update(genome_hash=winner, ratio=standings[winner], artifact=str(bundle / artifact))
    return pick


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundles", type=Path, help="the folder holding the workload's bundles")
    parser.add_argument("--package", type=Path, required=True, help="a new, empty folder")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    bundles = sorted(p.parent for p in args.bundles.glob("*/manifest.json"))
    if not bundles:
        print(f"error: no bundle (manifest.json) under {args.bundles}", file=sys.stderr)
        return 2
    picks = [best_of(b) for b in bundles]
    from check_dispatch import make_package  # torch: only once there is something to package

    args.package.mkdir(parents=True, exist_ok=False)
    make_package([Path(p["artifact"]) for p in picks if p["artifact"]], args.package)
    args.json.write_text(json.dumps({"picks": picks}, indent=1) + "\n")
    for p in picks:
        print(f"{p['bundle']}: {p['genome_hash'] or 'none (torch.matmul)'} "
              f"ratio {p['ratio']} ({p['measured']} measured)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
