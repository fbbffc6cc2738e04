"""The studies' winners and the best-known schedules, measured side by side (paired).

Issue #12 asks whether a fresh study gets within 2 % of the best-known schedule and whether
two studies with different seeds name winners within 1 % of each other. A study's own ratios
were taken minutes apart at the power cap; this puts every winner (rank 1 of each study's
standings) and the best-known genomes of the same problem into one bundle and measures it
with ``tsopt measure`` (each candidate paired with cuBLAS in alternating rounds, adaptive
repetitions), twice, in opposite orders, so that the ratios compared were taken together.

On the GPU machine (the DSL on PYTHONPATH), after ``run_plan.py``::

    python3 bench/tune_gpu/crosscheck.py --db '/tmp/tunes/s*.db' --known bench/tune_gpu/known.json \\
        --out $OUT/crosscheck
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _build(item: tuple[dict, str, str]) -> tuple[dict, str, str | None, str | None]:
    from tsopt.build.builder import build_candidate
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import judge_for, verify_genome

    genome_dict, spec, label = item
    space = get_space("gemm")
    space.judge = judge_for(space)
    genome = Genome.from_dict(genome_dict)
    problem = parse_problem_spec(spec)
    verdict = verify_genome(genome, problem, space=space)
    if not verdict.valid:
        return genome_dict, label, None, verdict.summary()
    built = build_candidate(space, genome, problem, "sm_90a", cache_dir=Path("/tmp/cc-cache"))
    return genome_dict, label, built.artifact_dir if built.ok else None, built.error


def winners(pattern: str) -> dict[str, list[tuple[dict, str]]]:
    """problem spec -> [(genome, label)] of each study's rank-1 candidate."""
    from tsopt.db.store import Store

    found: dict[str, list[tuple[dict, str]]] = {}
    for path in sorted(glob.glob(pattern)):
        with Store(f"sqlite:///{path}") as store:
            for info in store.list_studies():
                ranked = store.ranked(info.name, limit=1)
                if not ranked:
                    continue
                top = ranked[0]
                p = info.problem.sizes
                spec = f"gemm:{info.problem.dtype}:{p['m']}x{p['n']}x{p['k']}"
                found.setdefault(spec, []).append(
                    (top.genome.to_dict(), f"winner:{info.name}"))
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True, help="glob of the studies' SQLite files")
    parser.add_argument("--known", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--problem", action="append", default=[],
                        help="also a problem no study ran (its best-known genomes only)")
    args = parser.parse_args()
    from tsopt.core.bundle import BundleEntry, write_bundle
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec

    known = json.loads(args.known.read_text())
    groups = winners(args.db)
    for spec in args.problem:
        groups.setdefault(spec, [])
    args.out.mkdir(parents=True, exist_ok=True)
    labels: dict[str, dict[str, list[str]]] = {}
    for spec, items in groups.items():
        items = items + [(k["genome"], f"known:{k['label']}") for k in known.get(spec, [])]
        seen: dict[str, tuple[dict, list[str]]] = {}
        for genome, label in items:
            h = Genome.from_dict(genome).hash
            seen.setdefault(h, (genome, []))[1].append(label)
        with ProcessPoolExecutor(args.jobs) as pool:
            built = list(pool.map(_build, [(g, spec, "+".join(ls)) for g, ls in seen.values()]))
        entries = []
        for genome, label, artifact, error in built:
            if artifact is None:
                print(f"{spec} {label}: not built: {error}", flush=True)
                continue
            entries.append(BundleEntry(Genome.from_dict(genome), Path(artifact), origin="crosscheck"))
        labels[spec] = {h: ls for h, (_, ls) in seen.items()}
        name = "cc-" + spec.replace(":", "-")
        for order, chosen in (("fwd", entries), ("rev", entries[::-1])):
            bundle = Path("/tmp/cc") / f"{name}-{order}"
            shutil.rmtree(bundle, ignore_errors=True)
            write_bundle(bundle, study=f"{name}-{order}", space="gemm",
                         problem=parse_problem_spec(spec), arch="sm_90a", candidates=chosen)
            rc = subprocess.call([sys.executable, "-m", "tsopt", "measure", str(bundle)],
                                 env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                     [str(ROOT), os.environ.get("PYTHONPATH", "")])})
            print(f"== {name}-{order} rc {rc}", flush=True)
            if (bundle / "results.json").exists():
                shutil.copy(bundle / "results.json", args.out / f"{name}-{order}.results.json")
    (args.out / "labels.json").write_text(json.dumps(labels, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
