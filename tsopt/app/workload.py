"""A workload file: the GEMMs of a model to tune together (``tsopt tune gemm --workload FILE``).

A small TOML or JSON list of projections, each a GEMM ``D = A @ W^T`` with fixed N and K (the
weight ``W``, N x K, as torch's ``nn.Linear`` holds it: out x in) and an M that varies at run
time. TOML::

    name = "llama3-8b-layer"   # optional, shown in the progress view
    dtype = "bf16"             # optional default for every problem (else bf16)
    m = "1-128"                # optional default M for every problem

    [[problem]]
    name = "qkv"               # required, unique: names the projection in the summary
    n = 6144                   # required: output features
    k = 4096                   # required: input features
    # m = "1-128"              # a range (buckets of runtime-M kernels), 16 or "1,8,32" (exact
    #                            fixed-M kernels); required here unless given at the top
    # dtype = "bf16"

JSON: the same as one object (``{"problem": [...]}``) or the list of problems alone. Anything
else (a key not listed above, a range that is empty or starts below 1, a size that is no
positive integer, two problems of one name) is refused with one line naming it and the file.
``examples/llama3_8b_layer.toml`` is the example: one Llama-3-8B decoder layer.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tsopt.core.buckets import RangeError, parse_m
from tsopt.core.errors import UserInputError
from tsopt.core.problem import DTYPES
from tsopt.core.strict_json import JsonInputError, strict_loads

TOP_KEYS = ("name", "dtype", "m", "problem")
PROBLEM_KEYS = ("name", "n", "k", "m", "dtype")
DEFAULT_DTYPE = "bf16"
MAX_PROBLEMS = 256
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class ServedGemm:
    """One GEMM a serving stack calls with a varying M: its name, dtype, N, K and the Ms to
    tune for: a range (``m_range``: buckets of runtime-M kernels) or exact Ms (``exact_ms``:
    a fixed-M kernel each)."""

    name: str
    dtype: str
    n: int
    k: int
    m_range: tuple[int, int] | None
    exact_ms: tuple[int, ...] = ()

    @property
    def m_text(self) -> str:
        if self.m_range is not None:
            return f"{self.m_range[0]}-{self.m_range[1]}"
        return ",".join(map(str, self.exact_ms))


@dataclass(frozen=True)
class Workload:
    """What a workload file asks for: its name and its GEMMs, in the file's order."""

    name: str
    gemms: tuple[ServedGemm, ...]
    source: str = ""


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserInputError(f"{what} = {value!r} must be a positive integer")
    return value


def _dtype(value: Any, what: str) -> str:
    if not isinstance(value, str) or value not in DTYPES:
        raise UserInputError(f"{what} = {value!r} is not a dtype ({', '.join(DTYPES)})")
    return value


def served_gemm(doc: Any, where: str, defaults: dict[str, Any]) -> ServedGemm:
    """One problem of a workload (``where`` names it in errors); UserInputError naming the bad
    key or value."""
    if not isinstance(doc, dict):
        raise UserInputError(f"{where} must be a table of {', '.join(PROBLEM_KEYS)}, got "
                             f"{type(doc).__name__}")
    unknown = sorted(set(doc) - set(PROBLEM_KEYS))
    name = doc.get("name")
    label = f"{where} ({name})" if isinstance(name, str) else where
    if unknown:
        raise UserInputError(f"{label}: unknown key {unknown[0]!r} (known: "
                             f"{', '.join(PROBLEM_KEYS)})")
    missing = [key for key in ("name", "n", "k") if key not in doc]
    if "m" not in doc and "m" not in defaults:
        missing.append("m")
    if missing:
        raise UserInputError(f"{label}: missing {', '.join(repr(k) for k in missing)}")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise UserInputError(f"{where}: name = {name!r} is not a name (letters, digits, "
                             "'_', '.', '-'; at most 64)")
    n = _positive(doc["n"], f"{label}: n")
    k = _positive(doc["k"], f"{label}: k")
    dtype = _dtype(doc.get("dtype", defaults.get("dtype", DEFAULT_DTYPE)), f"{label}: dtype")
    m_value = doc.get("m", defaults.get("m"))
    try:
        m_range, exact = parse_m(m_value)
    except RangeError as exc:
        raise UserInputError(f"{label}: m: {exc}") from None
    return ServedGemm(name, dtype, n, k, m_range, exact)


def parse_workload(doc: Any, source: str) -> Workload:
    """A workload from its parsed document (a TOML or JSON object, or a JSON list of
    problems); UserInputError (one line, naming ``source`` and the bad key or value)."""
    try:
        return _parse(doc, source)
    except UserInputError as exc:
        raise UserInputError(f"workload {source}: {exc}") from None


def _parse(doc: Any, source: str) -> Workload:
    if isinstance(doc, list):
        doc = {"problem": doc}
    if not isinstance(doc, dict):
        raise UserInputError(f"expected a table with a 'problem' list, got {type(doc).__name__}")
    unknown = sorted(set(doc) - set(TOP_KEYS))
    if unknown:
        raise UserInputError(f"unknown key {unknown[0]!r} (known at the top: "
                             f"{', '.join(TOP_KEYS)}; a problem's keys go under [[problem]])")
    problems = doc.get("problem")
    if not isinstance(problems, list) or not problems:
        raise UserInputError("no problems: give one [[problem]] table (or JSON list entry) at "
                             "least")
    if len(problems) > MAX_PROBLEMS:
        raise UserInputError(f"{len(problems)} problems: at most {MAX_PROBLEMS}")
    defaults: dict[str, Any] = {}
    if "dtype" in doc:
        defaults["dtype"] = _dtype(doc["dtype"], "dtype")
    if "m" in doc:
        try:
            parse_m(doc["m"])
        except RangeError as exc:
            raise UserInputError(f"m: {exc}") from None
        defaults["m"] = doc["m"]
    name = doc.get("name", Path(source).stem)
    if not isinstance(name, str) or not name:
        raise UserInputError(f"name = {name!r} is not a name")
    gemms = [served_gemm(p, f"problem {i + 1}", defaults) for i, p in enumerate(problems)]
    seen: dict[str, int] = {}
    for index, gemm in enumerate(gemms):
        if gemm.name in seen:
            raise UserInputError(f"problems {seen[gemm.name] + 1} and {index + 1} are both "
                                 f"named {gemm.name!r}")
        seen[gemm.name] = index
    return Workload(name, tuple(gemms), source)


def read_workload(path: Path) -> Workload:
    """The workload file at ``path`` (``.toml`` or ``.json``); UserInputError (one line) for a
    file that cannot be read, parsed or understood."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise UserInputError(f"workload {path}: expected a .toml or .json file")
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserInputError(f"workload {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise UserInputError(f"workload {path}: not text ({exc.reason})") from None
    try:
        doc = tomllib.loads(text) if suffix == ".toml" else strict_loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserInputError(f"workload {path}: not TOML ({exc})") from None
    except (JsonInputError, ValueError) as exc:
        raise UserInputError(f"workload {path}: not JSON ({str(exc).splitlines()[0]})") from None
    return parse_workload(doc, str(path))
