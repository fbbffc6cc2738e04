"""Measured candidates per second on 1 and 2 GPUs, and whether a fed measuring pool keeps both
busy. Runs on the GPU machine (torch + the standard library + this tree; no DSL, no database).

    python3 bench/multi_gpu/run.py BUNDLE --out DIR [--gpus 1 2] [--feed-rates inf,auto]

Phase ``measure``: for each GPU count N, a fresh copy of BUNDLE (its results.json left out) is
measured as ``tsopt measure COPY --gpus N`` does it (tsopt.workers.bundle_measure.measure_bundle:
one measuring worker per GPU, each pinned to its GPU, taking the next candidate when free). It
records candidates per second over the measuring phase (worker start-ups and baselines
included), each GPU's busy fraction (time inside its measure calls / the phase's wall), and every
candidate's paired ratio with the GPU that measured it; results.json of each run goes to DIR.

Phase ``feed``: the searching side's measuring pool for this machine's GPUs
(tsopt.search.pools.inline.InlineMeasurePool, the pool ``tsopt tune`` uses without Ray) fed the
bundle's artifacts as built candidates arriving at a given rate (``inf``: every build done
ahead; ``auto``: 1.25 x the 2-GPU rate the measure phase found, a build side just faster than
the GPUs), under the driver's back-pressure (at most 2 x max(build slots, GPUs) pending). It
samples the queue and records when a GPU sat idle with nothing queued while candidates were
still to come (the queue "running dry"). The builds themselves are not run here (no DSL on this
machine): their arrival is emulated; see README.md for what that does and does not show.

Writes DIR/multi_gpu.json after each phase (a partial run leaves what it finished).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tsopt.core.bundle import RESULTS_NAME, read_manifest, read_results  # noqa: E402
from tsopt.core.errors import UserInputError  # noqa: E402
from tsopt.core.records import Measurement  # noqa: E402
from tsopt.workers.bundle_measure import BundleView, GpuShare, measure_bundle  # noqa: E402
from tsopt.workers.gpus import visible_count  # noqa: E402


class Capture(BundleView):
    """The plain view (lines on stdout), keeping each GPU's share."""

    def __init__(self) -> None:
        self.split: list[GpuShare] = []

    def shares(self, shares: list[GpuShare]) -> None:
        self.split = shares
        super().shares(shares)


def fresh_copy(bundle: Path, where: Path) -> Path:
    target = where / bundle.name
    shutil.copytree(bundle, target, ignore=shutil.ignore_patterns(RESULTS_NAME))
    return target


def candidate_rows(measurements: list[Measurement]) -> list[dict[str, Any]]:
    return [{"genome_hash": m.genome_hash, "gpu": m.conditions.get("gpu"), "status": m.status,
             "ratio": m.ratio, "ratio_lo": m.ratio_lo, "ratio_hi": m.ratio_hi,
             "median_us": m.median_us, "baseline_median_us": m.baseline_median_us,
             "rounds": m.rounds, "seconds": m.seconds,
             "sm_mhz_median": m.conditions.get("sm_mhz_median"),
             "reasons": m.conditions.get("reasons")} for m in measurements]


def measure_phase(bundle: Path, counts: list[int], runs: int, warmup: int, out: Path,
                  scratch: Path) -> list[dict[str, Any]]:
    rows = []
    for n in counts:
        copy = fresh_copy(bundle, scratch / f"gpus{n}")
        view = Capture()
        began = time.monotonic()
        try:
            code = measure_bundle(copy, runs=runs, warmup=warmup, gpus=n, view=view)
        except UserInputError as exc:  # more GPUs asked than this machine has
            print(str(exc), flush=True)
            rows.append({"gpus": n, "error": str(exc)})
            continue
        wall = time.monotonic() - began
        results = read_results(copy, read_manifest(copy))  # the digest and checksums hold
        measured = results.measurements if results else []
        if results is not None:
            shutil.copy(copy / RESULTS_NAME, out / f"results-gpus{n}.json")
        shares = view.split
        phase = max((s.wall_s for s in shares), default=wall)
        rows.append({
            "gpus": n, "exit_code": code, "candidates": len(measured),
            "statuses": {s: sum(m.status == s for m in measured)
                         for s in sorted({m.status for m in measured})},
            "call_wall_s": wall, "measuring_wall_s": phase,
            "candidates_per_s": len(measured) / phase if phase > 0 else None,
            "per_gpu": [{**s.to_dict(), "busy_with_setup_fraction":
                         (s.measuring_s + s.setup_s) / s.wall_s if s.wall_s > 0 else None,
                         "steady_candidates_per_s":
                         s.candidates / s.measuring_s if s.measuring_s > 0 else None}
                        for s in shares],
            "device": results.device if results else None,
            "measurements": candidate_rows(measured),
        })
        print(f"--gpus {n}: {len(measured)} candidates in {phase:.1f} s "
              f"({rows[-1]['candidates_per_s'] or 0:.3f} candidates/s); busy "
              + ", ".join(f"GPU {s.gpu}: {100 * s.busy_fraction:.0f} %" for s in shares),
              flush=True)
    return rows


