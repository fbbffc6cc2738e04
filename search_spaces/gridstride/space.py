"""The ``gridstride`` search space: the TS copy tutorial's first kernel, opened up.

The kernel (one task, GMEM -> registers -> GMEM, a grid-stride domain loop)
lives in :mod:`tsopt.search_spaces.gridstride.kernel`, which imports only the
CUTLASS DSL and is exported verbatim by ``tsopt export``. Around it:
``config.py`` (genes -> configuration, placements), ``checks.py`` (what TS does
not see), ``funnel.py`` (the funnel) and ``export.py`` (the ``kernel.py`` source).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from typing import Any

from tsopt.core.dsl_env import ensure_arch

ensure_arch()  # the DSL reads its target arch when first imported

from tsopt.core.devices import DeviceProfile  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem, ProblemError  # noqa: E402
from tsopt.core.space import (  # noqa: E402
    Enumeration,
    Finding,
    FunnelCount,
    Judge,
    KernelSpec,
    Knob,
    OpView,
    Progress,
    SearchSpace,
    TaskView,
    TensorArg,
    op_kind,
)
from tsopt.search_spaces.common.placement import (  # noqa: E402
    head_depth,
    key_of_placement,
    parse_placement_name,
    placement_name,
)
from tsopt.search_spaces.gridstride.checks import (  # noqa: E402
    gridstride_checks,
    placement_dataflow_error,
)
from tsopt.search_spaces.gridstride.config import (  # noqa: E402
    COPY_OPS,
    HEAD_DEPTHS,
    KNOB_DOCS,
    NUMERIC_CHOICES,
    SPACE,
    TASK,
    config_of,
    make_genome,
    placement_keys,
    render_copy_placement,
    resolve_grid,
)
from tsopt.search_spaces.gridstride.funnel import gridstride_funnel  # noqa: E402
from tsopt.search_spaces.gridstride.kernel import (  # noqa: E402
    GridStrideConfig,
    TileWalk,
    build_task_manager,
    compile_args,
    make_kernel,
)

INT32_LIMIT = 2**31
TS_KEY_GENES = ("warps", "loop_unroll")
"""Genes the TS skeleton sees besides the placement (the task's warps, the loop's unroll)."""


class GridStrideSpace(SearchSpace):
    """The TS grid-stride copy (GMEM -> registers -> GMEM) of a 2-byte 2-D tensor."""

    name = SPACE
    op = "copy"
    description = ("TS grid-stride copy GMEM -> registers -> GMEM, one task, no SMEM (the TS "
                   "tutorial's kernel 01), int16/fp16/bf16")
    archs = ("sm_90a",)
    dtypes = ("int16", "fp16", "bf16")

    # -- problems and knobs ----------------------------------------------------------
    def check_problem(self, problem: Problem) -> None:
        elements = problem["rows"] * problem["cols"]
        if elements >= INT32_LIMIT:
            raise ProblemError(
                f"rows x cols = {problem['rows']}x{problem['cols']} = {elements} elements: this "
                f"space keeps tensor sizes within 32 bits, so it copies fewer than {INT32_LIMIT}")

    def raw_knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        """The enumerator's knobs: every placement key and gene value, before any check."""
        placements = tuple(placement_name(key) for key in placement_keys())
        knobs = [Knob("copy.placement", "structural", placements, KNOB_DOCS["copy.placement"])]
        knobs += [Knob(name, "numeric", choices, KNOB_DOCS[name])
                  for name, choices in NUMERIC_CHOICES.items()]
        return tuple(knobs)

    def knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        """The sampler's knobs: for a problem, only vector widths that divide its size (the
        others are rejected by ``tsopt.vector_divisibility``)."""
        if problem is None:
            return self.raw_knobs()
        elements = problem["rows"] * problem["cols"]

        def fits(vector: object) -> bool:
            return isinstance(vector, int) and elements % vector == 0

        return tuple(
            Knob(k.name, k.kind, tuple(v for v in k.choices if fits(v)), k.doc)
            if k.name == "vector" else k
            for k in self.raw_knobs(problem)
        )

    def genome(self, placement: tuple[Any, ...] | None = None, **genes: Any) -> Genome:
        """A genome from knob values (a placement key and genes; defaults: the seed)."""
        return make_genome(placement or placement_keys()[0], **genes)

    def seed_genome(self, problem: Problem) -> Genome:
        """The tutorial's schedule as written: load then store in the domain loop, 8 warps,
        one element per thread per iteration, loop unroll 1, 256 CTAs."""
        return make_genome()

    # -- search ----------------------------------------------------------------------
    def numeric_combinations(self) -> Iterator[dict[str, Any]]:
        names = list(NUMERIC_CHOICES)
        for values in itertools.product(*NUMERIC_CHOICES.values()):
            yield dict(zip(names, values, strict=True))

    def numeric_count(self) -> int:
        return math.prod(len(choices) for choices in NUMERIC_CHOICES.values())

    def enumerate(self, problem: Problem) -> Enumeration:
        """Every placement key x every gene value. ``raw`` counts them all; the genomes
        yielded are the dataflow-legal ones (TS and tsopt's checks are the verifier's)."""
        self.check(problem)
        keys = placement_keys()
        enumeration = Enumeration(raw=len(keys) * self.numeric_count(), genomes=iter(()))

        def genomes() -> Iterator[Genome]:
            for key in keys:
                if placement_dataflow_error(render_copy_placement(*key)) is not None:
                    continue
                for genes in self.numeric_combinations():
                    enumeration.dataflow_legal += 1
                    yield make_genome(key, **genes)

        enumeration.genomes = genomes()
        return enumeration

    def diverse_genomes(self, problem: Problem, n: int, seed: int = 0) -> list[Genome]:
        """Up to ``n`` distinct genomes for ``problem`` that pass the dataflow check and
        tsopt's checks, the seed first: every knob walks its own shuffled cycle of values, so
        with ``n`` at least the longest knob every value of every knob appears. A measuring
        batch; TS verification is the caller's (every placement here passes it)."""
        self.check(problem)
        rng = random.Random(seed)
        cycles = {}
        for knob in self.knobs(problem):
            order = list(knob.choices)
            rng.shuffle(order)
            cycles[knob.name] = itertools.cycle(order)
        picked: dict[str, Genome] = {}
        seed_genome = self.seed_genome(problem)
        if not gridstride_checks(self.config(seed_genome, problem)):
            picked[seed_genome.hash] = seed_genome
        for _ in range(50 * n):
            if len(picked) >= n:
                break
            genes = {name: next(cycle) for name, cycle in cycles.items()}
            genome = make_genome(parse_placement_name(str(genes.pop("copy.placement"))), **genes)
            if genome.hash not in picked and not gridstride_checks(self.config(genome, problem)):
                picked[genome.hash] = genome
        return list(picked.values())

    def suggest(self, trial: Any, problem: Problem) -> Genome:
        genes = {k.name: trial.suggest_categorical(k.name, list(k.choices))
                 for k in self.knobs(problem)}
        key = parse_placement_name(str(genes.pop("copy.placement")))
        return make_genome(key, **genes)

    def params_of(self, genome: Genome) -> dict[str, Any]:
        placement = [(p.op, p.section) for p in genome.task(TASK).ops]
        key = key_of_placement(placement, COPY_OPS, HEAD_DEPTHS, render_copy_placement)
        if key is None:
            raise ValueError(f"copy placement of {genome.short_hash} is not a sampler placement")
        return {"copy.placement": placement_name(key),
                **{name: genome[name] for name in NUMERIC_CHOICES}}

    def funnel(
        self, problem: Problem, judge: Judge, progress: Progress | None = None
    ) -> FunnelCount:
        """The funnel: TS verdicts per schedule, tsopt's checks per genome (``funnel.py``)."""
        return gridstride_funnel(self, problem, judge, progress)

    # -- verification ----------------------------------------------------------------
    def config(self, genome: Genome, problem: Problem, arch: str = "sm_90a",
               device: DeviceProfile | None = None) -> GridStrideConfig:
        """The kernel's configuration for ``problem`` on ``device`` (:meth:`target_device`)."""
        return config_of(genome, problem, arch, self.target_device(device).sm_count)

    def dataflow_error(self, genome: Genome) -> str | None:
        if genome.space != SPACE:
            return f"genome is of space {genome.space!r}, not {SPACE!r}"
        tasks = [t.task for t in genome.schedule]
        if tasks != [TASK]:
            return f"gridstride genomes schedule the one task {TASK!r}, got {tasks}"
        missing = sorted(set(NUMERIC_CHOICES) - set(genome.genes))
        unknown = sorted(set(genome.genes) - set(NUMERIC_CHOICES))
        if missing or unknown:
            return f"genes missing {missing}, unknown {unknown} for space {SPACE!r}"
        malformed = [f"{name}={value!r}" for name in ("warps", "vector", "unroll", "loop_unroll")
                     if isinstance(value := genome[name], bool) or not isinstance(value, int)
                     or value < 1]
        if malformed:
            return f"genes {', '.join(malformed)}: each must be a positive integer"
        try:
            resolve_grid(str(genome["grid"]), 1, 1)
        except ValueError as exc:
            return str(exc)
        error = placement_dataflow_error([(p.op, p.section) for p in genome.task(TASK).ops])
        return f"{TASK}: {error}" if error else None

    def build_skeleton(self, genome: Genome, problem: Problem, domain: int) -> Any:
        cfg = self.config(genome, problem)
        return build_task_manager(cfg, TileWalk(first=0, end=domain, step=1,
                                                unroll=cfg.loop_unroll))

    def verify_domain(self, genome: Genome) -> int:
        """Iterations for host verification: the head's, and then some in the loop."""
        return max(4, head_depth(genome.task(TASK).ops, "load") + 3)

    def tsopt_checks(self, genome: Genome, problem: Problem) -> list[Finding]:
        return gridstride_checks(self.config(genome, problem))

    def verdict_key(self, genome: Genome, problem: Problem) -> str:
        placement = tuple((p.op, p.section) for p in genome.task(TASK).ops)
        return repr((placement, [(name, genome[name]) for name in TS_KEY_GENES]))

    # -- reports ---------------------------------------------------------------------
    def schedule_view(self, genome: Genome) -> list[TaskView]:
        """One lane: the copy task on warps 0..warps-1 with its placed ops."""
        warps = genome["warps"]
        assert isinstance(warps, int)
        ops = tuple(OpView(p.op, p.section, op_kind(p.op)) for p in genome.task(TASK).ops)
        return [TaskView(TASK, 0, warps - 1, ops)]

    # -- build -----------------------------------------------------------------------
    def source_modules(self) -> tuple[str, ...]:
        return ("tsopt.search_spaces.gridstride.kernel",)

    def source_digest(self) -> str:
        """The kernel module plus the genome -> configuration mapping: the knobs, checks and
        funnel never reach a kernel, so editing them keeps every build."""
        import hashlib
        import inspect

        digest = hashlib.sha256(super().source_digest().encode())
        for fn in (config_of, resolve_grid, render_copy_placement):
            digest.update(inspect.getsource(fn).encode())
        return digest.hexdigest()[:16]

    def export_source(self, genome: Genome, problem: Problem, arch: str, header: str,
                      device: DeviceProfile | None = None) -> str:
        from tsopt.search_spaces.gridstride.export import export_source

        return export_source(self.config(genome, problem, arch, device), header, arch)

    def kernel_spec(self, genome: Genome, problem: Problem, arch: str,
                    device: DeviceProfile | None = None) -> KernelSpec:
        cfg = self.config(genome, problem, arch, device)
        per_sm = str(genome["grid"]).startswith("per_sm:")
        shape = (cfg.rows, cfg.cols)
        return KernelSpec(
            host_fn=make_kernel(cfg),
            compile_args=compile_args(cfg),
            tensors=(TensorArg("src", "input", shape, cfg.dtype),
                     TensorArg("dst", "output", shape, cfg.dtype)),
            launch={"grid": [cfg.grid, 1, 1], "block": [cfg.threads, 1, 1], "smem_bytes": 0,
                    "tiles": cfg.tiles, "sm_count": self.target_device(device).sm_count,
                    # A grid-stride loop is correct over any grid; per SM, it was sized for these.
                    **({"decomposition_sms": self.target_device(device).sm_count}
                       if per_sm else {})},
        )
