"""The search-space interface: a TS kernel template and its knobs.

A search space owns one kernel template. It says which knobs exist, which
problems it accepts, how to enumerate or sample genomes, how to build the TS
skeleton of a genome on the host (so that the TS verifier can judge it with
no compile), which hazards TS does not see and tsopt must check itself, and
how to compile a genome into a kernel.

Roles elsewhere only talk to this interface: the verifier
(``tsopt.verify.verifier``) calls :meth:`SearchSpace.dataflow_error`,
:meth:`SearchSpace.build_skeleton` and :meth:`SearchSpace.tsopt_checks`; the
builder (``tsopt.build.builder``) calls :meth:`SearchSpace.kernel_spec`; the driver
calls :meth:`SearchSpace.enumerate` or :meth:`SearchSpace.suggest`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tsopt.core.genome import GeneValue, Genome
from tsopt.core.problem import Problem, ProblemError

KnobKind = Literal["structural", "numeric"]


@dataclass(frozen=True)
class Knob:
    """One gene the search may change, with its legal values for a problem."""

    name: str
    kind: KnobKind
    choices: tuple[GeneValue, ...]
    doc: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "choices": list(self.choices),
            "doc": self.doc,
        }


@dataclass(frozen=True)
class Finding:
    """A hazard found by tsopt's own checks: a stable rule name and a message."""

    rule: str
    message: str


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument of the compiled kernel, in call order (row-major, contiguous)."""

    name: str
    role: Literal["input", "output"]
    shape: tuple[int, ...]
    dtype: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "shape": list(self.shape),
            "dtype": self.dtype,
        }


@dataclass(frozen=True)
class KernelSpec:
    """Everything the builder needs to compile one genome for one problem.

    ``host_fn`` is a ``@cute.jit`` function taking the tensors of ``tensors``
    in order and then a ``cuda.bindings.driver.CUstream``; ``compile_args``
    are the fake arguments for ``cute.compile`` in the same order (fake
    tensors and a fake stream). ``launch`` records grid/block/cluster for the
    artifact manifest. ``source`` optionally carries the template's source
    rendering of the genome's schedule (for export).
    """

    host_fn: Callable[..., Any]
    compile_args: tuple[Any, ...]
    tensors: tuple[TensorArg, ...]
    launch: dict[str, Any] = field(default_factory=dict)


@dataclass
class Enumeration:
    """The enumerator's funnel front: raw count and the dataflow-legal genomes.

    ``raw`` counts every combination of placements and gene values before any
    check; ``genomes`` yields the dataflow-legal ones (the verifier judges the
    pipeline protocol of each); ``dataflow_legal`` is filled as they are yielded.
    """

    raw: int
    genomes: Iterator[Genome]
    dataflow_legal: int = 0


class SearchSpace(ABC):
    """A TS kernel template with knobs. Subclasses register in :data:`tsopt.core.registry.SPACES`."""

    name: ClassVar[str]
    op: ClassVar[str]
    description: ClassVar[str]
    archs: ClassVar[tuple[str, ...]] = ("sm_90a",)
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16")

    # -- problems and knobs ----------------------------------------------------------
    def check(self, problem: Problem) -> None:
        """Raise ``ProblemError`` naming the bad value if this space cannot tune ``problem``:
        the op and dtype it is declared for, then the space's own :meth:`check_problem`."""
        if problem.op != self.op:
            raise ProblemError(f"space {self.name!r} tunes {self.op}, not {problem.op}")
        if problem.dtype not in self.dtypes:
            raise ProblemError(f"space {self.name!r} takes dtype {', '.join(self.dtypes)}, "
                               f"not {problem.dtype!r}")
        self.check_problem(problem)

    @abstractmethod
    def check_problem(self, problem: Problem) -> None:
        """Raise ``ProblemError`` naming the bad value if this space cannot tune ``problem``
        (sizes, alignment); the op and dtype are checked by :meth:`check` first."""

    @abstractmethod
    def knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        """The genes and their choices (for ``problem`` when given, else generic)."""

    @abstractmethod
    def seed_genome(self, problem: Problem) -> Genome:
        """A reference schedule of this template (the tutorial's or a hand-written one)."""

    # -- search ----------------------------------------------------------------------
    @abstractmethod
    def enumerate(self, problem: Problem) -> Enumeration:
        """Every dataflow-legal genome, with the raw count before the dataflow filter."""

    @abstractmethod
    def suggest(self, trial: Any, problem: Problem) -> Genome:
        """A genome from an Optuna trial (``trial.suggest_categorical`` per knob)."""

    def params_of(self, genome: Genome) -> dict[str, Any]:
        """The Optuna parameters :meth:`suggest` would need to return ``genome`` (to enqueue a
        known schedule, e.g. the seed, as a trial). Default: knob names are gene names."""
        names = {k.name for k in self.knobs()}
        return {name: value for name, value in genome.genes.items() if name in names}

    # -- verification ----------------------------------------------------------------
    @abstractmethod
    def dataflow_error(self, genome: Genome) -> str | None:
        """Why the genome uses a value before it is produced (or is not of this space), else None."""

    @abstractmethod
    def build_skeleton(self, genome: Genome, problem: Problem, domain: int) -> Any:
        """Construct the TS skeleton on the host with a concrete domain of ``domain`` iterations.

        Constructing the ``TaskManager`` runs every TS check and the BFS
        deadlock/race checker; it raises ``ValueError`` (or ``AssertionError``
        for register rules) on an invalid schedule. No DSL tracer is needed.
        """

    @abstractmethod
    def tsopt_checks(self, genome: Genome, problem: Problem) -> list[Finding]:
        """Hazards TS does not see (warp overlap, launch shape, stage identity, SMEM, registers...)."""

    def verify_domain(self, genome: Genome) -> int:
        """Iterations for host verification: at least stages + 2 (MEASURED.md)."""
        stages = genome.get("stages", 1)
        assert isinstance(stages, int)
        return max(4, stages + 2)

    @abstractmethod
    def verdict_key(self, genome: Genome, problem: Problem) -> str:
        """A key of only the genes (and problem facts) that can change the verdict."""

    # -- build -----------------------------------------------------------------------
    def source_digest(self) -> str:
        """Hash of the template's source files: part of the build cache key, so an edited
        template never reuses an artifact built from the old code."""
        import hashlib
        import inspect
        import sys

        digest = hashlib.sha256()
        for module_name in sorted(self.source_modules()):
            module = sys.modules.get(module_name)
            if module is not None:
                digest.update(inspect.getsource(module).encode())
        return digest.hexdigest()[:16]

    def source_modules(self) -> tuple[str, ...]:
        """Modules whose code ends up in this space's kernels."""
        return (type(self).__module__,)

    def export_source(self, genome: Genome, problem: Problem, arch: str, header: str) -> str:
        """A standalone ``kernel.py`` for this candidate: the template with its schedule written
        out literally, checking itself against torch when run (``tsopt export``)."""
        raise NotImplementedError(f"space {self.name!r} cannot export kernel source yet")

    @abstractmethod
    def kernel_spec(self, genome: Genome, problem: Problem, arch: str) -> KernelSpec:
        """The host function and fake arguments that compile this genome for ``problem``."""
