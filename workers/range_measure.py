"""A runtime-M kernel measured at several M: each checked and timed paired with cuBLAS, then
combined into one Measurement with a ``per_m`` entry per M.

A runtime-M kernel's ``artifact.json`` says ``"m_range": [lo, hi]`` and lists its tensors at
M = hi (the size its buffers are allocated for); its launch takes the call's M from A's first
dimension. Measured here at :func:`tsopt.core.buckets.sample_ms` of its range (or the Ms a
caller names, each inside the range; a fixed-M kernel's range is [M, M]):

- **Buffers.** The problem's buffer sets (made at M = hi) are reused: at M the kernel is handed
  the first M rows of A and of D (contiguous views, the same aligned start). The rows of D
  from M to hi are poisoned with the rest and must still hold the poison after every checked
  launch: a kernel that writes past its call's M is ``wrong``, named so.
- **Launch.** Through the export's loader (``LoadedKernel.launch`` on the views: the call path a
  user's ``torch.ops.tsopt`` op takes, which reads M from A), in the study's launch mode as any
  candidate; the baseline is ``torch.matmul`` on the same views.
- **Combined.** Each M's paired ratio and interval go into ``per_m``; the Measurement's
  ``ratio`` is :func:`tsopt.core.buckets.range_ratio` of them (its interval the same function
  of their bounds), its times those at the top M. The first M that is not ``ok`` is the
  measurement's status, its message saying at which M.

Torch and the standard library only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from tsopt.core.artifact import TensorDesc
from tsopt.core.buckets import range_ratio, sample_ms
from tsopt.core.problem import Problem
from tsopt.core.records import Measurement
from tsopt.workers.buffers import Buffers, BufferSet
from tsopt.workers.loader import KernelLoadError, load_kernel
from tsopt.workers.reference import CheckResult, OpReference, reference_for

Launch = Callable[[BufferSet], None]


def artifact_m_range(artifact_dir: Path) -> tuple[int, int] | None:
    """The ``m_range`` an artifact.json declares (None: a fixed-M kernel); KernelLoadError for
    one that is not two integers ``lo <= hi``."""
    try:
        doc = json.loads((Path(artifact_dir) / "artifact.json").read_text())
    except (OSError, ValueError) as exc:
        raise KernelLoadError(f"{artifact_dir}: cannot read artifact.json ({exc})") from None
    found = doc.get("m_range") if isinstance(doc, dict) else None
    if found is None:
        return None
    if (not isinstance(found, list) or len(found) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in found)
            or not 1 <= found[0] <= found[1]):
        raise KernelLoadError(f"{artifact_dir}: artifact.json m_range {found!r} is not [lo, hi]")
    return int(found[0]), int(found[1])


def samples_for(problem: Problem, m_range: tuple[int, int] | None,
                explicit: Sequence[int] | None) -> tuple[int, ...]:
    """The Ms to measure a kernel at: ``explicit`` (each inside the kernel's range, [M, M] for
    a fixed-M one), else the sample of its ``m_range``; () for a fixed-M kernel asked nothing
    (measured at its M as any candidate). KernelLoadError naming an M outside the range."""
    if explicit:
        if problem.op != "gemm":
            raise KernelLoadError(f"Ms to measure at ({list(explicit)}) need a GEMM, not "
                                  f"{problem.op}")
        lo, hi = m_range if m_range is not None else (problem["m"], problem["m"])
        outside = [m for m in explicit if not lo <= m <= hi]
        if outside:
            raise KernelLoadError(f"M {outside[0]} is outside the kernel's range {lo}-{hi}")
        return tuple(sorted(set(explicit)))
    return sample_ms(*m_range) if m_range is not None else ()


def problem_at(problem: Problem, m: int) -> Problem:
    """The fixed-M problem of one call at M (what the reference and cuBLAS compute)."""
    return Problem.of(problem.op, problem.dtype, **{**problem.sizes, "m": m})


def tensors_at(tensors: Sequence[TensorDesc], problem: Problem, m: int) -> list[TensorDesc]:
    """The kernel's tensors as a call at M sees them: the reference's shapes at M, by role in
    the artifact's order (A and D have M rows; B does not change)."""
    ins, outs = reference_for(problem_at(problem, m)).tensor_shapes()
    shapes = {"input": iter(ins), "output": iter(outs)}
    return [replace(t, shape=tuple(next(shapes[t.role]))) for t in tensors]


def views_at(buffers: Buffers, m: int) -> tuple[Buffers, dict[int, torch.Tensor]]:
    """``buffers`` (made at the range's top M) as sets of a call at M: the first M rows of A
    and D, B whole; and each D view's full tensor, by data pointer, whose rows past M must keep
    their poison."""
    import ctypes

    full_outputs: dict[int, torch.Tensor] = {}
    sets = []
    for bset in buffers.sets:
        a, *rest = bset.inputs
        inputs = [a[:m], *rest]
        outputs = [d[:m] for d in bset.outputs]
        for view, whole in zip(outputs, bset.outputs, strict=True):
            full_outputs[view.data_ptr()] = whole
        swap = {id(t): v for t, v in zip([*bset.inputs, *bset.outputs], [*inputs, *outputs],
                                         strict=True)}
        tensors = [swap[id(t)] for t in bset.tensors]
        ptrs = (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])
        sets.append(BufferSet(tensors, inputs, outputs, ptrs))
    return Buffers(sets, buffers.input_region, buffers.output_region, buffers.set_bytes), full_outputs


