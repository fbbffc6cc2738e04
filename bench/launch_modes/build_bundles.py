"""Issue #28 item 3's check: every committed winner at a decode shape (M <= 128), built here.

Which winners: for every GEMM problem with M <= 128 in the shipped seed library
(tsopt/data/seed_library.json), its best entry by recorded paired ratio; and, where
bench/targets_h200/targets.md marks another genome as the problem's met target, that one too.
Each genome is verified by today's verifier and built for sm_90a from today's template, then
written into one bundle per problem whose study is measured in CUDA-graph mode (``launch:
graph``), under ``carry/launch_modes/`` (git-ignored, carried to the H200 whole)::

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/launch_modes/build_bundles.py [--build-only]

``--build-only`` fills the build cache and writes nothing else (the bundles need the bundle
format's launch field). ``winners.json`` beside the bundles lists what was chosen and why.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "targets_h200"))

from build_bundles import _build  # noqa: E402  (verify with today's checks, then build)

from tsopt.core.problem import Problem  # noqa: E402

OUT = ROOT / "carry" / "launch_modes"
DECODE_M = 128
LIBRARY_BEFORE_ROUND_10 = "a50cd5b^"
# bench/targets_h200/targets.md: the genome marked "met" per decode problem (its winner there).
TARGETS_MET = {
    "gemm:bf16:128x8192x8192": "e5b4eb91cd12", "gemm:bf16:16x4096x4096": "c655ff32c673",
    "gemm:bf16:16x8192x8192": "32361e6b86b4", "gemm:bf16:64x4096x4096": "6be6e076753c",
    "gemm:bf16:64x8192x8192": "9200813197c7",
}


def choose() -> dict[str, list[dict]]:
    """Per decode problem spec: the winners (genome dict, short hash, why chosen)."""
    doc = json.loads((ROOT / "tsopt/data/seed_library.json").read_text())
    by_problem: dict[str, list[dict]] = {}
    for entry in doc["entries"]:
        p = entry["problem"]
        if entry["space"] != "gemm" or entry["arch"] != "sm_90a" or p["m"] > DECODE_M:
            continue
        spec = f"gemm:{p['dtype']}:{p['m']}x{p['n']}x{p['k']}"
        by_problem.setdefault(spec, []).append(entry)
    chosen: dict[str, list[dict]] = {}
    for spec, entries in sorted(by_problem.items()):
        best = max(entries, key=lambda e: e["ratio"])
        picks = [{"genome": best["genome"], "short": best["genome_hash"][:12],
                  "why": f"seed library's best ({best['ratio']}, {best['source'][:80]})"}]
        met = TARGETS_MET.get(spec)
        if met and met != best["genome_hash"][:12]:
            found = [e for e in entries if e["genome_hash"].startswith(met)]
            if found:
                picks.append({"genome": found[0]["genome"], "short": met,
                              "why": "bench/targets_h200 winner (in the seed library)"})
            else:
                genome = _targets_genome(met)
                if genome is not None:
                    picks.append({"genome": genome, "short": met,
                                  "why": "bench/targets_h200 winner (targets.md 'met')"})
        chosen[spec] = picks
    return chosen


def _targets_genome(short: str) -> dict | None:
    """A targets winner the seed library no longer holds (remade since), from the library as it
    was when bench/targets_h200 measured it (the commit before round 10 remade it)."""
    import subprocess
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{LIBRARY_BEFORE_ROUND_10}:"
                           "tsopt/data/seed_library.json"], capture_output=True, text=True,
                          check=True).stdout
    for entry in json.loads(text)["entries"]:
        if entry["genome_hash"].startswith(short):
            return dict(entry["genome"])
    return None


def build_and_write(chosen: dict[str, list[dict]], out: Path, jobs: int = 1,
                    build_only: bool = False) -> int:
    """Build every pick of ``chosen`` (spec -> picks with genome, short hash, why), then write
    one graph-mode bundle per problem under ``out`` and ``winners.json`` beside them."""
    work = [(spec, pick["genome"]) for spec, picks in chosen.items() for pick in picks]
    print(f"{len(work)} winners at {len(chosen)} decode problems", flush=True)
    with ProcessPoolExecutor(jobs) as pool:
        built = list(pool.map(_build, work))
    failed = [(s, e) for s, _g, a, e in built if a is None]
    for spec, error in failed:
        print(f"{spec}: not built: {error}", flush=True)
    if build_only:
        return 1 if failed else 0
    from tsopt.core.bundle import BundleEntry, write_bundle
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for spec in chosen:
        problem: Problem = parse_problem_spec(spec)
        entries = [BundleEntry(Genome.from_dict(g), Path(a), origin="library")
                   for s, g, a, _e in built if s == spec and a is not None]
        name = "launch-" + spec.replace(":", "-")
        write_bundle(out / name, study=name, space=problem.op, problem=problem, arch="sm_90a",
                     candidates=entries, launch="graph")
        print(f"{out / name}: {len(entries)} candidates", flush=True)
    (out / "winners.json").write_text(json.dumps(
        {spec: [{"genome": p["short"], "why": p["why"]} for p in picks]
         for spec, picks in chosen.items()}, indent=1))
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--build-only", action="store_true")
    args = parser.parse_args()
    return build_and_write(choose(), OUT, args.jobs, args.build_only)


if __name__ == "__main__":
    sys.exit(main())
