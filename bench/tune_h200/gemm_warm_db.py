"""Record the hand sweep of the Hopper GEMM (bench/gemm_h200/gemm-final.json) as finished studies.

One study per problem (``gemm-bf16-MxNxK-sm_90a-hand``), each candidate with its verdict, build
and H200 measurement, so ``tsopt tune gemm`` warm-starts from them (tsopt/search/warm_start.py):

    python bench/tune_h200/gemm_warm_db.py bench/gemm_h200/gemm-final.json \\
        --db sqlite:///carry/gemm-warm/tsopt.db
"""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.records import BuildResult, Measurement, Verdict  # noqa: E402
from tsopt.db.store import Store  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    doc = json.loads(args.results.read_text())
    store = Store(args.db)
    by_problem: dict[str, list[dict]] = defaultdict(list)
    for row in doc["results"]:
        by_problem[Problem.from_dict(row["problem"]).key].append(row)
    run_id = f"{args.results.stem}@{doc['measured_at']}"
    for key, rows in sorted(by_problem.items()):
        problem = Problem.from_dict(rows[0]["problem"])
        name = f"gemm-{key.removeprefix('gemm-')}-sm_90a-hand"
        store.create_or_get_study(name, "gemm", problem, "sm_90a", "hand",
                                  {"source": str(args.results), "command": doc["command"]})
        for row in rows:
            genome = Genome.from_dict(row["genome"])
            cid = store.add_candidate(name, genome, "seed")
            verdict = Verdict.from_dict(row["verdict"])
            store.record_verdict(cid, "gemm", f"hand:{genome.hash}", verdict)
            if row.get("build"):
                store.record_build(cid, BuildResult.from_dict(row["build"]))
            if row.get("measurement"):
                store.record_measurement(cid, Measurement.from_dict(row["measurement"]), run_id)
        store.set_study_status(name, "finished")
        best = store.ranked(name, limit=1)
        ratio = f", best {best[0].measurement.ratio:.3f}x cuBLAS" if best else ""
        print(f"{name}: {len(rows)} candidates{ratio}")
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