def ratio_agreement(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each candidate's ratio with 1 GPU (GPU 0) beside its ratio in the 2-GPU run, on the GPU
    that measured it there: ratios on GPU 1 should agree with GPU 0's within their intervals."""
    by_n = {r["gpus"]: {m["genome_hash"]: m for m in r["measurements"] if m["status"] == "ok"}
            for r in rows if "measurements" in r}
    if 1 not in by_n or 2 not in by_n:
        return []
    pairs = []
    for h, one in by_n[1].items():
        two = by_n[2].get(h)
        if two is None or one["ratio"] is None or two["ratio"] is None:
            continue
        overlap = (one["ratio_lo"] is not None and two["ratio_lo"] is not None
                   and one["ratio_lo"] <= two["ratio_hi"] and two["ratio_lo"] <= one["ratio_hi"])
        pairs.append({"genome_hash": h, "ratio_gpus1": one["ratio"], "gpu_in_gpus2": two["gpu"],
                      "ratio_gpus2": two["ratio"],
                      "relative_difference": two["ratio"] / one["ratio"] - 1,
                      "intervals_overlap": overlap})
    return pairs


def feed_phase(bundle: Path, rate: float, build_slots: int, runs: int, warmup: int,
               repeat: int) -> dict[str, Any]:
    from tsopt.search.pools.inline import InlineMeasurePool
    from tsopt.search.pools.protocol import MeasureRequest

    manifest = read_manifest(bundle)
    problem = manifest.problem.to_dict()
    items = [MeasureRequest(str(bundle / c.artifact), c.genome_hash, problem)
             for _ in range(repeat) for c in manifest.candidates]
    pool = InlineMeasurePool(runs, warmup, gpus=(0, 1))
    cap = 2 * max(build_slots, pool.slots)  # the driver's back-pressure (Driver._may_ask)
    done: list[dict[str, Any]] = []
    samples: list[tuple[float, int, int, int]] = []  # t, queued, measuring, released
    released = 0
    # Each GPU's worker started and its baseline timed first (one candidate pinned to each,
    # not counted): the feed then shows the steady state, not two start-ups.
    warm = time.monotonic()
    for g in range(pool.slots):
        first = items[0]
        pool.submit(("warm-up", g), MeasureRequest(first.artifact_dir, first.genome_hash,
                                                   problem, gpu=g))
    while pool.pending():
        pool.poll(0.1)
    warm_s = time.monotonic() - warm
    start = time.monotonic()
    try:
        while len(done) < len(items):
            now = time.monotonic() - start
            while (released < len(items) and pool.pending() < cap
                   and (math.isinf(rate) or now >= released / rate)):
                pool.submit(released, items[released])
                released += 1
            for d in pool.poll(0.02):
                m = d.result.measurement
                done.append({"index": d.tag, "gpu": d.worker, "seconds": d.result.seconds,
                             "status": m.status if m else "unusable",
                             "at_s": time.monotonic() - start})
            # The pool's own counts (private: this experiment looks inside the pool).
            queued = len(pool._queue)
            samples.append((time.monotonic() - start, queued, len(pool._busy), released))
    finally:
        summaries = pool.close()
    wall = time.monotonic() - start
    # A GPU idle while nothing is queued but builds are still to come: the queue ran dry.
    dry = tail = 0.0
    for (t0, queued, measuring, rel), (t1, *_rest) in zip(samples, samples[1:], strict=False):
        idle_gpus = pool.slots - measuring
        if idle_gpus and not queued:
            if rel < len(items):
                dry += (t1 - t0) * idle_gpus / pool.slots
            else:
                tail += (t1 - t0) * idle_gpus / pool.slots
    per_gpu = []
    for g in range(pool.slots):
        secs = [x["seconds"] for x in done if x["gpu"] == g]
        per_gpu.append({"gpu": g, "candidates": len(secs), "measuring_s": sum(secs),
                        "busy_fraction": sum(secs) / wall if wall > 0 else None})
    return {
        "feed_rate_per_s": None if math.isinf(rate) else rate, "feed": "all ahead"
        if math.isinf(rate) else f"{rate:.3f} built candidates/s", "build_slots": build_slots,
        "pending_cap": cap, "candidates": len(items), "warm_up_s": warm_s, "wall_s": wall,
        "candidates_per_s": len(items) / wall if wall > 0 else None, "per_gpu": per_gpu,
        "queue_dry_gpu_fraction": dry / wall if wall > 0 else None,
        "tail_idle_gpu_fraction": tail / wall if wall > 0 else None,
        "max_queued": max((s[1] for s in samples), default=0),
        "statuses": {s: sum(x["status"] == s for x in done)
                     for s in sorted({x["status"] for x in done})},
        "summaries": summaries,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    p.add_argument("--phases", default="measure,feed")
    p.add_argument("--feed-rates", default="inf,auto",
                   help="built candidates per second: numbers, inf (all ahead) or auto")
    p.add_argument("--build-slots", type=int, default=30,
                   help="build workers the back-pressure assumes (32 cores: ~30)")
    p.add_argument("--repeat", type=int, default=1, help="feed each artifact this many times")
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "bundle": str(args.bundle), "visible_gpus": visible_count(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cpu_count": os.cpu_count(), "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    manifest = read_manifest(args.bundle)
    doc["problem"], doc["bundle_candidates"] = manifest.problem.key, len(manifest.candidates)
    target = args.out / "multi_gpu.json"

    def save() -> None:
        target.write_text(json.dumps(doc, indent=1) + "\n")

    phases = args.phases.split(",")
    with tempfile.TemporaryDirectory(prefix="multi-gpu-") as scratch:
        if "measure" in phases:
            doc["measure"] = measure_phase(args.bundle, args.gpus, args.runs, args.warmup,
                                           args.out, Path(scratch))
            doc["ratio_agreement"] = ratio_agreement(doc["measure"])
            save()
        if "feed" in phases and doc["visible_gpus"] < 2:
            doc["feed_skipped"] = f"the feed phase needs 2 GPUs; {doc['visible_gpus']} visible"
        elif "feed" in phases:
            two = next((r for r in doc.get("measure", []) if r["gpus"] == 2 and "error" not in r),
                       None)
            doc["feed"] = []
            for text in args.feed_rates.split(","):
                if text == "auto":
                    steady = [g["steady_candidates_per_s"] for g in (two or {}).get("per_gpu", [])]
                    if not steady or None in steady:
                        continue
                    # Just faster than the two GPUs measure (their steady rates, start-ups
                    # left out): the build side is then never the bottleneck, barely.
                    rate = 1.25 * sum(steady)
                else:
                    rate = float(text)
                copy = fresh_copy(args.bundle, Path(scratch) / f"feed-{len(doc['feed'])}")
                row = feed_phase(copy, rate, args.build_slots, args.runs, args.warmup,
                                 args.repeat)
                doc["feed"].append(row)
                print(f"feed {row['feed']}: {row['candidates']} in {row['wall_s']:.1f} s; busy "
                      + ", ".join(f"GPU {g['gpu']}: {100 * (g['busy_fraction'] or 0):.0f} %"
                                  for g in row["per_gpu"])
                      + f"; queue dry {100 * (row['queue_dry_gpu_fraction'] or 0):.1f} % of "
                      "GPU time", flush=True)
                save()
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
