"""Does a DSL-valued K domain change any GEMM cubin? Run once before and once after the change.

Compiles (``tsopt.build.builder.compile_spec``, sm_90a) the GEMM seed at 8192^3 and every
candidate of two GPU-measured bundles (``.tsopt/bundles/gemm-small-gemm-bf16-8192x8192x8192``:
suite winners, persistent and not; ``...-16x8192x8192``: split-K, swap-AB, small tiles), and
records the sha256 of each cubin under ``--label``::

    CUTE_DSL_ARCH=sm_90a python bench/build_memory/gemm_cubin_identity.py --label before
    # ... edit search_spaces/gemm/kernel.py ...
    CUTE_DSL_ARCH=sm_90a python bench/build_memory/gemm_cubin_identity.py --label after
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path

from tsopt.build.builder import compile_spec
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.registry import get_space

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "build_memory" / "gemm-cubin-identity.json"
BUNDLES = ("gemm-small-gemm-bf16-8192x8192x8192", "gemm-small-gemm-bf16-16x8192x8192")


def cases() -> list[tuple[Genome, Problem]]:
    space = get_space("gemm")
    big = Problem.of("gemm", "bf16", m=8192, n=8192, k=8192)
    out = [(space.seed_genome(big), big)]
    for name in BUNDLES:
        manifest = json.loads((ROOT / ".tsopt" / "bundles" / name / "manifest.json").read_text())
        problem = Problem.from_dict(manifest["problem"])
        out += [(Genome.from_dict(c["genome"]), problem) for c in manifest["candidates"]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    args = parser.parse_args()
    space = get_space("gemm")
    doc = json.loads(OUT.read_text()) if OUT.exists() else {}
    shas = {}
    for genome, problem in cases():
        with tempfile.TemporaryDirectory() as tmp:
            compile_spec(space.kernel_spec(genome, problem, "sm_90a"), "sm_90a", Path(tmp))
            cubin = sorted(Path(tmp).glob("*.cubin"))[-1].read_bytes()
        key = f"{genome.short_hash}@{problem.key}"
        shas[key] = hashlib.sha256(cubin).hexdigest()
        print(key, shas[key][:16], flush=True)
    doc[args.label] = shas
    if "before" in doc and "after" in doc:
        doc["identical"] = doc["before"] == doc["after"]
        print("identical:", doc["identical"])
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
