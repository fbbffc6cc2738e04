"""The GEMM export: a standalone ``kernel.py`` that recompiles to the very cubin tsopt built.

CPU only, real sm_90a compiles (no GPU here): the candidate is built by the
builder, its ``kernel.py`` is rendered (the kernel module verbatim + the
configuration as literals + the schedule bodies written out op by op), run
as a script with ``--cubin`` in a fresh isolated interpreter, and the two
cubins are compared byte for byte. ``python kernel.py`` on a GPU (the torch
check) is not exercised here.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tests.fixtures import read_fixture  # noqa: E402
from tsopt.build.builder import build_candidate  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search_spaces.gemm import kernel as K  # noqa: E402
from tsopt.search_spaces.gemm.export import render_body  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL = Problem.of("gemm", "bf16", m=512, n=512, k=512)
RAGGED = Problem.of("gemm", "fp16", m=3000, n=2008, k=1000)
GENOMES: dict[str, dict[str, Any]] = {
    "seed": {},
    "persistent-2x1": {
        "persistent": True, "cluster": "2x1", "swizzle": 2, "raster": "n",
        "load": (("coords", "try_acquire", "acquire", "tma_load", "commit"), 1, "none"),
    },
    "stream-k": {
        "persistent": True, "stream_k": True,
        "load": (("coords", "try_acquire", "acquire", "tma_load", "commit"), 1, "none"),
    },
}
STANDALONE_IMPORTS = {"os", "contextlib", "collections", "dataclasses", "functools", "typing",
                      "cuda", "cutlass", "argparse", "tempfile", "torch"}


@pytest.fixture(scope="module")
def space():  # type: ignore[no-untyped-def]
    return get_space("gemm")


def recompile(kernel_py: Path, cubin: Path) -> None:
    """``python -I kernel.py --cubin F`` in its own directory, without tsopt's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUTE_DSL_ARCH", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "-I", str(kernel_py), "--cubin", str(cubin)],
        cwd=kernel_py.parent, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def imported_modules(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


# -- the literal schedule is the placed one ------------------------------------------------


class _Recorder:
    """Stands in for the TS resource proxies and ``domain_loop``: logs every call in order."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.tokens = 0

    def resource(self, name: str) -> Any:
        recorder = self

        class Proxy:
            def __getattr__(self, op: str) -> Any:
                def call(**kwargs: Any) -> Any:
                    recorder.log.append((name, op, tuple(sorted(kwargs.items()))))
                    recorder.tokens += 1
                    if op == "compute_coords":
                        return tuple(f"t{recorder.tokens}.{i}" for i in range(3))
                    return f"t{recorder.tokens}"

                return call

        return Proxy()

    @contextlib.contextmanager
    def domain_loop(self, start: int, stop: int, step: int) -> Any:
        self.log.append(("loop", start, stop, step))
        yield
        self.log.append(("end",))


def _resources(recorder: _Recorder, task: str) -> dict[str, Any]:
    names = ("coords", "smem") if task == "load" else ("smem", "acc")
    return {name: recorder.resource(name) for name in names}


def test_literal_bodies_make_the_same_calls_as_the_placed_ops_for_every_screened_placement(
    space, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    # Tokens are named by call order, so a literal body that hands tma_load the coordinates of
    # another compute_coords, or a wgmma another stage, logs differently. The loop's coords pass
    # no iteration (its default, -1) where the placed ops pass it=-1; the cubins agree (below).
    screen = {task: space.screened_placements(task) for task in ("load", "mma")}
    placements = [("load", key) for key in screen["load"]] + [("mma", key) for key in screen["mma"]]
    assert len(placements) == len(screen["load"]) + len(screen["mma"]) > 0
    for task, key in placements:
        cfg = space.config(space.genome(**{task: key}), SMALL)
        ops = cfg.load_ops if task == "load" else cfg.mma_ops
        placed, literal = _Recorder(), _Recorder()
        monkeypatch.setattr(K, "domain_loop", placed.domain_loop)
        K.placed_body(task, cfg)(_resources(placed, task), 8)
        namespace: dict[str, Any] = {"domain_loop": literal.domain_loop}
        exec(render_body(task, ops), namespace)  # noqa: S102 - our own rendering, under test
        namespace[f"{task}_body"](_resources(literal, task), 8)
        normalise = [(e[0], e[1], tuple(kv for kv in e[2] if kv != ("it", -1))) if len(e) == 3 else e
                     for e in placed.log]
        assert literal.log == normalise, f"{task} {key}"


def test_the_task_manager_runs_the_bodies_it_is_given(space) -> None:  # type: ignore[no-untyped-def]
    cfg = space.config(space.seed_genome(SMALL), SMALL)
    source = render_body("mma", cfg.mma_ops)
    namespace: dict[str, Any] = {"domain_loop": K.domain_loop}
    exec(source, namespace)  # noqa: S102
    bodies = {"load": K.placed_body("load", cfg), "mma": namespace["mma_body"]}
    K.make_task_manager(cfg, None, domain=6, bodies=bodies)  # TS accepts the literal schedule
    # The same literal body without its delayed release: TS must now reject it.
    broken = source.rsplit("    smem.release()\n", 1)[0]
    exec(broken, namespace)  # noqa: S102
    with pytest.raises(ValueError, match="not matched by ConsumerRelease"):
        K.make_task_manager(cfg, None, domain=6, bodies={**bodies, "mma": namespace["mma_body"]})


# -- recompiling kernel.py gives the built cubin -------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("problem", [SMALL, RAGGED], ids=["512^3-bf16", "3000x2008x1000-fp16"])
@pytest.mark.parametrize("name", list(GENOMES))
def test_exported_kernel_recompiles_to_the_built_cubin(
    space, name: str, problem: Problem, tmp_path_factory: pytest.TempPathFactory  # type: ignore[no-untyped-def]
) -> None:
    genome = space.genome(**GENOMES[name])
    built = build_candidate(space, genome, problem, "sm_90a", tmp_path_factory.mktemp("artifacts"))
    assert built.ok, built.error
    work = tmp_path_factory.mktemp("export")
    source = space.export_source(genome, problem, "sm_90a", f"test export of {name} for {problem}")
    assert imported_modules(source) <= STANDALONE_IMPORTS  # no tsopt, no search_spaces
    assert "BODIES = {\"load\": load_body, \"mma\": mma_body}" in source
    assert "make_kernel(CONFIG, BODIES)" in source
    (work / "kernel.py").write_text(source)
    recompile(work / "kernel.py", work / "again.cubin")
    built_cubin = (Path(built.artifact_dir or "") / "kernel.cubin").read_bytes()
    assert (work / "again.cubin").read_bytes() == built_cubin


# -- `tsopt export` of a real H200 measurement ------------------------------------------------


@pytest.mark.slow
def test_tsopt_export_of_a_measured_gemm(space, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A study holding one real H200 measurement, exported with the CLI and recompiled.

    The timing is the HEADLINE row of bench/gemm_h200's gemm-final.json (persistent, 2x1 cluster,
    8192^3 bf16), measured on an H200 from a build of an earlier template (053cfc8b): it is
    attached here to a fresh build of the same genome to exercise the export, and is not a
    claim about the current template's speed.
    """
    from tsopt.core.records import Measurement
    from tsopt.db.store import Store
    from tsopt.verify.verifier import VerdictCache, verify_genome

    final = read_fixture("gemm_h200/gemm-final.json")  # that row, cut from it
    row = next(r for r in final["results"] if r["label"] == "HEADLINE best")
    genome = Genome.from_dict(row["genome"])
    assert genome.hash == row["genome_hash"]
    problem = Problem.from_dict(row["problem"])
    measured = Measurement.from_dict(row["measurement"])
    assert measured.status == "ok" and measured.device == "NVIDIA H200"

    db = f"sqlite:///{tmp_path / 'tsopt.db'}"
    study = f"gemm-{problem.dtype}-8192x8192x8192-sm_90a"
    with Store(db) as store:
        store.create_or_get_study(study, "gemm", problem, "sm_90a", "tpe", {"trials": 1})
        cid = store.add_candidate(study, genome, "seed", trial_number=0)
        verdict = verify_genome(genome, problem, space=space, cache=VerdictCache())
        assert verdict.valid, verdict.summary()
        store.record_verdict(cid, "gemm", space.verdict_key(genome, problem), verdict)
        built = build_candidate(space, genome, problem, "sm_90a", tmp_path / "artifacts")
        assert built.ok, built.error
        store.record_build(cid, built)
        store.record_measurement(cid, measured, run_id="h200-gemm-final")

    out = tmp_path / "best-gemm"
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "tsopt", "export", study, "--out", str(out), "--db", db],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for name in ("kernel.py", "kernel.cubin", "kernel.h", "kernel.o", "libkernel.so", "loader.py",
                 "artifact.json", "manifest.json", "example.c", "build.sh", "genome.json"):
        assert (out / name).is_file(), name
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["genome_hash"] == genome.hash and manifest["space"] == "gemm"
    assert manifest["measured"]["median_us"] == measured.median_us
    assert manifest["measured"]["device"] == "NVIDIA H200"
    assert manifest["forward_progress"] == "none needed: no CTA waits for another CTA"
    source = (out / "kernel.py").read_text()
    assert f"{measured.median_us:.2f} us" in source  # the header states what was measured
    assert "cluster_m=2," in source and "persistent=True," in source
    assert imported_modules(source) <= STANDALONE_IMPORTS
    recompile(out / "kernel.py", tmp_path / "again.cubin")
    assert (tmp_path / "again.cubin").read_bytes() == (out / "kernel.cubin").read_bytes()
