"""A copy space whose builder process dies on purpose: for the Ray worker-death tests.

Not a fake of anything: the real copy template, verifier and builder, except that
``kernel_spec`` (called in the build) kills its own process first for some genomes,
the way a compiler crash or the OOM killer would. Each attempt appends a line to
``$TSOPT_TEST_CRASH_DIR/<genome hash>.attempts``.

- ``stages == 2``: the first attempt dies, the retry builds;
- ``stages == 3``: every attempt dies.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from search_spaces.copy_tma import CopySpace
from tsopt.genome import Genome
from tsopt.problem import Problem


def attempts(directory: Path, genome: Genome) -> int:
    path = directory / f"{genome.hash}.attempts"
    return len(path.read_text().splitlines()) if path.exists() else 0


class CrashingCopySpace(CopySpace):
    def kernel_spec(self, genome: Genome, problem: Problem, arch: str) -> Any:
        directory = Path(os.environ["TSOPT_TEST_CRASH_DIR"])
        before = attempts(directory, genome)
        with open(directory / f"{genome.hash}.attempts", "a") as log:
            log.write(f"{os.getpid()}\n")
        stages = genome["stages"]
        if stages == 3 or (stages == 2 and before == 0):
            os._exit(17)
        return super().kernel_spec(genome, problem, arch)
