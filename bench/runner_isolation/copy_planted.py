"""Planted faulty TS copies for the runner's isolation demo (issue: GPU runner, item 2).

Each is built with TS validation skipped (``planted.skip_validation``), so the
kernel exists although the verifier would reject it or never see the fault:

- ``deadlock``: consumer keeps two stages in flight with only one stage; TS's
  BFS rejects it ("Schedule is blocked"); on the GPU it hangs.
- ``oob_read``: store warps read SMEM 2^22 elements past their stage.
- ``unwritten``: each store thread skips its last vector: part of the output
  is never written.
- ``control``: the same template with no fault, which must measure ``ok``.

Usage (CPU side, no GPU needed)::

    python bench/runner_isolation/copy_planted.py --out carry/planted --rows 4096 --cols 4096

then on the GPU machine ``python3 -m tsopt measure carry/planted``.
"""

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ["TSOPT_ALLOW_FAULT_GENES"] = "1"  # this demo plants faults on purpose
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tsopt.build.builder import build_candidate  # noqa: E402
from tsopt.core.bundle import BundleEntry, write_bundle  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search_spaces.copy.config import STORE_OPS  # noqa: E402
from tsopt.verify.verifier import verify_genome  # noqa: E402


def planted(space, name: str) -> Genome:  # type: ignore[no-untyped-def]
    base = {"stages": 4, "box_rows": 32, "box_cols": 128, "chunk": 8}
    if name == "control":
        return space.genome(**base)
    if name == "deadlock":
        genome = space.genome(
            store=(STORE_OPS, 2, "release"), advance_on_wait=True, **{**base, "stages": 1}
        )
        fault = {"planted.skip_validation": True}
    elif name == "oob_read":
        genome = space.genome(**base)
        fault = {"planted.skip_validation": True, "planted.smem_read_offset": 1 << 22}
    elif name == "unwritten":
        genome = space.genome(**base)
        fault = {"planted.skip_validation": True, "planted.skip_vectors": 1}
    else:
        raise SystemExit(f"unknown planted fault {name!r}")
    doc = genome.to_dict()
    doc["structure"].update(fault)
    return Genome.from_dict(doc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--dtype", default="fp16")
    args = parser.parse_args()
    space = get_space("copy")
    problem = Problem.of("copy", args.dtype, rows=args.rows, cols=args.cols)
    entries = []
    for name in ("control", "deadlock", "oob_read", "unwritten"):
        genome = planted(space, name)
        verdict = verify_genome(genome, problem, space=space)
        build = build_candidate(space, genome, problem)
        print(
            f"{name:10s} {genome.short_hash} verifier: {verdict.summary()[:90]} | build: {build.status}"
            f" {build.error or ''}"
        )
        if not build.ok:
            return 1
        entries.append(BundleEntry(genome, Path(build.artifact_dir or ""), "planted"))
    write_bundle(
        args.out,
        study=f"planted-{problem.key}",
        space="copy",
        problem=problem,
        arch="sm_90a",
        candidates=entries,
        append=args.out.exists(),
    )
    print(f"bundle written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
