"""tsopt: autotuning of CUTLASS Task Scheduling (TS) GPU kernels.

Importing the package stays light (standard library only): the GPU runner and
the exported-kernel loader run where neither the DSL nor the search stack is
installed.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def load_kernel(path: str) -> Any:
    """Load an exported kernel directory; returns a callable on torch tensors."""
    from tsopt.loader import load_kernel as _load

    return _load(path)
