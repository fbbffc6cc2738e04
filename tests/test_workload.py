"""`tsopt tune gemm --workload FILE` and `--m` ranges, through the real command line and a real
database: bad input (one line, exit 2, nothing written), the plan of studies, and a workload
run interrupted and resumed with nothing recorded lost (real DSL builds of two small GEMMs).

The buckets are tuned as fixed-M stand-ins (TSOPT_BUCKET_KERNELS=fixed-m-standin), named as
such in their studies: this tree has no runtime-M GEMM kernels yet (issue 30's runtime-M part).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tsopt.app.serving_tune import FIXED_M, RUNTIME_M, STANDIN, plan_studies
from tsopt.app.workload import read_workload
from tsopt.core.errors import UserInputError
from tsopt.core.problem import Problem

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama3_8b_layer.toml"
HAS_RUNTIME_M = "m_range" in {f.name for f in dataclasses.fields(Problem)}


def tsopt(*args: str, cwd: Path, standin: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=str(ROOT), CUTE_DSL_ARCH="sm_90a")
    if standin:
        env["TSOPT_BUCKET_KERNELS"] = STANDIN
    return subprocess.run([sys.executable, "-m", "tsopt", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=900, check=False)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    return lines[0]


BAD = [
    ("unknown-key.toml", '[[problem]]\nname = "qkv"\nnn = 6144\nk = 4096\nm = "1-128"\n',
     "workload unknown-key.toml: problem 1 (qkv): unknown key 'nn' (known: name, n, k, m, dtype)"),
    ("empty-range.toml", '[[problem]]\nname = "qkv"\nn = 6144\nk = 4096\nm = "128-1"\n',
     "problem 1 (qkv): m: M range 128-1 is empty: its end is below its start"),
    ("zero.toml", '[[problem]]\nname = "o"\nn = 4096\nk = 4096\nm = "0-16"\n',
     "problem 1 (o): m: M range 0-16: M starts at 1"),
    ("top-key.toml", 'models = 1\n[[problem]]\nname = "o"\nn = 4096\nk = 4096\nm = 8\n',
     "unknown key 'models' (known at the top: name, dtype, m, problem"),
    ("twice.json", json.dumps([{"name": "o", "n": 8, "k": 8, "m": 4},
                               {"name": "o", "n": 16, "k": 8, "m": 4}]),
     "problems 1 and 2 are both named 'o'"),
    ("no-m.json", json.dumps({"problem": [{"name": "o", "n": 8, "k": 8}]}),
     "problem 1 (o): missing 'm'"),
    ("negative.json", json.dumps([{"name": "o", "n": -8, "k": 8, "m": 4}]),
     "problem 1 (o): n = -8 must be a positive integer"),
    ("dtype.json", json.dumps([{"name": "o", "n": 8, "k": 8, "m": 4, "dtype": "fp8"}]),
     "problem 1 (o): dtype = 'fp8' is not a dtype"),
    ("not.toml", "[[problem]\n", "workload not.toml: not TOML"),
    ("model.yaml", "problem: []\n", "expected a .toml or .json file"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_workload_gets_one_line_and_exit_2(tmp_path: Path, name: str, text: str,
                                                 message: str) -> None:
    (tmp_path / name).write_text(text)
    line = one_line(tsopt("tune", "gemm", "--workload", name, "--built", "1", cwd=tmp_path))
    assert message in line, line
    assert not (tmp_path / "tsopt.db").exists()  # refused before the database is touched


@pytest.mark.parametrize(("args", "message"), [
    (("--m", "1-32", "--n", "256", "--k", "256", "--study", "mine"), "--study 'mine' names one study"),
    (("--workload", str(EXAMPLE), "--n", "4096"), "gives every problem's sizes; drop --n"),
    (("--m", "32-1", "--n", "256", "--k", "256"), "--m: M range 32-1 is empty"),
    (("--n", "256", "--k", "256"), "missing option --m (or give --workload FILE)"),
], ids=["study", "sizes-and-workload", "range", "no-m"])
def test_bad_options_of_a_run_of_several_get_one_line(tmp_path: Path, args: tuple[str, ...],
                                                      message: str) -> None:
    line = one_line(tsopt("tune", "gemm", *args, "--built", "1", cwd=tmp_path))
    assert message in line, line
    assert not (tmp_path / "tsopt.db").exists()


@pytest.mark.skipif(HAS_RUNTIME_M, reason="runtime-M problems exist: a range is tuned as one")
def test_a_range_without_runtime_m_kernels_says_what_to_do(tmp_path: Path) -> None:
    line = one_line(tsopt("tune", "gemm", "--m", "1-32", "--n", "256", "--k", "256",
                          "--built", "1", cwd=tmp_path, standin=False))
    assert "no runtime-M GEMM kernels yet" in line and "TSOPT_BUCKET_KERNELS=fixed-m-standin" in line


def test_the_example_workload_plans_four_buckets_per_projection() -> None:
    workload = read_workload(EXAMPLE)
    assert [(g.name, g.n, g.k, g.m_range, g.dtype) for g in workload.gemms] == [
        ("qkv", 6144, 4096, (1, 128), "bf16"), ("o", 4096, 4096, (1, 128), "bf16"),
        ("gate_up", 28672, 4096, (1, 128), "bf16"), ("down", 4096, 14336, (1, 128), "bf16")]
    planned = plan_studies(workload.gemms, "sm_90a", None, STANDIN)
    assert len(planned) == 16 and {p.kernel for p in planned} == {STANDIN}
    qkv = [p for p in planned if p.names == ("qkv",)]
    assert [(p.bucket, p.problem["m"], p.m_range) for p in qkv] == [
        ((1, 16), 16, (16, 16)), ((17, 32), 32, (32, 32)), ((33, 64), 64, (64, 64)),
        ((65, 128), 128, (128, 128))]
    assert qkv[0].study == "gemm-bf16-16x6144x4096-sm_90a-standin-1-16"
    if HAS_RUNTIME_M:
        runtime = plan_studies(workload.gemms, "sm_90a", None, RUNTIME_M)
        assert [p.m_range for p in runtime[:4]] == [(1, 16), (17, 32), (33, 64), (65, 128)]
        assert runtime[0].samples == (1, 8, 13, 16)
    else:
        with pytest.raises(UserInputError, match="no runtime-M GEMM kernels yet"):
            plan_studies(workload.gemms, "sm_90a", None, RUNTIME_M)


def test_exact_ms_plan_fixed_m_studies_and_shared_shapes_share_them(tmp_path: Path) -> None:
    (tmp_path / "w.json").write_text(json.dumps([
        {"name": "o", "n": 4096, "k": 4096, "m": "1,8"},
        {"name": "o2", "n": 4096, "k": 4096, "m": "8,64"}]))
    planned = plan_studies(read_workload(tmp_path / "w.json").gemms, "sm_90a", None, STANDIN)
    assert [(p.names, p.problem["m"], p.kernel, p.study) for p in planned] == [
        (("o",), 1, FIXED_M, None), (("o", "o2"), 8, FIXED_M, None), (("o2",), 64, FIXED_M, None)]


def _counts(db: Path) -> dict[str, tuple[int, int]]:
    """Per study: candidates, and candidates with a recorded build."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT s.name, COUNT(c.id), COUNT(c.build_id) FROM tsopt_study s "
            "JOIN tsopt_candidate c ON c.study_id = s.id GROUP BY s.name").fetchall()
    return {name: (candidates, built) for name, candidates, built in rows}


