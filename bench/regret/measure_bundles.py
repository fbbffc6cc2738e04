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

A ``results.json`` measured on another GPU than this machine's (``nvidia-smi``'s name, or
``--card``) is not resumed: it is renamed ``results-<its GPU>.json`` and the bundle is
measured afresh, so that every candidate of a bundle is timed on one card (a ratio ranks
kernels on the card that measured it only; stop 54's call, given an H100, resumed bundles an
H200 had measured). The run's entry says what was set aside. ``--resume-across-cards`` keeps
the old way: the runner resumes whatever is there, notes the other card, and times only the
candidates that lack a result.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import socket
import subprocess
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


def this_card() -> str | None:
    """This machine's first GPU as nvidia-smi names it (the name results.json records), None
    where there is none."""
    try:
        shown = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = shown.stdout.strip().splitlines() if shown.returncode == 0 else []
    return names[0].strip() if names else None


def set_aside_other_card(bundle: Path, card: str | None) -> str | None:
    """Rename the bundle's ``results.json`` to ``results-<its GPU>.json`` (never over another
    file) when it was measured on a GPU other than ``card``; the new name, else None."""
    path = bundle / "results.json"
    if card is None or not path.exists():
        return None
    try:
        measured_on = json.loads(path.read_text()).get("device") or None
    except (OSError, ValueError):
        return None  # the runner itself names what is wrong with it
    if measured_on is None or measured_on == card:
        return None
    slug = re.sub(r"[^A-Za-z0-9]+", "-", measured_on).strip("-").lower() or "gpu"
    target, n = bundle / f"results-{slug}.json", 1
    while target.exists():
        n += 1
        target = bundle / f"results-{slug}-{n}.json"
    path.rename(target)
    return target.name


def measure_into(doc: dict, bundle: Path, folder: str, rel: str, left: float, out: Path,
                 start: float, runner_args: list[str] | tuple[str, ...] = (),
                 set_aside: str | None = None) -> None:
    """One bundle measured by the runner, its run (with the ``roles.json`` beside it, if
    any) added to ``doc``, and ``out`` rewritten: a call cut short keeps what it measured."""
    run = run_runner(bundle, left, runner_args)
    roles_path = bundle.parent / f"{bundle.name}.{ROLES_NAME}"
    run.update(folder=folder, path=rel, set_aside=set_aside,
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
    parser.add_argument("--card", default=None,
                        help="this machine's GPU name (default: nvidia-smi's first)")
    parser.add_argument("--resume-across-cards", action="store_true",
                        help="resume a results.json measured on another GPU (default: set it "
                             "aside and measure the bundle afresh on this one)")
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
    card = None if args.resume_across_cards else (args.card or this_card())
    doc["card"] = card
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for folder, bundle in todo:
        rel = bundle.relative_to(folder).as_posix()
        left = args.deadline - (time.time() - start)
        if left < args.reserve:
            doc["left"].append(f"{folder.as_posix()}/{rel}")
            continue
        aside = set_aside_other_card(bundle, card)
        if aside:
            print(f"{rel}: results.json was measured on another GPU; kept as {aside}, "
                  f"measured afresh on {card}", flush=True)
        measure_into(doc, bundle, folder.as_posix(), rel, left, args.out, start,
                     args.runner_arg, aside)
    save(doc, args.out, start)
    print(json.dumps({"measured": len(doc["bundles"]), "left": len(doc["left"]),
                      "wall_s": doc["wall_s"],
                      "rc": sorted({b["rc"] for b in doc["bundles"]})}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
