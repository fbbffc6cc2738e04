"""What the shipped TS search memo would have spared round 10's studies (issue #12 item 2).

    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/driver_scale/ts_memo_replay.py \\
        --out bench/driver_scale/ts_memo_replay.json

Round 10's studies (bench/tune_gpu/results-round10) ran on fresh databases, before the memo
existed. For each, the TS exhaustive searches it ran (its ``tsopt_ts_search`` rows: key and
CPU seconds) against a memo made the way the shipped one is (``tsopt.app.corpus.current_searches`` of the
corpus's search table) from every shipped study archive except round 10's: the searches
it would have been sent instead of running, and their seconds. Also the state-bound
statistics of the shipped memo itself. Replayed from recorded searches; nothing is re-run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tsopt.app.corpus import SHIPPED_SOURCES, current_searches, load_corpus  # noqa: E402
from tsopt.core.corpus import CorpusSearch  # noqa: E402
from tsopt.db.store import Store  # noqa: E402
from tsopt.search.ts_memo import load_memo  # noqa: E402

ROUND = "bench/tune_gpu/results-round10/studies.db.tar.xz"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import os

    os.chdir(ROOT)
    _, searches = load_corpus()
    others = [CorpusSearch(s.search, tuple(p for p in s.sources if p != ROUND))
              for s in searches]
    memo = {s.key for s in current_searches(others, SHIPPED_SOURCES)}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        with tarfile.open(ROOT / ROUND, "r:xz") as archive:
            archive.extractall(scratch, filter="data")
        for db in sorted(Path(scratch).glob("*.db")):
            with Store(f"sqlite:///{db}") as store:
                ran = store.searches()
            hit = [s for s in ran if s.key in memo]
            rows.append({"study": db.stem, "searches": len(ran),
                         "seconds": round(sum(s.seconds for s in ran), 1),
                         "in_memo": len(hit), "seconds_spared": round(sum(s.seconds for s in hit), 1)})
            print(rows[-1], flush=True)
    shipped = load_memo()
    bounded = [s for s in shipped if s.bounded]
    summary = {
        "memo_without_round10": len(memo),
        "shipped": len(shipped),
        "shipped_bounded": len(bounded),
        "shipped_bounded_seconds": round(sum(s.seconds for s in bounded), 1),
        "shipped_seconds": round(sum(s.seconds for s in shipped), 1),
        "shipped_with_a_counterexample": sum(1 for s in shipped if s.error),
    }
    print(summary)
    args.out.write_text(json.dumps({"command": " ".join([Path(sys.executable).name, *sys.argv]),
                                    "studies": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
