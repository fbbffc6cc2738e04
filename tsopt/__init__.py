"""tsopt: autotuning of CUTLASS Task Scheduling (TS) GPU kernels.

Importing the package stays light (standard library only): the GPU runner and
the exported-kernel loader run where neither the DSL nor the search stack is
installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__version__ = "0.1.0"

# Installed, the folders db/, workers/, search_spaces/ and reports/ are this package's
# subpackages (setup.py maps them). A bare source tree, as the GPU machine receives it, has no
# installation to map them: there they are found beside this folder.
_SOURCE_TREE = Path(__file__).resolve().parent.parent
if (_SOURCE_TREE / "setup.py").is_file() and (_SOURCE_TREE / "workers").is_dir():
    __path__.append(str(_SOURCE_TREE))  # noqa: F821 - a package's __path__


def load_kernel(path: str) -> Any:
    """Load an exported kernel directory; returns a callable on torch tensors."""
    from tsopt.workers.loader import load_kernel as _load

    return _load(path)
