"""Per op, what the measuring side needs: inputs, the torch reference check, the vendor baseline.

One entry of :data:`REFERENCES` per op of ``tsopt.core.problem.OP_SPECS``: the tensors an
artifact takes, how to fill its inputs, how to judge its output against torch, what the vendor
does (``copy``: ``dst.copy_(src)``; ``gemm``: ``torch.matmul(A, B.t(), out=D)``, i.e. cuBLAS)
and the rate its time is reported in. Adding an op is one entry there and one here.

Correctness, by op and dtype: a copy must reproduce its input bit for bit; a GEMM is within
:data:`GEMM_REL_TOL` of an fp32 reference (norm) and within :data:`GEMM_ELEM_TOL` elementwise.
Torch and the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tsopt.core.artifact import TensorDesc
from tsopt.core.problem import Problem, ProblemError
from tsopt.workers.loader import KernelLoadError

TORCH_DTYPES: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16,
                                        "int16": torch.int16}

INT16_POISON = -0x5556
"""What an int16 output holds before the kernel writes it (0xAAAA, alternating bits: neither
zero nor a sign flip of anything). Integers have no NaN; a random input equals it once in 2^16
elements, so a kernel that skips a whole region is still caught."""

POISON: dict[str, float] = {"fp16": float("nan"), "bf16": float("nan"), "int16": INT16_POISON}

# Correctness of a GEMM, D = A @ B^T with fp32 accumulation, against ref = A.float() @ B.float().T
# (fp32, TF32 off). The output is rounded to 16 bits, so a correct kernel's error is that
# rounding: bf16 keeps 8 significant bits (unit roundoff 2^-8; the rms relative rounding error is
# ~1.6e-3, and the first H200 GEMMs measured 1.7e-3), fp16 keeps 11 (2^-11; ~2e-4).
# The norm thresholds sit 6x (bf16) and 25x (fp16) above that floor and far below what a real
# bug gives (a dropped K stage or a wrong tile row: 1e-1 and up).
GEMM_REL_TOL: dict[str, float] = {"bf16": 1e-2, "fp16": 5e-3}
# A norm hides a small wrong region (one wrong 128x128 tile of 8192x8192 moves it by 1.6e-2 x its
# error), so each element must also satisfy |d - ref| <= tol x (|ref| + rms(ref)): 8x the
# half-ulp bound of one rounding (bf16 2^-9, fp16 2^-12); the rms term absorbs the fp32
# summation-order difference on elements near zero.
GEMM_ELEM_TOL: dict[str, float] = {"bf16": 2.0**-6, "fp16": 2.0**-9}

_BITS: dict[int, torch.dtype] = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    rel_err: float | None
    message: str = ""


class OpReference:
    """One op's inputs, reference check, vendor baseline and rate, for one problem."""

    baseline_name = ""
    rate_unit = ""
    dtypes: tuple[str, ...] = ()  # the element types this check knows how to judge
    input_std = 1.0

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.dtype = TORCH_DTYPES[problem.dtype]

    def tensor_shapes(self) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        raise NotImplementedError

    def compare(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> CheckResult:
        raise NotImplementedError

    def baseline(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        raise NotImplementedError

    def rate(self, median_us: float) -> float:
        raise NotImplementedError

    def fill_inputs(self, tensor: torch.Tensor, generator: torch.Generator) -> None:
        """Random inputs: N(0, input_std) for floats, every value of the type for integers."""
        if tensor.dtype.is_floating_point:
            tensor.normal_(0.0, self.input_std, generator=generator)
        else:  # torch.randint's draw, in place (a region may be half the free memory)
            info = torch.iinfo(tensor.dtype)
            tensor.random_(info.min, info.max + 1, generator=generator)

    def poison(self, tensor: torch.Tensor) -> None:
        """Fill an output with what no correct kernel leaves there: what it never wrote shows."""
        tensor.fill_(POISON[self.problem.dtype])

    def unwritten(self, tensor: torch.Tensor) -> torch.Tensor:
        """Where an output still holds the poison."""
        if tensor.dtype.is_floating_point:
            return torch.isnan(tensor)
        return tensor == POISON[self.problem.dtype]

    def default_tensors(self) -> list[TensorDesc]:
        ins, outs = self.tensor_shapes()
        return ([TensorDesc(f"in{i}", "input", s, self.problem.dtype) for i, s in enumerate(ins)]
                + [TensorDesc(f"out{i}", "output", s, self.problem.dtype)
                   for i, s in enumerate(outs)])

    def check_tensors(self, tensors: Sequence[TensorDesc]) -> None:
        """The artifact's tensors, by role and in order, must be this op's; else KernelLoadError."""
        ins, outs = self.tensor_shapes()
        got_in = [t.shape for t in tensors if t.role == "input"]
        got_out = [t.shape for t in tensors if t.role == "output"]
        roles = {t.role for t in tensors} - {"input", "output"}
        dtypes = {t.dtype for t in tensors} - {self.problem.dtype}
        if got_in != ins or got_out != outs or roles or dtypes:
            have = ", ".join(f"{t.name}:{t.role}{list(t.shape)}:{t.dtype}" for t in tensors)
            raise KernelLoadError(
                f"artifact tensors [{have}] do not fit {self.problem}: expected inputs {ins} "
                f"and outputs {outs} of {self.problem.dtype}"
            )


class CopyReference(OpReference):
    baseline_name = "torch.copy_"
    rate_unit = "GB/s"
    dtypes = ("fp16", "bf16", "int16")

    def tensor_shapes(self) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        shape = (self.problem["rows"], self.problem["cols"])
        return [shape], [shape]

    def compare(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> CheckResult:
        src, dst = inputs[0], outputs[0]
        bits = _BITS[src.element_size()]
        bits_src, bits_dst = src.view(bits), dst.view(bits)
        if torch.equal(bits_src, bits_dst):
            return CheckResult(True, 0.0)
        differs = bits_src != bits_dst
        poisoned = self.unwritten(dst)
        if not dst.dtype.is_floating_point:  # an input may equal the poison by chance
            poisoned &= differs
        differ, unwritten = int(differs.sum()), int(poisoned.sum())
        diff = torch.where(~poisoned, dst.float() - src.float(), torch.zeros((), device=dst.device))
        rel = float(torch.linalg.vector_norm(diff, dtype=torch.float64)
                    / torch.linalg.vector_norm(src.double()))
        poison = "the NaN poison" if dst.dtype.is_floating_point else (
            f"the poison {POISON[self.problem.dtype]}")
        return CheckResult(False, rel, (
            f"{differ} of {dst.numel()} elements differ from the input; {unwritten} of them "
            f"still hold {poison} (never written)"
        ))

    def baseline(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        outputs[0].copy_(inputs[0])

    def rate(self, median_us: float) -> float:
        return self.problem.bytes_moved / (median_us * 1e3)  # read + write bytes, GB/s


class GemmReference(OpReference):
    baseline_name = "torch.matmul (cuBLAS)"
    rate_unit = "TFLOP/s"
    dtypes = ("fp16", "bf16")

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem)
        # A, B ~ N(0, K^-1/2): D's elements come out ~N(0, 1), well inside fp16's range.
        self.input_std = problem["k"] ** -0.25

    def tensor_shapes(self) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        m, n, k = self.problem["m"], self.problem["n"], self.problem["k"]
        return [(m, k), (n, k)], [(m, n)]

    def compare(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> CheckResult:
        a, b = inputs
        out = outputs[0].float()
        nonfinite = int((~torch.isfinite(out)).sum())
        if nonfinite:
            return CheckResult(False, None, (
                f"{nonfinite} of {out.numel()} output elements are NaN/Inf: left unwritten (the "
                "output was poisoned with NaN) or computed non-finite"
            ))
        ref = a.float() @ b.float().t()
        diff = out - ref
        ref_norm = float(torch.linalg.vector_norm(ref, dtype=torch.float64))
        rel = float(torch.linalg.vector_norm(diff, dtype=torch.float64)) / ref_norm
        rms = ref_norm / math.sqrt(ref.numel())
        tol, elem_tol = GEMM_REL_TOL[self.problem.dtype], GEMM_ELEM_TOL[self.problem.dtype]
        over = int((diff.abs() > elem_tol * (ref.abs() + rms)).sum())
        if rel <= tol and over == 0:
            return CheckResult(True, rel)
        return CheckResult(False, rel, (
            f"relative error {rel:.3g} (limit {tol:g}); {over} of {out.numel()} elements off by "
            f"more than {elem_tol:.3g} x (|ref| + rms(ref))"
        ))

    def baseline(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        torch.matmul(inputs[0], inputs[1].t(), out=outputs[0])

    def rate(self, median_us: float) -> float:
        return self.problem.flops / (median_us * 1e6)  # TFLOP/s


REFERENCES: dict[str, type[OpReference]] = {"copy": CopyReference, "gemm": GemmReference}
"""The torch reference and vendor baseline of each op, by op name."""


def reference_for(problem: Problem) -> OpReference:
    """``problem``'s reference; ProblemError when its op or dtype has none."""
    if problem.op not in REFERENCES:
        raise ProblemError(f"the runner cannot check op {problem.op!r}; known: {list(REFERENCES)}")
    kind = REFERENCES[problem.op]
    if problem.dtype not in kind.dtypes:
        raise ProblemError(f"the runner cannot check {problem.op} on {problem.dtype}; it checks "
                           f"{', '.join(kind.dtypes)}")
    return kind(problem)
