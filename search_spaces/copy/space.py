"""The ``copy`` search space: the TS tutorial's TMA copy (kernel 02), opened up.

The kernel itself is :mod:`tsopt.search_spaces.copy.kernel` (standalone; read it
first, like a TS tutorial). This module is the search space around it: the
genome <-> kernel configuration mapping, the enumerator and knobs, the
dataflow check, tsopt's own checks for what TS misses, and the factorised
funnel (``_copy_funnel.py``).

Placement genes. Each task's loop body is a permutation of its five ops; the
head holds ``depth`` copies of that body for the first iterations (producer
prefetch, or consumer work kept in flight), and one sync op of those head
copies may be *deferred* to the tail (delayed release on the consumer side,
delayed commit on the producer side). The genome stores the resulting
explicit placement; :func:`placement_of` renders knob values into it and
:func:`knobs_of_placement` reads them back.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tsopt.core.genome import Genome, Section
from tsopt.core.problem import Problem, ProblemError
from tsopt.core.space import Enumeration, Finding, KernelSpec, Knob, SearchSpace, TensorArg
from tsopt.search_spaces.copy.kernel import (
    PRIMARY_OP,
    CopyConfig,
    build_task_manager,
    make_kernel,
)

SPACE = "copy"
SM_COUNT = {"sm_90a": 132, "sm_100a": 148}
SMEM_CAPACITY = 232_448
REGISTER_FILE = 65_536

# --------------------------------------------------------------------------------------
# Ops and placements
# --------------------------------------------------------------------------------------

LOAD_OPS = ("coords", "try_acquire", "acquire", "tma_load", "commit")
STORE_OPS = ("try_wait", "wait", "read", "release", "store")
TASK_OPS = {"load": LOAD_OPS, "store": STORE_OPS}
WORK_OPS = {"load": ("coords", "tma_load"), "store": ("read", "store")}
SYNC_OPS = {"load": ("try_acquire", "acquire", "commit"), "store": ("try_wait", "wait", "release")}
# (producer of a token, its consumer): the token must exist before it is used.
TOKENS = {"load": ("coords", "tma_load"), "store": ("read", "store")}

CANONICAL_BODY = {"load": LOAD_OPS, "store": STORE_OPS}
HEAD_DEPTHS = (0, 1, 2)


def placement_of(body: Sequence[str], depth: int, defer: str) -> tuple[tuple[str, Section], ...]:
    """Explicit placement: ``depth`` head copies of ``body`` (less ``defer``), the loop body,
    and one deferred ``defer`` op per head copy in the tail."""
    head: list[tuple[str, Section]] = []
    for _ in range(depth):
        head.extend((op, "head") for op in body if op != defer)
    loop = [(op, "loop") for op in body]
    tail = [(defer, "tail")] * depth if defer != "none" and depth else []
    return tuple(head + loop + tail)


def knobs_of_placement(ops: Sequence[tuple[str, str]]) -> tuple[tuple[str, ...], int, str] | None:
    """(body, depth, defer) if ``ops`` is of the form :func:`placement_of` renders, else None."""
    body = tuple(op for op, sec in ops if sec == "loop")
    tail = [op for op, sec in ops if sec == "tail"]
    defer = tail[0] if tail else "none"
    if any(op != defer for op in tail):
        return None
    for depth in HEAD_DEPTHS:
        if placement_of(body, depth, defer) == tuple((op, sec) for op, sec in ops):
            return body, depth, defer
    return None


# --------------------------------------------------------------------------------------
# From a genome to the kernel's configuration
# --------------------------------------------------------------------------------------


def config_of(genome: Genome, problem: Problem, arch: str = "sm_90a") -> CopyConfig:
    """The kernel configuration a genome describes for a problem."""

    def num(name: str) -> int:
        value = genome[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"gene {name}={value!r} must be an integer")
        return value

    return CopyConfig(
        dtype=problem.dtype,
        rows=problem["rows"],
        cols=problem["cols"],
        load_ops=tuple((p.op, p.section) for p in genome.task("load").ops),
        store_ops=tuple((p.op, p.section) for p in genome.task("store").ops),
        advance_on_wait=bool(genome["advance_on_wait"]),
        persistent=bool(genome["persistent"]),
        stages=num("stages"),
        box_rows=num("box_rows"),
        box_cols=num("box_cols"),
        store_warps=num("store_warps"),
        store_warp=num("store_warp"),
        load_warp=num("load_warp"),
        load_regs=num("load_regs"),
        store_regs=num("store_regs"),
        chunk=num("chunk"),
        ctas_per_sm=num("ctas_per_sm"),
        vector=num("vector"),
        raster=str(genome["raster"]),
        sm_count=SM_COUNT.get(arch, 132),
        planted=tuple(
            (k.removeprefix("planted."), v)
            for k, v in genome.genes.items()
            if k.startswith("planted.")
        ),
    )


# --------------------------------------------------------------------------------------
# The search space
# --------------------------------------------------------------------------------------

BODIES = {task: tuple(itertools.permutations(ops)) for task, ops in TASK_OPS.items()}
DEFERRABLE = {task: ("none", *SYNC_OPS[task]) for task in TASK_OPS}

NUMERIC_CHOICES: dict[str, tuple[int, ...]] = {
    "stages": (1, 2, 3, 4, 6, 8),
    "box_rows": (1, 8, 16, 32, 64, 128),
    "box_cols": (64, 128, 256),
    "store_warps": (1, 2, 4, 8),
    "store_warp": (0, 4),
    "load_warp": (0, 4, 8),
    "load_regs": (24, 40),
    "store_regs": (64, 128, 168, 232),
    "chunk": (1, 2, 4, 8, 16, 32),
    "ctas_per_sm": (0, 1, 2, 4),
    "vector": (1, 2, 4, 8),
}
STRUCTURE_CHOICES: dict[str, tuple[Any, ...]] = {
    "advance_on_wait": (False, True),
    "persistent": (False, True),
    "raster": ("row", "col"),
}
PLANTED_FAULTS = {
    "skip_validation": "build even if TS rejects the schedule (TS warns instead of raising)",
    "consumer_threads": "consumer cooperative-group size that does not match the store warps",
    "smem_read_offset": "store warps read SMEM this many elements past their stage (out of bounds)",
    "skip_vectors": "each store thread leaves its last N vectors unwritten",
    "no_proxy_fence": "no fence.proxy.async between the store warps' SMEM reads and the release",
}
KNOB_DOCS = {
    "load.body": "order of the producer's loop body (coords, try_acquire, acquire, tma_load, commit)",
    "load.depth": "producer prefetch depth: copies of the body placed in the head",
    "load.defer": "sync op of the head copies deferred to the tail (delayed commit)",
    "store.body": "order of the consumer's loop body (try_wait, wait, read, release, store)",
    "store.depth": "consumer in-flight depth: copies of the body placed in the head",
    "store.defer": "sync op of the head copies deferred to the tail (delayed release)",
    "advance_on_wait": "consumer pipeline advances its stage on wait, releases from a lagging state",
    "persistent": "static persistent WorkQueue tile loop instead of one CTA per work tile",
    "stages": "SMEM pipeline stages",
    "box_rows": "TMA box rows (one box per iteration)",
    "box_cols": "TMA box columns (contiguous)",
    "store_warps": "warps of the store task (consumer group = 32 x this)",
    "store_warp": "first warp of the store task",
    "load_warp": "warp of the load task",
    "load_regs": "register budget of the load warp's group (setmaxnreg)",
    "store_regs": "register budget of the store warps' groups (setmaxnreg)",
    "chunk": "boxes per work tile (domain-loop iterations per tile)",
    "ctas_per_sm": "persistent CTAs per SM (0: not persistent)",
    "vector": "elements per SMEM read and GMEM store of one thread (8 = 16 bytes at fp16)",
    "raster": "boxes of a work tile run along rows (row) or down a column strip (col)",
}


def _body_name(body: Sequence[str]) -> str:
    return ",".join(body)


def placement_name(placement: tuple[Sequence[str], int, str]) -> str:
    """``coords,try_acquire,acquire,tma_load,commit|1|none``: a placement as a knob value."""
    body, depth, defer = placement
    return f"{_body_name(body)}|{depth}|{defer}"


def parse_placement_name(name: str) -> tuple[tuple[str, ...], int, str]:
    body, depth, defer = name.split("|")
    return tuple(body.split(",")), int(depth), defer


_SCREENED: dict[str, list[tuple[tuple[str, ...], int, str]]] = {}


def _screen_cache_path(what: str) -> Path:
    """Screening verdicts depend only on this template's source and the DSL version."""
    import hashlib
    from importlib.metadata import version

    digest = hashlib.sha256(Path(__file__).read_bytes() + version("nvidia-cutlass-dsl").encode())
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tsopt"
    return root / f"copy-screen-{what}-{digest.hexdigest()[:16]}.json"


