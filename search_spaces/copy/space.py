"""The ``copy`` search space: the TS tutorial's TMA copy (kernel 02), opened up.

The kernel itself is :mod:`tsopt.search_spaces.copy.kernel` (standalone; read it
first, like a TS tutorial). This module is the search space around it: knobs,
genomes, the enumerator and the sampler. The rest of the space is in its
neighbours: the genome -> kernel configuration mapping and the gene tables
(``config.py``), tsopt's own checks for what TS misses (``checks.py``), the
factorised funnel and the sampler's screens (``funnel.py``), and the export
(``export.py``). The screens ship in ``data/copy_screened.json``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from tsopt.core.devices import DeviceProfile
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.space import (
    Enumeration,
    Factor,
    Finding,
    FunnelCount,
    Judge,
    KernelSpec,
    Knob,
    Progress,
    SearchSpace,
    TensorArg,
    fault_genes,
    fault_genes_allowed,
)
from tsopt.search_spaces.common import placement as placement_rules
from tsopt.search_spaces.common.screen_cache import shipped_screen
from tsopt.search_spaces.copy import config
from tsopt.search_spaces.copy.checks import copy_checks
from tsopt.search_spaces.copy.config import (
    KNOB_DOCS,
    LAYOUT_GENES,
    LOAD_OPS,
    PLANTED_FAULTS,
    SPACE,
    STORE_OPS,
    TASK_OPS,
    PlacementKnobs,
    config_of,
    layout_name,
    parse_layout_name,
    parse_placement_name,
    placement_name,
    placement_of,
)
from tsopt.search_spaces.copy.export import export_source
from tsopt.search_spaces.copy.funnel import compute_screens, copy_factors, copy_funnel, screen_key
from tsopt.search_spaces.copy.kernel import PRIMARY_OP, build_task_manager, make_kernel

SCREEN_FILE = Path(__file__).with_name("data") / "copy_screened.json"
NO_SCREEN: dict[str, Any] = {"load": [], "store": [], "layouts": []}
"""What a nested call sees while the screen is being computed (see ``shipped_screen``)."""


class CopySpace(SearchSpace):
    """The TS TMA copy (GMEM -> SMEM -> GMEM) for fp16/bf16 2-D tensors."""

    name = SPACE
    op = "copy"
    description = "TS TMA copy GMEM -> SMEM -> GMEM (the TS tutorial's kernel 02), fp16/bf16 2-D"
    archs = ("sm_90a", "sm_100a")
    screen_file: ClassVar[Path] = SCREEN_FILE

    # -- problems and knobs ----------------------------------------------------------
    def check_problem(self, problem: Problem) -> None:
        if problem.op != "copy":
            raise ProblemError(f"space 'copy' tunes copy problems, not {problem.op!r}")
        for name in ("rows", "cols"):
            value = problem[name]
            unit = 8 if name == "rows" else 64
            if value % unit:
                raise ProblemError(
                    f"{name}={value} is not a multiple of {unit} (the smallest TMA box this space uses)"
                )

    def raw_knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        """The enumerator's knobs: every placement part and gene value, before any check."""
        knobs = []
        for task in ("load", "store"):
            knobs.append(
                Knob(
                    f"{task}.body",
                    "structural",
                    tuple(",".join(b) for b in config.BODIES[task]),
                    KNOB_DOCS[f"{task}.body"],
                )
            )
            knobs.append(
                Knob(f"{task}.depth", "structural", config.HEAD_DEPTHS, KNOB_DOCS[f"{task}.depth"])
            )
            knobs.append(
                Knob(f"{task}.defer", "structural", config.DEFERRABLE[task], KNOB_DOCS[f"{task}.defer"])
            )
        for name, choices in config.STRUCTURE_CHOICES.items():
            knobs.append(Knob(name, "structural", choices, KNOB_DOCS[name]))
        for name, nchoices in config.NUMERIC_CHOICES.items():
            if problem is not None and name in ("box_rows", "box_cols"):
                size = problem["rows" if name == "box_rows" else "cols"]
                nchoices = tuple(c for c in nchoices if size % c == 0)
            knobs.append(Knob(name, "numeric", nchoices, KNOB_DOCS[name]))
        return tuple(knobs)

    def knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        """The sampler's knobs. Placements are drawn from those the TS verifier accepted
        task by task (:meth:`screened_placements`), not from all 540 orders per task."""
        knobs = []
        for task in ("load", "store"):
            choices = tuple(placement_name(p) for p in self.screened_placements(task))
            knobs.append(
                Knob(
                    f"{task}.placement",
                    "structural",
                    choices,
                    f"{task} task placement: body | head depth | deferred op "
                    f"({KNOB_DOCS[task + '.depth']}; {KNOB_DOCS[task + '.defer']})",
                )
            )
        knobs.append(
            Knob(
                "layout",
                "numeric",
                tuple(layout_name(g) for g in self.screened_layouts()),
                "warps and register budgets: store_warps@store_warp, load_warp, "
                "load_regs/store_regs (layouts TS accepts)",
            )
        )
        for knob in self.raw_knobs(problem):
            if knob.name.split(".")[0] in ("load", "store") or knob.name in LAYOUT_GENES:
                continue
            if knob.name == "ctas_per_sm":
                knob = Knob(
                    knob.name,
                    knob.kind,
                    tuple(c for c in knob.choices if c > 0),
                    "persistent CTAs per SM (only when persistent)",
                )
            knobs.append(knob)
        return tuple(knobs)

    # -- the sampler's screens -------------------------------------------------------
    def screens(self) -> dict[str, Any]:
        """The shipped screens (``load``, ``store``, ``layouts``), digest-checked; a stale
        file is recomputed with the injected :attr:`judge` (see ``common/screen_cache.py``)."""
        judge = self.judge
        compute = None if judge is None else (lambda: compute_screens(self, judge))
        return shipped_screen(self.screen_file, screen_key(self), compute, while_computing=NO_SCREEN)

    def screened_layouts(self) -> list[dict[str, int]]:
        """Warp/register layouts that pass TS and tsopt's checks with the canonical schedule."""
        return [dict(genes) for genes in self.screens()["layouts"]]

    def screened_placements(self, task: str) -> list[PlacementKnobs]:
        """Dataflow-legal placements of ``task`` that pass TS and tsopt's checks next to the
        canonical partner for some advance_on_wait setting (the verifier decides)."""
        return [(tuple(b), int(d), str(x)) for b, d, x in self.screens()[task]]

    # -- genomes ---------------------------------------------------------------------
    def genome(
        self,
        load: tuple[Sequence[str], int, str] = (LOAD_OPS, 0, "none"),
        store: tuple[Sequence[str], int, str] = (STORE_OPS, 0, "none"),
        **genes: Any,
    ) -> Genome:
        """A genome from knob values: ``load``/``store`` are (body, depth, defer)."""
        structure = dict(config.DEFAULT_STRUCTURE)
        numeric = dict(config.DEFAULT_NUMERIC)
        for name, value in genes.items():
            if name in structure:
                structure[name] = value
            elif name in numeric:
                numeric[name] = value
            else:
                raise KeyError(f"copy space has no gene {name!r}")
        return Genome.make(
            SPACE,
            {"load": placement_of(*load), "store": placement_of(*store)},
            structure,
            numeric,
        )

    def seed_genome(self, problem: Problem) -> Genome:
        """The TS tutorial's kernel 02 as written: one stage; each CTA owns a 128-column
        strip and walks down it one 1x128 row box per iteration (``raster=col``,
        ``chunk=rows``); 4 store warps, one element per thread; load warp 4 + 3 padding
        warps at 40 registers (the tutorial gives its store warps 160, this space 168)."""
        box_cols = 128 if problem["cols"] % 128 == 0 else 64
        return self.genome(
            stages=1,
            box_rows=1,
            box_cols=box_cols,
            store_warps=4,
            store_warp=0,
            load_warp=4,
            load_regs=40,
            store_regs=168,
            chunk=problem["rows"],
            vector=box_cols // 128 or 1,
            raster="col",
        )

    # -- search ----------------------------------------------------------------------
    def _placements(self, task: str) -> Iterator[PlacementKnobs]:
        return placement_rules.placement_keys(
            config.TASKS[task], config.HEAD_DEPTHS, config.BODIES[task]
        )

    def placement_count(self, task: str) -> int:
        return placement_rules.placement_key_count(
            config.TASKS[task], config.HEAD_DEPTHS, config.BODIES[task]
        )

    def legal_placements(self, task: str) -> list[PlacementKnobs]:
        return [
            p
            for p in self._placements(task)
            if config.placement_dataflow_error(task, placement_of(*p)) is None
        ]

    def numeric_combinations(self, problem: Problem) -> Iterator[dict[str, Any]]:
        """Every consistent assignment of the structural flags and numeric genes.

        ``persistent`` and ``ctas_per_sm`` go together (0 CTAs per SM means one
        CTA per work tile), so only consistent pairs are produced.
        """
        knobs = [k for k in self.raw_knobs(problem) if k.kind == "numeric"]
        names = [k.name for k in knobs]
        flags = config.STRUCTURE_CHOICES["advance_on_wait"], config.STRUCTURE_CHOICES["raster"]
        for aow, raster in itertools.product(*flags):
            for values in itertools.product(*(k.choices for k in knobs)):
                genes = dict(zip(names, values, strict=True))
                genes.update(
                    advance_on_wait=aow, raster=raster, persistent=genes["ctas_per_sm"] > 0
                )
                yield genes

    def numeric_count(self, problem: Problem) -> int:
        """Consistent flag x numeric assignments (``persistent`` follows ``ctas_per_sm``)."""
        knobs = {k.name: len(k.choices) for k in self.raw_knobs(problem) if k.kind == "numeric"}
        flags = len(config.STRUCTURE_CHOICES["advance_on_wait"]) * len(
            config.STRUCTURE_CHOICES["raster"]
        )
        return flags * math.prod(knobs.values())

    def enumerate(self, problem: Problem) -> Enumeration:
        """Placements x structural flags x numeric genes.

        ``raw`` counts every placement pair (loop-body permutations x head
        depths x deferred op, per task) times every consistent assignment of
        the flags and numeric genes; the genomes yielded are those whose
        placements are dataflow-legal (each token produced before its use, in
        the same iteration). The pipeline protocol is the verifier's to judge.
        """
        self.check(problem)
        raw = (
            self.placement_count("load")
            * self.placement_count("store")
            * self.numeric_count(problem)
        )
        legal = {task: self.legal_placements(task) for task in TASK_OPS}
        enumeration = Enumeration(raw=raw, genomes=iter(()))

        def genomes() -> Iterator[Genome]:
            for load in legal["load"]:
                for store in legal["store"]:
                    for genes in self.numeric_combinations(problem):
                        enumeration.dataflow_legal += 1
                        yield self.genome(load, store, **genes)

        enumeration.genomes = genomes()
        return enumeration

    def funnel(
        self, problem: Problem, judge: Judge, progress: Progress | None = None
    ) -> FunnelCount:
        """The funnel by factorised verification (see ``funnel.py``)."""
        return copy_funnel(self, problem, judge, progress)

    def proposal_factors(self, problem: Problem, judge: Judge) -> tuple[Factor, ...]:
        """The funnel's factorisation, for proposals drawn inside it (see ``funnel.py``)."""
        return copy_factors(self, problem, judge)

    def suggest(self, trial: Any, problem: Problem) -> Genome:
        genes: dict[str, Any] = {}
        for knob in self.knobs(problem):
            if knob.name == "ctas_per_sm":
                continue
            genes[knob.name] = trial.suggest_categorical(knob.name, list(knob.choices))
        # Conditional: CTAs per SM only means something for a persistent grid.
        ctas = [k for k in self.knobs(problem) if k.name == "ctas_per_sm"][0]
        genes["ctas_per_sm"] = (
            trial.suggest_categorical("ctas_per_sm", list(ctas.choices))
            if genes["persistent"]
            else 0
        )
        load = parse_placement_name(str(genes.pop("load.placement")))
        store = parse_placement_name(str(genes.pop("store.placement")))
        genes.update(parse_layout_name(str(genes.pop("layout"))))
        return self.genome(load, store, **genes)

    def params_of(self, genome: Genome) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for task in ("load", "store"):
            placement = config.knobs_of_placement(
                task, [(p.op, p.section) for p in genome.task(task).ops]
            )
            if placement is None:
                raise ValueError(
                    f"{task} placement of {genome.short_hash} is not a sampler placement"
                )
            params[f"{task}.placement"] = placement_name(placement)
        params["layout"] = layout_name({g: int(genome[g]) for g in LAYOUT_GENES})
        for name, value in genome.genes.items():
            if name == "ctas_per_sm" and not genome["persistent"]:
                continue
            if not name.startswith("planted.") and name not in LAYOUT_GENES:
                params[name] = value
        return params

    # -- verification ----------------------------------------------------------------
    def dataflow_error(self, genome: Genome) -> str | None:
        if genome.space != SPACE:
            return f"genome is of space {genome.space!r}, not {SPACE!r}"
        tasks = {t.task for t in genome.schedule}
        if tasks != set(TASK_OPS):
            return f"copy genomes schedule tasks {sorted(TASK_OPS)}, got {sorted(tasks)}"
        genes = (*config.NUMERIC_CHOICES, *config.STRUCTURE_CHOICES)
        missing = [g for g in genes if g not in genome.genes]
        if missing:
            return f"genome lacks gene(s) {missing}"
        known = {*genes, *(f"planted.{p}" for p in PLANTED_FAULTS)}
        unknown = sorted(set(genome.genes) - known)
        if unknown:
            return f"unknown gene(s) {unknown} for space {SPACE!r}"
        for task in ("load", "store"):
            error = config.placement_dataflow_error(
                task, tuple((p.op, p.section) for p in genome.task(task).ops)
            )
            if error:
                return f"{task}: {error}"
        return None

    def build_skeleton(self, genome: Genome, problem: Problem, domain: int) -> Any:
        cfg = config_of(genome, problem)
        return build_task_manager(cfg, domain=domain)

    def verify_domain(self, genome: Genome) -> int:
        stages = genome["stages"]
        depth = max(placement_rules.head_depth(genome.task(t).ops, PRIMARY_OP[t]) for t in TASK_OPS)
        assert isinstance(stages, int)
        return max(4, stages + 2, depth + 2)

    def tsopt_checks(self, genome: Genome, problem: Problem) -> list[Finding]:
        return copy_checks(config_of(genome, problem))

    def verdict_key(self, genome: Genome, problem: Problem) -> str:
        cfg = config_of(genome, problem)
        # tsopt's checks also read box shape, chunk and grid; they are cheap and run
        # every time, so only the TS-relevant genes key the cached TS verdict.
        ts = {name: genome[name] for name in config.TS_KEY_GENES}
        return repr(
            (
                cfg.load_ops,
                cfg.store_ops,
                cfg.advance_on_wait,
                cfg.persistent,
                sorted(ts.items()),
                cfg.planted,
            )
        )

    def ts_schedule_key(self, genome: Genome, problem: Problem) -> str:
        """The verdict key less the register budgets, which the exhaustive checker never
        reads (SMEM overlaps are keyed by the verifier itself)."""
        cfg = config_of(genome, problem)
        ts = {name: genome[name] for name in config.TS_KEY_GENES
              if name not in ("load_regs", "store_regs")}
        return repr((cfg.load_ops, cfg.store_ops, cfg.advance_on_wait, cfg.persistent,
                     sorted(ts.items()), cfg.planted))

    # -- build -----------------------------------------------------------------------
    def source_modules(self) -> tuple[str, ...]:
        return ("tsopt.search_spaces.copy.kernel",)

    def source_digest(self) -> str:
        """The kernel module plus the genome -> configuration mapping: the rest of the
        space (knobs, checks, enumeration) never reaches a kernel."""
        import hashlib
        import inspect

        digest = hashlib.sha256(super().source_digest().encode())
        digest.update(inspect.getsource(config_of).encode())
        return digest.hexdigest()[:16]

    def export_source(self, genome: Genome, problem: Problem, arch: str, header: str,
                      device: DeviceProfile | None = None) -> str:
        return export_source(genome, problem, arch, header, self.target_device(device).sm_count)

    def kernel_spec(self, genome: Genome, problem: Problem, arch: str,
                    device: DeviceProfile | None = None) -> KernelSpec:
        import cutlass
        from cutlass.cute.runtime import make_fake_compact_tensor
        from cutlass.runtime import make_fake_stream

        planted = fault_genes(genome)
        if planted and not fault_genes_allowed():
            # The verifier rejects them (tsopt.fault_gene); a build that skipped it does too.
            raise ValueError(f"fault-injection gene(s) {planted} are built only where faults "
                             "are planted on purpose (TSOPT_ALLOW_FAULT_GENES=1)")
        sm_count = self.target_device(device).sm_count
        cfg = config_of(genome, problem, arch, sm_count)
        dt = cutlass.Float16 if cfg.dtype == "fp16" else cutlass.BFloat16
        shape = (cfg.rows, cfg.cols)
        src = make_fake_compact_tensor(dt, shape, stride_order=(1, 0), assumed_align=16)
        dst = make_fake_compact_tensor(dt, shape, stride_order=(1, 0), assumed_align=16)
        return KernelSpec(
            host_fn=make_kernel(cfg),
            compile_args=(src, dst, make_fake_stream()),
            tensors=(
                TensorArg("src", "input", shape, cfg.dtype),
                TensorArg("dst", "output", shape, cfg.dtype),
            ),
            launch={
                "grid": [1, 1, cfg.grid] if cfg.persistent else [cfg.grid, 1, 1],
                "block": [32 * cfg.block_warps, 1, 1],
                "smem_bytes": cfg.smem_bytes,
                "sm_count": sm_count,
                # The persistent grid was sized for this GPU's SMs (its loop is correct on any).
                **({"decomposition_sms": sm_count} if cfg.persistent else {}),
            },
        )
