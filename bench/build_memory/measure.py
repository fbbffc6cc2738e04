"""Build time and peak memory of one space's seed as the problem grows.

Each build runs in a fresh child process (``python measure.py --child SPACE PROBLEM``) into
an empty artifact cache, so nothing is shared or cached between sizes; the parent takes the
child's peak resident set from ``os.wait4`` (the kernel's ``ru_maxrss`` of that child and its
own children: the compile, the export and the link) and the wall time around it::

    CUTE_DSL_ARCH=sm_90a python bench/build_memory/measure.py --space copy \\
        --problem copy:fp16:4096x128 --problem copy:fp16:1048576x128 --out after.json

``--genome FILE`` builds that genome (JSON) instead of the seed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def child(space_name: str, spec: str, genome_file: str | None) -> None:
    """Build once into an empty cache and print the record as one JSON line."""
    from tsopt.build.builder import build_candidate
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space

    space = get_space(space_name)
    problem = parse_problem_spec(spec)
    genome = (Genome.from_dict(json.loads(Path(genome_file).read_text())) if genome_file
              else space.seed_genome(problem))
    with tempfile.TemporaryDirectory(prefix="build-memory-") as cache:
        result = build_candidate(space, genome, problem, "sm_90a", cache_dir=cache, force=True)
    print(json.dumps({"status": result.status, "error": result.error,
                      "compile_seconds": result.compile_seconds, "genome_hash": genome.hash}))


def measure(space: str, spec: str, genome_file: str | None = None) -> dict[str, Any]:
    """One build in a child: its wall seconds, peak RSS (bytes) and build record."""
    argv = [sys.executable, __file__, "--child", space, spec]
    if genome_file:
        argv += ["--genome", genome_file]
    env = {**os.environ, "CUTE_DSL_ARCH": os.environ.get("CUTE_DSL_ARCH", "sm_90a")}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    # wait4, not communicate(): its rusage is this child's alone (RUSAGE_CHILDREN would be
    # the maximum over every child this process has waited for).
    out_fd, err_fd = proc.stdout, proc.stderr
    assert out_fd is not None and err_fd is not None
    out, err = out_fd.read(), err_fd.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"build of {space} {spec} exited {proc.returncode}: {tail}")
    record = json.loads(lines[-1])
    return {
        "space": space,
        "problem": spec,
        "genome_hash": record["genome_hash"],
        "status": record["status"],
        "error": record["error"],
        "wall_seconds": round(seconds, 2),
        "compile_seconds": round(record["compile_seconds"], 2),
        # Linux reports ru_maxrss in KiB.
        "peak_rss_bytes": usage.ru_maxrss * 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("SPACE", "PROBLEM"), help=argparse.SUPPRESS)
    parser.add_argument("--space", default="copy")
    parser.add_argument("--problem", action="append", default=[],
                        help="problem spec like copy:fp16:4096x128 (repeatable)")
    parser.add_argument("--genome", help="genome JSON to build instead of the seed")
    parser.add_argument("--label", default="", help="what tree was measured (kept in the JSON)")
    parser.add_argument("--out", help="write the rows here as JSON")
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.genome)
        return
    rows = []
    for spec in args.problem:
        row = measure(args.space, spec, args.genome)
        rows.append(row)
        print(f"{row['space']:10} {row['problem']:24} {row['status']:5} "
              f"wall {row['wall_seconds']:7.2f} s  compile {row['compile_seconds']:7.2f} s  "
              f"peak RSS {row['peak_rss_bytes'] / 2**30:5.2f} GiB", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"label": args.label, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
