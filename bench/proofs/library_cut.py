"""Which of the seed library's genomes rest on an exhaustive TS search that TS's bound cut,
and at how many stages: read from the shipped TS search memo, without searching (TS's cheap
checks on each skeleton, the search looked up).

A search is keyed by the model TS explores and carries the DSL checker it ran under
(``tsopt.verify.verifier.search_version``); ``--any-version`` reads those of another checker
(another DSL) as if they were of this one: an estimate of which are cut (a model's digest does
not depend on the checker), never a verdict. Searches keyed the old way (by a space's schedule
key and the verifier's version, before 2026-12-04) match no model and are never read.

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/proofs/library_cut.py --any-version \\
        --out bench/proofs/library_cut.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--any-version", action="store_true")
    args = parser.parse_args()
    from tsopt.core.registry import get_space
    from tsopt.search.ts_memo import shipped_searches
    from tsopt.verify.verifier import VerdictCache, judge_for, proof_of, search_version

    doc = json.loads((ROOT / "tsopt/data/seed_library.json").read_text())
    from tsopt.core.genome import Genome
    from tsopt.core.problem import Problem

    cache = VerdictCache()
    spaces = {}
    rows = []
    for entry in doc["entries"]:
        name = entry["space"]
        if name not in spaces:
            spaces[name] = get_space(name)
            spaces[name].judge = judge_for(spaces[name])
            version = search_version()
            for s in shipped_searches():
                if s.space == name and (args.any_version or s.tool_version == version):
                    cache.keep_search(replace(s, tool_version=version))
        space = spaces[name]
        genome, problem = Genome.from_dict(entry["genome"]), Problem.from_dict(entry["problem"])
        proofs = proof_of(genome, problem, space, cache)
        genes = genome.genes
        rows.append({
            "space": name, "genome": genome.hash, "problem": problem.key,
            "stages": genes.get("stages"), "consumers": genes.get("consumers"),
            "persistent": genes.get("persistent"), "stream_k": genes.get("stream_k"),
            "searches": [p.to_dict() for p in proofs],
            "cut": any(p.search is not None and not p.complete for p in proofs),
            "unrecorded": sum(p.search is None for p in proofs),
            "complete": bool(proofs) and all(p.complete for p in proofs)})
        r = rows[-1]
        print(f"{name} {genome.short_hash} {problem.key:32} stages={r['stages']} "
              f"consumers={r['consumers']} persistent={r['persistent']} cut={r['cut']} "
              f"unrecorded={r['unrecorded']} searches={len(proofs)}", flush=True)
    args.out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    cut = [r for r in rows if r["cut"]]
    print(f"{len(cut)} of {len(rows)} library entries rest on a cut search; stages "
          f"{sorted({r['stages'] for r in cut})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
