"""Check the committed plans against the held-out set: one plan per held-out problem, of its
version, at least its oracle count of distinct candidates, each genome's hash and family as
the plan says, every family of the space held within a few of an equal share.

The plans are raw outputs, packed in ``evidence/oracle.tar.xz``; unpack them first::

    python3 -m scripts.evidence unpack oracle
    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/oracle/check_plans.py [--plans bench/oracle/plans]

(``tests/test_oracle_harness.py`` runs the same check on one plan, a fixture.) Prints one line
per plan; exit 1 naming what is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FAMILIES = {f"{d}{s}" for d in ("tile-per-cta", "persistent", "split-k2", "split-k3",
                                "split-k4", "stream-k") for s in ("", "+swap")}


def family_of(genes: dict[str, Any]) -> str:
    if genes.get("stream_k"):
        name = "stream-k"
    elif int(genes.get("split_k", 1)) > 1:
        name = f"split-k{genes['split_k']}"
    else:
        name = "persistent" if genes["persistent"] else "tile-per-cta"
    return name + ("+swap" if genes.get("swap_ab") else "")


def plan_problems(plan: dict[str, Any], spec: str, version: int, oracle: int) -> list[str]:
    """What is wrong with one plan for the held-out problem ``spec`` (empty: nothing)."""
    from tsopt.core.genome import Genome

    wrong = []
    if plan.get("problem") != spec or plan.get("heldout_version") != version:
        wrong.append(f"plan of {plan.get('problem')} v{plan.get('heldout_version')}, "
                     f"the set has {spec} v{version}")
    hashes = [c["genome_hash"] for c in plan["candidates"]]
    if len(set(hashes)) != len(hashes) or len(hashes) < oracle:
        wrong.append(f"{len(set(hashes))} distinct candidates of {len(hashes)}, oracle {oracle}")
    for cand in plan["candidates"]:
        genome = Genome.from_dict(cand["genome"])
        if genome.hash != cand["genome_hash"] or family_of(genome.genes) != cand["family"]:
            wrong.append(f"{cand['genome_hash'][:12]}: hash or family is not its genome's")
    shares = plan["coverage"]["family"]
    if set(shares) != FAMILIES:
        wrong.append(f"families {sorted(shares)}")
    elif max(shares.values()) - min(shares.values()) > max(3, len(hashes) // 20):
        wrong.append(f"family shares {min(shares.values())}-{max(shares.values())}")
    return wrong


def main() -> int:
    from tsopt.app.heldout import load_heldout

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=Path, default=HERE / "plans")
    parser.add_argument("--heldout", type=Path, default=None)
    args = parser.parse_args()
    held = load_heldout(args.heldout)
    bad = 0
    for item in held.problems:
        path = args.plans / f"{item.name}.json"
        if not path.is_file():
            print(f"{path}: missing (python3 -m scripts.evidence unpack oracle?)")
            bad += 1
            continue
        wrong = plan_problems(json.loads(path.read_text()), item.spec, held.version,
                              item.oracle)
        print(f"{path}: " + ("; ".join(wrong) if wrong else "ok"))
        bad += bool(wrong)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