@pytest.mark.slow
def test_a_workload_run_interrupted_and_resumed_loses_nothing(tmp_path: Path) -> None:
    (tmp_path / "layer.toml").write_text(
        'name = "tiny"\nm = "1-32"\n[[problem]]\nname = "up"\nn = 256\nk = 256\n')
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=str(ROOT), CUTE_DSL_ARCH="sm_90a",
               TSOPT_BUCKET_KERNELS=STANDIN)
    # Three builds a study (about 2.5 CPU-s each): with two, the second study once finished
    # within the 2 s between its "[2/2]" line and the interrupt (a fresh-clone CI run on
    # 2026-12-05 read exit 0 for 130).
    command = [sys.executable, "-m", "tsopt", "tune", "gemm", "--workload", "layer.toml",
               "--built", "3", "--db", "sqlite:///w.db"]
    # The default SIGINT action, whatever the test's own: a test run started in the background
    # of a non-interactive shell (`.ci/run &`) hands its children SIGINT ignored, and then an
    # interrupt before the driver's handler (the seed library's re-fit) was lost: exit 0, not
    # 130 (fresh-clone run on 2026-12-06).
    run = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    assert run.stdout is not None
    for line in run.stdout:  # interrupt once the second study is under way
        seen.append(line)
        if line.startswith("[2/2]"):
            time.sleep(2)
            run.send_signal(signal.SIGINT)
            break
    rest, _ = run.communicate(timeout=600)
    first = "".join(seen) + rest
    assert run.returncode == 130, first
    assert "interrupted: run the same command to resume" in first
    before = _counts(tmp_path / "w.db")
    standin_1 = "gemm-bf16-16x256x256-sm_90a-standin-1-16"
    standin_2 = "gemm-bf16-32x256x256-sm_90a-standin-17-32"
    assert before[standin_1][1] == 3, before  # the first study ran to its budget
    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    after = _counts(tmp_path / "w.db")
    for study, (candidates, built) in before.items():
        assert after[study][0] >= candidates and after[study][1] >= built, (before, after)
    assert after[standin_1] == before[standin_1]  # finished: nothing proposed or built again
    assert after[standin_2][1] == 3, after
    assert "2 of 2 studies run" in again.stdout and "fixed-M stand-in" in again.stdout
    with sqlite3.connect(tmp_path / "w.db") as conn:
        configs = [json.loads(c) for (c,) in conn.execute(
            "SELECT config_json FROM tsopt_study ORDER BY name")]
    assert [c["serving"]["bucket"] for c in configs] == [[1, 16], [17, 32]]
    assert {c["serving"]["kernel"] for c in configs} == {STANDIN}


