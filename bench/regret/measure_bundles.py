"""On the GPU machine (torch only: no DSL, optuna or SQLAlchemy): every bundle under the
folders given, measured by the runner one after another, into ONE JSON file.

    python3 bench/regret/measure_bundles.py bench/regret/work/ship/r1 --out $OUT/r1.json \
        --deadline 540

A bundle is a folder holding ``manifest.json`` (found up to two levels down). Each is
measured by ``python -m tsopt.workers.runner --bundle`` with its defaults (paired against
cuBLAS in the bundle's launch mode; a bundle already holding a ``results.json`` is resumed:
only what it lacks is measured). ``--out`` is rewritten after every bundle, so a call cut
short keeps what it measured (a call brings back at most 8 files): per bundle its path
relative to the folder given, the runner's rc, seconds and last lines, its
``results.json``, and its ``<bundle>.roles.json`` where there is one (pair bundles).
A bundle that cannot start before ``--deadline`` (seconds from the start, less
``--reserve`` s it may take) is listed as left; the same command in a later call measures
it.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sidebyside import ROLES_NAME, run_runner  # noqa: E402

FORMAT = "tsopt-regret-measured"


def bundles_under(folder: Path) -> list[Path]:
    found = sorted({p.parent for p in folder.glob("manifest.json")}
                   | {p.parent for p in folder.glob("*/manifest.json")}
                   | {p.parent for p in folder.glob("*/*/manifest.json")})
    return found


def new_document(start: float) -> dict:
    """An empty document of this format, started at ``start`` (epoch seconds)."""
    return {"format": FORMAT, "version": 1, "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
            "bundles": [], "left": []}


def measure_into(doc: dict, bundle: Path, folder: str, rel: str, left: float, out: Path,
                 start: float, runner_args: list[str] | tuple[str, ...] = ()) -> None:
    """One bundle measured by the runner, its run (with the ``roles.json`` beside it, if
    any) added to ``doc``, and ``out`` rewritten: a call cut short keeps what it measured."""
    run = run_runner(bundle, left, runner_args)
    roles_path = bundle.parent / f"{bundle.name}.{ROLES_NAME}"
    run.update(folder=folder, path=rel,
               roles=json.loads(roles_path.read_text()) if roles_path.exists() else None)
    doc["bundles"].append(run)
    save(doc, out, start)


def first_rank(rel: str, globs: list[str]) -> int:
    """Where a bundle goes in the order: the index of the first ``--first`` glob it matches,
    len(globs) if none (a stable sort keeps the rest in path order)."""
    return next((i for i, g in enumerate(globs) if fnmatch.fnmatch(rel, g)), len(globs))


def save(doc: dict, out: Path, start: float) -> None:
    doc["wall_s"] = round(time.time() - start, 1)
    out.write_text(json.dumps(doc, sort_keys=True) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, required=True, help="the one JSON file written")
    parser.add_argument("--deadline", type=float, default=540.0, help="seconds from the start")
    parser.add_argument("--reserve", type=float, default=60.0,
                        help="seconds a bundle may need: none is started later than "
                             "deadline - reserve")
    parser.add_argument("--runner-arg", action="append", default=[])
    parser.add_argument("--only", action="append", default=[],
                        help="measure only bundles whose path under its folder matches this "
                             "glob (repeatable), e.g. 's1-*' or 'decode-*'")
    parser.add_argument("--first", action="append", default=[],
                        help="measure bundles whose path matches this glob before the rest, "
                             "in the order the globs are given (repeatable), so a deadline "
                             "leaves the others: e.g. the buckets that missed")
    args = parser.parse_args()
    start = time.time()
    todo = [(folder, b) for folder in args.folders for b in bundles_under(folder)
            if not args.only or any(fnmatch.fnmatch(b.relative_to(folder).as_posix(), g)
                                    for g in args.only)]
    todo = sorted(todo, key=lambda fb: first_rank(fb[1].relative_to(fb[0]).as_posix(),
                                                  args.first))
    if not todo:
        print(f"error: no bundle (manifest.json) under {' '.join(map(str, args.folders))}",
              file=sys.stderr)
        return 2
    doc = new_document(start)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for folder, bundle in todo:
        rel = bundle.relative_to(folder).as_posix()
        left = args.deadline - (time.time() - start)
        if left < args.reserve:
            doc["left"].append(f"{folder.as_posix()}/{rel}")
            continue
        measure_into(doc, bundle, folder.as_posix(), rel, left, args.out, start,
                     args.runner_arg)
    save(doc, args.out, start)
    print(json.dumps({"measured": len(doc["bundles"]), "left": len(doc["left"]),
                      "wall_s": doc["wall_s"],
                      "rc": sorted({b["rc"] for b in doc["bundles"]})}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
