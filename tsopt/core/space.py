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
calls :meth:`SearchSpace.enumerate` or :meth:`SearchSpace.suggest`; the funnel count
(``tsopt.verify.funnel``) calls :meth:`SearchSpace.funnel`; the report's schedule drawing
calls :meth:`SearchSpace.schedule_view`.

A space never imports the verifier (both are roles, and roles do not import each other).
Where a space needs verdicts (its funnel, the screens that focus its sampler) the caller
injects a :data:`Judge`: the funnel receives one as an argument, the screens read
:attr:`SearchSpace.judge`.
"""

from __future__ import annotations

import os
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tsopt.core.devices import DeviceProfile, default_profile
from tsopt.core.errors import UserInputError
from tsopt.core.genome import GeneValue, Genome, Section
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.records import Verdict

KnobKind = Literal["structural", "numeric"]

SANITY_FACTOR = 64
"""An integer knob's gene may be at most this many times the greatest value the space proposes
(:meth:`SearchSpace.gene_domains`)."""

FAULT_GENE_PREFIX = "planted."
"""Genes named ``planted.<fault>`` plant a deliberate fault (a space's tests, the runner's
isolation demo); no enumerator or sampler makes them."""
FAULT_GENES_ENV = "TSOPT_ALLOW_FAULT_GENES"
"""Set to ``1`` where faults are planted on purpose; otherwise the verifier rejects a genome
that carries a fault gene (rule ``tsopt.fault_gene``), whatever the space."""


def fault_genes(genome: Genome) -> list[str]:
    """The fault-injection genes ``genome`` carries (:data:`FAULT_GENE_PREFIX`), sorted."""
    return sorted(name for name in genome.genes if name.startswith(FAULT_GENE_PREFIX))


def fault_genes_allowed() -> bool:
    """Whether this process plants faults on purpose (:data:`FAULT_GENES_ENV` is ``1``)."""
    return os.environ.get(FAULT_GENES_ENV, "") == "1"


Judge = Callable[[Genome, Problem], Verdict]
"""``judge(genome, problem) -> Verdict``: the verifier, injected by whoever holds one (the
app, the driver: ``tsopt.verify.verifier.verify_genome`` bound to a space and a cache)."""

@dataclass(frozen=True)
class JudgedKey:
    """What a whole verdict depends on: the genome, the problem, the arch, the verifier's
    version (``tsopt.verify.verifier.verifier_version``: its code, the space's code, the DSL).
    The verifier memoises whole verdicts under it; the database shares them across studies
    (``tsopt.db.store.Store.find_judged``/``record_judged``)."""

    space: str
    genome_hash: str
    problem_key: str
    arch: str
    tool_version: str

    def to_dict(self) -> dict[str, str]:
        return {"space": self.space, "genome_hash": self.genome_hash,
                "problem_key": self.problem_key, "arch": self.arch,
                "tool_version": self.tool_version}


Progress = Callable[[str, int, int], None]
"""``progress(stage description, done, total)``; total 0 when unknown."""


@dataclass(frozen=True)
class Knob:
    """One gene the search may change, with its legal values for a problem."""

    name: str
    kind: KnobKind
    choices: tuple[GeneValue, ...]
    doc: str
    param: str = ""
    """The Optuna parameter the knob is sampled under ('': its name). A knob whose choices
    grew takes a new one: Optuna refuses a parameter whose choices differ from those a
    resumed study recorded for it (``CategoricalDistribution does not support dynamic value
    space``). Searches speak knob names; ``tsopt.search.samplers.KnobView`` translates."""

    @property
    def param_name(self) -> str:
        return self.param or self.name

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "choices": list(self.choices),
            "doc": self.doc,
            **({"param": self.param} if self.param else {}),
        }


GeneKind = Literal["int", "bool", "str", "ints"]


def gene_kind(value: GeneValue) -> GeneKind:
    """The kind of a gene value (a bool is not an int here, whatever Python says)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "str"
    return "ints"


_KIND_WORDS: dict[str, str] = {"int": "an integer", "bool": "true or false", "str": "a text",
                               "ints": "a list of integers"}


@dataclass(frozen=True)
class GeneDomain:
    """The values one gene may take: its kind, then a closed set of ``choices``, or a range
    ``low``..``high`` (either end open when None), or a regular expression ``pattern`` for a
    text. :meth:`SearchSpace.gene_domains` declares one per gene."""

    name: str
    kind: GeneKind
    choices: tuple[GeneValue, ...] | None = None
    low: int | None = None
    high: int | None = None
    pattern: str | None = None

    def error(self, value: GeneValue) -> str | None:
        """Why ``value`` is not a value of this gene (naming the gene), else None."""
        kind = gene_kind(value)
        if kind != self.kind:
            return (f"gene {self.name!r} is {value!r} ({_KIND_WORDS[kind]}); it must be "
                    f"{_KIND_WORDS[self.kind]}")
        if self.choices is not None and value not in self.choices:
            shown = ", ".join(repr(c) for c in self.choices[:12])
            more = f", ... ({len(self.choices)} in all)" if len(self.choices) > 12 else ""
            return f"gene {self.name!r} is {value!r}; it must be one of {shown}{more}"
        if kind == "int":
            assert isinstance(value, int)
            if (self.low is not None and value < self.low) or (
                    self.high is not None and value > self.high):
                low = "" if self.low is None else str(self.low)
                high = "" if self.high is None else str(self.high)
                return f"gene {self.name!r} is {value}; it must lie in {low}..{high}"
        if kind == "str" and self.pattern is not None:
            assert isinstance(value, str)
            if not re.fullmatch(self.pattern, value):
                return f"gene {self.name!r} is {value!r}; it must match {self.pattern!r}"
        return None


def genome_schema_error(space: str, domains: dict[str, GeneDomain], genome: Genome) -> str | None:
    """Why ``genome`` does not fit the schema ``domains`` of space ``space`` (the first bad
    gene, named), else None; see :meth:`SearchSpace.schema_error`."""
    if genome.space != space:
        return f"genome is of space {genome.space!r}, not {space!r}"
    genes = genome.genes
    for name, domain in domains.items():
        if name not in genes:
            return f"genome has no gene {name!r} (a {space} genome has one)"
        error = domain.error(genes[name])
        if error is not None:
            return error
    return None


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
    in order (then the workspace, if any) and then a ``cuda.bindings.driver.CUstream``; ``compile_args``
    are the fake arguments for ``cute.compile`` in the same order (fake
    tensors and a fake stream). ``launch`` records grid/block/cluster for the
    artifact manifest. ``source`` optionally carries the template's source
    rendering of the genome's schedule (for export).
    """

    host_fn: Callable[..., Any]
    compile_args: tuple[Any, ...]
    tensors: tuple[TensorArg, ...]
    launch: dict[str, Any] = field(default_factory=dict)
    workspace_bytes: int = 0
    """Device memory the kernel keeps between launches, passed after ``tensors`` (before the
    stream) to ``host_fn``: the built library allocates it per device, zeroed, when it is
    loaded, so callers see only ``tensors``. The kernel must leave it zeroed at exit."""


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


@dataclass(frozen=True)
class FunnelCount:
    """A space's own count of its funnel, from a factorisation of its genome.

    Counts at each gate: ``raw`` (every knob combination), ``dataflow_legal``, ``ts_valid``
    (the TS verifier accepts it; tsopt's checks may still reject it), ``tsopt_checked``
    (both accept it). ``method`` says how they were counted. A factorised count rests on
    assumptions about TS; ``draw`` (a random genome of the space) and ``predicted`` (whether
    the factorisation says that genome is TS-valid) let the caller test them against full
    verification (``tsopt.verify.funnel.check_factorisation``).
    """

    raw: int
    dataflow_legal: int
    ts_valid: int
    tsopt_checked: int
    method: str
    draw: Callable[[random.Random], Genome] | None = None
    predicted: Callable[[Genome], bool] | None = None


@dataclass(frozen=True)
class Factor:
    """One factor of a space's legal set, as proposals see it (``tsopt.search.proposals``).

    ``knobs`` are sampler knobs (names of :meth:`SearchSpace.knobs`) this factor decides;
    ``legal(params)`` says whether their values are legal given the knobs of the factors
    before it (it reads no knob of a later factor). A proposal is inside the declared legal
    set when every factor is legal; a knob in no factor is free. The verifier still judges
    every genome: a factor is a prediction of its verdict, never a substitute.
    """

    name: str
    knobs: tuple[str, ...]
    legal: Callable[[Mapping[str, Any]], bool]
    doc: str = ""


OpKind = Literal["acquire", "commit", "wait", "release", "work"]

_SYNC_KINDS: dict[str, OpKind] = {
    "try_acquire": "acquire",
    "acquire": "acquire",
    "commit": "commit",
    "try_wait": "wait",
    "wait": "wait",
    "release": "release",
}


def op_kind(name: str) -> OpKind:
    """The pipeline role of an op from its name (``acquire``, ``smem.release``); else work.

    Only a whole name segment counts, so a work call such as ``wgmma_wait``
    stays work.
    """
    for segment in reversed(re.split(r"[.:/\s]+", name)):
        if segment in _SYNC_KINDS:
            return _SYNC_KINDS[segment]
    return "work"


@dataclass(frozen=True)
class OpView:
    """One placed op as a schedule drawing shows it: name, section and pipeline role."""

    name: str
    section: Section
    kind: OpKind

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "section": self.section, "kind": self.kind}


@dataclass(frozen=True)
class TaskView:
    """One task's lane: its warps (first..last inclusive, None if unknown) and ops in order."""

    task: str
    first_warp: int | None
    last_warp: int | None
    ops: tuple[OpView, ...]

    @property
    def warps_label(self) -> str:
        if self.first_warp is None or self.last_warp is None:
            return "warps ?"
        if self.first_warp == self.last_warp:
            return f"warp {self.first_warp}"
        return f"warps {self.first_warp}\u2013{self.last_warp}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "warps": self.warps_label,
            "first_warp": self.first_warp,
            "last_warp": self.last_warp,
            "ops": [op.to_dict() for op in self.ops],
        }


class SearchSpace(ABC):
    """A TS kernel template with knobs. Subclasses register in :data:`tsopt.core.registry.SPACES`."""

    name: ClassVar[str]
    op: ClassVar[str]
    description: ClassVar[str]
    archs: ClassVar[tuple[str, ...]] = ("sm_90a",)
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16")

    judge: Judge | None = None
    """The verifier, injected by the caller (``space.judge = ...``) before :meth:`knobs` or
    :meth:`suggest` when the space's shipped screens may be stale: a space recomputes a
    stale screen with it, and without one refuses to use it (it never trusts it silently)."""

    device: DeviceProfile | None = None
    """The GPU its verdicts are judged for (a decomposition over the SMs can be legal on one
    GPU and not on another), set by whoever verifies (the driver, a build worker from its
    request); None: the arch's default profile (``tsopt.core.devices.DEFAULT_PROFILE``). A
    build names its own (:meth:`kernel_spec`'s ``device``)."""

    def target_device(self, device: DeviceProfile | None = None) -> DeviceProfile:
        """``device``, else :attr:`device`, else the default profile of this process's arch."""
        from tsopt.core.dsl_env import DEFAULT_ARCH

        chosen = device or self.device
        if chosen is not None:
            return chosen
        return default_profile(os.environ.get("CUTE_DSL_ARCH") or DEFAULT_ARCH)

    # -- determinism -------------------------------------------------------------------
    def is_deterministic(self, genome: Genome) -> bool:
        """Whether ``genome``'s kernel writes bit-identical output for identical inputs, run
        after run: no atomics, no reduction whose order depends on timing. True unless a space
        says otherwise (a space with such reductions overrides it); ``tune --deterministic``
        keeps to the genomes for which it holds."""
        del genome
        return True

    # -- forward progress --------------------------------------------------------------
    def forward_progress(self, genome: Genome) -> str:
        """What guarantees that ``genome``'s kernel finishes while other kernels hold SMs (a
        second stream, NCCL, a second model under MPS): one sentence, written into the
        export's manifest. By default the kernel has no wait on another CTA, so each CTA
        finishes on its own; a space whose kernels wait across CTAs overrides it."""
        del genome
        return "none needed: no CTA waits for another CTA"

    def has_deterministic_schedule(self, problem: Problem) -> bool:
        """Whether the space holds a deterministic schedule for ``problem`` at all, asked before
        a ``--deterministic`` run builds anything: by default, whether its seed is one."""
        return self.is_deterministic(self.seed_genome(problem))

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

    def funnel(
        self, problem: Problem, judge: Judge, progress: Progress | None = None
    ) -> FunnelCount | None:
        """Count raw -> dataflow-legal -> TS-valid -> tsopt-checked for ``problem``, judging
        with ``judge``, without verifying every genome (a raw space is far too large).

        A space whose genome factors (placements, layout, the rest) verifies each factor
        with ``judge`` and multiplies the counts out; its :class:`FunnelCount` carries the
        ``draw``/``predicted`` pair that tests the factorisation. Default: None, the space
        has no factorisation, and the caller verifies every enumerated genome instead.
        """
        return None

    def proposal_factors(self, problem: Problem, judge: Judge) -> tuple[Factor, ...] | None:
        """The space's factorisation as proposals use it: the factors of its legal set, in
        the order a proposal is decided (structure first, then the numeric values legal given
        it), each judging its part with ``judge`` on a canonical genome or with the space's
        own arithmetic (SMEM, registers, tiles). ``tsopt.search.proposals`` repairs every
        sampler's proposal to the nearest params that all factors accept. Default: None,
        proposals go to the verifier as the sampler made them."""
        return None

    def coupled(self, params: Mapping[str, Any],
                moved: Collection[str] = ()) -> dict[str, Any]:
        """``params`` with the values that a chosen knob value requires of other knobs (a
        structure that runs only with a given cluster or tile loop, say), for a search that
        moves one knob at a time: moving that knob alone would only ever leave the legal set.
        The knobs in ``moved`` (the ones a search just changed) keep their values: a
        structure whose requirements they contradict is switched off instead. Only knobs
        ``params`` names are set. Default: ``params`` as they are."""
        del moved
        return dict(params)

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

    def gene_domains(self, problem: Problem) -> dict[str, GeneDomain]:
        """What each gene of this space may be for ``problem``: the genome schema, checked
        (:meth:`schema_error`) before anything else judges a genome.

        Default, from :meth:`seed_genome` and :meth:`knobs` (for any problem and for this one):
        every gene of the seed, of the seed's kind. A gene that is a knob of its own name takes
        the knob's choices (and the seed's value) when it is a text or a flag; when it is an
        integer, it is at least the least of them and at most :data:`SANITY_FACTOR` times the
        greatest, so that values near the proposals stay the space's own checks' to judge,
        with their named rules, while absurd ones (a billion stages) never reach the verifier.
        Any other integer gene is at least 0. A space declares exact domains by overriding this.
        """
        seed = self.seed_genome(problem)
        knobs: dict[str, list[GeneValue]] = {}
        try:
            listed = (*self.knobs(), *self.knobs(problem))
        except UserInputError:
            # The space cannot list its knobs now (a stale screen and no verifier to recompute
            # it): the schema then holds the knobs its code fixes alone, and the seed's kinds
            # for the rest (the screened ones, which the verifier judges in full).
            listed = (*self.unscreened_knobs(), *self.unscreened_knobs(problem))
        for knob in listed:
            knobs.setdefault(knob.name, []).extend(knob.choices)
        domains: dict[str, GeneDomain] = {}
        for name, value in seed.genes.items():
            kind = gene_kind(value)
            values = [c for c in knobs.get(name, ()) if gene_kind(c) == kind]
            if kind in ("bool", "str") and values:
                domains[name] = GeneDomain(name, kind, choices=tuple(dict.fromkeys([*values, value])))
            elif kind == "int" and values:
                numbers = [c for c in values if isinstance(c, int)]
                seed_value = value if isinstance(value, int) else min(numbers)
                domains[name] = GeneDomain(name, kind, low=min(*numbers, seed_value),
                                           high=max(SANITY_FACTOR * max(numbers), seed_value))
            elif kind == "int":
                domains[name] = GeneDomain(name, kind, low=0)
            else:
                domains[name] = GeneDomain(name, kind)
        return domains

    def unscreened_knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        """The knobs whose choices the space's code fixes, not a screen of the verifier's
        verdicts: what the genome schema still knows when :meth:`knobs` cannot be listed (a
        stale shipped screen and no verifier to recompute it), so that a value outside them
        (``epilogue='bogus'``) is refused then too. Default: none."""
        del problem
        return ()

    def schema_error(self, genome: Genome, problem: Problem) -> str | None:
        """Why ``genome`` does not fit this space's genome schema (:meth:`gene_domains`),
        naming the first bad gene: of another space, a gene missing, of the wrong kind or out
        of its range or choices. None when it fits. Genes the schema does not declare are the
        space's own checks' to judge."""
        return genome_schema_error(self.name, self.gene_domains(problem), genome)

    def verify_domain(self, genome: Genome) -> int:
        """Iterations for host verification: at least stages + 2 (MEASURED.md)."""
        stages = genome.get("stages", 1)
        assert isinstance(stages, int)
        return max(4, stages + 2)

    def extra_verify_domains(self, genome: Genome, problem: Problem) -> tuple[int, ...]:
        """Further K domains TS must accept the schedule at, besides :meth:`verify_domain`:
        where the kernel's domain varies per work tile (a stream-K piece), its shortest run.
        Each is judged by TS in full (its own memo entries). Default: none."""
        del genome, problem
        return ()

    @abstractmethod
    def verdict_key(self, genome: Genome, problem: Problem) -> str:
        """A key of only the genes (and problem facts) that can change the verdict."""

    def ts_schedule_key(self, genome: Genome, problem: Problem) -> str | None:
        """The part of the genome the TS exhaustive deadlock/race checker sees (schedules,
        pipeline shapes, stage counts, tasks), without the numeric genes it does not see
        (register budgets, tile sizes that only set byte counts). Until 2026-12-04 the
        verifier memoised that checker's outcome under this key; it now keys a search by the
        model the checker explores (``tsopt.verify.ts_model``), for every space, and reads
        this only to carry searches of the old key over (``bench/proofs/rekey.py``).
        Default: None."""
        return None

    # -- reports ---------------------------------------------------------------------
    def schedule_view(self, genome: Genome) -> list[TaskView] | None:
        """The genome's schedule as lanes to draw: each task with the warps that run it and
        its placed ops. Which warps run which task is a fact of the template, so a space
        whose warp layout its gene names do not spell out (``<task>_warp``,
        ``<task>_warps``...) draws its own. Default: None, the report derives the lanes from
        the genome's genes (``tsopt.reports.schedule.generic_schedule_view``).
        """
        return None

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

    def export_source(self, genome: Genome, problem: Problem, arch: str, header: str,
                      device: DeviceProfile | None = None) -> str:
        """A standalone ``kernel.py`` for this candidate: the template with its schedule written
        out literally, checking itself against torch when run (``tsopt export``), for the GPU
        ``device`` (None: :meth:`target_device`)."""
        raise NotImplementedError(f"space {self.name!r} cannot export kernel source yet")

    @abstractmethod
    def kernel_spec(self, genome: Genome, problem: Problem, arch: str,
                    device: DeviceProfile | None = None) -> KernelSpec:
        """The host function and fake arguments that compile this genome for ``problem`` on
        the GPU ``device`` (None: :meth:`target_device`): a grid over the SMs takes its
        ``sm_count``."""
