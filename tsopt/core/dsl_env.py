"""The DSL's target architecture, fixed per process.

The CUTLASS DSL reads ``CUTE_DSL_ARCH`` when it is first imported; with no
GPU to detect, export (``export_to_c``) then fails late with "Symbols not
found ... Failed to dump object file with PIC relocation" if it was unset.
So tsopt sets it before the first DSL import and refuses to build for
another arch in the same process.
"""

from __future__ import annotations

import os
import sys

DEFAULT_ARCH = "sm_90a"


class ArchMismatchError(RuntimeError):
    """The DSL in this process was initialised for another architecture."""


def ensure_arch(arch: str | None = None) -> str:
    """Set ``CUTE_DSL_ARCH`` before the DSL loads; check it if the DSL is already loaded."""
    current = os.environ.get("CUTE_DSL_ARCH")
    wanted = arch or current or DEFAULT_ARCH
    if "cutlass" not in sys.modules:
        os.environ["CUTE_DSL_ARCH"] = wanted
        return wanted
    if current is None:
        raise ArchMismatchError(
            "the CUTLASS DSL was imported before CUTE_DSL_ARCH was set; set CUTE_DSL_ARCH="
            f"{wanted} in the environment (or import tsopt before cutlass)"
        )
    if arch is not None and current != arch:
        raise ArchMismatchError(
            f"this process's DSL targets {current}; build {arch} in another process "
            f"(CUTE_DSL_ARCH={arch})"
        )
    return current
