"""The split_n pair bundles' two passes (``device.sh``) as a table: per problem, every genome's
paired ratio to cuBLAS in each pass (graph mode), split_n variants beside the oracle picks.

    python3 bench/where_space_loses/split_n_summary.py DIR > bench/where_space_loses/split_n.md

``DIR`` holds what ``device.sh`` packed: ``<problem>-<order>.results.json`` and the bundles'
``<problem>-<order>.roles.json``. Standard library only.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "regret"))

from regret import ratios_of  # noqa: E402

PROBLEMS = ("mid", "fp16-wide")
ORDERS = ("fwd", "rev")


def genes_text(genome: dict[str, Any]) -> str:
    n, s = genome["numeric"], genome["structure"]
    parts = [f"{n['tile_m']}x{n['tile_n']}x{n['tile_k']}", f"c{s.get('cluster')}",
             f"s{n['stages']}", s.get("arrangement", "cooperative")]
    parts += [p for p, on in (("persistent", s.get("persistent")), ("swap", s.get("swap_ab")))
              if on]
    return " ".join(parts)


def problem_rows(folder: Path, name: str) -> list[str]:
    roles = json.loads((folder / f"{name}-fwd.roles.json").read_text())
    passes = []
    for order in ORDERS:
        path = folder / f"{name}-{order}.results.json"
        passes.append(ratios_of(json.loads(path.read_text())) if path.exists() else {})
    manifest = {}
    for order in ORDERS:
        found = folder / f"{name}-{order}.manifest.json"
        if found.exists():
            manifest = {c["genome_hash"]: c["genome"]
                        for c in json.loads(found.read_text())["candidates"]}
    rows = []
    for entry in roles["entries"]:
        h = entry["genome_hash"]
        kind = ", ".join(f"{r['kind']} {r['rank']}" for r in entry["roles"])
        ratios = [p.get(h) for p in passes]
        known = [r for r in ratios if r is not None]
        text = " / ".join("-" if r is None else f"{r:.3f}" for r in ratios)
        mean = f"{statistics.fmean(known):.3f}" if known else "-"
        genes = genes_text(manifest[h]) if h in manifest else ""
        rows.append((-(statistics.fmean(known) if known else 0.0),
                     f"| {name} | `{h[:12]}` | {kind} | {genes} | {text} | {mean} |"))
    return [r for _, r in sorted(rows)]


def main() -> int:
    folder = Path(sys.argv[1])
    print("| problem | genome | role | genes | ratio to cuBLAS (fwd / rev) | mean |")
    print("|---|---|---|---|---|---:|")
    for name in PROBLEMS:
        if (folder / f"{name}-fwd.roles.json").exists():
            print("\n".join(problem_rows(folder, name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
