"""One pass of tsopt's runner in graph mode over every bundle under ``--bundles``: the worker API
(tsopt.workers.measure.measure_artifacts, one persistent measuring worker for all problems),
each bundle's artifacts checked against its manifest's sha256 first. Writes one JSON document:
every Measurement as the runner records it, the baseline probes and the measurer's summary.

    python3 bench/launch_modes/runner_pass.py --bundles carry/launch_modes --out runner.pass1.json

``--in-process`` measures in this process instead, through the measuring worker's own code
(tsopt.workers.measuring_worker.MeasuringWorker: the same buffers, checks, warm-up and paired
graphs, without the watchdog's child), so that a profiler around this script sees the runner's
kernels (round 7: ``kernels_seen.py -- runner_pass.py --in-process``). A hang or a crash then
takes the script with it: use it on candidates already measured cleanly.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tsopt.core.bundle import read_manifest  # noqa: E402
from tsopt.core.records import Measurement  # noqa: E402
from tsopt.workers.measure import measure_artifacts  # noqa: E402

RUNS, WARMUP, CHECKS = 50, 10, 2  # the runner's defaults (tsopt.workers.runner)


def show(m: Measurement) -> None:
    print(f"{m.genome_hash[:12]} {m.problem_key} {m.status} ratio {m.ratio} "
          f"[{m.ratio_lo}, {m.ratio_hi}] {m.median_us} us vs {m.baseline_median_us} us "
          f"({m.launch})", flush=True)


class _Quiet:
    """A reporter that keeps nothing: the measurements are returned, not sent."""

    def send(self, event: str, **payload: Any) -> None:
        return None


def measure_here(dirs: list[Path], launch: str) -> list[Measurement]:
    """Each artifact measured by a MeasuringWorker living in this process, problem by problem
    (its vendor baseline timed when the problem changes, as the worker does)."""
    from tsopt.core.artifact import ArtifactManifest
    from tsopt.workers.measuring_worker import MeasuringWorker

    worker = MeasuringWorker(_Quiet(), max_candidates=len(dirs) + 1)  # type: ignore[arg-type]
    held, out = None, []
    for artifact in dirs:
        manifest = ArtifactManifest.read(artifact)
        if manifest.problem != held:
            worker.handle({"cmd": "problem", "problem": manifest.problem, "runs": RUNS,
                           "warmup": WARMUP})
            held = manifest.problem
        out.append(worker.measure(artifact, manifest.genome_hash, RUNS, WARMUP, CHECKS,
                                  paired=True, launch=launch))
        show(out[-1])
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundles", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--launch", default="graph")
    parser.add_argument("--glob", default="launch-*",
                        help="the bundles under --bundles to measure (default: launch-*)")
    parser.add_argument("--in-process", action="store_true",
                        help="measure in this process (for a profiler), not in a worker child")
    args = parser.parse_args()
    dirs: list[Path] = []
    problems: dict[str, str] = {}
    for bundle in sorted(args.bundles.glob(args.glob)):
        manifest = read_manifest(bundle)  # every artifact file against its sha256
        if manifest.launch != args.launch:
            print(f"{bundle}: its study measures in {manifest.launch}, not {args.launch}",
                  file=sys.stderr)
            return 2
        for c in manifest.candidates:
            dirs.append(bundle / c.artifact)
            problems[c.genome_hash] = manifest.problem.key
    started = time.time()
    doc: dict[str, Any] = {"launch": args.launch, "started": started, "in_process": args.in_process}
    if args.in_process:
        measured = measure_here(dirs, args.launch)
        doc.update(measurements=[m.to_dict() for m in measured], probes={}, summary="in process")
    else:
        run = measure_artifacts(dirs, runs=RUNS, warmup=WARMUP, checks=CHECKS, launch=args.launch,
                                log=lambda text: print(text, flush=True),
                                on_result=lambda i, m: show(m))
        doc.update(measurements=[m.to_dict() for m in run.measurements],
                   probes={k: {"baseline": p.baseline.to_dict(), "environment": p.environment}
                           for k, p in run.probes.items()},
                   summary=run.stats.summary() if run.stats is not None else "")
    doc["seconds"] = round(time.time() - started, 1)
    args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
