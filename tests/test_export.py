"""`tsopt export` on a study whose winner carries a real H200 measurement, and its refusals.

The measurement is the one recorded for the copy genome d4032827a38d in bench/copy_h200's
copy-4096-fenced/results.json (measured on an H200 with the current copy template; the
fixture tests/fixtures/copy_h200 is cut from it); the candidate is verified and built here,
for real, before it is exported. A second study (16384x16384, the winner 6b3dc6745318 of
copy-16384-fenced, its H200 measurement attached to a build here) makes the package of two
kernels.

The exports' PyTorch ops are loaded in a fresh isolated interpreter with only the export on
its path (no launch: there is no GPU here).
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import FIXTURES
from tsopt.app.export import export_candidate, export_studies
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem
from tsopt.core.records import Measurement
from tsopt.core.registry import get_space
from tsopt.db.store import Store
from tsopt.search.pipeline import CandidatePipeline

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = FIXTURES / "copy_h200" / "copy-4096-fenced"
EVIDENCE_16K = FIXTURES / "copy_h200" / "copy-16384-fenced"
STUDY = "copy-fp16-4096x4096-sm_90a"
STUDY_16K = "copy-fp16-16384x16384-sm_90a"


def _measured(genome_prefix: str, evidence: Path = EVIDENCE) -> tuple[Genome, Measurement, Problem]:
    manifest = json.loads((evidence / "manifest.json").read_text())
    results = json.loads((evidence / "results.json").read_text())
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
    genome, measurement, problem = _measured("6b3dc6745318", EVIDENCE_16K)
    store.create_or_get_study(STUDY_16K, "copy", problem, "sm_90a", "tpe", {})
    pipeline = CandidatePipeline(store, space, problem, "sm_90a", STUDY_16K, root / "artifacts")
    candidate = store.add_candidate(STUDY_16K, genome, "suggest")
    assert pipeline.verify(candidate, genome).valid
    assert pipeline.build(candidate, genome).ok
    assert store.record_measurement(candidate, measurement, "h200-fenced")
    return store, root


def test_export_writes_a_complete_directory(store_with_winner: tuple[Store, Path]) -> None:
    store, root = store_with_winner
    out = root / "best"
    result = export_candidate(store, STUDY, out)
    names = set(result.files)
    assert {"kernel.py", "kernel.h", "kernel.o", "kernel.cubin", "libkernel.so", "loader.py",
            "artifact.json", "example.c", "build.sh", "manifest.json", "torch_ops.py"} <= names
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["genome_hash"].startswith("d4032827a38d")
    assert manifest["measured"]["device"] == "NVIDIA H200" and manifest["measured"]["status"] == "ok"
    assert manifest["verdict"]["valid"] is True
    assert manifest["versions"]["nvidia-cutlass-dsl"] == "4.8.1"
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
    # The loader travels as the very file tsopt uses (torch + standard library only).
    assert (out / "loader.py").read_text() == (ROOT / "workers" / "loader.py").read_text()
    assert (out / "torch_ops.py").read_text() == (ROOT / "workers" / "torch_ops.py").read_text()
    assert manifest["kernels"] == [{
        "name": "copy_fp16_4096x4096", "op": "copy", "dtype": "fp16",
        "sizes": [["rows", 4096], ["cols", 4096]], "dir": ".", "study": STUDY, "rank": 1,
        "genome_hash": manifest["genome_hash"],
        "median_us": manifest["measured"]["median_us"], "ratio": manifest["measured"]["ratio"],
        "baseline_name": manifest["measured"]["baseline_name"], "device": "NVIDIA H200",
        "launch": "isolated",
        # A study recorded before device profiles was built for the arch's default.
        "built_for": {"id": "H200_SXM", "sm_count": 132}}]
    # The committed evidence was timed before the launch modes: the export says so, as its
    # header does, rather than the graph mode a new study measures in.
    assert manifest["launch"] == manifest["measured"]["launch"] == "isolated"
    assert "both in launch mode 'isolated'" in (out / "kernel.py").read_text()
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


def test_a_non_empty_directory_that_is_no_export_is_refused_even_with_force(
        store_with_winner: tuple[Store, Path]) -> None:
    # Issue #14: export writes into a new or empty directory, or replaces the files of an earlier
    # export; it never deletes a file it did not write (--force used to empty the directory).
    store, root = store_with_winner
    out = root / "occupied"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for force in (False, True):
        with pytest.raises(UserInputError, match=r"is not empty \(notes.txt\) and holds no earlier "
                           "tsopt export: choose a new or empty directory"):
            export_candidate(store, STUDY, out, force=force)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "mine"


def test_force_replaces_only_the_files_the_earlier_export_wrote(
        store_with_winner: tuple[Store, Path]) -> None:
    store, root = store_with_winner
    out = root / "replaced"
    first = export_candidate(store, STUDY, out)
    (out / "notes.txt").write_text("mine")
    (out / "kernel.py").write_text("edited by hand")
    with pytest.raises(UserInputError, match="holds an earlier tsopt export: pass --force"):
        export_candidate(store, STUDY, out)
    assert (out / "kernel.py").read_text() == "edited by hand"  # a refusal changes nothing
    again = export_candidate(store, STUDY, out, force=True)
    assert again.files == first.files
    assert (out / "notes.txt").read_text() == "mine"
    manifest = json.loads((out / "manifest.json").read_text())
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
    assert not [p for p in root.iterdir() if ".export-" in p.name]  # no staging left behind


def test_a_failed_export_leaves_the_directory_as_it_was(store_with_winner: tuple[Store, Path]) -> None:
    store, root = store_with_winner
    out = root / "kept"
    export_candidate(store, STUDY, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(UserInputError, match="has no correct timed candidate"):
        export_candidate(store, "nothing-timed", out, force=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize(
    ("cwd", "out", "message"),
    [
        (".", ".", r"--out '\.' is the working directory"),
        (".", "..", r"--out '\.\.' contains the working directory"),
        (".", ".tsopt", r"--out '\.tsopt' is tsopt's cache \.tsopt/"),
        ("elsewhere", "{root}", r"contains the database"),
        ("elsewhere", "{root}/tsopt.db", r"is the database"),
    ],
    ids=["cwd", "ancestor", "cache", "db-folder", "db-file"],
)
def test_export_refuses_to_write_over_the_project(store_with_winner: tuple[Store, Path], cwd: str, out: str,
                                                  message: str, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    store, root = store_with_winner
    (root / ".tsopt").mkdir(exist_ok=True)
    monkeypatch.chdir(root if cwd == "." else tmp_path)
    before = sorted(p.name for p in root.iterdir())
    for force in (False, True):
        with pytest.raises(UserInputError, match=message):
            export_candidate(store, STUDY, Path(out.format(root=root)), force=force)
    assert sorted(p.name for p in root.iterdir()) == before


def test_export_out_dot_force_in_the_project_directory_keeps_the_database(
        store_with_winner: tuple[Store, Path]) -> None:
    # The exact case of issue #14: it used to delete tsopt.db and .tsopt/ and exit 0.
    _, root = store_with_winner
    (root / ".tsopt" / "bundles").mkdir(parents=True, exist_ok=True)
    before = sorted(p.name for p in root.iterdir())
    done = subprocess.run(
        [sys.executable, "-m", "tsopt", "export", STUDY, "--out", ".", "--force",
         "--db", "sqlite:///tsopt.db"],
        capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--out '.' is the working directory" in lines[0]
    assert (root / "tsopt.db").is_file() and (root / ".tsopt" / "bundles").is_dir()
    assert sorted(p.name for p in root.iterdir()) == before


def test_export_judges_the_genome_again_and_refuses_one_the_verifier_now_rejects(
        store_with_winner: tuple[Store, Path]) -> None:
    # A study recorded valid by an older verifier: the schedule commits before its TMA load
    # (ts.missing_commit today), planted with a "valid" verdict and a real H200 measurement.
    from tsopt.core.records import Verdict

    store, root = store_with_winner
    space = get_space("copy")
    _, measurement, problem = _measured("d4032827a38d")
    stale = space.genome(load=(("coords", "try_acquire", "acquire", "commit", "tma_load"), 0, "none"))
    store.create_or_get_study("stale-verdict", "copy", problem, "sm_90a", "tpe", {})
    candidate = store.add_candidate("stale-verdict", stale, "suggest")
    store.record_verdict(candidate, "copy", f"planted:{stale.hash}", Verdict.ok(stale.hash))
    store.record_measurement(candidate, Measurement.from_dict({**measurement.to_dict(),
                                                               "genome_hash": stale.hash}), "planted")
    with pytest.raises(UserInputError, match=r"no longer passes the verifier \(ts: ts.missing_commit"):
        export_candidate(store, "stale-verdict", root / "stale")
    assert not (root / "stale").exists()


def _isolated(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that sees no tsopt source (``-I``: no PYTHONPATH, no
    working directory on the path)."""
    return subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=cwd)