def _screen_cache_read(what: str) -> Any:
    try:
        return json.loads(_screen_cache_path(what).read_text())
    except (OSError, ValueError):
        return None


def _screen_cache_write(what: str, value: Any) -> None:
    path = _screen_cache_path(what)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(value))
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs a re-screen next time


_SCREENED_LAYOUTS: dict[str, list[dict[str, int]]] = {}
LAYOUT_GENES = ("store_warps", "store_warp", "load_warp", "load_regs", "store_regs")


def layout_name(genes: dict[str, int]) -> str:
    """``4@0,load4,40/168``: store warps @ first store warp, load warp, load/store registers."""
    return (
        f"{genes['store_warps']}@{genes['store_warp']},load{genes['load_warp']},"
        f"{genes['load_regs']}/{genes['store_regs']}"
    )


def parse_layout_name(name: str) -> dict[str, int]:
    store, load, regs = name.split(",")
    store_warps, store_warp = store.split("@")
    load_regs, store_regs = regs.split("/")
    return {
        "store_warps": int(store_warps),
        "store_warp": int(store_warp),
        "load_warp": int(load.removeprefix("load")),
        "load_regs": int(load_regs),
        "store_regs": int(store_regs),
    }


def _ts_key_genes() -> tuple[str, ...]:
    """Numeric genes the TS checks see (the rest only matter to tsopt's checks and speed)."""
    return ("stages", "store_warps", "store_warp", "load_warp", "load_regs", "store_regs")


