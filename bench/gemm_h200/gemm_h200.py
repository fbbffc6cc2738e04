"""Hopper TS GEMM on an H200: build candidates here (no GPU), check and time them there.

Two halves, because the build machine has the DSL and no GPU, and the GPU
machine has torch and no DSL:

``build PLAN`` (CPU)
    verify every candidate of the plan with the TS verifier and tsopt's checks,
    compile the valid ones for sm_90a (``tsopt.build.builder``), and write
    ``carry/gemm/PLAN/plan.json`` next to the artifacts.
``run PLAN`` (GPU)
    check every artifact against torch on random inputs and time it against
    cuBLAS (``torch.matmul``) (``tsopt.workers.runner`` via the watchdog), write the
    raw measurements to ``$OUT/gemm-PLAN.json`` (or ``--out``) and print a table.
``headline PLAN LABEL...`` (GPU)
    the same artifacts, A/B against cuBLAS in one process: rounds that alternate
    the candidate and ``torch.matmul`` on the same rotated buffers, so clock and
    power drift on a shared GPU hits both alike; the ratio of each round's pair
    and their median go to ``$OUT/gemm-headline.json`` (or ``--out``).

A plan is a list of (label, problem, knob values changed from the seed). The
commands that produced the committed results are in README.md beside this script (the JSON
files record them as run, with this script at its earlier place, one folder up).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
CARRY = ROOT / "carry" / "gemm"
HERE = Path(__file__).resolve().parent  # the committed results

BIG = (8192, 8192, 8192)
SUITE = {
    "8192^3": (8192, 8192, 8192),
    "4096^3": (4096, 4096, 4096),
    "128x8192x8192": (128, 8192, 8192),
    "8192x1024x8192": (8192, 1024, 8192),
    "2048x2048x16384": (2048, 2048, 16384),
    "ragged 3000x2008x1000": (3000, 2008, 1000),
}
BODY_MMA = ("try_wait", "wait", "read_stage", "wgmma", "wgmma_wait", "release")
BODY_LOAD = ("coords", "try_acquire", "acquire", "tma_load", "commit")
D0 = {"mma": (BODY_MMA, 0, "none", 0, "none")}
D2 = {"mma": (BODY_MMA, 2, "release", 2, "tail")}
P1 = {"load": (BODY_LOAD, 1, "none")}
P2 = {"load": (BODY_LOAD, 2, "none")}

Entry = tuple[str, tuple[int, int, int], str, dict[str, Any]]


def _first() -> list[Entry]:
    """One knob at a time from the seed at 8192^3, then the suite with a few layouts."""
    knob_steps: list[tuple[str, dict[str, Any]]] = [
        ("seed", {}),
        ("persistent", {"persistent": True}),
        ("persistent swizzle8", {"persistent": True, "swizzle": 8}),
        ("persistent raster-n swizzle4", {"persistent": True, "raster": "n", "swizzle": 4}),
        ("cluster 2x1", {"cluster": "2x1"}),
        ("cluster 1x2", {"cluster": "1x2"}),
        ("persistent cluster 2x1", {"persistent": True, "cluster": "2x1"}),
        ("D0 (wait_group 0)", D0),
        ("D2 (2 in flight)", D2),
        ("P1 prefetch", P1),
        ("P2 prefetch", P2),
        ("stages 3", {"stages": 3}),
        ("stages 5 tk32", {"stages": 5, "tile_k": 32}),
        ("tile_k 128 s2", {"tile_k": 128, "stages": 2}),
        ("1 consumer 128x128", {"consumers": 1, "tile_n": 128}),
        ("1 consumer 64x256", {"consumers": 1, "tile_m": 64, "tile_n": 256}),
        ("2 consumers 256x128", {"tile_m": 256, "tile_n": 128}),
        ("2 consumers 128x128 s6", {"tile_n": 128, "stages": 6}),
        ("128x192 s5", {"tile_n": 192, "stages": 5}),
        ("producer last", {"producer_wg": "last"}),
        ("load warp 3", {"load_warp": 3}),
        ("regs 24/240", {"producer_regs": 24, "consumer_regs": 240}),
        ("D0 no advance_on_wait", {**D0, "advance_on_wait": False}),
    ]
    entries: list[Entry] = [(label, BIG, "bf16", knobs) for label, knobs in knob_steps]
    entries.append(("fp16 seed", BIG, "fp16", {}))
    for name, shape in SUITE.items():
        if shape == BIG:
            continue
        entries.append((f"{name} seed", shape, "bf16", {}))
        entries.append((f"{name} persistent 2x1", shape, "bf16",
                        {"persistent": True, "cluster": "2x1"}))
    ragged = SUITE["ragged 3000x2008x1000"]
    entries += [
        ("ragged 1x2", ragged, "bf16", {"cluster": "1x2"}),
        ("ragged 1 consumer 64x128", ragged, "bf16",
         {"consumers": 1, "tile_m": 64, "tile_n": 128}),
        ("ragged fp16 D2 P2", ragged, "fp16", {**D2, **P2}),
    ]
    return entries


def _sweep() -> list[Entry]:
    """Persistent candidates around the best of the first run, and the knob values, placements
    and suite shapes the first run did not check."""
    fast = {"persistent": True, "swizzle": 8, "producer_regs": 24, "consumer_regs": 240}
    entries: list[Entry] = []
    for mma_name, mma in (("D1", {}), ("D0", {"mma": (BODY_MMA, 0, "none", 0, "none")})):
        for load_name, load in (("P0", {}), ("P1", P1)):
            for cl in ("1x1", "2x1"):
                for tile_name, tile in (("128x256", {}), ("256x128", {"tile_m": 256,
                                                                      "tile_n": 128})):
                    label = f"fast {tile_name} {cl} {mma_name} {load_name}"
                    entries.append((label, BIG, "bf16",
                                    {**fast, **mma, **load, **tile, "cluster": cl}))
    entries += [
        ("fast 128x256 1x2 D1 P1", BIG, "bf16", {**fast, **P1, "cluster": "1x2"}),
        ("fast swizzle4 raster-n", BIG, "bf16", {**fast, "swizzle": 4, "raster": "n"}),
        ("fast 128x256 s4 regs 40/232", BIG, "bf16", {**fast, "producer_regs": 40,
                                                      "consumer_regs": 232}),
    ]
    ragged = SUITE["ragged 3000x2008x1000"]
    entries += [
        ("mma wait-before-issue D2 p1", ragged, "bf16",
         {"mma": (("try_wait", "wait", "read_stage", "wgmma_wait", "wgmma", "release"),
                  2, "release", 1, "tail")}),
        ("mma release-before-issue D1 p0", ragged, "bf16",
         {"mma": (("try_wait", "wait", "release", "read_stage", "wgmma", "wgmma_wait"),
                  1, "release", 0, "tail")}),
        ("mma release-then-wait D2 p1", ragged, "bf16",
         {"mma": (("try_wait", "wait", "read_stage", "wgmma", "release", "wgmma_wait"),
                  2, "release", 1, "tail")}),
        ("mma release-first no-aow D1", ragged, "bf16",
         {"advance_on_wait": False,
          "mma": (("release", "try_wait", "wait", "read_stage", "wgmma", "wgmma_wait"),
                  1, "release", 0, "tail")}),
        ("load coords-after-acquire P1", ragged, "bf16",
         {"load": (("try_acquire", "acquire", "coords", "tma_load", "commit"), 1, "none")}),
        ("persistent swizzle2 raster-n", ragged, "bf16",
         {"persistent": True, "swizzle": 2, "raster": "n"}),
        ("2c 128x64 s8", ragged, "bf16", {"tile_n": 64, "stages": 8}),
        ("1c 64x64 s7 regs 56/160", ragged, "fp16",
         {"consumers": 1, "tile_m": 64, "tile_n": 64, "stages": 7, "producer_regs": 56,
          "consumer_regs": 160}),
        ("2c 128x128 regs 56/200", ragged, "bf16",
         {"tile_n": 128, "producer_regs": 56, "consumer_regs": 200}),
        ("1c 128x192 tk128 s3", ragged, "bf16",
         {"consumers": 1, "tile_n": 192, "tile_k": 128, "stages": 3, "consumer_regs": 240,
          "producer_regs": 24}),
        ("persistent 1x2 fp16 D2 P2", SUITE["4096^3"], "fp16",
         {"persistent": True, "cluster": "1x2", **D2, **P2}),
        ("small-M 1c 64x128 persistent", SUITE["128x8192x8192"], "bf16",
         {"consumers": 1, "tile_m": 64, "tile_n": 128, "persistent": True, "stages": 8}),
    ]
    best = {**fast, **P1, "cluster": "2x1"}
    for name, shape in SUITE.items():
        if shape != BIG:
            entries.append((f"{name} fast 2x1 P1", shape, "bf16", best))
    return entries


BEST = {"persistent": True, "swizzle": 8, "producer_regs": 24, "consumer_regs": 240,
        "cluster": "2x1"}
"""The fastest schedule of the sweep (gemm-sweep.json beside this script) at 8192^3 bf16."""


def _final() -> list[Entry]:
    """The best schedule at 8192^3 (bf16 and fp16) for the headline, then every suite shape
    with the best schedule and with one knob value changed at a time, so that every knob
    value that builds is checked against torch on every shape."""
    variations: list[tuple[str, dict[str, Any]]] = [
        ("best", {}),
        ("cluster 1x1", {"cluster": "1x1"}),
        ("cluster 1x2", {"cluster": "1x2"}),
        ("one tile per CTA", {"persistent": False, "swizzle": 1}),
        ("raster n swizzle 4", {"raster": "n", "swizzle": 4}),
        ("swizzle 1", {"swizzle": 1}),
        ("swizzle 2", {"swizzle": 2}),
        ("D0", {"mma": (BODY_MMA, 0, "none", 0, "none")}),
        ("D2", D2),
        ("P1", P1),
        ("P2", P2),
        ("256x128", {"tile_m": 256, "tile_n": 128}),
        ("1c 64x256", {"consumers": 1, "tile_m": 64}),
        ("2c 128x128 s6", {"tile_n": 128, "stages": 6}),
        ("128x192 s5", {"tile_n": 192, "stages": 5}),
        ("2c 128x64 s8", {"tile_n": 64, "stages": 8}),
        ("tile_k 32 s8", {"tile_k": 32, "stages": 8}),
        ("tile_k 128 s2", {"tile_k": 128, "stages": 2}),
        ("stages 3", {"stages": 3}),
        ("producer last", {"producer_wg": "last"}),
        ("load warp 3", {"load_warp": 3}),
        ("regs 40/232", {"producer_regs": 40, "consumer_regs": 232}),
        ("regs 56/200", {"producer_regs": 56, "consumer_regs": 200}),
        ("no advance_on_wait D0", {"advance_on_wait": False,
                                   "mma": (BODY_MMA, 0, "none", 0, "none")}),
        ("wait-before-issue D2 p1",
         {"mma": (("try_wait", "wait", "read_stage", "wgmma_wait", "wgmma", "release"),
                  2, "release", 1, "tail")}),
        ("coords-after-acquire P1",
         {"load": (("try_acquire", "acquire", "coords", "tma_load", "commit"), 1, "none")}),
    ]
    entries: list[Entry] = [("HEADLINE best", BIG, "bf16", BEST),
                            ("HEADLINE best fp16", BIG, "fp16", BEST)]
    for name, shape in SUITE.items():
        for label, knobs in variations:
            entries.append((f"{name} | {label}", shape, "bf16", {**BEST, **knobs}))
    entries.append(("ragged fp16 | best", SUITE["ragged 3000x2008x1000"], "fp16", BEST))
    return entries


def _epilogue_arrangement() -> list[Entry]:
    """The TMA-store epilogue and warpgroups on their own tiles ('separate'), on every suite
    shape, from the best schedule of the sweep, with the layouts those knob values need
    (SMEM for the staging buffers; a pipeline per warpgroup) and the launch variants whose
    edge handling differs (one tile per CTA, clusters that round the grid up)."""
    tma = {"epilogue": "tma_store"}
    sep = {"arrangement": "separate", "tile_n": 128, "stages": 3}
    variations: list[tuple[str, dict[str, Any]]] = [
        ("best", {}),
        ("tma_store", tma),
        ("tma_store one tile per CTA", {**tma, "persistent": False, "swizzle": 1}),
        ("tma_store 1x1", {**tma, "cluster": "1x1"}),
        ("tma_store 1c 64x256", {**tma, "consumers": 1, "tile_m": 64}),
        ("tma_store 256x128", {**tma, "tile_m": 256, "tile_n": 128}),
        ("separate 128x128 s3", sep),
        ("separate 128x128 s3 tma_store", {**sep, **tma}),
        ("separate 64x256 tk32 s4", {"arrangement": "separate", "tile_m": 64, "tile_k": 32,
                                     "stages": 4}),
        ("separate one tile per CTA", {**sep, "persistent": False, "swizzle": 1}),
        ("separate 1x2", {**sep, "cluster": "1x2"}),
        ("separate 64x128 s4 1x1 tma_store", {**tma, "arrangement": "separate", "tile_m": 64,
                                              "tile_n": 128, "stages": 4, "cluster": "1x1"}),
    ]
    entries: list[Entry] = []
    for name, shape in SUITE.items():
        for label, knobs in variations:
            entries.append((f"{name} | {label}", shape, "bf16", {**BEST, **knobs}))
    ragged = SUITE["ragged 3000x2008x1000"]
    entries += [("ragged fp16 | tma_store", ragged, "fp16", {**BEST, **tma}),
                ("ragged fp16 | separate 128x128 s3 tma_store", ragged, "fp16",
                 {**BEST, **sep, **tma})]
    return entries


PLANS = {"first": _first, "sweep": _sweep, "final": _final, "epilogue": _epilogue_arrangement}


# --------------------------------------------------------------------------------------
# build (CPU)
# --------------------------------------------------------------------------------------


def _build_one(job: tuple[str, tuple[int, int, int], str, dict[str, Any], str]) -> dict[str, Any]:
    label, (m, n, k), dtype, knobs, cache_dir = job
    from tsopt.build.builder import build_candidate
    from tsopt.core.problem import Problem
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import verify_genome

    space = get_space("gemm")
    problem = Problem.of("gemm", dtype, m=m, n=n, k=k)
    genome = space.genome(**knobs)
    row: dict[str, Any] = {"label": label, "problem": problem.to_dict(), "knobs": _jsonable(knobs),
                           "genome": genome.to_dict(), "genome_hash": genome.hash}
    verdict = verify_genome(genome, problem, space=space)
    row["verdict"] = verdict.to_dict()
    if not verdict.valid:
        return row
    result = build_candidate(space, genome, problem, "sm_90a", cache_dir)
    row["build"] = result.to_dict()
    if result.ok and result.artifact_dir:
        row["artifact"] = os.path.relpath(result.artifact_dir, ROOT)
    return row


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def prune(out: Path) -> None:
    """Drop artifacts no row of the plan uses (stale builds): the GPU call carries 64 MiB."""
    used = {Path(r["artifact"]).name for r in json.loads((out / "plan.json").read_text())["rows"]
            if "artifact" in r}
    for directory in (out / "artifacts").iterdir():
        if directory.name not in used:
            shutil.rmtree(directory, ignore_errors=True)


def build(plan: str, jobs: int) -> int:
    entries = PLANS[plan]()
    out = CARRY / plan
    out.mkdir(parents=True, exist_ok=True)
    cache_dir = str(out / "artifacts")
    start = time.perf_counter()
    # Jobs of one genome on several shapes go to one worker, whose verdict cache then
    # judges the genome once (the TS key holds no problem sizes).
    order = sorted(range(len(entries)), key=lambda i: repr(sorted(entries[i][3].items())))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        done = list(pool.map(_build_one, [(*entries[i], cache_dir) for i in order],
                             chunksize=4))
    rows = [row for _, row in sorted(zip(order, done, strict=True))]
    for row in rows:
        status = ("built" if "artifact" in row else
                  f"REJECTED {row['verdict']['rule']}" if not row["verdict"]["valid"] else
                  f"BUILD FAILED {row['build'].get('error', '')[:200]}")
        print(f"{row['label']:38s} {status}")
    doc = {"plan": plan, "command": f"python bench/gemm_h200/gemm_h200.py build {plan}",
           "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "seconds": round(time.perf_counter() - start, 1), "rows": rows}
    (out / "plan.json").write_text(json.dumps(doc, indent=1))
    prune(out)
    built = sum("artifact" in r for r in rows)
    print(f"{built}/{len(rows)} built in {doc['seconds']} s -> {out / 'plan.json'}")
    return 0 if built else 1


# --------------------------------------------------------------------------------------
# run (GPU)
# --------------------------------------------------------------------------------------


def run(plan: str, out: Path, runs: int, warmup: int, only: Sequence[str]) -> int:
    from tsopt.workers.measure import measure_artifacts

    doc = json.loads((CARRY / plan / "plan.json").read_text())
    rows = [r for r in doc["rows"] if "artifact" in r
            and (not only or any(o in r["label"] for o in only))]
    dirs = [ROOT / r["artifact"] for r in rows]
    start = time.perf_counter()

    results: list[dict[str, Any]] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "plan": plan,
        "command": f"python bench/gemm_h200/gemm_h200.py run {plan} --runs {runs} --warmup {warmup}",
        "built_by": doc["command"],
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }

    def show(index: int, m: Any) -> None:
        r = rows[index]
        results.append({**r, "measurement": m.to_dict()})
        payload["seconds"] = round(time.perf_counter() - start, 1)
        # Written after every candidate: a run cut short still leaves its results.
        out.write_text(json.dumps(payload, indent=1))
        print(f"[{time.perf_counter() - start:6.1f}s] {r['label']:38s} {m.status:6s} "
              f"{(m.rate or 0):7.1f} TFLOP/s ratio {(m.ratio or 0):.3f} err {m.rel_err}"
              + (f" {m.error[:300]}" if m.error else ""), flush=True)

    measured = measure_artifacts(dirs, runs=runs, warmup=warmup, checks=2, on_result=show)
    payload["baselines"] = {k: {"baseline": p.baseline.to_dict(), "environment": p.environment}
                            for k, p in measured.probes.items()}
    payload["seconds"] = round(time.perf_counter() - start, 1)
    out.write_text(json.dumps(payload, indent=1))
    print()
    print(f"{'candidate':38s} {'problem':24s} {'status':7s} {'TFLOP/s':>8s} {'cuBLAS':>8s} "
          f"{'ratio':>6s} {'rel_err':>8s}")
    for row in results:
        m = row["measurement"]
        p = row["problem"]
        prob = f"{p['dtype']} {p['m']}x{p['n']}x{p['k']}"
        print(f"{row['label']:38s} {prob:24s} {m['status']:7s} {(m['rate'] or 0):8.1f} "
              f"{(m['baseline_rate'] or 0):8.1f} {(m['ratio'] or 0):6.3f} "
              f"{(m['rel_err'] or 0):8.2e}")
    print(f"raw JSON: {out}")
    return 0


def _ab_rounds(kernel: Any, sets: list[tuple], rounds: int, per_round: int) -> list[dict]:
    """Alternate the candidate and torch.matmul, ``per_round`` launches each per round."""
    import torch

    def candidate(s: tuple) -> None:
        kernel(s[0], s[1], out=s[2])

    def cublas(s: tuple) -> None:
        torch.matmul(s[0], s[1].t(), out=s[2])

    def timed(fn: Any) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(per_round):
            fn(sets[i % len(sets)])
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / per_round  # us per GEMM

    for fn in (candidate, cublas):  # warm-up
        timed(fn)
    pairs = []
    for _ in range(rounds):
        t_c, t_b = timed(candidate), timed(cublas)
        pairs.append({"candidate_us": t_c, "cublas_us": t_b, "ratio": t_b / t_c})
    return pairs


def headline(plan: str, labels: Sequence[str], out: Path, rounds: int, per_round: int) -> int:
    import torch

    from tsopt.workers.loader import load_kernel

    doc = json.loads((CARRY / plan / "plan.json").read_text())
    by_label = {r["label"]: r for r in doc["rows"] if "artifact" in r}
    torch.set_float32_matmul_precision("highest")
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    results = []
    for label in labels:
        row = by_label[label]
        p = row["problem"]
        m, n, k, dtype = p["m"], p["n"], p["k"], dtypes[p["dtype"]]
        kernel = load_kernel(ROOT / row["artifact"])
        gen = torch.Generator(device="cuda").manual_seed(1234)
        # Two sets: 2 x (A + B + D) = 768 MiB at 8192^3, well past the 60 MiB L2.
        sets = []
        for _ in range(2):
            a = torch.randn(m, k, device="cuda", generator=gen).mul_(k ** -0.25).to(dtype)
            b = torch.randn(n, k, device="cuda", generator=gen).mul_(k ** -0.25).to(dtype)
            sets.append((a, b, torch.full((m, n), float("nan"), device="cuda", dtype=dtype)))
        a, b, d = sets[0]
        kernel(a, b, out=d)
        ref = a.float() @ b.float().t()
        rel = float(torch.linalg.vector_norm((d.float() - ref).double())
                    / torch.linalg.vector_norm(ref.double()))
        ok = bool(torch.isfinite(d).all()) and rel < (1e-2 if p["dtype"] == "bf16" else 5e-3)
        del ref

        pairs = _ab_rounds(kernel, sets, rounds, per_round)
        ratios = sorted(x["ratio"] for x in pairs)
        cand = sorted(x["candidate_us"] for x in pairs)
        base = sorted(x["cublas_us"] for x in pairs)
        flops = 2 * m * n * k
        summary = {
            "label": label, "problem": p, "genome_hash": row["genome_hash"], "knobs": row["knobs"],
            "correct": ok, "rel_err": rel, "rounds": pairs,
            "median_ratio": ratios[len(ratios) // 2], "min_ratio": ratios[0],
            "candidate_median_us": cand[len(cand) // 2], "cublas_median_us": base[len(base) // 2],
            "candidate_tflops": flops / cand[len(cand) // 2] / 1e6,
            "cublas_tflops": flops / base[len(base) // 2] / 1e6,
        }
        results.append(summary)
        print(f"{label:32s} correct={ok} rel={rel:.2e} {summary['candidate_tflops']:7.1f} vs "
              f"cuBLAS {summary['cublas_tflops']:7.1f} TFLOP/s  ratio median "
              f"{summary['median_ratio']:.3f} (min {summary['min_ratio']:.3f}, max {ratios[-1]:.3f})",
              flush=True)
        del sets, a, b, d, kernel
        torch.cuda.empty_cache()
    payload = {
        "plan": plan,
        "command": f"python bench/gemm_h200/gemm_h200.py headline {plan} --rounds {rounds} "
                   f"--per-round {per_round} " + " ".join(repr(x) for x in labels),
        "method": "one process; each round times per_round back-to-back launches of the "
                  "candidate, then of torch.matmul, on the same two rotated buffer sets (CUDA "
                  "events around the whole round); ratio = cuBLAS time / candidate time",
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1))
    print(f"raw JSON: {out}")
    return 0 if all(r["correct"] for r in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="verify and compile a plan's candidates (CPU)")
    b.add_argument("plan", choices=sorted(PLANS))
    b.add_argument("--jobs", type=int, default=2)
    r = sub.add_parser("run", help="check and time a built plan (GPU)")
    r.add_argument("plan", choices=sorted(PLANS))
    r.add_argument("--out", type=Path, default=None)
    r.add_argument("--runs", type=int, default=50)
    r.add_argument("--warmup", type=int, default=10)
    r.add_argument("--only", nargs="*", default=[])
    h = sub.add_parser("headline", help="A/B the named candidates against cuBLAS (GPU)")
    h.add_argument("plan", help="a built plan: one of " + ", ".join(sorted(PLANS)) + ", or any "
                   "folder of carry/gemm with a plan.json (e.g. from "
                   "bench/search_efficiency_h200/search_remeasure.py)")
    h.add_argument("labels", nargs="*")
    h.add_argument("--all", action="store_true", help="every built candidate of the plan")
    h.add_argument("--rounds", type=int, default=15)
    h.add_argument("--per-round", type=int, default=20)
    h.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.cmd == "build":
        return build(args.plan, args.jobs)
    if args.cmd == "headline":
        plan_file = CARRY / args.plan / "plan.json"
        if not plan_file.exists():
            parser.error(f"plan {args.plan!r}: no {plan_file} (build it first)")
        labels = args.labels
        if args.all:
            labels = [r["label"] for r in json.loads(plan_file.read_text())["rows"]
                      if "artifact" in r]
        if not labels:
            parser.error("headline: give LABELs or --all")
        out = args.out or Path(os.environ.get("OUT", HERE)) / "gemm-headline.json"
        return headline(args.plan, labels, out, args.rounds, args.per_round)
    out = args.out or Path(os.environ.get("OUT", HERE)) / f"gemm-{args.plan}.json"
    return run(args.plan, out, args.runs, args.warmup, args.only)


if __name__ == "__main__":
    sys.exit(main())
