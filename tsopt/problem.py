"""The problem a kernel is tuned for: an op, a dtype and its sizes.

Standard library only (the GPU runner reads problems from manifests).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DTYPES: dict[str, int] = {"fp16": 2, "bf16": 2}
"""Supported element types and their size in bytes."""

OPS: dict[str, tuple[str, ...]] = {
    "copy": ("rows", "cols"),
    "gemm": ("m", "n", "k"),
}
"""Each op and the names of its sizes, in order."""


class ProblemError(ValueError):
    """A problem is malformed or not supported; the message names the bad value."""


@dataclass(frozen=True)
class Problem:
    """An op on concrete sizes, e.g. ``copy fp16 rows=4096 cols=4096``."""

    op: str
    dtype: str
    dims: tuple[tuple[str, int], ...]

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

    @classmethod
    def of(cls, op: str, dtype: str, **sizes: int) -> Problem:
        if op not in OPS:
            raise ProblemError(f"unknown op {op!r}; known: {', '.join(OPS)}")
        missing = [n for n in OPS[op] if n not in sizes]
        extra = [n for n in sizes if n not in OPS[op]]
        if missing or extra:
            raise ProblemError(f"{op} needs sizes {OPS[op]}; missing {missing}, unexpected {extra}")
        return cls(op, dtype, tuple((n, sizes[n]) for n in OPS[op]))

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

    @property
    def key(self) -> str:
        """Stable short name, e.g. ``copy-fp16-4096x4096``."""
        return f"{self.op}-{self.dtype}-" + "x".join(str(v) for _, v in self.dims)

    @property
    def bytes_moved(self) -> int:
        """Fewest bytes through device memory: each input read once, output written once."""
        s = self.sizes
        if self.op == "copy":
            return 2 * s["rows"] * s["cols"] * self.element_bytes
        return (s["m"] * s["k"] + s["n"] * s["k"] + s["m"] * s["n"]) * self.element_bytes

    @property
    def flops(self) -> int:
        s = self.sizes
        return 2 * s["m"] * s["n"] * s["k"] if self.op == "gemm" else 0

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "dtype": self.dtype, **self.sizes}

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
        return cls.of(op, dtype, **doc)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def __str__(self) -> str:
        return f"{self.op} {self.dtype} " + " ".join(f"{k}={v}" for k, v in self.dims)