class RowsBeyondM(OpReference):
    """The reference at one M, which also holds every D row past M to its poison: poisoning a
    D view poisons its whole tensor, and a comparison fails where a row past M was written."""

    def __init__(self, at_m: OpReference, m: int, full_outputs: dict[int, torch.Tensor]) -> None:
        super().__init__(at_m.problem)
        self.at_m = at_m
        self.m = m
        self.full_outputs = full_outputs
        self.baseline_name = at_m.baseline_name
        self.rate_unit = at_m.rate_unit
        self.input_std = at_m.input_std

    def tensor_shapes(self) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        return self.at_m.tensor_shapes()

    def fill_inputs(self, tensor: torch.Tensor, generator: torch.Generator) -> None:
        self.at_m.fill_inputs(tensor, generator)

    def poison(self, tensor: torch.Tensor) -> None:
        self.at_m.poison(self.full_outputs.get(tensor.data_ptr(), tensor))

    def compare(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> CheckResult:
        result = self.at_m.compare(inputs, outputs)
        if not result.ok:
            return result
        for view in outputs:
            whole = self.full_outputs.get(view.data_ptr())
            if whole is None or whole.shape[0] == self.m:
                continue
            written = int((~self.at_m.unwritten(whole[self.m:])).sum())
            if written:
                return CheckResult(False, result.rel_err, (
                    f"{written} elements of D's rows {self.m}..{whole.shape[0] - 1} were written "
                    f"by a call at M={self.m}: past the call's M"))
        return result

    def baseline(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        self.at_m.baseline(inputs, outputs)

    def rate(self, median_us: float) -> float:
        return self.at_m.rate(median_us)


def loader_launch(artifact_dir: Path, device_index: int) -> Launch:
    """The kernel launched as its export's user launches it (``LoadedKernel.launch``: M from
    A's first dimension), on the current stream; its module loaded first."""
    kernel = load_kernel(artifact_dir)
    kernel.load_module()

    def launch(bset: BufferSet) -> None:
        kernel.launch((*bset.inputs, *bset.outputs), device_index)
    return launch


def per_m_entry(m: int, measured: Measurement) -> dict[str, Any]:
    """One M's figures, as ``Measurement.per_m`` holds them."""
    return {"m": m, "median_us": measured.median_us, "p10_us": measured.p10_us,
            "p90_us": measured.p90_us, "baseline_median_us": measured.baseline_median_us,
            "ratio": measured.ratio, "ratio_lo": measured.ratio_lo,
            "ratio_hi": measured.ratio_hi, "rounds": measured.rounds,
            "rel_err": measured.rel_err, "rate": measured.rate,
            "abnormal": list(measured.abnormal)}


def combine(at: Sequence[tuple[int, Measurement]], started: float) -> Measurement:
    """Every M's ``ok`` measurement -> the range's one (see the module doc)."""
    entries = [per_m_entry(m, measured) for m, measured in at]
    top = at[-1][1]
    ratios = [e["ratio"] for e in entries if e["ratio"] is not None]
    if len(ratios) != len(entries):
        return replace(top, per_m=entries, seconds=round(time.perf_counter() - started, 3))
    lows = [e["ratio_lo"] if e["ratio_lo"] is not None else e["ratio"] for e in entries]
    highs = [e["ratio_hi"] if e["ratio_hi"] is not None else e["ratio"] for e in entries]
    abnormal = sorted({a for e in entries for a in e["abnormal"]})
    conditions = {**top.conditions, "abnormal": abnormal} if abnormal else dict(top.conditions)
    conditions["per_m_ms"] = [m for m, _ in at]
    return replace(
        top, ratio=range_ratio(ratios), ratio_lo=range_ratio(lows), ratio_hi=range_ratio(highs),
        rounds=sum(measured.rounds for _, measured in at),
        rel_err=max((measured.rel_err or 0.0) for _, measured in at),
        conditions=conditions, per_m=entries, seconds=round(time.perf_counter() - started, 3))


def measure_at_ms(
    samples: Sequence[int], problem: Problem, tensors: Sequence[TensorDesc], buffers: Buffers,
    launch: Launch, measure_one: Callable[[OpReference, list[TensorDesc], Buffers, Launch, bool],
                                          Measurement], started: float,
) -> Measurement:
    """``measure_one(reference, tensors, buffers, launch, first)`` (a candidate's check and
    paired timing, tsopt.workers.candidate.check_and_time) at each M of ``samples`` on views of
    ``buffers``, combined; ``first`` is True for the first M only (its check opens the
    watchdog's timing phase)."""
    at: list[tuple[int, Measurement]] = []
    for index, m in enumerate(samples):
        views, full_outputs = views_at(buffers, m)
        reference = RowsBeyondM(reference_for(problem_at(problem, m)), m, full_outputs)
        measured = measure_one(reference, tensors_at(tensors, problem, m), views, launch,
                               index == 0)
        if measured.status != "ok":
            where = f"at M={m} (of {', '.join(map(str, samples))})"
            return replace(measured, error=f"{where}: {measured.error or measured.status}",
                           per_m=[per_m_entry(mm, done) for mm, done in at])
        at.append((m, measured))
    return combine(at, started)