# -- one package for a workload, from real H200 measurements ---------------------------------------
ARCHIVED = ROOT / "tests" / "fixtures" / "serving" / "archived_h200.json"
"""The seed library's best kernel of 16x4096x4096 (c655ff32c673) and of 64x4096x4096
(6be6e076753c) with the measurement an H200 study recorded of each (cut from
evidence/tune_gpu.tar.xz's study databases; each entry names its study)."""


def _archived(m: int, scratch: Path) -> tuple[object, object]:
    """(genome, Measurement) of the H200 measurement of the kernel for ``m``."""
    from tsopt.core.genome import Genome
    from tsopt.core.records import Measurement

    entry = json.loads(ARCHIVED.read_text())[str(m)]
    return Genome.from_dict(entry["genome"]), Measurement.from_dict(entry["measurement"])


def _vendor_floor_leaves_the_slower_to_torch(tmp_path: Path, studies: dict[int, str]) -> None:
    """--vendor-floor between the two kernels' recorded ratios: the slower one is left to
    torch.matmul, said in one line naming its ratio; the other is exported as before."""
    ratios = {m: _archived(m, tmp_path)[1].ratio for m in studies}  # type: ignore[attr-defined]
    low, high = sorted(ratios, key=lambda m: ratios[m])
    assert ratios[low] < ratios[high], ratios
    floor = (ratios[low] + ratios[high]) / 2
    floored = tsopt("export", "--workload", "w.toml", "--db", "sqlite:///w.db", "--out", "pkg2",
                    "--vendor-floor", f"{floor:.6f}", cwd=tmp_path)
    assert floored.returncode == 0, floored.stdout + floored.stderr
    said = " ".join(floored.stdout.split())
    assert f"reads {ratios[low]:.3f}x" in said and f"below --vendor-floor {floor:.6g}" in said, said
    assert said.count("its Ms fall back to torch.matmul") == 1, said
    manifest = json.loads((tmp_path / "pkg2" / "manifest.json").read_text())
    assert [k["name"] for k in manifest["kernels"]] == [f"gemm_bf16_{high}x4096x4096"]
    # the study left out is a vendor route of the package: the op runs torch there, silently
    (route,) = manifest["vendor_routes"]
    assert (route["op"], route["dtype"], route["n"], route["k"]) == ("gemm", "bf16", 4096, 4096)
    assert route["m_range"] == [low, low] and "below --vendor-floor" in route["why"]
    refused = tsopt("export", "--workload", "w.toml", "--db", "sqlite:///w.db", "--out", "pkg3",
                    "--vendor-floor", "nan", cwd=tmp_path)
    assert refused.returncode == 2 and "--vendor-floor nan must be a ratio above 0" in refused.stderr
    assert not (tmp_path / "pkg3").exists()


def _measured_again_on_another_card(tmp_path: Path, studies: dict[int, str]) -> None:
    """The M=64 kernel measured again on another card: the export no longer ranks across the
    two (one line, exit 2); --measured-on ranks each study on that card alone, and a study
    never measured on it falls back to torch.matmul, said in one line."""
    from tsopt.core.records import Measurement
    from tsopt.db.store import Store

    h100 = "NVIDIA H100 80GB HBM3"
    genome, measurement = _archived(64, tmp_path)
    with Store(f"sqlite:///{tmp_path / 'w.db'}") as store:
        again = {**measurement.to_dict(), "device": h100}  # type: ignore[attr-defined]
        assert store.record_measurement(store.candidate_id(studies[64], genome.hash),  # type: ignore[arg-type, attr-defined]
                                        Measurement.from_dict(again), "h100-again")
    pooled = tsopt("export", "--workload", "w.toml", "--db", "sqlite:///w.db", "--out", "pkg4",
                   cwd=tmp_path)
    lines = [line for line in pooled.stderr.splitlines() if line.strip()]
    assert pooled.returncode == 2 and len(lines) == 1, pooled.stdout + pooled.stderr
    assert f"{studies[64]}' was measured on 2 GPUs" in lines[0] and "--measured-on" in lines[0]
    assert not (tmp_path / "pkg4").exists()
    on_h100 = tsopt("export", "--workload", "w.toml", "--db", "sqlite:///w.db", "--out", "pkg5",
                    "--measured-on", h100, cwd=tmp_path)
    assert on_h100.returncode == 0, on_h100.stdout + on_h100.stderr
    said = " ".join(on_h100.stdout.split())
    assert f"{studies[16]} has no correct timed candidate measured on {h100}" in said, said
    kernels = json.loads((tmp_path / "pkg5" / "manifest.json").read_text())["kernels"]
    assert [(k["name"], k["device"]) for k in kernels] == [("gemm_bf16_64x4096x4096", h100)]