OP_PROBE = """
import json, sys, warnings
import torch
sys.path.insert(0, {out!r})
import torch_ops
package = torch_ops.load({out!r})
graphs = []
def recording(gm, example_inputs):
    graphs.append(gm)
    return gm.forward
def model(x):
    return torch.ops.tsopt.copy(x).float().sum() + getattr(torch.ops.tsopt, {name!r})(x).float().sum()
x = torch.empty({shape}, dtype=torch.float16, device="meta")
torch.compile(model, fullgraph=True, backend=recording)(x)
try:
    getattr(torch.ops.tsopt, {name!r})(torch.zeros({shape}, dtype=torch.float16))
    refused = None
except torch_ops.KernelInputError as exc:
    refused = str(exc)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    small = torch.arange(12, dtype=torch.float16).view(3, 4)
    assert torch.equal(torch.ops.tsopt.copy(small), small)
print(json.dumps({{
    "kernels": [[k.name, k.genome_hash, str(k.directory)] for k in package.kernels],
    "graph": sorted({{str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}}),
    "refused": refused, "warnings": [str(w.message) for w in caught],
    "heavy": sorted({{m.split(".")[0] for m in sys.modules}}
                    & {{"tsopt", "cutlass", "optuna", "sqlalchemy"}}),
}}))
"""


