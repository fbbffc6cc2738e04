"""The rotated buffer sets a candidate runs on: how many, laid out how, filled with what.

Timed runs rotate among input/output sets whose total exceeds 2 x L2, so no timed run finds its
data cached. Inputs are fresh random values from a recorded seed (the reference says which:
tsopt.workers.reference), outputs are poisoned so that an element the kernel never wrote shows.
Torch and the standard library only.
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from tsopt.core.artifact import TensorDesc
from tsopt.workers.reference import OpReference

ROTATION_L2_MULTIPLE = 2  # rotated buffers total > 2 x L2, so no timed run finds its data cached
MAX_BUFFER_SETS = 4096  # tiny problems: beyond this the rotation stops growing
MEMORY_FRACTION = 0.5  # of free device memory, for the rotated sets (the reference needs room)
ALIGN_BYTES = 256


def plan_buffer_sets(set_bytes: int, l2_bytes: int, free_bytes: int) -> int:
    """How many input/output sets to rotate: enough to total > 2 x L2, at least 2, memory allowing.

    Raises ValueError when not even one set fits in :data:`MEMORY_FRACTION` of free memory.
    """
    if set_bytes <= 0:
        raise ValueError(f"a buffer set of {set_bytes} bytes")
    # The fewest sets whose total strictly exceeds 2 x L2; at least 2 so that no run follows
    # one on the same buffers.
    want = max(2, ROTATION_L2_MULTIPLE * l2_bytes // set_bytes + 1)
    afford = int(MEMORY_FRACTION * free_bytes) // set_bytes
    if afford < 1:
        raise ValueError(
            f"one buffer set needs {set_bytes / 2**20:.0f} MiB; only {free_bytes / 2**20:.0f} MiB "
            "of device memory are free"
        )
    return max(1, min(want, MAX_BUFFER_SETS, afford))


@dataclass
class BufferSet:
    tensors: list[torch.Tensor]  # in the order the set was made for
    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]
    ptrs: ctypes.Array[ctypes.c_void_p]  # of ``tensors``, in that order
    bound: dict[tuple[str, ...], ctypes.Array[ctypes.c_void_p]] = field(
        default_factory=dict, repr=False)

    def pointers(self, roles: Sequence[str]) -> ctypes.Array[ctypes.c_void_p]:
        """The device pointers in a launch order given by role: a worker's buffers are made
        once per problem (inputs, then outputs), and an artifact may interleave them (D, A, B).
        Within a role the order is the op's (``OpReference.check_tensors`` holds artifacts to it).
        """
        key = tuple(roles)
        cached = self.bound.get(key)
        if cached is None:
            ins, outs = iter(self.inputs), iter(self.outputs)
            views = [next(ins) if role == "input" else next(outs) for role in key]
            cached = (ctypes.c_void_p * len(views))(*[v.data_ptr() for v in views])
            self.bound[key] = cached
        return cached


@dataclass
class Buffers:
    """Every set's inputs in one allocation and outputs in another, so one fill covers each."""

    sets: list[BufferSet]
    input_region: torch.Tensor
    output_region: torch.Tensor
    set_bytes: int


def aligned(numel: int, element_bytes: int) -> int:
    """``numel`` rounded up to whole :data:`ALIGN_BYTES` blocks, in elements."""
    per = ALIGN_BYTES // element_bytes
    return (numel + per - 1) // per * per


def set_bytes(tensors: Sequence[TensorDesc], dtype: torch.dtype) -> int:
    """The bytes of one set of ``tensors``, each aligned."""
    elem = torch.tensor([], dtype=dtype).element_size()
    return sum(aligned(math.prod(t.shape), elem) for t in tensors) * elem


def make_buffers(tensors: Sequence[TensorDesc], dtype: torch.dtype, n_sets: int,
                 device: torch.device) -> Buffers:
    elem = torch.tensor([], dtype=dtype).element_size()
    sizes = [aligned(math.prod(t.shape), elem) for t in tensors]
    in_per_set = sum(s for s, t in zip(sizes, tensors, strict=True) if t.role == "input")
    out_per_set = sum(s for s, t in zip(sizes, tensors, strict=True) if t.role == "output")
    inputs = torch.empty(max(in_per_set * n_sets, 1), dtype=dtype, device=device)
    outputs = torch.empty(max(out_per_set * n_sets, 1), dtype=dtype, device=device)
    sets = []
    for i in range(n_sets):
        offsets = {"input": i * in_per_set, "output": i * out_per_set}
        views = []
        for size, t in zip(sizes, tensors, strict=True):
            region = inputs if t.role == "input" else outputs
            start = offsets[t.role]
            views.append(region[start:start + math.prod(t.shape)].view(t.shape))
            offsets[t.role] += size
        ptrs = (ctypes.c_void_p * len(views))(*[v.data_ptr() for v in views])
        sets.append(BufferSet(
            views, [v for v, t in zip(views, tensors, strict=True) if t.role == "input"],
            [v for v, t in zip(views, tensors, strict=True) if t.role == "output"], ptrs,
        ))
    return Buffers(sets, inputs, outputs, (in_per_set + out_per_set) * elem)


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") & (2**63 - 1)


def fill(buffers: Buffers, reference: OpReference, generator: torch.Generator) -> int:
    """Random inputs and poisoned outputs in every set at once; returns the seed."""
    seed = fresh_seed()
    generator.manual_seed(seed)
    reference.fill_inputs(buffers.input_region, generator)
    reference.poison(buffers.output_region)
    return seed


def fill_set(bset: BufferSet, reference: OpReference, generator: torch.Generator) -> int:
    """Random inputs and poisoned outputs in one set; returns the seed."""
    seed = fresh_seed()
    generator.manual_seed(seed)
    for t in bset.inputs:
        reference.fill_inputs(t, generator)
    for t in bset.outputs:
        reference.poison(t)
    return seed
