"""Here, after a device call: put each bundle's ``results.json`` from a ``measure_bundles.py``
document back into the bundle it measured, so that ``tsopt ingest`` takes it. Prints the
bundles written, one a line, for the ingest loop:

    python3 bench/regret/restore_results.py bench/llama_layer/results/gen1.json \\
        | xargs -n1 -I{} .venv/bin/python -m tsopt ingest {} --db sqlite:///.tsopt/llama/llama.db

A bundle is found where the device found it: ``<folder>/<path>`` from the repository root (the
folder as the device command named it). A bundle that is not here, or whose manifest names
another ``bundle_id`` than the results, is refused in one line (exit 2) before anything is
written. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("documents", type=Path, nargs="+")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="where the device command's folders are (default: this checkout)")
    args = parser.parse_args()
    todo: list[tuple[Path, dict]] = []
    for document in args.documents:
        for item in json.loads(document.read_text())["bundles"]:
            results = item.get("results")
            if not results:
                print(f"{item['folder']}/{item['path']}: nothing measured (rc {item['rc']}); "
                      "skipped", file=sys.stderr)
                continue
            bundle = args.root / item["folder"] / item["path"]
            manifest = bundle / "manifest.json"
            if not manifest.exists():
                print(f"error: {bundle}: no bundle here (no manifest.json)", file=sys.stderr)
                return 2
            bundle_id = json.loads(manifest.read_text()).get("bundle_id")
            if results.get("bundle_id") != bundle_id:
                print(f"error: {bundle}: the results are of bundle {results.get('bundle_id')}, "
                      f"this one is {bundle_id}", file=sys.stderr)
                return 2
            todo.append((bundle, results))
    for bundle, results in todo:
        (bundle / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        print(bundle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
