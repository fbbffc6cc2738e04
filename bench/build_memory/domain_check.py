"""Does TS accept with a DSL-valued domain every copy schedule it accepts on the host?

The kernel now hands TS a DSL value for the domain; TS then simulates a few representative
iterations instead of ``chunk`` of them. A schedule the host verifier accepts (with its
concrete domain, ``CopySpace.verify_domain``) but TS rejects with a DSL value would fail to
build. For every placement pair of the shipped screen x ``--stages`` x ``advance_on_wait``
(one CTA per work tile, or with ``--persistent`` the static persistent WorkQueue), builds the
TaskManager both ways: the host's (every TS check, the exhaustive BFS included) and the
kernel's (the same checks, no BFS, as ``on_device``) with a stand-in that is not an ``int``::

    CUTE_DSL_ARCH=sm_90a python bench/build_memory/domain_check.py --stages 1,2,3,4,6,8 \\
        --out domain-check.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import time
import warnings
from pathlib import Path
from typing import Any

import tsopt.search_spaces.copy.kernel as copy_kernel
from tsopt.core.problem import Problem
from tsopt.core.registry import get_space
from tsopt.search_spaces.copy.config import config_of
from tsopt.verify.verifier import judge_for

HOST_TASK_MANAGER = copy_kernel.TaskManager


class NotAnInt:
    """What TS sees of a DSL value at trace time: a domain that is not a Python int."""


def kernel_task_manager(**kwargs: Any) -> Any:
    # The kernel's TaskManager skips the exhaustive BFS (on_device); the rest is the same.
    return HOST_TASK_MANAGER(**{**kwargs, "exhaustive_deadlock_race_check": False})


def accepts(cfg: Any, domain: Any, manager: Any) -> tuple[bool, str]:
    copy_kernel.TaskManager = manager
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            copy_kernel.build_task_manager(cfg, domain=domain)
        return True, ""
    except Exception as exc:  # noqa: BLE001 - a rejection is the answer
        return False, str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    finally:
        copy_kernel.TaskManager = HOST_TASK_MANAGER


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stages", default="1,2,3,4,6,8")
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    space = get_space("copy")
    space.judge = judge_for(space)
    problem = Problem.of("copy", "fp16", rows=4096, cols=4096)
    screen = space.screens()
    loads = [(tuple(b), d, x) for b, d, x in screen["load"]]
    stores = [(tuple(b), d, x) for b, d, x in screen["store"]]
    extra = {"persistent": True, "ctas_per_sm": 1} if args.persistent else {}
    stages = [int(s) for s in args.stages.split(",")]
    start = time.perf_counter()
    counts = {"configs": 0, "host": 0, "dsl_value": 0}
    disagree = []
    for load, store, n, aow in itertools.product(loads, stores, stages, (False, True)):
        genome = space.genome(load, store, stages=n, advance_on_wait=aow, **extra)
        cfg = config_of(genome, problem)
        host, why_host = accepts(cfg, space.verify_domain(genome), HOST_TASK_MANAGER)
        kernel, why_kernel = accepts(cfg, NotAnInt(), kernel_task_manager)
        counts["configs"] += 1
        counts["host"] += host
        counts["dsl_value"] += kernel
        if host != kernel:
            disagree.append({"genome_hash": genome.hash, "load": load, "store": store,
                             "stages": n, "advance_on_wait": aow, "host": host,
                             "dsl_value": kernel, "why": why_host or why_kernel})
    seconds = round(time.perf_counter() - start, 1)
    print(f"{counts['configs']} schedules (persistent={args.persistent}, stages {stages}): "
          f"the host accepts {counts['host']}, a DSL-valued domain {counts['dsl_value']}; "
          f"{len(disagree)} disagree ({seconds} s)")
    for row in disagree:
        print("  DISAGREE", row)
    if args.out:
        args.out.write_text(json.dumps({"persistent": args.persistent, "stages": stages,
                                        **counts, "disagree": disagree, "seconds": seconds},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
