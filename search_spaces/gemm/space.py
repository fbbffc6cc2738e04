"""The Hopper TS GEMM search space: the kernel of ``hopper_gemm_kernel.py`` with its knobs.

The kernel (a warp-specialized wgmma GEMM written in TS, ``D = A · Bᵀ``) lives
in :mod:`tsopt.search_spaces.gemm.kernel`, which imports only the CUTLASS DSL
and is exported verbatim by ``tsopt export``. This module makes it a search
space: knobs and genomes (``_gemm_space.py``, ``_gemm_config.py``), the genome
-> configuration mapping (:func:`tsopt.search_spaces.gemm.config.config_of`), the
checks TS does not make (``_gemm_checks.py``), the funnel (``_gemm_funnel.py``)
and the export (``_gemm_export.py``).
"""

from __future__ import annotations

from typing import Any

from tsopt.core.dsl_env import ensure_arch

ensure_arch()  # the DSL reads its target arch when first imported

from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem, ProblemError  # noqa: E402
from tsopt.core.space import (  # noqa: E402
    Enumeration,
    Finding,
    KernelSpec,
    Knob,
    SearchSpace,
    TensorArg,
)
from tsopt.search_spaces.gemm import layout as _space  # noqa: E402
from tsopt.search_spaces.gemm.checks import gemm_checks  # noqa: E402
from tsopt.search_spaces.gemm.config import (  # noqa: E402
    SPACE,
    config_of,
    gene,
    parse_cluster,
)
from tsopt.search_spaces.gemm.kernel import (  # noqa: E402, F401
    GemmConfig,
    compile_args,
    make_kernel,
    make_task_manager,
)


class HopperGemmSpace(SearchSpace):
    """The warp-specialized TS GEMM of ``hopper_gemm_kernel``, its placements and knobs as genes."""

    name = SPACE
    op = "gemm"
    description = ("Hopper warp-specialized TS GEMM D = A.B^T (TMA producer, wgmma consumer "
                   "warpgroups), bf16/fp16, sm_90a")
    archs = ("sm_90a",)

    # -- problems and knobs ----------------------------------------------------------
    def check_problem(self, problem: Problem) -> None:
        if problem.op != "gemm":
            raise ProblemError(f"space 'gemm' tunes gemm problems, not {problem.op!r}")
        for name in ("n", "k"):
            if problem[name] % 8:
                raise ProblemError(
                    f"{name}={problem[name]} is not a multiple of 8: TMA needs 16-byte rows "
                    "(K) and the epilogue 4-byte aligned pairs in every row of D (N)")

    def knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        return _space.knobs(self)

    def raw_knobs(self, problem: Problem | None = None) -> tuple[Knob, ...]:
        return _space.raw_knobs()

    def params_of(self, genome: Genome) -> dict[str, Any]:
        return _space.params_of(self, genome)

    def genome(self, **values: Any) -> Genome:
        """A genome from knob values (placement knobs and genes; defaults: the seed)."""
        return _space.make_genome(**values)

    def seed_genome(self, problem: Problem) -> Genome:
        """A hand-written schedule: 128x256x64 tiles, 4 stages, two cooperative consumer
        warpgroups at 232 registers, one wgmma batch in flight, one tile per CTA."""
        return _space.make_genome()

    # -- search ----------------------------------------------------------------------
    def enumerate(self, problem: Problem) -> Enumeration:
        self.check(problem)
        return _space.enumerate_space(problem)

    def suggest(self, trial: Any, problem: Problem) -> Genome:
        return _space.suggest(trial, self)

    def funnel(self, problem: Problem, **kwargs: Any) -> Any:
        """The funnel by factorised verification (see ``search_spaces/_gemm_funnel.py``)."""
        from tsopt.search_spaces.gemm.funnel import gemm_funnel

        return gemm_funnel(self, problem, **kwargs)

    # -- verification ----------------------------------------------------------------
    def config(self, genome: Genome, problem: Problem) -> GemmConfig:
        return config_of(genome, problem.sizes, problem.dtype)

    def dataflow_error(self, genome: Genome) -> str | None:
        return _space.dataflow_error(genome)

    def build_skeleton(self, genome: Genome, problem: Problem, domain: int) -> Any:
        return make_task_manager(self.config(genome, problem), None, domain=domain)

    def verify_domain(self, genome: Genome) -> int:
        stages = genome["stages"]
        assert isinstance(stages, int)
        depth = max(_space.head_depth(genome, task) for task in ("load", "mma"))
        return max(4, stages + 2, depth + 2)

    def tsopt_checks(self, genome: Genome, problem: Problem) -> list[Finding]:
        return gemm_checks(self.config(genome, problem))

    def verdict_key(self, genome: Genome, problem: Problem) -> str:
        cfg = self.config(genome, problem)
        # Raster order and swizzle never reach the TS skeleton (the epilogue does: its SMEM).
        ts_genes = {name: gene(genome, name) for name in _space.TS_KEY_GENES}
        return repr((cfg.load_ops, cfg.mma_ops, sorted(ts_genes.items())))

    # -- build -----------------------------------------------------------------------
    def source_modules(self) -> tuple[str, ...]:
        return ("tsopt.search_spaces.gemm.kernel",)

    def source_digest(self) -> str:
        """The kernel module (the configuration's derived sizes included) plus the genome ->
        configuration mapping: knobs, checks, enumeration and the funnel never reach a kernel,
        so editing them keeps every build."""
        import hashlib
        import inspect

        digest = hashlib.sha256(super().source_digest().encode())
        for fn in (config_of, parse_cluster):
            digest.update(inspect.getsource(fn).encode())
        return digest.hexdigest()[:16]

    def export_source(self, genome: Genome, problem: Problem, arch: str, header: str) -> str:
        from tsopt.search_spaces.gemm.export import export_source

        return export_source(genome, problem, arch, header)

    def kernel_spec(self, genome: Genome, problem: Problem, arch: str) -> KernelSpec:
        cfg = self.config(genome, problem)
        return KernelSpec(
            host_fn=make_kernel(cfg),
            compile_args=compile_args(cfg),
            tensors=(
                TensorArg("a", "input", (cfg.m, cfg.k), cfg.dtype),
                TensorArg("b", "input", (cfg.n, cfg.k), cfg.dtype),
                TensorArg("d", "output", (cfg.m, cfg.n), cfg.dtype),
            ),
            launch={"grid": list(cfg.grid), "block": [cfg.threads, 1, 1],
                    "cluster": [cfg.cluster_m, cfg.cluster_n, 1], "smem_bytes": cfg.smem_bytes},
        )
