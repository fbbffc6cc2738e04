"""tsopt: autotuning of CUTLASS Task Scheduling (TS) GPU kernels.

Importing the package stays light (standard library only): the GPU runner and
the exported-kernel loader run where neither the DSL nor the search stack is
installed. The Python API (:func:`tune`, :func:`report`, :func:`export`, with the
command line's semantics, returning records) imports the application floor
(:mod:`tsopt.app.api`) when it is first called.
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


def tune(space: str, problem: Any, **options: Any) -> Any:
    """Search ``space`` for ``problem`` (e.g. ``tsopt.tune("copy", "copy:fp16:4096x4096",
    built=10)``); returns a :class:`tsopt.app.api.TuneSummary`. See :func:`tsopt.app.api.tune`."""
    from tsopt.app.api import tune as _tune

    return _tune(space, problem, **options)


def report(study: Any, **options: Any) -> Any:
    """Write a study's HTML report (``out=``, ``db=``); returns its path."""
    from tsopt.app.api import report as _report

    return _report(study, **options)


def export(study: Any, out: Any, **options: Any) -> Any:
    """Export a study's best kernel (or several studies as one package) into ``out``
    (``rank=``, ``force=``, ``db=``); returns a :class:`tsopt.app.export.ExportResult`."""
    from tsopt.app.api import export as _export

    return _export(study, out, **options)


def load_kernel(path: str) -> Any:
    """Load an exported kernel directory; returns a callable on torch tensors."""
    from tsopt.workers.loader import load_kernel as _load

    return _load(path)
