"""Build one stream-K GEMM genome for two device profiles (H200_SXM, 132 SMs; H100_PCIE,
114 SMs) into bench/device_profiles/artifacts/<profile>/ for check.py on the H200.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/device_profiles/build.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tsopt.build.builder import build_candidate  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402

HERE = Path(__file__).resolve().parent
PROBLEM = Problem.of("gemm", "bf16", m=128, n=8192, k=8192)
GENES = {"stream_k": True, "persistent": True, "swap_ab": True, "tile_m": 64, "consumers": 1,
         "consumer_regs": 232, "tile_n": 128, "stages": 6, "epilogue": "tma_store"}
PROFILES = ("H200_SXM", "H100_PCIE")
KEPT = ("artifact.json", "libkernel.so", "genome.json", "build.json")


def main() -> int:
    space = get_space("gemm")
    genome = space.genome(**GENES)
    out = HERE / "artifacts"
    shutil.rmtree(out, ignore_errors=True)
    for profile in PROFILES:
        result = build_candidate(space, genome, PROBLEM, "sm_90a",
                                 cache_dir=ROOT / ".tsopt" / "artifacts", device=profile)
        if not result.ok:
            print(f"{profile}: build failed: {result.error}")
            return 1
        target = out / profile
        target.mkdir(parents=True)
        for name in KEPT:
            shutil.copy2(Path(result.artifact_dir) / name, target / name)
        launch = json.loads((target / "artifact.json").read_text())["launch"]
        print(f"{profile}: {result.cache_key} grid {launch['grid']} "
              f"decomposition_sms {launch.get('decomposition_sms')} "
              f"workspace {launch.get('workspace_bytes')} B")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
