"""A Ray measuring actor with ``num_gpus=1`` against ``tsopt measure``, on one GPU (issue #32).

Runs on the GPU machine (Python 3.12, torch; Ray unpacked from ``.whl/ray312``, see the
README). Starts a local Ray cluster there (``tsopt.search.pools.ray_pool.start_ray``: 2 CPUs,
the GPUs Ray finds), then measures the bundle's candidates in alternating passes:

    ray pass 1, measure pass 1, ray pass 2, measure pass 2, ...

- a ray pass: ``RayMeasurePool(1)``, the driver's own pool, whose one ``MeasureActor`` asks
  Ray for ``num_gpus=1`` and times every candidate through the same persistent runner
  (``GpuMeasurer``: the torch-only child under the watchdog, paired with the baseline);
- a measure pass: ``python -m tsopt measure`` on a fresh copy of the bundle (its
  ``results.json``), the command a user runs, same runs, warm-up and checks.

Compared per candidate: the paired ratio (baseline time / candidate time). The pass-to-pass
spread is the largest relative difference between two passes of the same way of measuring
(over the candidates); the ray actor agrees with ``tsopt measure`` when, for each candidate,
the means of the two ways differ by no more than that spread. Writes ``ray_gpu.json`` (every
pass's measurements, Ray's view of its GPU, the verdict) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def ray_pass(manifest: Any, bundle: Path, runs: int, warmup: int) -> dict[str, Any]:
    """Every candidate through one num_gpus=1 MeasureActor (RayMeasurePool)."""
    from tsopt.search.pools.protocol import MeasureRequest
    from tsopt.search.pools.ray_pool import RayMeasurePool

    pool = RayMeasurePool(1, runs=runs, warmup=warmup)  # gpus_per_actor=1: Ray's GPU
    start = time.monotonic()
    problem = manifest.problem.to_dict()
    for c in manifest.candidates:
        pool.submit(c.genome_hash, MeasureRequest(str(bundle / c.artifact), c.genome_hash,
                                                  problem))
    done: dict[str, Any] = {}
    while pool.pending() and time.monotonic() - start < 600:
        for d in pool.poll(1.0):
            m = d.result.measurement
            done[d.tag] = {"measurement": m.to_dict() if m else None,
                           "unusable": d.result.unusable, "seconds": d.result.seconds,
                           "baseline": d.result.baseline.to_dict() if d.result.baseline else None}
    summaries = pool.close()
    return {"seconds": time.monotonic() - start, "candidates": done, "summaries": summaries}


def measure_pass(bundle: Path, work: Path, index: int, runs: int, warmup: int) -> dict[str, Any]:
    """``tsopt measure`` on a fresh copy of the bundle; its results.json read back."""
    copy = work / f"measure-{index}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(bundle, copy, ignore=shutil.ignore_patterns("results*.json"))
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tsopt", "measure", str(copy), "--runs",
                           str(runs), "--warmup", str(warmup)], cwd=REPO, text=True,
                          capture_output=True, timeout=600)
    results = json.loads((copy / "results.json").read_text()) if (
        copy / "results.json").exists() else {"measurements": []}
    return {"seconds": time.monotonic() - start, "rc": done.returncode,
            "output_tail": (done.stdout + done.stderr)[-3000:],
            "candidates": {m["genome_hash"]: {"measurement": m}
                           for m in results.get("measurements", [])},
            "device": results.get("device", "")}


def ratios(one_pass: dict[str, Any]) -> dict[str, float]:
    out = {}
    for genome_hash, entry in one_pass["candidates"].items():
        m = entry.get("measurement") or {}
        if m.get("status") == "ok" and m.get("ratio"):
            out[genome_hash] = float(m["ratio"])
    return out


def spread(passes: list[dict[str, float]]) -> float:
    """The largest relative difference between two passes of one way, over the candidates."""
    worst = 0.0
    for genome_hash in set().union(*passes):
        values = [p[genome_hash] for p in passes if genome_hash in p]
        if len(values) > 1:
            worst = max(worst, (max(values) - min(values)) / statistics.fmean(values))
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--passes", type=int, default=3, help="passes of each way")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()

    import ray

    from tsopt.core.bundle import read_manifest
    from tsopt.search.pools.ray_pool import start_ray, stop_ray

    bundle = args.bundle.resolve()
    manifest = read_manifest(bundle)
    work = Path("/tmp/ray_gpu_work")
    work.mkdir(parents=True, exist_ok=True)
    cluster = start_ray(None, 2, manifest.arch)
    report: dict[str, Any] = {
        "question": "does a Ray MeasureActor with num_gpus=1 time a bundle as tsopt measure "
                    "does, within the pass-to-pass spread?",
        "bundle": {"study": manifest.study, "problem": manifest.problem.key,
                   "candidates": [c.genome_hash for c in manifest.candidates]},
        "ray": {"version": ray.__version__, "cluster_cpus": cluster.cpus,
                "cluster_gpus": cluster.gpus},
        "settings": {"runs": args.runs, "warmup": args.warmup, "passes": args.passes},
        "passes": [],
    }

    @ray.remote(num_gpus=1)
    def gpu_view() -> dict[str, Any]:
        return {"ray_gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}

    try:
        if not cluster.gpus:
            report["verdict"] = "Ray counted no GPU on this machine: nothing measured"
            return finish(report, args.out, 1)
        report["ray"]["actor_gpu"] = ray.get(gpu_view.remote(), timeout=120)
        for index in range(args.passes):
            for way in ("ray", "measure"):
                print(f"pass {index + 1}: {way}", flush=True)
                one = (ray_pass(manifest, bundle, args.runs, args.warmup) if way == "ray"
                       else measure_pass(bundle, work, index, args.runs, args.warmup))
                report["passes"].append({"way": way, "index": index, **one})
    finally:
        stop_ray(cluster)
    by_way = {w: [ratios(p) for p in report["passes"] if p["way"] == w] for w in ("ray", "measure")}
    allowed = max(spread(by_way["ray"]), spread(by_way["measure"]))
    rows = {}
    for c in manifest.candidates:
        h = c.genome_hash
        ray_values = [p[h] for p in by_way["ray"] if h in p]
        measure_values = [p[h] for p in by_way["measure"] if h in p]
        if not ray_values or not measure_values:
            rows[h] = {"ray": ray_values, "measure": measure_values, "agree": None}
            continue
        r, m = statistics.fmean(ray_values), statistics.fmean(measure_values)
        rows[h] = {"ray": ray_values, "measure": measure_values, "ray_mean": r, "measure_mean": m,
                   "relative_difference": abs(r - m) / m, "agree": abs(r - m) / m <= allowed}
    report["comparison"] = {"pass_to_pass_spread": allowed,
                            "spread_ray": spread(by_way["ray"]),
                            "spread_measure": spread(by_way["measure"]), "candidates": rows}
    judged = [row["agree"] for row in rows.values() if row["agree"] is not None]
    report["verdict"] = (
        f"{sum(judged)} of {len(rows)} candidates agree within the pass-to-pass spread "
        f"({allowed:.2%}); {len(rows) - len(judged)} not measured ok by both ways")
    for h, row in rows.items():
        if row["agree"] is not None:
            print(f"{h[:12]}  ray {row['ray_mean']:.4f}  measure {row['measure_mean']:.4f}  "
                  f"diff {row['relative_difference']:.2%}  {'ok' if row['agree'] else 'OUTSIDE'}")
    return finish(report, args.out, 0 if judged and all(judged) else 1)


def finish(report: dict[str, Any], out: Path, code: int) -> int:
    out.mkdir(parents=True, exist_ok=True)
    (out / "ray_gpu.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    print(report["verdict"])
    return code


if __name__ == "__main__":
    raise SystemExit(main())
