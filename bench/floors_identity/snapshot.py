"""Byte identity across the move to floors: exported kernel.py sources and cubins.

Writes sha256 of the copy and GEMM seeds' exported ``kernel.py`` and of the cubins of five
GEMM configurations (bf16 8192^3, sm_90a) to the JSON named on the command line, and, with
``--compare BEFORE.json``, exits 1 unless every hash matches::

    CUTE_DSL_ARCH=sm_90a python bench/floors_identity/snapshot.py after.json \\
        --compare bench/floors_identity/before.json

``before.json`` was written by the same steps on the tree before the move (commit 7bd68c9).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from tsopt.build.builder import build_candidate
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.registry import get_space


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--compare", type=Path)
    args = parser.parse_args()
    before = json.loads(args.compare.read_text()) if args.compare else None

    hashes: dict[str, str] = {}
    copy = get_space("copy")
    pc = Problem.of("copy", "fp16", rows=4096, cols=4096)
    hashes["copy kernel.py"] = sha(copy.export_source(copy.seed_genome(pc), pc, "sm_90a",
                                                      "# header\n").encode())
    gemm = get_space("gemm")
    pg = Problem.of("gemm", "bf16", m=8192, n=8192, k=8192)
    hashes["gemm kernel.py"] = sha(gemm.export_source(gemm.seed_genome(pg), pg, "sm_90a",
                                                      "# header\n").encode())
    genomes = before["genomes"] if before else {}
    with tempfile.TemporaryDirectory() as cache:
        for name, doc in genomes.items():
            built = build_candidate(gemm, Genome.from_dict(doc), pg, "sm_90a", cache_dir=cache)
            assert built.ok, (name, built.error)
            hashes[f"gemm cubin: {name}"] = sha(
                (Path(built.artifact_dir or "") / "kernel.cubin").read_bytes())
    args.out.write_text(json.dumps({"sha256": hashes, "genomes": genomes}, indent=1))
    if before is None:
        return 0
    differ = [k for k, v in before["sha256"].items() if hashes.get(k) != v]
    for key in before["sha256"]:
        print(f"{'same' if key not in differ else 'DIFFERENT':9} {key}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
