"""A copy space whose build asks for more memory than a build may have: for the bounded-build
tests.

Not a fake of anything: the real copy template, verifier and builder, except that
``kernel_spec`` (called in the build) first asks for :data:`HUNGRY_BYTES` at once, the way a
template whose IR grows with the problem does (the copy seed at 1,048,576 x 128 rows took
3.1 GB to build). Under the build memory limit the request fails with a real MemoryError; the
pages are never touched, so without a limit it costs nothing.
"""

from __future__ import annotations

from typing import Any

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.search_spaces.copy.space import CopySpace

HUNGRY_BYTES = 4 * 2**30


class MemoryHungryCopySpace(CopySpace):
    def kernel_spec(self, genome: Genome, problem: Problem, arch: str,
                    device: Any = None) -> Any:
        hoard = bytearray(HUNGRY_BYTES)
        del hoard
        return super().kernel_spec(genome, problem, arch, device)
