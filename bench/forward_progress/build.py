"""Build the kernels the forward-progress experiment runs beside a hog (issue #29, item 2).

Every cross-CTA wait of the GEMM space, one kernel each: the seed library's two stream-K
genomes at 8192^3, the first of them also re-targeted to shapes where stream-K covers more
of the grid (4096^3, 2048x2048x8192: fewer tiles than CTAs, so every tile is cut into K
pieces), a split-K genome (the cluster's DSMEM handshake) and a persistent non-stream-K
control. Built here for sm_90a into ``carry/forward_progress/`` (git-ignored)::

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/forward_progress/build.py
"""

from __future__ import annotations

import json
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "targets_h200"))

from build_bundles import _build  # noqa: E402  (verify with today's checks, then build)

OUT = ROOT / "carry" / "forward_progress"
KERNELS = (
    # (problem, genome hash prefix in the seed library, what it exercises)
    ("gemm:bf16:8192x8192x8192", "6453970a5e0b", "stream-K"),
    ("gemm:bf16:8192x8192x8192", "b22e8a783fd9", "stream-K"),
    ("gemm:bf16:4096x4096x4096", "6453970a5e0b", "stream-K"),
    ("gemm:bf16:2048x2048x8192", "6453970a5e0b", "stream-K"),
    ("gemm:bf16:16x4096x4096", "c655ff32c673", "split-K (cluster DSMEM)"),
    ("gemm:bf16:4096x4096x4096", "779ff2a2d3cd", "persistent, no cross-CTA wait"),
)


def main() -> int:
    from tsopt.core.genome import Genome
    from tsopt.search.library import load_library

    by_hash = {e.genome.short_hash: e.genome for e in load_library()}
    work = [(spec, by_hash[prefix].to_dict()) for spec, prefix, _ in KERNELS]
    with ProcessPoolExecutor(2) as pool:
        built = list(pool.map(_build, work))
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    plan = []
    for (spec, prefix, what), (_, genome, artifact, error) in zip(KERNELS, built, strict=True):
        if artifact is None:
            print(f"{spec} {prefix}: not built: {error}")
            continue
        name = f"{spec.replace(':', '-')}-{prefix}"
        shutil.copytree(artifact, OUT / name)
        plan.append({"kernel": name, "problem": spec, "genome": prefix, "cross_cta": what,
                     "genes": Genome.from_dict(genome).to_dict()})
        print(f"{OUT / name}: {what}")
    (OUT / "plan.json").write_text(json.dumps(plan, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
