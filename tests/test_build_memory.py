"""Building the copy seed costs the same at any row count, the GEMM seed at any K (issue #14).

The seed walks a 128-column strip one row box per domain-loop iteration (``chunk=rows``),
so its domain is the row count. TS simulates an int domain iteration by iteration when the
kernel is traced: 2.9 GiB and minutes at 1,048,576 rows before the kernel passed a DSL value
(bench/build_memory). The GEMM's domain is its K slices: 225 s and 0.46 GiB at K = 4,194,304
before its kernel did the same. Each build here is a real sm_90a DSL compile, export and link in a
fresh child process, measured by ``os.wait4`` (that child's peak resident set alone).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUILD = """
import json, sys
from tsopt.build.builder import build_candidate
from tsopt.core.problem import parse_problem_spec
from tsopt.core.registry import get_space
problem = parse_problem_spec(sys.argv[1])
space = get_space(problem.op)
genome = space.seed_genome(problem)
result = build_candidate(space, genome, problem, "sm_90a", cache_dir=sys.argv[2], force=True)
print(json.dumps({"status": result.status, "error": result.error,
                  "chunk": genome["chunk"] if problem.op == "copy" else None}))
"""


def build_in_child(spec: str, cache: Path) -> tuple[float, int, dict]:
    """(wall seconds, peak RSS in bytes, build record) of one seed build in a fresh child."""
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a"}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", BUILD, spec, str(cache)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    # wait4: this child's rusage alone (RUSAGE_CHILDREN is the maximum over all children).
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    assert os.waitstatus_to_exitcode(status) == 0, out
    record = json.loads(out.strip().splitlines()[-1])
    return seconds, usage.ru_maxrss * 1024, record


@pytest.mark.slow
def test_copy_seed_build_does_not_grow_with_the_row_count(tmp_path: Path) -> None:
    small_s, small_rss, small = build_in_child("copy:fp16:4096x128", tmp_path / "small")
    assert small["status"] == "ok", small["error"]
    # 256x the rows (bench/build_memory has 65,536 and 262,144 rows too).
    seconds, rss, huge = build_in_child("copy:fp16:1048576x128", tmp_path / "huge")
    assert huge["status"] == "ok", huge["error"]
    # The seed's domain really is the row count: the case the growth came from.
    assert (small["chunk"], huge["chunk"]) == (4096, 1_048_576)
    assert rss <= 1.25 * small_rss, (
        f"1048576x128: peak RSS {rss / 2**20:.0f} MiB > 1.25 x {small_rss / 2**20:.0f} MiB "
        "at 4096x128")
    # Generous, as the machine is shared: before the fix this build took 230x as long.
    assert seconds <= 3 * small_s + 5, (
        f"1048576x128: build {seconds:.1f} s vs {small_s:.1f} s at 4096x128")


@pytest.mark.slow
def test_gemm_seed_build_does_not_grow_with_k(tmp_path: Path) -> None:
    small_s, small_rss, small = build_in_child("gemm:bf16:256x256x512", tmp_path / "small")
    assert small["status"] == "ok", small["error"]
    # 8192x the K slices: 225 s and 0.46 GiB before the kernel's domain became a DSL value.
    seconds, rss, huge = build_in_child("gemm:bf16:256x256x4194304", tmp_path / "huge")
    assert huge["status"] == "ok", huge["error"]
    assert rss <= 1.25 * small_rss, (
        f"K=4194304: peak RSS {rss / 2**20:.0f} MiB > 1.25 x {small_rss / 2**20:.0f} MiB at K=512")
    assert seconds <= 3 * small_s + 5, f"K=4194304: build {seconds:.1f} s vs {small_s:.1f} s"
