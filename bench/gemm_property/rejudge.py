"""Re-judge every row of a property-test result with today's verifier (CPU, no GPU).

The GPU run (``gemm-property.json``) judged its pairs with the rules of the day it was built;
a rule added since (``tsopt.unit_extent``, for the M = 1 crashes) should now refuse exactly
the pairs that failed on the GPU and change no other verdict. This script judges every row
again with the real verifier (``verify_genome``: the space's ``check_problem``, the schema
and dataflow gate, TS, tsopt's checks) and writes each row's verdict then and now, plus a
summary with the claims it checks::

    CUTE_DSL_ARCH=sm_90a nice -n 10 .venv/bin/python bench/gemm_property/rejudge.py \
        bench/gemm_property/gemm-property.json --out bench/gemm_property/gemm-property-rejudged.json

TS, two ways (each row says which, ``ts``): the TS skeleton and its exhaustive checker take
~10-20 s a genome on this 2-core machine, and TS's outcome does not depend on the problem
(``verdict_key`` holds the schedule and TS genes, not the sizes). So rows the GPU run found
not correct (and any ``--full`` row) are judged with TS run here (``"run"``); for the others
TS's outcome is the one the build recorded (``"from the build"``: every genome of the table
was accepted by the full verifier on 8192^3 before its shape was drawn), handed to the real
verifier through its ``VerdictCache`` lookup, the way the database backs it; all the rest of
the verifier runs for every row. ``--full all`` runs TS for every row (about 1.5 h here).

Claims (``summary.claims``; the exit status is 1 when one fails): every pair that was
accepted and not correct on the GPU is now rejected; every pair that was correct is still
accepted; no pair that was rejected is now accepted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
HERE = Path(__file__).resolve().parent
RESULTS_FORMAT = "tsopt-gemm-property-results"
FORMAT = "tsopt-gemm-property-rejudged"
REFERENCE_SIZES = {"m": 8192, "n": 8192, "k": 8192}
"""The problem every genome of the table was accepted on first (``gemm_property.py``)."""


def judge_row(row: dict[str, Any], space: Any, cache: Any) -> dict[str, Any]:
    """Today's verdict on one (genome, shape) row."""
    from tsopt.core.genome import Genome
    from tsopt.core.problem import Problem, ProblemError
    from tsopt.verify.verifier import verify_genome

    try:
        problem = Problem.of("gemm", row["dtype"], **row["shape"])
        v = verify_genome(Genome.from_dict(row["genome"]), problem, space=space, cache=cache)
    except ProblemError as exc:  # the space refuses the problem itself (check_problem)
        return {"verdict": "rejected", "stage": "problem", "rule": "space.check_problem",
                "message": str(exc)}
    return {"verdict": "accepted" if v.valid else "rejected", "stage": v.stage,
            "rule": v.rule, "message": v.message}


def build_ts_outcomes(doc: dict[str, Any], space: Any) -> dict[str, Any]:
    """TS's outcome per verdict key, as the build recorded it: every genome in the table
    passed the full verifier on the reference problem (TS included) before its shape."""
    from tsopt.core.genome import Genome
    from tsopt.core.problem import Problem
    from tsopt.core.records import Verdict
    from tsopt.verify.verifier import verdict_cache_key

    reference = Problem.of("gemm", "bf16", **REFERENCE_SIZES)
    known: dict[str, Any] = {}
    for row in doc["rows"]:
        genome = Genome.from_dict(row["genome"])
        key = verdict_cache_key(space, genome, reference)
        known[key] = Verdict(genome.hash, True, "ok")
    return known


