"""CPU side of the torch-op check: GEMM studies from recorded H200 measurements, exported as one
package (torch_ops.py + a kernel per shape) for check_op.py to run on the GPU machine.

For each shape, the fastest candidate of ``bench/gemm_h200/gemm-epilogue.json`` (the knob sweep
measured on an H200) that today's verifier accepts is verified and built here for real, and
recorded with its H200 measurement as a study ``gemm-bf16-MxNxK-sm_90a-h200``; then
``tsopt.export`` writes the studies as one package. The recorded times come from a build of an
earlier template: they let the study be exported and are not a claim about this build's speed
(check_op.py times it afresh). Run from the repository root::

    python bench/torch_op_h200/make_export.py --out carry/torch-op/package
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tsopt  # noqa: E402
from tsopt.core.dsl_env import ensure_arch  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.records import Measurement  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.db.store import Store  # noqa: E402

ARCH = "sm_90a"


def record_study(store: Store, rows: list[dict], problem: Problem, run_id: str, cache: Path) -> str:
    """The study of ``problem`` holding its fastest recorded candidate that verifies and builds
    today; returns the study's name."""
    from tsopt.build.builder import build_candidate
    from tsopt.verify.verifier import VerdictCache, verify_genome

    name = f"gemm-{problem.key.removeprefix('gemm-')}-{ARCH}-h200"
    store.create_or_get_study(name, "gemm", problem, ARCH, "hand",
                              {"source": "bench/gemm_h200"})
    if store.ranked(name, limit=1):
        print(f"{name}: already recorded")
        return name
    space = get_space("gemm")
    for row in sorted(rows, key=lambda r: r["measurement"]["median_us"]):
        genome = Genome.from_dict(row["genome"])
        if genome.hash != row["genome_hash"]:
            print(f"  {row['label']}: genome no longer reads as {row['genome_hash'][:12]}; skipped")
            continue
        verdict = verify_genome(genome, problem, space=space, cache=VerdictCache())
        if not verdict.valid:
            print(f"  {row['label']} {genome.short_hash}: {verdict.summary()[:120]}; skipped")
            continue
        built = build_candidate(space, genome, problem, ARCH, cache)
        if not built.ok:
            why = (built.error or "").strip().splitlines()[0][:120] if built.error else "?"
            print(f"  {row['label']} {genome.short_hash}: build failed ({why}); skipped")
            continue
        candidate = store.add_candidate(name, genome, "seed")
        store.record_verdict(candidate, "gemm", space.verdict_key(genome, problem), verdict)
        store.record_build(candidate, built)
        store.record_measurement(candidate, Measurement.from_dict(row["measurement"]), run_id)
        m = row["measurement"]
        print(f"{name}: {row['label']} {genome.short_hash}, recorded {m['median_us']:.1f} us, "
              f"{m['ratio']:.3f}x {m['baseline_name']} on {m['device']}")
        return name
    raise SystemExit(f"no candidate of {problem} verifies and builds today")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("bench/gemm_h200/gemm-epilogue.json"))
    parser.add_argument("--shapes", default="8192x8192x8192,4096x4096x4096",
                        help="MxNxK of each kernel (bf16), comma-separated")
    parser.add_argument("--db", default="sqlite:///carry/torch-op/tsopt.db")
    parser.add_argument("--cache", type=Path, default=Path(".tsopt/artifacts"))
    parser.add_argument("--out", type=Path, default=Path("carry/torch-op/package"))
    args = parser.parse_args()
    ensure_arch(ARCH)
    doc = json.loads(args.results.read_text())
    run_id = f"{args.results.stem}@{doc['measured_at']}"
    db_file = Path(args.db.removeprefix("sqlite:///"))
    db_file.parent.mkdir(parents=True, exist_ok=True)
    studies = []
    with Store(args.db) as store:
        for shape in args.shapes.split(","):
            m, n, k = (int(v) for v in shape.split("x"))
            problem = Problem.of("gemm", "bf16", m=m, n=n, k=k)
            rows = [r for r in doc["results"] if r.get("measurement", {}).get("status") == "ok"
                    and Problem.from_dict(r["problem"]) == problem]
            if not rows:
                raise SystemExit(f"{args.results} has no timed row for {problem}")
            studies.append(record_study(store, rows, problem, run_id, args.cache))
    names = studies if len(studies) > 1 else studies[0]
    result = tsopt.export(names, args.out, db=args.db, force=True)
    print(f"exported to {args.out}: " + ", ".join(f"torch.ops.tsopt.{k.name} ({k.genome_hash[:12]})"
                                                   for k in result.kernels))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
