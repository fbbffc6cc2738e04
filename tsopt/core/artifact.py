"""The artifact contract between the builder (CPU) and the runner (GPU).

A built candidate is a directory::

    kernel.h        the header export_to_c wrote
    kernel.o        the object export_to_c wrote (embeds the cubin + host launch code)
    shim.c          the C shim that gives every kernel the same ABI
    libkernel.so    shim.c + kernel.o + the DSL's CUDA-dialect runtime, linked
    artifact.json   this manifest

The shared library exports the same two functions for every kernel::

    int tsopt_load(void);                      /* load the module once; 0 or a cudaError_t */
    int tsopt_launch(void **data, int n, void *stream);
                                               /* data[i]: device pointer of tensors[i];
                                                  0, or a cudaError_t, or -1 on a bad n */

A kernel whose M is a launch argument (``m_range`` in its manifest: ``[lo, hi]``) exports a
third, and ``tsopt_launch`` runs it at ``hi`` (the shapes its manifest lists)::

    int tsopt_launch_m(void **data, int n, int m, void *stream);
                                               /* the call's M: the size of every tensor
                                                  dimension listed in its runtime_dims;
                                                  -2 when m lies outside [lo, hi] */

A fixed-M kernel's manifest has no ``m_range`` (it serves exactly its shapes).

The CUDA runtime is linked dynamically (``libcudart.so.12`` or ``.13``): a
static copy costs 1 MB per candidate, too much to ship hundreds. The runner
loads ``libcuda.so.1`` and a ``libcudart`` with ``RTLD_GLOBAL`` first.

Standard library only: the GPU runner reads this.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tsopt.core.strict_json import JsonInputError, strict_loads

ARTIFACT_ABI = 1
MANIFEST_NAME = "artifact.json"
LIBRARY_NAME = "libkernel.so"
LAUNCH_M_SYMBOL = "tsopt_launch_m"
"""The launch of a runtime-M kernel at the call's M (absent from a fixed-M kernel's library)."""
M_OUTSIDE_RANGE = -2
"""What ``tsopt_launch_m`` returns for an M outside the kernel's range (nothing launched)."""


class ArtifactError(ValueError):
    """An artifact directory or its manifest is missing or malformed."""


@dataclass(frozen=True)
class TensorDesc:
    name: str
    role: str  # "input" | "output"
    shape: tuple[int, ...]
    dtype: str  # "fp16" | "bf16"
    runtime_dims: tuple[int, ...] = ()
    """Dimensions given by each call (a runtime-M kernel's M: ``shape`` holds the range's
    upper end there); written only when there are some."""

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "role": self.role,
            "shape": list(self.shape),
            "dtype": self.dtype,
        }
        if self.runtime_dims:
            doc["runtime_dims"] = list(self.runtime_dims)
        return doc


@dataclass(frozen=True)
class ArtifactManifest:
    """``artifact.json``: what the runner needs to call and check a built kernel."""

    genome_hash: str
    space: str
    problem: dict[str, Any]
    arch: str
    tensors: tuple[TensorDesc, ...]
    library: str = LIBRARY_NAME
    load_symbol: str = "tsopt_load"
    launch_symbol: str = "tsopt_launch"
    abi: int = ARTIFACT_ABI
    launch: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    """The GPU profile it was built for: ``id``, ``sm_count``, ``name`` (``derived_from``
    when derived); empty in an artifact built before profiles (an H200's: 132 SMs). A
    ``launch["decomposition_sms"]`` says the kernel's grid was sized for that many SMs: the
    loader refuses it on a GPU with another count (:func:`decomposition_sms`)."""
    m_range: tuple[int, int] | None = None
    """``(lo, hi)``: M is a launch argument (``tsopt_launch_m``) and may be anything from lo
    to hi; None (absent from the file): a fixed-M kernel, for exactly its shapes."""

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["tensors"] = [t.to_dict() for t in self.tensors]
        if self.m_range is None:
            del doc["m_range"]  # a fixed-M kernel's manifest is the one of before ranges
        else:
            doc["m_range"] = list(self.m_range)
        return doc

    def write(self, directory: Path) -> Path:
        path = Path(directory) / MANIFEST_NAME
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True))
        return path

    @classmethod
    def from_dict(cls, doc: Any, where: str = "artifact.json") -> ArtifactManifest:
        if not isinstance(doc, dict):
            raise ArtifactError(f"{where}: not a JSON object")
        if doc.get("abi") != ARTIFACT_ABI:
            raise ArtifactError(f"{where}: abi {doc.get('abi')!r} is not {ARTIFACT_ABI}")
        try:
            tensors = tuple(
                TensorDesc(t["name"], t["role"], tuple(int(x) for x in t["shape"]), t["dtype"],
                           tuple(int(x) for x in t.get("runtime_dims", ())))
                for t in doc["tensors"]
            )
            m_range = doc.get("m_range")
            if m_range is not None:
                lo, hi = (int(v) for v in m_range)
                if not 1 <= lo <= hi:
                    raise ValueError(f"m_range {m_range!r} is not [lo, hi] with 1 <= lo <= hi")
                m_range = (lo, hi)
            return cls(
                genome_hash=str(doc["genome_hash"]),
                space=str(doc["space"]),
                problem=dict(doc["problem"]),
                arch=str(doc["arch"]),
                tensors=tensors,
                library=str(doc.get("library", LIBRARY_NAME)),
                load_symbol=str(doc.get("load_symbol", "tsopt_load")),
                launch_symbol=str(doc.get("launch_symbol", "tsopt_launch")),
                abi=ARTIFACT_ABI,
                launch=dict(doc.get("launch", {})),
                versions=dict(doc.get("versions", {})),
                device=dict(doc.get("device", {})),
                m_range=m_range,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"{where}: malformed ({type(exc).__name__}: {exc})") from None

    def decomposition_sms(self) -> int | None:
        """SMs the kernel's decomposition was made for (a persistent grid of one wave,
        stream-K's CTAs), or None when its grid is independent of the GPU's SM count."""
        value = self.launch.get("decomposition_sms")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @classmethod
    def read(cls, directory: Path) -> ArtifactManifest:
        path = Path(directory) / MANIFEST_NAME
        try:
            doc = strict_loads(path.read_text())
        except FileNotFoundError:
            raise ArtifactError(f"{path}: no artifact manifest") from None
        except JsonInputError as exc:
            raise ArtifactError(f"{path}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ArtifactError(f"{path}: not text ({exc.reason} at byte {exc.start})") from None
        except OSError as exc:
            raise ArtifactError(f"{path}: cannot be read ({exc.strerror})") from None
        return cls.from_dict(doc, str(path))