class CopySpace(SearchSpace):
    """The TS TMA copy (GMEM -> SMEM -> GMEM) for fp16/bf16 2-D tensors."""

    name = SPACE
    op = "copy"
    description = "TS TMA copy GMEM -> SMEM -> GMEM (the TS tutorial's kernel 02), fp16/bf16 2-D"
    archs = ("sm_90a", "sm_100a")

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
                    tuple(_body_name(b) for b in BODIES[task]),
                    KNOB_DOCS[f"{task}.body"],
                )
            )
            knobs.append(
                Knob(f"{task}.depth", "structural", HEAD_DEPTHS, KNOB_DOCS[f"{task}.depth"])
            )
            knobs.append(
                Knob(f"{task}.defer", "structural", DEFERRABLE[task], KNOB_DOCS[f"{task}.defer"])
            )
        for name, choices in STRUCTURE_CHOICES.items():
            knobs.append(Knob(name, "structural", choices, KNOB_DOCS[name]))
        for name, nchoices in NUMERIC_CHOICES.items():
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

    def screened_layouts(self) -> list[dict[str, int]]:
        """Warp/register layouts that pass TS and tsopt's checks with the canonical schedule."""
        if "layout" not in _SCREENED_LAYOUTS:
            cached = _screen_cache_read("layouts")
            if cached is not None:
                _SCREENED_LAYOUTS["layout"] = cached
                return cached
            from tsopt.verify.verifier import run_ts_checks

            problem = Problem.of("copy", "fp16", rows=4096, cols=4096)
            keep = []
            for values in itertools.product(*(NUMERIC_CHOICES[g] for g in LAYOUT_GENES)):
                genes = dict(zip(LAYOUT_GENES, values, strict=True))
                genome = self.genome(**genes)
                # Only the layout's own rules: box-dependent ones (registers per box,
                # vectors per thread) are judged per candidate by the verifier.
                if run_ts_checks(self, genome, problem, self.verify_domain(genome)).valid and not [
                    f
                    for f in copy_checks(config_of(genome, problem))
                    if f.rule in ("tsopt.warp_overlap", "tsopt.launch_shape")
                ]:
                    keep.append(genes)
            _SCREENED_LAYOUTS["layout"] = keep
            _screen_cache_write("layouts", keep)
        return _SCREENED_LAYOUTS["layout"]

    def screened_placements(self, task: str) -> list[tuple[tuple[str, ...], int, str]]:
        """Dataflow-legal placements of ``task`` that pass TS and tsopt's checks next to the
        canonical partner for some advance_on_wait setting (the verifier decides; cached)."""
        if task not in _SCREENED:
            cached = _screen_cache_read(f"placements-{task}")
            if cached is not None:
                _SCREENED[task] = [(tuple(b), int(d), str(x)) for b, d, x in cached]
                return _SCREENED[task]
            from tsopt.verify.verifier import VerdictCache, verify_genome

            problem = Problem.of("copy", "fp16", rows=4096, cols=4096)
            cache = VerdictCache()
            keep = []
            for placement in self.legal_placements(task):
                for aow in STRUCTURE_CHOICES["advance_on_wait"]:
                    genome = self.genome(**{task: placement}, advance_on_wait=aow)
                    if verify_genome(genome, problem, space=self, cache=cache).valid:
                        keep.append(placement)
                        break
            _SCREENED[task] = keep
            _screen_cache_write(f"placements-{task}", keep)
        return _SCREENED[task]

    def genome(
        self,
        load: tuple[Sequence[str], int, str] = (LOAD_OPS, 0, "none"),
        store: tuple[Sequence[str], int, str] = (STORE_OPS, 0, "none"),
        **genes: Any,
    ) -> Genome:
        """A genome from knob values: ``load``/``store`` are (body, depth, defer)."""
        structure = {"advance_on_wait": False, "persistent": False, "raster": "row"}
        numeric = {
            "stages": 4,
            "box_rows": 32,
            "box_cols": 128,
            "store_warps": 4,
            "store_warp": 0,
            "load_warp": 4,
            "load_regs": 40,
            "store_regs": 168,
            "chunk": 8,
            "ctas_per_sm": 0,
            "vector": 8,
        }
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
    def _placements(self, task: str) -> Iterator[tuple[tuple[str, ...], int, str]]:
        for body in BODIES[task]:
            for depth in HEAD_DEPTHS:
                for defer in DEFERRABLE[task] if depth else ("none",):
                    yield body, depth, defer

    def placement_count(self, task: str) -> int:
        return len(BODIES[task]) * (1 + (len(HEAD_DEPTHS) - 1) * len(DEFERRABLE[task]))

    def numeric_combinations(self, problem: Problem) -> Iterator[dict[str, Any]]:
        """Every consistent assignment of the structural flags and numeric genes.

        ``persistent`` and ``ctas_per_sm`` go together (0 CTAs per SM means one
        CTA per work tile), so only consistent pairs are produced.
        """
        knobs = [k for k in self.raw_knobs(problem) if k.kind == "numeric"]
        names = [k.name for k in knobs]
        flags = STRUCTURE_CHOICES["advance_on_wait"], STRUCTURE_CHOICES["raster"]
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
        flags = len(STRUCTURE_CHOICES["advance_on_wait"]) * len(STRUCTURE_CHOICES["raster"])
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

    def funnel(self, problem: Problem, **kwargs: Any) -> Any:
        """The funnel by factorised verification (see ``search_spaces/_copy_funnel.py``)."""
        from tsopt.search_spaces.copy.funnel import copy_funnel

        return copy_funnel(self, problem, **kwargs)

    def legal_placements(self, task: str) -> list[tuple[tuple[str, ...], int, str]]:
        return [
            p
            for p in self._placements(task)
            if _placement_dataflow_error(task, placement_of(*p)) is None
        ]

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
            placement = knobs_of_placement([(p.op, p.section) for p in genome.task(task).ops])
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
        missing = [g for g in (*NUMERIC_CHOICES, *STRUCTURE_CHOICES) if g not in genome.genes]
        if missing:
            return f"genome lacks gene(s) {missing}"
        known = {*NUMERIC_CHOICES, *STRUCTURE_CHOICES, *(f"planted.{p}" for p in PLANTED_FAULTS)}
        unknown = sorted(set(genome.genes) - known)
        if unknown:
            return f"unknown gene(s) {unknown} for space {SPACE!r}"
        for task in ("load", "store"):
            error = _placement_dataflow_error(
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
        depth = max(_head_depth(genome, t) for t in TASK_OPS)
        assert isinstance(stages, int)
        return max(4, stages + 2, depth + 2)

    def tsopt_checks(self, genome: Genome, problem: Problem) -> list[Finding]:
        return copy_checks(config_of(genome, problem))

    def verdict_key(self, genome: Genome, problem: Problem) -> str:
        cfg = config_of(genome, problem)
        # tsopt's checks also read box shape, chunk and grid; they are cheap and run
        # every time, so only the TS-relevant genes key the cached TS verdict.
        ts = {name: genome[name] for name in _ts_key_genes()}
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

    # -- build -----------------------------------------------------------------------
    def source_modules(self) -> tuple[str, ...]:
        return ("tsopt.search_spaces.copy.kernel",)

    def source_digest(self) -> str:
        """The kernel module plus the genome -> configuration mapping: the rest of this
        module (knobs, checks, enumeration) never reaches a kernel."""
        import hashlib
        import inspect

        digest = hashlib.sha256(super().source_digest().encode())
        digest.update(inspect.getsource(config_of).encode())
        return digest.hexdigest()[:16]

    def export_source(self, genome: Genome, problem: Problem, arch: str, header: str) -> str:
        from tsopt.search_spaces.copy.export import export_source

        return export_source(genome, problem, arch, header)

    def kernel_spec(self, genome: Genome, problem: Problem, arch: str) -> KernelSpec:
        import cutlass
        from cutlass.cute.runtime import make_fake_compact_tensor
        from cutlass.runtime import make_fake_stream

        cfg = config_of(genome, problem, arch)
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
            },
        )


