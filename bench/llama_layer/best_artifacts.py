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

Each pick names the GPU its winning measurement was taken on. A ratio ranks kernels on the
card that measured it only (stop 43: 142 of 512 (projection, M) pairs change sides between an
H100 and an H200), so picks made on several cards are named in one line, and
``--measured-on NAME`` picks on that card's measurements alone, as ``tsopt export
--measured-on`` does: a bundle that card never measured falls back to torch.matmul.
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


def best_of(bundle: Path, measured_on: str | None = None) -> dict:
    """The bundle's best ``ok`` measurement (of ``measured_on``'s, when given): its genome,
    ratio, GPU and artifact directory."""
    pick = {"bundle": bundle.name, "genome_hash": None, "ratio": None, "artifact": None,
            "measured": 0, "device": None}
    results_path = bundle / "results.json"
    if not results_path.exists():
        return pick
    results = json.loads(results_path.read_text())

    def card(m: dict) -> str | None:
        return m.get("device") or results.get("device")

    if measured_on is not None:
        results = {**results, "measurements": [m for m in results["measurements"]
                                               if card(m) == measured_on]}
    device_of = {m["genome_hash"]: card(m) for m in results["measurements"]}
    pick["measured"] = len(results["measurements"])
    standings = ratios(results)
    winner = best(standings)
    if winner is None:
        return pick
    manifest = json.loads((bundle / "manifest.json").read_text())
    artifact = next(c["artifact"] for c in manifest["candidates"] if c["genome_hash"] == winner)
    pick.update(genome_hash=winner, ratio=standings[winner], artifact=str(bundle / artifact),
                device=device_of[winner])
    return pick


def cards_note(picks: list[dict]) -> str | None:
    """One line when the picks were made on more than one GPU, else None."""
    count: dict[str, int] = {}
    for p in picks:
        if p["genome_hash"]:
            count[str(p["device"])] = count.get(str(p["device"]), 0) + 1
    if len(count) < 2:
        return None
    each = ", ".join(f"{d}: {n}" for d, n in sorted(count.items()))
    return (f"note: these picks were made on {len(count)} GPUs ({each} buckets); each ranks "
            "kernels on its own card's figures only: --measured-on NAME picks on one card")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundles", type=Path, help="the folder holding the workload's bundles")
    parser.add_argument("--package", type=Path, required=True, help="a new, empty folder")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--measured-on", default=None, metavar="NAME",
                        help="pick on this GPU's measurements alone (as nvidia-smi names it)")
    args = parser.parse_args()
    bundles = sorted(p.parent for p in args.bundles.glob("*/manifest.json"))
    if not bundles:
        print(f"error: no bundle (manifest.json) under {args.bundles}", file=sys.stderr)
        return 2
    picks = [best_of(b, args.measured_on) for b in bundles]
    from check_dispatch import make_package  # torch: only once there is something to package

    args.package.mkdir(parents=True, exist_ok=False)
    make_package([Path(p["artifact"]) for p in picks if p["artifact"]], args.package)
    args.json.write_text(json.dumps({"measured_on": args.measured_on, "picks": picks},
                                    indent=1) + "\n")
    for p in picks:
        print(f"{p['bundle']}: {p['genome_hash'] or 'none (torch.matmul)'} "
              f"ratio {p['ratio']} ({p['measured']} measured, on {p['device']})")
    note = cards_note(picks)
    if note:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
