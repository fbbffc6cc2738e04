"""Dump studies of a tsopt database as JSON: every candidate with its verdict, build, measurements.

    python bench/dump_studies.py sqlite:///bench/h200_session/session.sqlite \
        --out bench/h200_session/studies.json
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tsopt.db.store import Store  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--skip", default="-hand", help="skip studies whose name ends with this")
    args = parser.parse_args()
    store = Store(args.db)
    studies = []
    for info in store.list_studies():
        if args.skip and info.name.endswith(args.skip):
            continue
        candidates = []
        for c in store.candidates(info.name):
            candidates.append({
                "genome_hash": c.genome_hash, "origin": c.origin, "trial": c.trial_number,
                "genome": c.genome.to_dict(),
                "verdict": c.verdict.to_dict() if c.verdict else None,
                "build": c.build.to_dict() if c.build else None,
                "measurements": [{"run_id": r.run_id, **r.measurement.to_dict()} for r in c.measurements],
            })
        studies.append({
            "name": info.name, "space": info.space, "problem": info.problem.to_dict(), "arch": info.arch,
            "status": info.status, "funnel": store.funnel(info.name),
            "baselines": store.baselines(info.problem.key), "candidates": candidates,
        })
    args.out.write_text(json.dumps(studies, indent=1, sort_keys=True, default=str))
    print(f"{len(studies)} studies -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
