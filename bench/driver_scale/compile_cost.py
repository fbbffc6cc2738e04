"""What one build costs in CPU: the floor under issue #12's "CPU-s per built candidate".

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/driver_scale/compile_cost.py \\
        --out bench/driver_scale/compile_cost.json

For each GEMM problem of the shipped seed library, its best entry (a schedule a study would
build), compiled for sm_90a, exported and linked in a forked child, as every build of a study
is (``tsopt.build.builder.build_isolated``), with no artifact cache: the child's CPU seconds
(user + system, from ``RUSAGE_CHILDREN``) and the builder's own split (compile, export, link,
wall). Nothing here is verified or searched: this is the build alone, the part of a built
candidate's cost that no verifier change can remove.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tsopt.build.builder import build_isolated  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    space = get_space("gemm")
    library = json.loads((ROOT / "tsopt" / "data" / "seed_library.json").read_text())["entries"]
    best: dict[str, dict] = {}
    for entry in library:
        if entry["space"] != "gemm":
            continue
        key = json.dumps(entry["problem"], sort_keys=True)
        if key not in best or entry["ratio"] > best[key]["ratio"]:
            best[key] = entry
    import cutlass.cute  # noqa: F401 - the DSL's import is paid once, by the parent, as a worker's is

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for entry in best.values():
            genome, problem = Genome.from_dict(entry["genome"]), Problem.from_dict(entry["problem"])
            before, wall = child_cpu(), time.perf_counter()
            built = build_isolated(space, genome, problem, "sm_90a", cache, None)
            cpu, wall = child_cpu() - before, time.perf_counter() - wall
            g = genome.genes
            rows.append({
                "problem": problem.key, "genome": genome.short_hash, "ok": built.ok,
                "error": built.error, "child_cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
                "compile_s": round(built.compile_seconds or 0, 2),
                "export_s": round(built.export_seconds or 0, 2),
                "link_s": round(built.link_seconds or 0, 2),
                "schedule": {k: g.get(k) for k in ("tile_m", "tile_n", "tile_k", "stages", "cluster",
                                                   "persistent", "epilogue", "stream_k",
                                                   "split_k", "swap_ab") if k in g}})
            print(f"{problem.key} {genome.short_hash}: {cpu:.2f} CPU-s (compile "
                  f"{built.compile_seconds or 0:.2f} s wall)", flush=True)
    cpus = sorted(r["child_cpu_s"] for r in rows if r["ok"])
    summary = {"builds": len(cpus), "cpu_s_min": cpus[0], "cpu_s_median": cpus[len(cpus) // 2],
               "cpu_s_max": cpus[-1], "goal_cpu_s_per_built": 1.2}
    args.out.write_text(json.dumps({
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_at_end": os.getloadavg()},
        "summary": summary, "rows": rows}, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
