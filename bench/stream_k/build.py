"""Bundles for the stream-K knob (issue #13): each problem's best known kernel beside its
stream-K variants (and, at 128x8192x8192, deeper pipelines the studies never tried),
verified and compiled for sm_90a here, measured paired against cuBLAS on the H200::

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/stream_k/build.py [1|2] [SHAPE ...]  # here
    bash bench/stream_k/run.sh                                            # on the H200

The bundles land in ``carry/stream-k/`` (git-ignored; name it in the device call's carry).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

from genomes import genome_doc, known_genomes, variant  # noqa: E402

from tsopt.build.builder import build_candidate  # noqa: E402
from tsopt.core.bundle import BundleEntry, write_bundle  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.verify.verifier import judge_for, verify_genome  # noqa: E402

OUT = ROOT / "carry" / "stream-k"
SK = {"stream_k": True, "persistent": True, "cluster": "1x1", "swizzle": 1}


Plan = list[tuple[str, list[tuple[str, dict[str, Any]]]]]
Maker = Callable[..., dict[str, Any]]


def _maker(known: dict[str, Any]) -> Maker:
    """``g(prefix, **genes)``: the known genome of that hash prefix with ``genes`` changed."""
    def g(prefix: str, **genes: Any) -> dict[str, Any]:
        return variant(genome_doc(prefix, known), **genes)

    return g


def _short_and_skinny(g: Maker) -> Plan:
    """The controls and stream-K variants rounds 1 and 2 both measured at the ragged, the
    1024^3 and the 64x8192x8192 problems."""
    return [
        ("3000x2008x1000", [
            ("round-3 winner 2c7b86311864", g("2c7b86311864")),
            ("2c7b stream-K", g("2c7b86311864", **SK)),
        ]),
        ("1024x1024x1024", [
            ("library 6d85b86e3aed", g("6d85b86e3aed")),
            ("6d85 stream-K", g("6d85b86e3aed", **SK)),
        ]),
        ("64x8192x8192", [
            ("round-3 winner e55d657664c9", g("e55d657664c9")),
            ("107e stream-K", g("107efedf8781", **SK)),
        ]),
    ]


def round1(known: dict[str, Any]) -> Plan:
    """Each problem's best known kernel and its stream-K variants (stream-K as first built:
    the load warp worked the unit's tile out per K slice), deeper pipelines at 128x8192x8192."""
    g = _maker(known)
    return [
        ("128x8192x8192", [
            ("round-3 best 570f1255aee5", g("570f1255aee5")),
            ("570f 8 stages", g("570f1255aee5", stages=8)),
            ("570f tile_k 128, 4 stages", g("570f1255aee5", tile_k=128, stages=4)),
            ("570f stream-K", g("570f1255aee5", **SK)),
            ("570f stream-K 8 stages", g("570f1255aee5", stages=8, **SK)),
            ("570f stream-K raster m", g("570f1255aee5", raster="m", **SK)),
            ("swap 128x128 2 WG split-K 2", g("570f1255aee5", tile_m=128, consumers=2,
                                               consumer_regs=232, producer_regs=40, stages=4,
                                               persistent=False, swizzle=1, raster="m",
                                               split_k=2)),
        ]),
        ("64x4096x4096", [
            ("parity c3ffe4aa0d30 (64x32 1x2)", g("c3ffe4aa0d30")),
            ("107efedf8781 (64x64)", g("107efedf8781")),
            ("107e stream-K", g("107efedf8781", **SK)),
            ("107e stream-K 8 stages", g("107efedf8781", stages=8, **SK)),
            ("c3ff stream-K (64x32, 1x1)", g("c3ffe4aa0d30", **SK)),
        ]),
        ("4096x4096x4096", [
            ("library 378ca4a47678 (2x1)", g("378ca4a47678")),
            ("378c 1x1 persistent", g("378ca4a47678", cluster="1x1", swizzle=1)),
            ("378c stream-K", g("378ca4a47678", **SK)),
            ("8bb0 (128x128) stream-K", g("8bb0108a3dbb", **SK)),
        ]),
        ("8192x8192x8192", [
            ("best known 8bb0108a3dbb", g("8bb0108a3dbb")),
            ("8bb0 stream-K", g("8bb0108a3dbb", **SK)),
            ("87c8 stream-K", g("87c8f4f74327", **SK)),
        ]),
        *_short_and_skinny(g),
    ]


