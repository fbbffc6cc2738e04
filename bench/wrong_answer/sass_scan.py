"""Which compiled kernels read or write a wgmma accumulator register while the wgmma group that
writes it is still in flight (bench/wrong_answer/README.md): compile each genome of an oracle plan
for sm_90a, disassemble its cubin and scan the SASS.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/wrong_answer/sass_scan.py --plan skinny-n \
        [--only HASHPREFIX ...] [--out FILE]

The scan is the builder's (:mod:`tsopt.build.sass`, nvdisasm from the nvidia-cuda-nvdisasm
wheel); nothing is exported or linked. Prints one JSON line a genome (hazards: how many
instructions touch an in-flight accumulator; first: the first few of them; status: the oracle
table's measurement) and with ``--out`` writes them all.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

def compiled_sass(space, genome, problem, directory: Path) -> str:  # type: ignore[no-untyped-def]
    """The SASS of one genome's sm_90a compile (the builder's ``cute.compile``, ``--keep-sass``)."""
    from tsopt.build.builder import compile_spec

    compile_spec(space.kernel_spec(genome, problem, "sm_90a"), "sm_90a", directory)
    return "\n".join(p.read_text() for p in sorted(directory.glob("*.sass")))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", required=True, help="an oracle plan name (bench/oracle/plans)")
    parser.add_argument("--only", nargs="*", default=[], help="genome hash prefixes")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from tsopt.build.sass import accumulator_hazards
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space

    plan = json.loads((ROOT / "bench/oracle/plans" / f"{args.plan}.json").read_text())
    problem = parse_problem_spec(plan["problem"])
    space = get_space(problem.op)
    status = {}
    table = ROOT / "bench/oracle" / f"{args.plan}.table.json"
    if table.exists():
        status = {r["genome_hash"]: r.get("status") for r in json.loads(table.read_text())["rows"]}
    rows = []
    for candidate in plan["candidates"]:
        h = candidate["genome_hash"]
        if args.only and not any(h.startswith(p) for p in args.only):
            continue
        row: dict = {"genome_hash": h, "status": status.get(h)}
        started = time.time()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                sass = compiled_sass(space, Genome.from_dict(candidate["genome"]), problem,
                                     Path(tmp))
            hazards = accumulator_hazards(sass)
            row.update({"hazards": len(hazards), "first": [h.describe() for h in hazards[:3]]})
        except Exception as exc:  # noqa: BLE001 - one genome's failure is its row
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        row["seconds"] = round(time.time() - started, 1)
        print(json.dumps(row), flush=True)
        rows.append(row)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
