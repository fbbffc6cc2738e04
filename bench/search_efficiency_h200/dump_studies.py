"""Dump the studies of a tsopt database as JSON: every candidate with its verdict, build and
measurements (each with the time it was recorded), the study's sampler and configuration.

The format is ``tsopt.search.efficiency.dump_studies``'s, which ``search_efficiency.py studies``
reads in place of the database (``DUMP.json[.xz]:STUDY``)::

    python bench/search_efficiency_h200/dump_studies.py sqlite:///random.db --out studies-random.json
    xz -9 studies-random.json
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tsopt.db.store import Store  # noqa: E402
from tsopt.search.efficiency import dump_studies  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", help="SQLAlchemy URL of the database")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--skip", default="-hand", help="skip studies whose name ends with this")
    args = parser.parse_args()
    with Store(args.db) as store:
        studies = dump_studies(store, skip=args.skip)
    args.out.write_text(json.dumps(studies, indent=1, sort_keys=True, default=str))
    print(f"{len(studies)} studies -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
