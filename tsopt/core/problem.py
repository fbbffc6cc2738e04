"""The problem a kernel is tuned for: an op, a dtype and its sizes; and the op registry.

A GEMM problem may take its M at run time: ``gemm:bf16:1-256x4096x4096`` is one kernel for
every M from 1 to 256 (N and K fixed, as weights are). Its ``m_range`` is ``(1, 256)`` and its
``m`` the range's upper end, what buffers are sized for; a problem without a range is the
fixed-M problem, whose key and spec text are those of before ranges.

An op is one entry of :data:`OP_SPECS`: its sizes (with the help the command line shows),
the bytes it must move and the flops it must do, and the default problem that ``tsopt
verify`` and ``tsopt spaces`` use. Adding an op is one entry here, plus its torch reference
and baseline on the measuring side (``tsopt.workers.reference``).

Standard library only (the GPU runner reads problems from manifests).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DTYPES: dict[str, int] = {"fp16": 2, "bf16": 2, "int16": 2}
"""Element types and their size in bytes (a space declares which of them it takes)."""

@dataclass(frozen=True)
class OpSpec:
    """One op tsopt tunes: its sizes in order, what each means, and its cost model."""

    name: str
    sizes: tuple[tuple[str, str], ...]  # (size name, help for the command line)
    default_problem: str  # e.g. "copy:fp16:4096x4096"
    default_dtype: str
    bytes_moved: Callable[[dict[str, int], int], int]  # (sizes, element bytes) -> bytes
    flops: Callable[[dict[str, int]], int]
    summary: str

    @property
    def size_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.sizes)


OP_SPECS: dict[str, OpSpec] = {
    "copy": OpSpec(
        "copy",
        (("rows", "Rows of the 2-D tensor."), ("cols", "Columns of the 2-D tensor (contiguous).")),
        "copy:fp16:4096x4096", "fp16",
        lambda s, e: 2 * s["rows"] * s["cols"] * e,
        lambda s: 0,
        "device-to-device copy of a 2-D tensor (baseline: torch copy)",
    ),
    "gemm": OpSpec(
        "gemm",
        (("m", "Rows of A and D."), ("n", "Rows of B, columns of D."),
         ("k", "Columns of A and B (the reduction).")),
        "gemm:bf16:8192x8192x8192", "bf16",
        lambda s, e: (s["m"] * s["k"] + s["n"] * s["k"] + s["m"] * s["n"]) * e,
        lambda s: 2 * s["m"] * s["n"] * s["k"],
        "D = A @ B^T, fp32 accumulation (baseline: cuBLAS through torch.matmul)",
    ),
}
"""The ops tsopt tunes, by name."""

OPS: dict[str, tuple[str, ...]] = {name: spec.size_names for name, spec in OP_SPECS.items()}
"""Each op and the names of its sizes, in order."""


class ProblemError(ValueError):
    """A problem is malformed or not supported; the message names the bad value."""


RANGE_SIZE = "m"
"""The one size a problem may take at run time (a GEMM's M: a batch of tokens)."""


@dataclass(frozen=True)
class Problem:
    """An op on concrete sizes, e.g. ``copy fp16 rows=4096 cols=4096``, or a GEMM whose M
    lies anywhere in ``m_range`` at run time (``m`` is then the range's upper end)."""

    op: str
    dtype: str
    dims: tuple[tuple[str, int], ...]
    m_range: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ProblemError(f"unknown op {self.op!r}; known: {', '.join(OPS)}")
        if self.dtype not in DTYPES:
            raise ProblemError(f"unknown dtype {self.dtype!r}; known: {', '.join(DTYPES)}")
        names = tuple(name for name, _ in self.dims)
        if names != OPS[self.op]:
            raise ProblemError(f"{self.op} needs sizes {OPS[self.op]}, got {names}")
        for name, value in self.dims:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ProblemError(f"{name}={value!r} is not an integer")
            if value <= 0:
                raise ProblemError(f"{name}={value} must be positive")
        if self.m_range is not None:
            self._check_range(self.m_range)

    def _check_range(self, m_range: object) -> None:
        if RANGE_SIZE not in OPS[self.op]:
            raise ProblemError(f"{self.op} has no size {RANGE_SIZE!r} to take at run time: "
                               "only a gemm's M may be a range")
        if (not isinstance(m_range, tuple) or len(m_range) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in m_range)):
            raise ProblemError(f"m range {m_range!r} is not two integers (lo, hi)")
        lo, hi = m_range
        if not 1 <= lo <= hi:
            raise ProblemError(f"m range {lo}-{hi} must have 1 <= lo <= hi")
        if hi != self[RANGE_SIZE]:
            raise ProblemError(f"m range {lo}-{hi}: m={self[RANGE_SIZE]} must be its upper end "
                               f"{hi}")

    @classmethod
    def of(cls, op: str, dtype: str, m_range: tuple[int, int] | None = None,
           **sizes: int) -> Problem:
        """The problem of ``op`` on ``sizes``; with ``m_range`` (lo, hi) its M is taken at run
        time (``m``, when given, must be ``hi``)."""
        if op not in OPS:
            raise ProblemError(f"unknown op {op!r}; known: {', '.join(OPS)}")
        if m_range is not None:
            m_range = tuple(m_range)  # type: ignore[assignment]
            if RANGE_SIZE in OPS[op] and RANGE_SIZE not in sizes and len(m_range) == 2:
                sizes = {**sizes, RANGE_SIZE: m_range[1]}
        missing = [n for n in OPS[op] if n not in sizes]
        extra = [n for n in sizes if n not in OPS[op]]
        if missing or extra:
            raise ProblemError(f"{op} needs sizes {OPS[op]}; missing {missing}, unexpected {extra}")
        return cls(op, dtype, tuple((n, sizes[n]) for n in OPS[op]), m_range)

    def __getitem__(self, name: str) -> int:
        for key, value in self.dims:
            if key == name:
                return value
        raise KeyError(f"{self.op} problem has no size {name!r}")

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.dims)

    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype]

    def _size_texts(self) -> list[str]:
        """Each size as text, M as ``lo-hi`` when it is a range."""
        return [f"{self.m_range[0]}-{self.m_range[1]}" if self.m_range and name == RANGE_SIZE
                else str(value) for name, value in self.dims]

    @property
    def key(self) -> str:
        """Stable short name, e.g. ``copy-fp16-4096x4096``, ``gemm-bf16-1-256x4096x4096``."""
        return f"{self.op}-{self.dtype}-" + "x".join(self._size_texts())

    @property
    def spec(self) -> str:
        """The problem as :func:`parse_problem_spec` reads it, e.g. ``gemm:bf16:1-256x4096x4096``."""
        return f"{self.op}:{self.dtype}:" + "x".join(self._size_texts())

    @property
    def bytes_moved(self) -> int:
        """Fewest bytes through device memory: each input read once, output written once."""
        return OP_SPECS[self.op].bytes_moved(self.sizes, self.element_bytes)

    @property
    def flops(self) -> int:
        return OP_SPECS[self.op].flops(self.sizes)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"op": self.op, "dtype": self.dtype, **self.sizes}
        if self.m_range is not None:
            doc["m_range"] = list(self.m_range)
        return doc

    @classmethod
    def from_dict(cls, doc: Any) -> Problem:
        if not isinstance(doc, dict):
            raise ProblemError(f"problem must be an object, got {doc!r}")
        doc = dict(doc)
        op, dtype = doc.pop("op", None), doc.pop("dtype", None)
        if not isinstance(op, str) or not isinstance(dtype, str):
            raise ProblemError(
                f"problem needs string 'op' and 'dtype', got op={op!r} dtype={dtype!r}"
            )
        m_range = doc.pop("m_range", None)
        if m_range is not None and not isinstance(m_range, list):
            raise ProblemError(f"problem's m_range must be a list [lo, hi], got {m_range!r}")
        return cls.of(op, dtype, None if m_range is None else tuple(m_range), **doc)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def __str__(self) -> str:
        texts = self._size_texts()
        return f"{self.op} {self.dtype} " + " ".join(
            f"{k}={text}" for (k, _), text in zip(self.dims, texts, strict=True))


