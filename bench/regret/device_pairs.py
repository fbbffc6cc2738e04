"""On the GPU machine, right after round 2 is measured there (torch and tsopt.core only): each
problem's winners of rounds 1 and 2 beside its oracle picks, written as pair bundles and
measured, so that goal (a)'s side-by-side passes need no third machine start.

    python3 bench/regret/device_pairs.py --work .tsopt/regret \\
        --measured /tmp/keep/r2.json --deadline 330 --out $OUT/pairs.json

``--work`` holds ``pairs-pre/plan.json`` (``gpuless.py plan``, made where the DSL is: the
oracle picks and round-1 winners, built, with each study's round-1 standings) and the
round-2 ship bundles it names. ``--measured``: ``measure_bundles.py`` documents of those
bundles (and of any round-1 bundle the plan names instead of a winner). A study's round-2
winner is the best standing of its round-1 standings and its round-2 measurements: the rule
of ``store.ranked`` for candidates measured once (the greatest paired ratio of a correct,
timed measurement, ties broken by genome hash), which ``gpuless.py ingest --round 2`` checks
afterwards against the study's database. Every problem's ``fwd`` bundle is measured before
any ``rev`` one, so a call cut short still has one pass of every problem. ``--out`` is a
``measure_bundles.py`` document (``gpuless.py sidebyside`` reads it) plus ``chosen``: each
study's winners as chosen here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import sidebyside  # noqa: E402
from measure_bundles import measure_into, new_document, save  # noqa: E402

PROTOCOL = "gpuless"


def measured_results(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """'<round folder name>/<bundle>' (e.g. 'r2/s1-mid') -> its results document."""
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        for item in json.loads(path.read_text())["bundles"]:
            if item.get("results"):
                found[f"{Path(item['folder']).name}/{item['path']}"] = item["results"]
    return found


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """genome hash -> paired ratio of each correct, timed measurement."""
    return {m["genome_hash"]: m["ratio"] for m in results.get("measurements", [])
            if m.get("status") == "ok" and m.get("ratio") is not None
            and m.get("median_us") is not None}


def best(standings: dict[str, float]) -> str | None:
    return min(standings, key=lambda h: (-standings[h], h)) if standings else None


def bundle_candidate(work: Path, bundle: str, genome_hash: str) -> dict[str, Any]:
    manifest = json.loads((work / bundle / "manifest.json").read_text())
    for c in manifest["candidates"]:
        if c["genome_hash"] == genome_hash:
            return {"genome": c["genome"], "artifact_dir": str(work / bundle / c["artifact"])}
    raise KeyError(f"{genome_hash} is not in {bundle}")


def winner_item(seed: int, rnd: int, genome_hash: str, genome: dict[str, Any],
                artifact_dir: str, ratio: float | None, how: str) -> dict[str, Any]:
    return {"genome": genome, "genome_hash": genome_hash, "artifact_dir": artifact_dir,
            "role": {"kind": "winner", "protocol": PROTOCOL, "seed": seed, "round": rnd,
                     "study_ratio": ratio, "chosen": how}}


def study_winners(work: Path, study: dict[str, Any], measured: dict[str, dict[str, Any]],
                  chosen: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    seed = study["seed"]
    items = []
    standings = dict(study.get("round1_standings") or {})
    first = study.get("round1")
    if first is not None:  # the plan names its artifact under --work
        first = {**first, "artifact_dir": str(work / first["artifact_dir"])}
    if first is None and study.get("round1_bundle"):
        key = "r1/" + Path(study["round1_bundle"]).name
        if key in measured:
            standings = ratios(measured[key])
            top = best(standings)
            if top is not None:
                c = bundle_candidate(work, study["round1_bundle"], top)
                first = {"genome_hash": top, "genome": c["genome"],
                         "artifact_dir": c["artifact_dir"], "ratio": standings[top]}
                first["how"] = "device: best of its round-1 bundle measured here"
    if first is not None:
        items.append(winner_item(seed, 1, first["genome_hash"], first["genome"],
                                 first["artifact_dir"], first.get("ratio"),
                                 first.get("how", "database: rank 1")))
        chosen.append({"name": name, "seed": seed, "round": 1,
                       "genome_hash": first["genome_hash"], "ratio": first.get("ratio"),
                       "how": first.get("how", "database: rank 1")})
    if study.get("round2_bundle"):
        key = "r2/" + Path(study["round2_bundle"]).name
        if key not in measured:
            print(f"{name} seed {seed}: round 2 not measured; its winner left out", flush=True)
            return items
        second = ratios(measured[key])
        top = best({**standings, **second})
        if top is None:
            return items
        if top in second:
            c = bundle_candidate(work, study["round2_bundle"], top)
            genome, artifact = c["genome"], c["artifact_dir"]
        else:  # a round-1 candidate is still the best; round 1's winner is the one it can be
            if first is None or first["genome_hash"] != top:
                print(f"{name} seed {seed}: round-2 best {top[:12]} is a round-1 candidate "
                      "that is not round 1's winner; left out", flush=True)
                return items
            genome, artifact = items[0]["genome"], items[0]["artifact_dir"]
        ratio = {**standings, **second}[top]
        how = "device: best standing of rounds 1 and 2"
        items.append(winner_item(seed, 2, top, genome, artifact, ratio, how))
        chosen.append({"name": name, "seed": seed, "round": 2, "genome_hash": top,
                       "ratio": ratio, "how": how, "round2_measured": len(second)})
    return items


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path(".tsopt/regret"))
    parser.add_argument("--measured", type=Path, action="append", required=True)
    parser.add_argument("--pairs", type=Path, default=Path("/tmp/regret-pairs"),
                        help="where the pair bundles are written")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deadline", type=float, default=330.0)
    parser.add_argument("--reserve", type=float, default=25.0)
    args = parser.parse_args()
    start = time.time()
    plan = json.loads((args.work / "pairs-pre" / "plan.json").read_text())
    measured = measured_results([p for p in args.measured if p.exists()])
    chosen: list[dict[str, Any]] = []
    written: list[tuple[str, list[Path]]] = []
    for problem in plan["problems"]:
        items = []
        for study in problem["studies"]:
            items += study_winners(args.work, study, measured, chosen, problem["name"])
        oracle = [{"genome": o["genome"], "genome_hash": o["genome_hash"],
                   "artifact_dir": str(args.work / o["artifact_dir"]), "role": r}
                  for o in problem["oracle"] for r in o["roles"]]
        slots = sidebyside.merge_items(items + oracle)
        bundles = sidebyside.write_pair_bundles(args.pairs, problem["name"], problem["problem"],
                                                slots)
        written.append((problem["name"], bundles))
        print(f"{problem['name']}: {len(slots)} genomes", flush=True)
    doc = {**new_document(start), "chosen": chosen}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for order in range(2):  # every problem's first pass before any second pass
        for _, bundles in written:
            bundle = bundles[order]
            left = args.deadline - (time.time() - start)
            if left < args.reserve:
                doc["left"].append(bundle.name)
                continue
            measure_into(doc, bundle, args.pairs.as_posix(), bundle.name, left, args.out,
                         start)
    save(doc, args.out, start)
    print(json.dumps({"measured": len(doc["bundles"]), "left": len(doc["left"]),
                      "wall_s": doc["wall_s"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