def rejudge(doc: dict[str, Any], full: str, progress: bool = True) -> dict[str, Any]:
    from tsopt.core.registry import get_space
    from tsopt.search_spaces.common.screen_cache import dsl_version
    from tsopt.verify.verifier import VerdictCache, judge_for

    space = get_space("gemm")
    space.judge = judge_for(space)  # a stale shipped screen is recomputed, not fatal
    recorded = build_ts_outcomes(doc, space)
    run_cache = VerdictCache()  # TS run here
    seeded_cache = VerdictCache(lookup=lambda _space, key: recorded.get(key))
    wanted = ({r["id"] for r in doc["rows"]} if full == "all"
              else {int(i) for i in full.split(",") if i} if full else set())
    started = time.perf_counter()
    rows = []
    for i, row in enumerate(doc["rows"]):
        run_ts = (row["id"] in wanted or (row["verdict"] == "accepted"
                                           and row["result"] != "correct"))
        now = judge_row(row, space, run_cache if run_ts else seeded_cache)
        rows.append({
            "id": row["id"], "genome_hash": row["genome_hash"], "dtype": row["dtype"],
            "shape": row["shape"], "swap_ab": row["tiles"].get("swap_ab", False),
            "then": {"verdict": row["verdict"], "rule": row.get("rule"),
                     "gpu_result": row["result"] if row["verdict"] == "accepted" else None},
            "now": now, "ts": "run" if run_ts else "from the build",
            "changed": now["verdict"] != row["verdict"]
            or (now["verdict"] == "rejected" and now["rule"] != row.get("rule")),
        })
        if progress and (i + 1) % 50 == 0:
            print(f"judged {i + 1}/{len(doc['rows'])} ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr, flush=True)
    return {"format": FORMAT, "source_format": doc.get("format"),
            "source_digest_then": doc.get("source_digest"),
            "source_digest_now": space.source_digest(), "dsl": dsl_version(),
            "ts_runs_here": run_cache.misses, "judged_s": round(time.perf_counter() - started, 1),
            "summary": summarise(rows), "rows": rows}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    failed = [r for r in rows if r["then"]["verdict"] == "accepted"
              and r["then"]["gpu_result"] != "correct"]
    correct = [r for r in rows if r["then"]["gpu_result"] == "correct"]
    was_rejected = [r for r in rows if r["then"]["verdict"] == "rejected"]
    claims = {
        "every GPU failure is now rejected": all(r["now"]["verdict"] == "rejected" for r in failed),
        "every correct pair is still accepted": all(r["now"]["verdict"] == "accepted"
                                                    for r in correct),
        "no rejected pair is now accepted": all(r["now"]["verdict"] == "rejected"
                                                for r in was_rejected),
    }
    return {
        "rows": len(rows),
        "then_now": dict(Counter(f"{r['then']['verdict']}/{r['then']['gpu_result'] or r['then']['rule']}"
                                 f" -> {r['now']['verdict']}"
                                 f"{'' if r['now']['verdict'] == 'accepted' else '/' + str(r['now']['rule'])}"
                                 for r in rows)),
        "gpu_failures": [{"id": r["id"], "shape": r["shape"], "swap_ab": r["swap_ab"],
                          "gpu_result": r["then"]["gpu_result"], "now_rule": r["now"]["rule"]}
                         for r in failed],
        "ts_run_here": sum(r["ts"] == "run" for r in rows),
        "changed_ids": [r["id"] if r["id"] is not None else r["genome_hash"][:12]
                        for r in rows if r["changed"]],
        "claims": claims,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default=str(HERE / "gemm-property.json"))
    parser.add_argument("--out", default=str(HERE / "gemm-property-rejudged.json"))
    parser.add_argument("--full", default="",
                        help="row ids (comma-separated) or 'all' whose TS is run here too; the "
                             "rows not correct on the GPU always are")
    args = parser.parse_args(argv)
    doc = json.loads(Path(args.results).read_text())
    if doc.get("format") != RESULTS_FORMAT:
        raise SystemExit(f"{args.results}: not a gemm-property results file "
                         f"(format {doc.get('format')!r})")
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    out = rejudge(doc, args.full)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, args.out)
    print(json.dumps(out["summary"], indent=1))
    return 0 if all(out["summary"]["claims"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