@pytest.mark.slow
def test_the_export_registers_its_kernel_as_a_pytorch_op(store_with_winner: tuple[Store, Path]) -> None:
    _, root = store_with_winner
    out = root / "best"
    found = _isolated(OP_PROBE.format(out=str(out), name="copy_fp16_4096x4096", shape="(4096, 4096)"), root)
    assert found.returncode == 0, found.stderr[-3000:]
    probe = json.loads(found.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    assert probe["kernels"] == [["copy_fp16_4096x4096", manifest["genome_hash"], str(out)]]
    assert {"tsopt.copy", "tsopt.copy_fp16_4096x4096"} <= set(probe["graph"])
    assert "src: not on a CUDA device (on cpu)" in probe["refused"]
    assert probe["warnings"] == ["torch.ops.tsopt.copy fp16 rows=3 cols=4: no tuned kernel for this shape "
                                 "and dtype (tuned: copy fp16 4096x4096); running src.clone() instead "
                                 "(warned once per shape)"]
    assert probe["heavy"] == []


@pytest.mark.slow
def test_several_studies_export_as_one_package_with_a_dispatch_table(
        store_with_winner: tuple[Store, Path]) -> None:
    store, root = store_with_winner
    out = root / "package"
    result = export_studies(store, [STUDY, STUDY_16K], out)
    assert [k.name for k in result.kernels] == ["copy_fp16_4096x4096", "copy_fp16_16384x16384"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["package"] is True and [k["dir"] for k in manifest["kernels"]] == [
        "copy_fp16_4096x4096", "copy_fp16_16384x16384"]
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
    for kernel in manifest["kernels"]:  # each kernel directory is a complete export of its own
        inner = json.loads((out / kernel["dir"] / "manifest.json").read_text())
        assert inner["study"] == kernel["study"] and inner["genome_hash"] == kernel["genome_hash"]
        assert (out / kernel["dir"] / "libkernel.so").is_file()
        assert (out / kernel["dir"] / "kernel.py").is_file()
    assert (out / "torch_ops.py").is_file() and (out / "loader.py").is_file()
    probe_code = OP_PROBE.format(out=str(out), name="copy_fp16_16384x16384", shape="(16384, 16384)")
    found = _isolated(probe_code, root)
    assert found.returncode == 0, found.stderr[-3000:]
    probe = json.loads(found.stdout)
    assert [k[0] for k in probe["kernels"]] == ["copy_fp16_4096x4096", "copy_fp16_16384x16384"]
    assert "(tuned: copy fp16 16384x16384, copy fp16 4096x4096)" in probe["warnings"][0]
    assert probe["heavy"] == []


@pytest.mark.parametrize(
    ("studies", "message"),
    [
        ([STUDY, STUDY], f"study '{STUDY}' is named twice"),
        ([STUDY, "no-such-study"], "no study named 'no-such-study'"),
        ([], "name a study to export"),
    ],
)
def test_package_refusals(store_with_winner: tuple[Store, Path], studies: list[str], message: str) -> None:
    store, root = store_with_winner
    with pytest.raises(UserInputError, match=message):
        export_studies(store, studies, root / "refused-package")
    assert not (root / "refused-package").exists()


def test_two_studies_of_one_problem_cannot_share_a_package(store_with_winner: tuple[Store, Path]) -> None:
    store, root = store_with_winner
    _, measurement, problem = _measured("d4032827a38d")
    store.create_or_get_study("same-problem", "copy", problem, "sm_90a", "tpe", {})
    genome = Genome.from_json(json.dumps(json.loads((root / "best" / "genome.json").read_text())))
    candidate = store.add_candidate("same-problem", genome, "suggest")
    store.record_measurement(candidate, measurement, "h200-fenced")
    with pytest.raises(UserInputError, match=f"studies '{STUDY}' and 'same-problem' both tune copy fp16"):
        export_studies(store, [STUDY, "same-problem"], root / "ambiguous")


@pytest.mark.slow
def test_the_cli_exports_a_package_from_repeated_and_listed_studies(
        store_with_winner: tuple[Store, Path]) -> None:
    _, root = store_with_winner
    out = root / "cli-package"
    done = subprocess.run(
        [sys.executable, "-m", "tsopt", "export", "--study", STUDY, "--studies", STUDY_16K,
         "--out", str(out), "--db", f"sqlite:///{root / 'tsopt.db'}"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    assert "as torch.ops.tsopt.copy_fp16_16384x16384 in copy_fp16_16384x16384/" in done.stdout
    assert "import torch_ops" in done.stdout
    kernels = json.loads((out / "manifest.json").read_text())["kernels"]
    assert [k["study"] for k in kernels] == [STUDY, STUDY_16K]


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


def test_a_study_measured_on_two_gpus_is_ranked_on_the_one_named(
        store_with_winner: tuple[Store, Path]) -> None:
    # The same two genomes measured on two cards, each card preferring a different one: the
    # export refuses to pool them, and --measured-on ranks on that card's measurements alone.
    store, root = store_with_winner
    genome_a, on_h200, problem = _measured("d4032827a38d")
    genome_b, _, _ = _measured("6b3dc6745318", EVIDENCE_16K)
    study = "two-cards"
    store.create_or_get_study(study, "copy", problem, "sm_90a", "tpe", {})
    pipeline = CandidatePipeline(store, get_space("copy"), problem, "sm_90a", study,
                                 root / "artifacts")
    ids = {}
    for genome in (genome_a, genome_b):
        ids[genome.hash] = store.add_candidate(study, genome, "suggest")
        assert pipeline.verify(ids[genome.hash], genome).valid
        assert pipeline.build(ids[genome.hash], genome).ok
    h100 = "NVIDIA H100 80GB HBM3"

    def measured(genome: Genome, device: str, ratio: float) -> Measurement:
        return Measurement.from_dict({**on_h200.to_dict(), "genome_hash": genome.hash,
                                      "device": device, "ratio": ratio,
                                      "ratio_lo": ratio, "ratio_hi": ratio})

    for genome, device, ratio, run in ((genome_a, "NVIDIA H200", 1.05, "h200"),
                                       (genome_b, "NVIDIA H200", 0.95, "h200"),
                                       (genome_a, h100, 0.90, "h100"),
                                       (genome_b, h100, 1.10, "h100")):
        assert store.record_measurement(ids[genome.hash], measured(genome, device, ratio), run)
    assert store.measured_devices(study) == {h100: 2, "NVIDIA H200": 2}
    with pytest.raises(UserInputError, match=r"measured on 2 GPUs \(NVIDIA H100 80GB HBM3: 2, "
                                             r"NVIDIA H200: 2\).*pass --measured-on"):
        export_studies(store, [study], root / "pooled")
    assert not (root / "pooled").exists()
    with pytest.raises(UserInputError, match=r"--measured-on 'NVIDIA B200': study 'two-cards' "
                                             r"has no correct timed measurement on that GPU"):
        export_studies(store, [study], root / "b200", measured_on="NVIDIA B200")
    for device, winner, ratio in (("NVIDIA H200", genome_a, 1.05), (h100, genome_b, 1.10)):
        out = root / f"on-{device.split()[1]}"
        result = export_studies(store, [study], out, measured_on=device)
        assert result.genome_hash == winner.hash
        measured_doc = json.loads((out / "manifest.json").read_text())["measured"]
        assert measured_doc["device"] == device and measured_doc["ratio"] == ratio
