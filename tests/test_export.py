"""`tsopt export` on a study whose winner carries a real H200 measurement, and its refusals.

The measurement is the one recorded for the copy genome d4032827a38d in
bench/copy_h200/copy-4096-fenced/results.json (measured on an H200 with the current copy
template); the candidate is verified and built here, for real, before it is exported.
"""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tsopt.app.export import export_candidate
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import Measurement
from tsopt.core.registry import get_space
from tsopt.db.store import Store
from tsopt.search.pipeline import CandidatePipeline

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "bench" / "copy_h200" / "copy-4096-fenced"
STUDY = "copy-fp16-4096x4096-sm_90a"


def _measured(genome_prefix: str) -> tuple[Genome, Measurement, Problem]:
    manifest = json.loads((EVIDENCE / "manifest.json").read_text())
    results = json.loads((EVIDENCE / "results.json").read_text())
    doc = next(c for c in manifest["candidates"] if c["genome_hash"].startswith(genome_prefix))
    measured = next(m for m in results["measurements"] if m["genome_hash"] == doc["genome_hash"])
    problem = Problem.from_dict(manifest["problem"])
    return Genome.from_dict(doc["genome"]), Measurement.from_dict(measured), problem


@pytest.fixture(scope="module")
def store_with_winner(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, Path]:
    root = tmp_path_factory.mktemp("export")
    genome, measurement, problem = _measured("d4032827a38d")
    store = Store(f"sqlite:///{root / 'tsopt.db'}")
    store.create_or_get_study(STUDY, "copy", problem, "sm_90a", "tpe", {})
    store.create_or_get_study("nothing-timed", "copy", problem, "sm_90a", "tpe", {})
    space = get_space("copy")
    for study in (STUDY, "nothing-timed"):
        pipeline = CandidatePipeline(store, space, problem, "sm_90a", study, root / "artifacts")
        candidate = store.add_candidate(study, genome, "suggest")
        assert pipeline.verify(candidate, genome).valid
        assert pipeline.build(candidate, genome).ok
        if study == STUDY:
            assert store.record_measurement(candidate, measurement, "h200-fenced")
    return store, root


def test_export_writes_a_complete_directory(store_with_winner: tuple[Store, Path]) -> None:
    store, root = store_with_winner
    out = root / "best"
    result = export_candidate(store, STUDY, out)
    names = set(result.files)
    assert {"kernel.py", "kernel.h", "kernel.o", "kernel.cubin", "libkernel.so", "loader.py",
            "artifact.json", "example.c", "build.sh", "manifest.json"} <= names
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["genome_hash"].startswith("d4032827a38d")
    assert manifest["measured"]["device"] == "NVIDIA H200" and manifest["measured"]["status"] == "ok"
    assert manifest["verdict"]["valid"] is True
    assert manifest["versions"]["nvidia-cutlass-dsl"] == "4.8.1"
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
    # The loader travels as the very file tsopt uses (torch + standard library only).
    assert (out / "loader.py").read_text() == (ROOT / "workers" / "loader.py").read_text()
    source = (out / "kernel.py").read_text()
    assert "import tsopt" not in source and "from search_spaces" not in source
    assert "def store_body(res, domain):" in source


def test_exported_kernel_py_recompiles_to_the_exported_cubin(store_with_winner: tuple[Store, Path]) -> None:
    _, root = store_with_winner
    out = root / "best"
    recompiled = root / "again.cubin"
    subprocess.run([sys.executable, "-I", str(out / "kernel.py"), "--cubin", str(recompiled)], check=True,
                   capture_output=True, cwd=root)
    assert recompiled.read_bytes() == (out / "kernel.cubin").read_bytes()


def test_the_c_example_builds_against_the_exported_object(store_with_winner: tuple[Store, Path]) -> None:
    from tsopt.build.builder import find_toolchain

    _, root = store_with_winner
    out = root / "best"
    toolchain = find_toolchain()
    env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(toolchain.cuda_include.parent),
           "CUTE_DSL_RUNTIME": str(toolchain.dsl_runtime)}
    done = subprocess.run(["bash", str(out / "build.sh")], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert (out / "example").exists()


@pytest.mark.parametrize(
    ("study", "rank", "message"),
    [
        ("no-such-study", 1, "no study named 'no-such-study'"),
        ("nothing-timed", 1, "has no correct timed candidate to export"),
        (STUDY, 2, f"--rank 2 does not exist: study '{STUDY}' has 1 correct timed candidate"),
        (STUDY, 0, "--rank 0 must be 1"),
    ],
)
def test_refusals(store_with_winner: tuple[Store, Path], study: str, rank: int, message: str) -> None:
    store, root = store_with_winner
    with pytest.raises(UserInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        export_candidate(store, study, root / f"refused-{rank}-{study}", rank)


def test_a_non_empty_output_directory_needs_force(store_with_winner: tuple[Store, Path]) -> None:
    store, root = store_with_winner
    out = root / "occupied"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UserInputError, match="is not empty; choose another directory or pass --force"):
        export_candidate(store, STUDY, out)
    assert (out / "notes.txt").read_text() == "mine"
    export_candidate(store, STUDY, out, force=True)
    assert (out / "kernel.py").exists() and not (out / "notes.txt").exists()


def test_the_cli_refuses_with_one_line_and_exit_code_2(store_with_winner: tuple[Store, Path]) -> None:
    _, root = store_with_winner
    done = subprocess.run(
        [sys.executable, "-m", "tsopt", "export", "nothing-timed", "--out", str(root / "x"),
         "--db", f"sqlite:///{root / 'tsopt.db'}"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no correct timed candidate" in lines[0]
