"""Which GPUs a run measures on: ``--gpus N|all`` against the devices this process may use.

A GPU is named by its index among the devices this process sees (torch's numbering, after
``CUDA_VISIBLE_DEVICES``); :func:`tsopt.workers.watchdog.child_env` turns that index into the
one device a measuring child sees. One measuring worker per GPU: a paired ratio is timed
against the vendor baseline on the worker's own GPU, so ratios from different GPUs of one kind
are comparable while their absolute times need not be.

Runs in the searching process: torch is imported only when the devices are counted (it is
slow to import and the rest of this side is standard library only).
"""

from __future__ import annotations

import os

from tsopt.core.errors import UserInputError

ALL = "all"


def parse_gpus(text: str | int | None) -> int | None:
    """``--gpus``: ``"all"`` (or None) -> None, ``"2"`` -> 2; UserInputError naming the text."""
    if text is None or (isinstance(text, str) and text.strip().lower() == ALL):
        return None
    try:
        count = int(text)
    except (TypeError, ValueError):
        raise UserInputError(f"--gpus {text!r} is not a number of GPUs or 'all'") from None
    if count < 1:
        raise UserInputError(f"--gpus {text!r} must be at least 1 (or 'all')")
    return count


def visible_count() -> int:
    """How many CUDA devices this process may use (torch.cuda.device_count(), which honours
    ``CUDA_VISIBLE_DEVICES``); 0 without torch or without a CUDA build."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count())


def measuring_gpus(requested: int | None, available: int | None = None) -> tuple[int | None, ...]:
    """The device indices of one measuring worker each.

    ``requested``: ``--gpus`` parsed (None: all). With no more than one device visible the
    answer is ``(None,)``: one worker on the default device, which says itself why it cannot
    measure where there is no GPU (the single-GPU behaviour of every earlier version).
    """
    count = visible_count() if available is None else available
    if requested is None:
        return tuple(range(count)) if count > 1 else (None,)
    if requested == 1 and count <= 1:
        return (None,)
    if requested > count:
        raise UserInputError(f"--gpus {requested}: this process sees {count} GPU"
                             f"{'s' if count != 1 else ''}{_mask_note()}")
    return tuple(range(requested))


def _mask_note() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
