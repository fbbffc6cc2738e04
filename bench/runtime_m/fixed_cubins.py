"""Fixed-M builds after runtime M: the same cubins as before it (no GPU needed).

Compiles eight fixed-M GEMM configurations (the seed, a ragged fp16 problem, a persistent
swizzled multicast cluster, swap-AB, the TMA-store epilogue, split-K, stream-K, separate
warpgroups) for sm_90a in two source trees, this one and ``--base`` (a commit before runtime M,
unpacked with ``git archive``), and compares the cubins byte for byte. The same cubin is the
same kernel: the same speed. One JSON file (``--out``)::

    CUTE_DSL_ARCH=sm_90a nice -n 10 .venv/bin/python bench/runtime_m/fixed_cubins.py \
        --base 82ef933 --out bench/runtime_m/fixed-cubins.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = {
    "seed-8192": ({}, "gemm:bf16:8192x8192x8192"),
    "ragged-fp16": ({"consumers": 1, "tile_m": 64, "tile_n": 128, "tile_k": 32, "stages": 6},
                    "gemm:fp16:3000x2008x1000"),
    "persistent-swizzle": ({"persistent": True, "swizzle": 2, "raster": "n", "cluster": "2x1"},
                           "gemm:bf16:4096x4096x4096"),
    "swap-small": ({"swap_ab": True, "tile_m": 128, "tile_n": 64}, "gemm:bf16:64x4096x4096"),
    "tma-store": ({"epilogue": "tma_store", "persistent": True, "cluster": "1x2"},
                  "gemm:bf16:1000x4096x2048"),
    "split-k": ({"split_k": 2}, "gemm:bf16:256x4096x8192"),
    "stream-k": ({"stream_k": True, "persistent": True, "tile_n": 128},
                 "gemm:bf16:2048x4096x4096"),
    "separate": ({"arrangement": "separate", "consumers": 2, "tile_m": 64, "tile_n": 128},
                 "gemm:bf16:512x512x512"),
}


def hashes(tree: str) -> dict[str, str]:
    """sha256 (16 hex) of each case's cubin, compiled by the tree on ``sys.path[0]``."""
    sys.path.insert(0, tree)
    import tsopt

    assert str(Path(tsopt.__file__).resolve()).startswith(str(Path(tree).resolve())), tsopt.__file__
    from tsopt.build.builder import compile_spec
    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space

    space, out = get_space("gemm"), {}
    for name, (genes, spec) in CASES.items():
        kernel = space.kernel_spec(space.genome(**genes), parse_problem_spec(spec), "sm_90a")
        with tempfile.TemporaryDirectory() as dump:
            compile_spec(kernel, "sm_90a", Path(dump))
            cubin = sorted(Path(dump).glob("*.cubin"))[-1]
            out[name] = hashlib.sha256(cubin.read_bytes()).hexdigest()[:16]
    return out


def in_tree(tree: str) -> dict[str, str]:
    done = subprocess.run([sys.executable, __file__, "--hashes", tree], capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": tree})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", help="a commit before runtime M")
    parser.add_argument("--out", default="-")
    parser.add_argument("--hashes", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    if args.hashes:
        print(json.dumps(hashes(args.hashes), sort_keys=True))
        return
    with tempfile.TemporaryDirectory() as base:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
        before, after = in_tree(base), in_tree(str(ROOT))
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    doc = {"base": args.base, "tree": head, "dirty": bool(subprocess.run(
               ["git", "-C", str(ROOT), "status", "--porcelain", "search_spaces"],
               capture_output=True, text=True, check=True).stdout.strip()),
           "cases": {name: {"spec": spec, "genes": genes, "before": before[name],
                            "after": after[name], "identical": before[name] == after[name]}
                     for name, (genes, spec) in CASES.items()},
           "identical": before == after}
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if args.out == "-":
        print(text, end="")
    else:
        Path(args.out).write_text(text)
    print(f"{sum(c['identical'] for c in doc['cases'].values())}/{len(CASES)} cubins identical",
          file=sys.stderr)


if __name__ == "__main__":
    main()