def _head_depth(genome: Genome, task: str) -> int:
    return sum(1 for p in genome.task(task).ops if p.section == "head" and p.op == PRIMARY_OP[task])


def _placement_dataflow_error(task: str, ops: Sequence[tuple[str, str]]) -> str | None:
    """Why a placement cannot compute a copy, before any pipeline rule is judged.

    The pipeline protocol (brackets, pairing, deadlock) is the TS verifier's
    job; this only checks the data: each op is known; the loop holds each op of
    the task exactly once; the head holds whole iterations of the work ops and
    the tail none; and every token (coords -> tma_load, read -> store) is
    produced earlier in the same section and iteration.
    """
    known = TASK_OPS[task]
    for op, _ in ops:
        if op not in known:
            return f"unknown op {op!r} (known: {', '.join(known)})"
    loop = [op for op, sec in ops if sec == "loop"]
    for op in WORK_OPS[task]:
        if loop.count(op) != 1:
            return f"the loop body must hold {op} exactly once per iteration, holds it {loop.count(op)}x"
    head = [op for op, sec in ops if sec == "head"]
    counts = {op: head.count(op) for op in WORK_OPS[task]}
    if len(set(counts.values())) != 1:
        return f"head holds partial iterations of the work ops: {counts}"
    if any(op in WORK_OPS[task] for op, sec in ops if sec == "tail"):
        return "work ops in the tail: the loop already covers every remaining iteration"
    producer, consumer = TOKENS[task]
    for section in ("head", "loop"):
        available = 0
        for op, sec in ops:
            if sec != section:
                continue
            if op == producer:
                available += 1
            elif op == consumer:
                if available == 0:
                    return f"{consumer} uses its input before {producer} produces it ({section})"
                available -= 1
    return None


