"""How long a stream-K plan takes if a unit costs only its K slices: each CTA runs its units in
order, a tile's first piece waits for its later pieces (``StreamKPlan.segment``), a dummy unit
costs its granule. Prints the plan's makespan beside the data-parallel one's (whole waves of
tiles), in K slices, for the geometries measured in this folder.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/stream_k/replay_plan.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tsopt.search_spaces.gemm.kernel import StreamKPlan  # noqa: E402

GEOMETRIES = {  # problem: (tiles_m, tiles_n, K slices, granule) of the measured stream-K kernels
    "128x8192x8192 (swap-AB 64x128)": (128, 1, 128, 3),
    "1024^3 (swap-AB 64x128)": (16, 8, 16, 3),
    "4096^3 (128x256)": (32, 16, 64, 2),
    "8192^3 (128x256)": (64, 32, 128, 2),
}


def makespan(plan: StreamKPlan) -> int:
    clock, done, contributed = [0] * plan.ctas, [0] * plan.ctas, {}
    while min(done) < plan.units_per_cta:
        moved = False
        for c in range(plan.ctas):
            while done[c] < plan.units_per_cta:
                u = c + done[c] * plan.ctas
                _, k0, k_len, last = plan.segment(u)
                r = plan.range_of(u)
                end = clock[c] + k_len
                if k0 == 0:
                    waits = [contributed.get(x) for x in range(r + 1, last + 1)]
                    if any(w is None for w in waits):
                        break
                    end = max([end, *waits])
                elif k0 < plan.k_tiles:
                    contributed[r] = end
                clock[c], done[c], moved = end, done[c] + 1, True
        if not moved:
            raise RuntimeError("the plan deadlocks")
    return max(clock)


def main() -> None:
    for name, (tiles_m, tiles_n, k_tiles, granule) in GEOMETRIES.items():
        plan = StreamKPlan.make(tiles_m, tiles_n, k_tiles, granule, 132, True)
        dp = -(-plan.tiles // plan.ctas) * k_tiles
        print(f"{name}: stream-K {makespan(plan)} K slices, data-parallel {dp} "
              f"({plan.tiles} tiles, {plan.units_per_cta} units a CTA)")


if __name__ == "__main__":
    main()
