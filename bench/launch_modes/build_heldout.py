"""Issue #28 item 3's check for the held-out decode problems: every winner the regret
experiment committed there, built here into graph-mode bundles for ``device.sh``.

Which winners: for each held-out problem with M <= 128 (``tsopt/data/heldout.json``), every
distinct genome that won a study in ``bench/regret`` (goal (a): both seeds, both rounds,
``results/winners-transfer.json``; goal (b): each ``results/gpu-s<seed>-<problem>.json``).
They are test data, as the regret tables are: nothing here feeds a library or a model.
Run ``python3 -m scripts.evidence unpack regret`` first (the documents are in the archive)::

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/launch_modes/build_heldout.py --jobs 2
    # then on the GPU: bash bench/launch_modes/device.sh carry/launch_heldout
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# By path: bench/targets_h200 has a module of the same name, which this one imports.
_spec = importlib.util.spec_from_file_location("launch_build_bundles", HERE / "build_bundles.py")
assert _spec is not None and _spec.loader is not None
launch_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(launch_build)
DECODE_M = launch_build.DECODE_M

RESULTS = ROOT / "bench" / "regret" / "results"
OUT = ROOT / "carry" / "launch_heldout"


def decode_problems() -> dict[str, str]:
    """Held-out name -> problem spec, for the problems with M <= DECODE_M."""
    doc = json.loads((ROOT / "tsopt/data/heldout.json").read_text())
    return {p["name"]: p["problem"] for p in doc["problems"]
            if int(p["problem"].split(":")[2].split("x")[0]) <= DECODE_M}


def choose() -> dict[str, list[dict]]:
    """Per decode problem spec: its distinct winners (genome, short hash, which studies)."""
    problems = decode_problems()
    found: dict[str, dict[str, dict]] = {spec: {} for spec in problems.values()}

    def add(name: str, genome: dict, short: str, why: str) -> None:
        pick = found[problems[name]].setdefault(short, {"genome": genome, "short": short,
                                                         "why": []})
        pick["why"].append(why)

    gpuless = json.loads((RESULTS / "winners-transfer.json").read_text())
    for seed, by_problem in sorted(gpuless.items()):
        for name, by_round in sorted(by_problem.items()):
            for rnd, winner in sorted(by_round.items()):
                if name in problems:
                    add(name, winner["genome"], winner["genome_hash"][:12],
                        f"(a) seed {seed} round {rnd}")
    for path in sorted(RESULTS.glob("gpu-s*-*.json")):
        for problem in json.loads(path.read_text())["problems"]:
            for study in problem["studies"]:
                if problem["name"] in problems and study.get("winner"):
                    add(problem["name"], study["winner"]["genome"],
                        study["winner"]["genome_hash"][:12], f"(b) seed {study['seed']}")
    return {spec: [dict(p, why=", ".join(p["why"])) for p in picks.values()]
            for spec, picks in found.items()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    return launch_build.build_and_write(choose(), args.out, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