def parse_problem_spec(spec: str) -> Problem:
    """``copy:fp16:4096x4096`` / ``gemm:bf16:8192x8192x8192`` / ``gemm:bf16:1-256x4096x4096``
    (M from 1 to 256 at run time) -> Problem; raises ProblemError naming the bad part."""
    parts = spec.split(":")
    if len(parts) != 3:
        raise ProblemError(f"problem {spec!r} is not of the form op:dtype:AxB[xC]")
    op, dtype, sizes = parts
    texts = sizes.lower().split("x")
    m_range = None
    if texts and "-" in texts[0]:
        low, _, high = texts[0].partition("-")
        try:
            m_range = (int(low), int(high))
        except ValueError:
            raise ProblemError(
                f"problem {spec!r}: M range {texts[0]!r} is not two integers like 1-256"
            ) from None
        texts[0] = high
    try:
        values = [int(v) for v in texts]
    except ValueError:
        raise ProblemError(
            f"problem {spec!r}: sizes {sizes!r} are not integers like 4096x4096"
        ) from None
    if op not in OP_SPECS:
        raise ProblemError(f"problem {spec!r}: unknown op {op!r}; known: {', '.join(OP_SPECS)}")
    names = OPS[op]
    if len(values) != len(names):
        raise ProblemError(f"problem {spec!r}: {op} needs {len(names)} sizes ({'x'.join(names)})")
    if m_range is not None and names[0] != RANGE_SIZE:
        raise ProblemError(f"problem {spec!r}: only a gemm's M may be a range (lo-hi)")
    try:
        return Problem.of(op, dtype, m_range, **dict(zip(names, values, strict=True)))
    except ProblemError as exc:
        raise ProblemError(f"problem {spec!r}: {exc}") from None


def default_problem(op: str) -> Problem:
    """The op's default problem (what ``tsopt verify`` judges a genome on when none is given)."""
    if op not in OP_SPECS:
        raise ProblemError(f"unknown op {op!r}; known: {', '.join(OP_SPECS)}")
    return parse_problem_spec(OP_SPECS[op].default_problem)