def round2(known: dict[str, Any]) -> Plan:
    """Stream-K with the unit's origin worked out once per unit, beside the controls; at
    128x8192x8192 and 64x4096x4096 the shapes cuBLAS picks there (``cublas_kernels.py``:
    128x64 tiles in a 1x2 cluster multicasting A, 8 stages; 64x32 in 1x2, 16 stages)."""
    g = _maker(known)
    cublas_128 = dict(swap_ab=False, tile_m=128, tile_n=64, consumers=1, consumer_regs=160,
                      producer_regs=40, cluster="1x2", stages=8, swizzle=1, raster="m")
    return [
        ("128x8192x8192", [
            ("round-3 best 570f1255aee5", g("570f1255aee5")),
            ("570f stream-K", g("570f1255aee5", **SK)),
            ("570f stream-K 8 stages", g("570f1255aee5", stages=8, **SK)),
            ("128x64 1 WG, 1x2, 8 stages (cuBLAS's shape)", g("570f1255aee5", **cublas_128,
                                                              persistent=False)),
            ("128x64 1 WG, 1x2, 8 stages, persistent", g("570f1255aee5", **cublas_128)),
            ("128x64 2 WG, 1x2, 8 stages", g("570f1255aee5", **{**cublas_128, "consumers": 2},
                                             persistent=False)),
            ("570f 2x1 (A multicast), 8 stages", g("570f1255aee5", cluster="2x1", stages=8,
                                                   swizzle=1)),
        ]),
        ("64x4096x4096", [
            ("parity c3ffe4aa0d30 (64x32 1x2)", g("c3ffe4aa0d30")),
            ("c3ff 16 stages (cuBLAS's depth)", g("c3ffe4aa0d30", stages=16)),
            ("107e stream-K", g("107efedf8781", **SK)),
            ("c3ff stream-K (64x32, 1x1)", g("c3ffe4aa0d30", **SK)),
            ("c3ff stream-K 16 stages", g("c3ffe4aa0d30", stages=16, **SK)),
        ]),
        ("4096x4096x4096", [
            ("library 378ca4a47678 (2x1)", g("378ca4a47678")),
            ("378c stream-K", g("378ca4a47678", **SK)),
            ("256x128 2 WG 1x2 (cuBLAS's shape)", g("378ca4a47678", tile_m=256, tile_n=128,
                                                    cluster="1x2", swizzle=1)),
            ("256x128 stream-K", g("378ca4a47678", tile_m=256, tile_n=128, **SK)),
        ]),
        ("8192x8192x8192", [
            ("best known 8bb0108a3dbb", g("8bb0108a3dbb")),
            ("87c8 stream-K", g("87c8f4f74327", **SK)),
            ("256x128 stream-K", g("378ca4a47678", tile_m=256, tile_n=128, **SK)),
        ]),
        *_short_and_skinny(g),
    ]


def round3(known: dict[str, Any]) -> Plan:
    """Stream-K whose dummy units reread their tile's first K slices instead of loading boxes
    wholly past K, beside the data-parallel controls (a fresh machine: the reproduction)."""
    g = _maker(known)
    return [
        ("128x8192x8192", [("round-3 best 570f1255aee5", g("570f1255aee5")),
                           ("570f stream-K", g("570f1255aee5", **SK))]),
        ("1024x1024x1024", [("library 6d85b86e3aed", g("6d85b86e3aed")),
                            ("6d85 stream-K", g("6d85b86e3aed", **SK))]),
        ("4096x4096x4096", [("library 378ca4a47678 (2x1)", g("378ca4a47678")),
                            ("378c stream-K", g("378ca4a47678", **SK))]),
        ("8192x8192x8192", [("best known 8bb0108a3dbb", g("8bb0108a3dbb")),
                            ("87c8 stream-K", g("87c8f4f74327", **SK))]),
    ]


ROUNDS = {"1": round1, "2": round2, "3": round3}


def main() -> None:
    space = get_space("gemm")
    space.judge = judge_for(space)
    known = known_genomes()
    args = sys.argv[1:]
    which = args.pop(0) if args and args[0] in ROUNDS else "2"
    only = set(args)
    OUT.mkdir(parents=True, exist_ok=True)
    for shape, rows in ROUNDS[which](known):
        if only and shape not in only:
            continue
        m, n, k = (int(x) for x in shape.split("x"))
        problem = Problem.of("gemm", "bf16", m=m, n=n, k=k)
        entries, seen = [], set()
        for label, doc in rows:
            genome = Genome.from_dict(doc)
            if genome.hash in seen:
                continue
            seen.add(genome.hash)
            verdict = verify_genome(genome, problem, space=space)
            if not verdict.valid:
                print(f"{shape} skip {label} {genome.short_hash}: {verdict.summary()}", flush=True)
                continue
            built = build_candidate(space, genome, problem, "sm_90a",
                                    cache_dir=ROOT / ".tsopt" / "artifacts")
            if not built.ok:
                print(f"{shape} build failed {label}: {built.error}", flush=True)
                continue
            print(f"{shape} {genome.short_hash} {label}: built", flush=True)
            entries.append(BundleEntry(genome, Path(built.artifact_dir or ""), origin="enumerate"))
        out = OUT / f"sk-{shape}"
        shutil.rmtree(out, ignore_errors=True)
        write_bundle(out, study=f"stream-k-{shape}", space="gemm", problem=problem,
                     arch="sm_90a", candidates=entries)
        (out / "labels.tsv").write_text("".join(
            f"{Genome.from_dict(doc).hash}\t{label}\n" for label, doc in rows))
        print(f"{out}: {len(entries)} candidates", flush=True)


if __name__ == "__main__":
    main()
