"""Does the DSL-valued domain change any copy cubin? The HEAD kernel module vs this tree's.

For each genome (the copy seed and the top ``--top`` recorded copy candidates at fp16
4096x4096 and 16384x16384, ``bench/paired_h200/build_bundles.py``, and the seed at
65536x128), compiles the kernel once with the kernel module of a git revision (``--rev``,
default HEAD, loaded from ``git show``) and once with the module in this tree, and compares
the sha256 of the two cubins::

    CUTE_DSL_ARCH=sm_90a python bench/build_memory/cubin_identity.py --out identity.json
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "paired_h200"))

from build_bundles import copy_genomes  # noqa: E402

from tsopt.build.builder import compile_spec  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search_spaces.copy.config import config_of  # noqa: E402

KERNEL = "search_spaces/copy/kernel.py"


def module_at(rev: str, where: Path) -> ModuleType:
    """The copy kernel module as it was at ``rev`` (it imports only the DSL)."""
    path = where / "copy_kernel_at_rev.py"
    path.write_text(subprocess.run(["git", "show", f"{rev}:{KERNEL}"], cwd=ROOT, check=True,
                                   capture_output=True, text=True).stdout)
    spec = importlib.util.spec_from_file_location("copy_kernel_at_rev", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cubin_sha(spec: Any, dump: Path) -> str:
    dump.mkdir(parents=True)
    compile_spec(spec, "sm_90a", dump)
    return hashlib.sha256(sorted(dump.glob("*.cubin"))[-1].read_bytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    space = get_space("copy")
    cases: list[tuple[str, Genome, Problem]] = []
    for size in (4096, 16384):
        problem = Problem.of("copy", "fp16", rows=size, cols=size)
        cases.append((f"seed {size}^2", space.seed_genome(problem), problem))
        cases += [(f"top{i + 1} {size}^2", g, problem)
                  for i, g in enumerate(copy_genomes(size, args.top))]
    # The tall seed: its domain (65,536 rows) is what the revision's TS walked one by one.
    tall = Problem.of("copy", "fp16", rows=65536, cols=128)
    cases.append(("seed 65536x128", space.seed_genome(tall), tall))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        old = module_at(args.rev, Path(tmp))
        for n, (name, genome, problem) in enumerate(cases):
            spec = space.kernel_spec(genome, problem, "sm_90a")
            before = dataclasses.replace(spec, host_fn=old.make_kernel(config_of(genome, problem)))
            a = cubin_sha(before, Path(tmp) / f"{n}-rev")
            b = cubin_sha(spec, Path(tmp) / f"{n}-tree")
            rows.append({"case": name, "genome_hash": genome.hash, "chunk": genome["chunk"],
                         "rev_sha256": a, "tree_sha256": b, "same": a == b})
            print(f"{'same' if a == b else 'DIFFERENT':9} {name:14} chunk={genome['chunk']:<6} "
                  f"{genome.short_hash}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"rev": args.rev, "cases": rows}, indent=1) + "\n")
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