def copy_checks(cfg: CopyConfig) -> list[Finding]:
    """What TS does not check for this template, each a stable rule name."""
    findings: list[Finding] = []
    store = range(cfg.store_warp, cfg.store_warp + cfg.store_warps)
    if cfg.load_warp in store:
        findings.append(
            Finding(
                "tsopt.warp_overlap",
                f"LoadTask warp {cfg.load_warp} lies inside StoreTask warps "
                f"{cfg.store_warp}..{cfg.store_warp + cfg.store_warps - 1}",
            )
        )
    if cfg.store_warps > 1 and cfg.store_warp % 4 + cfg.store_warps > 4 and cfg.store_warp % 4:
        findings.append(
            Finding(
                "tsopt.launch_shape",
                f"StoreTask warps {cfg.store_warp}.. straddle a warpgroup boundary",
            )
        )
    if 32 * cfg.block_warps > 1024:
        findings.append(
            Finding("tsopt.launch_shape", f"block of {32 * cfg.block_warps} threads > 1024")
        )
    # Stage identity: a deferred release/commit frees the *oldest* held stage only
    # when the pipeline keeps a separate lagging state for it.
    store_tail = [op for op, sec in cfg.store_ops if sec == "tail"]
    if "release" in store_tail and not cfg.advance_on_wait:
        findings.append(
            Finding(
                "tsopt.stage_identity",
                "delayed release without advance_on_wait: release would free the stage just waited on, "
                "not the oldest one still held",
            )
        )
    if "commit" in [op for op, sec in cfg.load_ops if sec == "tail"]:
        findings.append(
            Finding(
                "tsopt.stage_identity",
                "delayed commit needs advance_on_acquire, which TMA->async pipelines do not offer: "
                "commit would signal the wrong stage",
            )
        )
    if cfg.smem_bytes > SMEM_CAPACITY:
        findings.append(
            Finding(
                "tsopt.smem",
                f"{cfg.stages} stages x {cfg.box_rows}x{cfg.box_cols} boxes need {cfg.smem_bytes} B SMEM "
                f"> {SMEM_CAPACITY} B",
            )
        )
    elems = cfg.box_rows * cfg.box_cols
    if elems % (cfg.vec * cfg.store_threads):
        findings.append(
            Finding(
                "tsopt.launch_shape",
                f"a {cfg.box_rows}x{cfg.box_cols} box is not a whole number of 16-byte vectors for "
                f"{cfg.store_threads} store threads",
            )
        )
    # Fragment registers: 2 bytes per element, 4 per register, plus ~32 for addressing.
    need = cfg.vectors_per_thread * cfg.vec * cfg.elem_bytes // 4 + 32
    if need > cfg.store_regs:
        findings.append(
            Finding(
                "tsopt.registers",
                f"each store thread holds {cfg.vectors_per_thread * cfg.vec} elements (~{need} registers) "
                f"> budget {cfg.store_regs}: it would spill",
            )
        )
    if cfg.rows % cfg.box_rows or cfg.cols % cfg.box_cols:
        findings.append(
            Finding(
                "tsopt.tile_divisibility",
                f"{cfg.rows}x{cfg.cols} is not a whole number of {cfg.box_rows}x{cfg.box_cols} boxes",
            )
        )
    elif cfg.tiles % cfg.chunk:
        findings.append(
            Finding(
                "tsopt.tile_divisibility",
                f"{cfg.tiles} boxes do not split into chunks of {cfg.chunk}",
            )
        )
    if cfg.persistent != (cfg.ctas_per_sm > 0):
        findings.append(
            Finding(
                "tsopt.launch_shape",
                f"persistent={cfg.persistent} with ctas_per_sm={cfg.ctas_per_sm}: a persistent grid needs "
                "ctas_per_sm > 0, a non-persistent one 0",
            )
        )
    for head_task in ("load", "store"):
        if cfg.head_depth(head_task) >= cfg.chunk:
            findings.append(
                Finding(
                    "tsopt.domain",
                    f"{head_task} head holds {cfg.head_depth(head_task)} iterations but a work tile has "
                    f"only {cfg.chunk}",
                )
            )
    return findings
