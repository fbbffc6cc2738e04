"""One pass of tsopt's runner in graph mode over every bundle under ``--bundles``: the worker API
(tsopt.workers.measure.measure_artifacts, one persistent measuring worker for all problems),
each bundle's artifacts checked against its manifest's sha256 first. Writes one JSON document:
every Measurement as the runner records it, the baseline probes and the measurer's summary.

    python3 bench/launch_modes/runner_pass.py --bundles carry/launch_modes --out runner.pass1.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tsopt.core.bundle import read_manifest  # noqa: E402
from tsopt.workers.measure import measure_artifacts  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundles", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--launch", default="graph")
    args = parser.parse_args()
    dirs: list[Path] = []
    problems: dict[str, str] = {}
    for bundle in sorted(args.bundles.glob("launch-*")):
        manifest = read_manifest(bundle)  # every artifact file against its sha256
        if manifest.launch != args.launch:
            print(f"{bundle}: its study measures in {manifest.launch}, not {args.launch}",
                  file=sys.stderr)
            return 2
        for c in manifest.candidates:
            dirs.append(bundle / c.artifact)
            problems[c.genome_hash] = manifest.problem.key
    started = time.time()
    run = measure_artifacts(dirs, runs=50, warmup=10, checks=2, launch=args.launch,
                            log=lambda text: print(text, flush=True),
                            on_result=lambda i, m: print(
                                f"{m.genome_hash[:12]} {m.problem_key} {m.status} ratio "
                                f"{m.ratio} [{m.ratio_lo}, {m.ratio_hi}] {m.median_us} us "
                                f"vs {m.baseline_median_us} us ({m.launch})", flush=True))
    doc = {
        "launch": args.launch, "started": started, "seconds": round(time.time() - started, 1),
        "measurements": [m.to_dict() for m in run.measurements],
        "probes": {k: {"baseline": p.baseline.to_dict(), "environment": p.environment}
                   for k, p in run.probes.items()},
        "summary": run.stats.summary() if run.stats is not None else "",
    }
    args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
