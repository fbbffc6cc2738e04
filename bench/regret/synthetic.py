"""SYNTHETIC stand-in for ``measure_bundles.py``, to rehearse the protocol without a GPU.

    python3 bench/regret/synthetic.py .tsopt/regret/ship/r1 --out /tmp/x/r1.SYNTHETIC.json

Writes what ``measure_bundles.py`` writes, for the same bundles, but every timing is made up
(a ratio drawn from the genome's hash, the baseline three times the roofline's fastest
time), and the device is named ``SYNTHETIC (no GPU: made-up timings, not a measurement)``.
The timings are coherent as the measuring side writes them (the rate its median's, the ratio
the baseline over it), so ``tsopt ingest`` and the summariser take them: that is all they
test. Never a result: nothing made here is committed as a measurement.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (ROOT, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from measure_bundles import FORMAT, bundles_under  # noqa: E402
from sidebyside import ROLES_NAME  # noqa: E402

DEVICE = "SYNTHETIC (no GPU: made-up timings, not a measurement)"


def made_up_ratio(genome_hash: str, salt: str) -> float:
    digest = hashlib.sha256(f"{salt}:{genome_hash}".encode()).digest()
    return 0.5 + 0.55 * int.from_bytes(digest[:4], "big") / 2**32


def synthetic_results(bundle: Path, salt: str) -> dict:
    from tsopt.core.bundle import (
        Baseline,
        BundleResults,
        expected_rate,
        fastest_possible_us,
        read_manifest,
    )
    from tsopt.core.records import Measurement

    manifest = read_manifest(bundle)
    problem = manifest.problem
    base_us = 3.0 * (fastest_possible_us(problem, manifest.arch) or 10.0)
    rate, unit = expected_rate(problem, base_us)
    measurements = []
    for c in manifest.candidates:
        us = base_us / made_up_ratio(c.genome_hash, salt)
        measurements.append(Measurement(
            genome_hash=c.genome_hash, problem_key=problem.key, status="ok", median_us=us,
            p10_us=us * 0.99, p90_us=us * 1.01, runs=50, rate=expected_rate(problem, us)[0],
            rate_unit=unit, rel_err=0.0, baseline_name="torch.matmul",
            baseline_median_us=base_us, baseline_rate=rate, ratio=base_us / us,
            ratio_lo=base_us / us * 0.995, ratio_hi=base_us / us * 1.005, device=DEVICE,
            launch=manifest.launch))
    results = BundleResults(
        bundle_id=manifest.bundle_id, run_id=str(uuid.uuid4()), device=DEVICE,
        baselines=[Baseline(problem.key, "torch.matmul", DEVICE, base_us, base_us * 0.99,
                            base_us * 1.01, 50, rate, unit)],
        measurements=measurements,
        measured_files={c.genome_hash: dict(c.files) for c in manifest.candidates})
    return results.to_dict()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--salt", default="pass")
    args = parser.parse_args()
    if "SYNTHETIC" not in args.out.name:
        print("error: --out must name itself SYNTHETIC", file=sys.stderr)
        return 2
    doc = {"format": FORMAT, "version": 1, "host": DEVICE, "synthetic": True,
           "started": None, "bundles": [], "left": []}
    for folder in args.folders:
        for bundle in bundles_under(folder):
            roles_path = bundle.parent / f"{bundle.name}.{ROLES_NAME}"
            # a pass's own salt, so the two orders of a pair read apart, as two passes do
            salt = f"{args.salt}:{bundle.name.rsplit('-', 1)[-1]}"
            doc["bundles"].append({
                "folder": folder.as_posix(), "path": bundle.relative_to(folder).as_posix(),
                "rc": 0, "seconds": 0.0, "tail": "SYNTHETIC",
                "results": synthetic_results(bundle, salt),
                "roles": json.loads(roles_path.read_text()) if roles_path.exists() else None})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, sort_keys=True) + "\n")
    print(f"{args.out}: {len(doc['bundles'])} bundles (SYNTHETIC)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