@pytest.mark.slow
def test_a_workload_exports_as_one_package_that_says_which_kernel_serves_which_m(
        tmp_path: Path) -> None:
    """Two studies made by the real command (a bucket 1-16 as its fixed-M stand-in, an exact
    M=64), each given the seed library's kernel of its shape, verified and built here, with the
    measurement an H200 study recorded of it; then `tsopt export --workload` and the package's
    routing table, loaded with torch and the package alone."""
    from tsopt.core.registry import get_space
    from tsopt.db.store import Store
    from tsopt.search.pipeline import CandidatePipeline

    (tmp_path / "w.toml").write_text(
        'name = "pair"\n[[problem]]\nname = "up"\nn = 4096\nk = 4096\nm = "1-16"\n'
        '[[problem]]\nname = "down"\nn = 4096\nk = 4096\nm = 64\n')
    tuned = tsopt("tune", "gemm", "--workload", "w.toml", "--built", "1", "--db",
                  "sqlite:///w.db", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    studies = {16: "gemm-bf16-16x4096x4096-sm_90a-standin-1-16", 64: "gemm-bf16-64x4096x4096-sm_90a"}
    space = get_space("gemm")
    with Store(f"sqlite:///{tmp_path / 'w.db'}") as store:
        for m, study in studies.items():
            genome, measurement = _archived(m, tmp_path)
            problem = store.get_study(study).problem  # type: ignore[union-attr]
            pipeline = CandidatePipeline(store, space, problem, "sm_90a", study,
                                         tmp_path / ".tsopt" / "artifacts")
            candidate = store.candidate_id(study, genome.hash) or store.add_candidate(
                study, genome, "seed")  # type: ignore[arg-type]
            assert pipeline.verify(candidate, genome).valid  # type: ignore[arg-type]
            assert pipeline.build(candidate, genome).ok  # type: ignore[arg-type]
            assert store.record_measurement(candidate, measurement, "h200-archive")  # type: ignore[arg-type]
    exported = tsopt("export", "--workload", "w.toml", "--db", "sqlite:///w.db", "--out", "pkg",
                     cwd=tmp_path)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    text = " ".join(exported.stdout.split())
    assert "fixed M=16: a FIXED-M STAND-IN for bucket 1-16, serving its one M" in text, text
    assert "as torch.ops.tsopt.gemm_bf16_64x4096x4096 in gemm_bf16_64x4096x4096/, fixed M=64" in text
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    kernels = {k["name"]: k for k in manifest["kernels"]}
    assert {n: (k["m_range"], k["runtime_m"], k["serving"]["kernel"]) for n, k in kernels.items()} == {
        "gemm_bf16_16x4096x4096": ([16, 16], False, STANDIN),
        "gemm_bf16_64x4096x4096": ([64, 64], False, FIXED_M)}
    assert kernels["gemm_bf16_16x4096x4096"]["serving"]["bucket"] == [1, 16]
    assert manifest["vendor_routes"] == []  # every planned study exported
    probe = (
        "import sys, json, warnings, torch; sys.path.insert(0, 'pkg'); import torch_ops\n"
        "torch_ops.load('pkg', preload=False)\n"
        "route = {m: getattr(torch_ops.kernel_for('gemm', 'bf16', (('m', m), ('n', 4096), "
        "('k', 4096))), 'name', None) for m in (1, 16, 17, 64, 65)}\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    out = torch.ops.tsopt.gemm(torch.zeros(20, 4096, dtype=torch.bfloat16), "
        "torch.zeros(4096, 4096, dtype=torch.bfloat16))\n"
        "print(json.dumps({'route': route, 'warned': [str(w.message) for w in seen], "
        "'shape': list(out.shape)}))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    loaded = subprocess.run([sys.executable, "-I", "-c", probe], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    assert loaded.returncode == 0, loaded.stderr
    found = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert found["route"] == {"1": None, "16": "gemm_bf16_16x4096x4096", "17": None,
                              "64": "gemm_bf16_64x4096x4096", "65": None}
    assert found["shape"] == [20, 4096] and len(found["warned"]) == 1
    assert "m=20 n=4096 k=4096: no tuned kernel" in found["warned"][0]

    _vendor_floor_leaves_the_slower_to_torch(tmp_path, studies)
    _measured_again_on_another_card(tmp_path, studies)
