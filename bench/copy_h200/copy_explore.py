"""Round-1 exploration for the copy evidence: random proposals with some knobs fixed.

Runs the normal tune driver (verify, build, record, bundle) on an existing
study, with Optuna's PartialFixedSampler fixing the given knobs (here:
``persistent=False``, whose exact host verification costs seconds per genome on
a loaded 2-core machine), until ``--built`` candidates of the study are built.

    python bench/copy_h200/copy_explore.py --rows 4096 --cols 4096 --built 220 \
        --db sqlite:///carry/copy-h200.db --bundle carry/copy-4096-r1 --fix persistent=false
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import optuna  # noqa: E402
from rich.console import Console  # noqa: E402

from tsopt.core.problem import Problem  # noqa: E402
from tsopt.db.store import Store  # noqa: E402
from tsopt.search.driver import Driver  # noqa: E402
from tsopt.search.request import TuneRequest  # noqa: E402

ROUND = 40  # trials per driver run between checks of the study's build count


def parse_fix(items: list[str]) -> dict[str, object]:
    fixed: dict[str, object] = {}
    for item in items:
        name, _, value = item.partition("=")
        fixed[name] = {"true": True, "false": False}.get(
            value.lower(), int(value) if value.isdigit() else value
        )
    return fixed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--cols", type=int, required=True)
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument(
        "--built", type=int, required=True, help="stop when the study has this many builds"
    )
    parser.add_argument("--db", required=True)
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--fix", action="append", default=[])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    console = Console()
    problem = Problem.of("copy", args.dtype, rows=args.rows, cols=args.cols)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.monotonic()
    while True:
        base = TuneRequest(space="copy", problem=problem, db_url=args.db)
        name = base.study_name()
        with Store(args.db) as store:
            built = store.funnel(name)["built"] if store.get_study(name) else 0
            trials = len(optuna.load_study(study_name=name, storage=store.optuna_storage())
                         .trials) if store.get_study(name) else 0
        console.print(f"{time.monotonic() - start:.0f}s: study {name} built {built}")
        if built >= args.built:
            break
        # Fixed knobs keep their full choices in Optuna (PartialFixedSampler), so the study
        # stays compatible with its earlier, unfixed trials; the seed moves on each round.
        sampler = optuna.samplers.PartialFixedSampler(
            parse_fix(args.fix), optuna.samplers.RandomSampler(seed=args.seed + trials))
        request = TuneRequest(
            space="copy", problem=problem, sampler="random", trials=trials + ROUND,
            db_url=args.db, bundle_dir=args.bundle, seed=args.seed, measure="never",
            warm_start=False,
        )
        Driver(request, console, sampler=sampler).run()
    console.print(f"done: {built} built")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
