"""Device profiles (issue 29, item 1): the SM count is the target GPU's, not a constant.

The same stream-K and persistent GEMM genomes compiled for an H200 (132 SMs) and an H100 PCIe
(114) get other grids, other stream-K layouts, other cache keys and artifact.json files; the
loader refuses a kernel built for another SM count (the GPU's SM-count query is simulated,
named as such: there is no GPU here); a bad ``--device`` is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tsopt.core.devices import (  # noqa: E402
    DEFAULT_PROFILE,
    PROFILES,
    default_profile,
    get_profile,
    profile_for_gpu,
)
from tsopt.core.errors import UserInputError  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search.cost_model import gemm_estimate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SKINNY = Problem.of("gemm", "bf16", m=128, n=8192, k=8192)
BIG = Problem.of("gemm", "bf16", m=8192, n=8192, k=8192)
STREAM_K = {"stream_k": True, "persistent": True, "swap_ab": True, "tile_m": 64, "consumers": 1,
            "consumer_regs": 232, "tile_n": 128, "stages": 6, "epilogue": "tma_store"}
H200, PCIE = PROFILES["H200_SXM"], PROFILES["H100_PCIE"]


@pytest.fixture(scope="module")
def space():
    return get_space("gemm")


def test_profiles_carry_datasheet_figures_for_every_hopper_part() -> None:
    for pid, sms in (("H100_SXM", 132), ("H100_PCIE", 114), ("H800_SXM", 132), ("H20", 78),
                     ("H200_SXM", 132), ("B200", 148)):
        p = PROFILES[pid]
        assert p.sm_count == sms and p.memory_bytes > 0 and p.hbm_bytes_per_s > 0
        assert p.bf16_tflops > 0 and p.fp16_tflops > 0
        assert get_profile(pid) is p
    assert default_profile("sm_90a") is H200 and DEFAULT_PROFILE["sm_100a"] == "B200"
    assert PROFILES["H20"].bf16_tflops < PCIE.bf16_tflops < H200.bf16_tflops


def test_a_bad_device_is_one_line_listing_the_known_and_another_arch_is_refused() -> None:
    with pytest.raises(UserInputError) as bad:
        get_profile("H300")
    text = str(bad.value)
    assert "'H300'" in text and "H100_PCIE" in text and "H20" in text and "\n" not in text
    with pytest.raises(UserInputError, match="'B200' is an sm_100a GPU; this build targets sm_90a"):
        get_profile("B200", "sm_90a")
    with pytest.raises(UserInputError, match="H200_SXM has 132 SMs"):
        get_profile("H200_SXM-133SM")
    slice_ = get_profile("H200_SXM-66SM", "sm_90a")
    assert (slice_.sm_count, slice_.derived_from, slice_.bf16_tflops) == (66, "H200_SXM", 494.7)


def test_the_gpu_that_measures_picks_its_profile_or_a_derived_one() -> None:
    # Simulated GPUs: the names torch.cuda.get_device_name gives, with their SM counts.
    seen = {(n, s): profile_for_gpu(n, s, "sm_90a").id for n, s in (
        ("NVIDIA H200", 132), ("NVIDIA H100 PCIe", 114), ("NVIDIA H100 80GB HBM3", 132),
        ("NVIDIA H20", 78), ("NVIDIA H800", 132), ("NVIDIA H200 NVL", 132),
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 60), ("NVIDIA H200", 78),
        ("Some New Hopper", 120))}
    assert seen == {
        ("NVIDIA H200", 132): "H200_SXM", ("NVIDIA H100 PCIe", 114): "H100_PCIE",
        ("NVIDIA H100 80GB HBM3", 132): "H100_SXM", ("NVIDIA H20", 78): "H20",
        ("NVIDIA H800", 132): "H800_SXM", ("NVIDIA H200 NVL", 132): "H200_NVL",
        # A MIG slice, an H200 whose 78 SMs are not an H20's, an unknown part: derived.
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 60): "H100_SXM-60SM",
        ("NVIDIA H200", 78): "H200_SXM-78SM", ("Some New Hopper", 120): "H200_SXM-120SM",
    }


def test_the_configuration_and_the_cost_model_count_the_targets_sms(space) -> None:
    g = space.genome(**STREAM_K)
    big = space.genome(persistent=True)
    for profile in (H200, PCIE, PROFILES["H20"]):
        cfg = space.config(g, SKINNY, profile)
        assert cfg.grid == (1, 1, profile.sm_count) and cfg.sk_plan.ctas == profile.sm_count
        assert cfg.workspace_bytes == profile.sm_count * (64 * 128 * 4 + 4)
        assert space.config(big, BIG, profile).grid == (1, 1, profile.sm_count)
    genes = dict(big.genes)
    waves = {p.id: gemm_estimate(genes, BIG.sizes, device=p).terms["waves"]
             for p in (H200, PCIE)}
    # 2048 tiles of 128x256: 15.5 waves of 132, 18.0 of 114.
    assert waves == {"H200_SXM": pytest.approx(2048 / 132), "H100_PCIE": pytest.approx(2048 / 114)}


@pytest.mark.slow
def test_one_genome_built_for_two_gpus_gets_two_grids_keys_and_manifests(space, tmp_path) -> None:
    from tsopt.build.builder import build_candidate, cache_key

    g = space.genome(**STREAM_K)
    built = {}
    for profile in (H200, PCIE):
        result = build_candidate(space, g, SKINNY, "sm_90a", cache_dir=tmp_path / "art",
                                 device=profile.id)
        assert result.ok, result.error
        assert result.cache_key == cache_key(g, SKINNY, "sm_90a", space.source_digest(), profile)
        directory = Path(result.artifact_dir)
        built[profile.id] = (result, json.loads((directory / "artifact.json").read_text()),
                             (directory / "shim.c").read_text(),
                             (directory / "kernel.cubin").read_bytes())
    (a, ma, sa, ca), (b, mb, sb, cb) = built["H200_SXM"], built["H100_PCIE"]
    assert a.cache_key != b.cache_key
    # The default profile's artifacts keep the key they had before profiles existed.
    assert a.cache_key == cache_key(g, SKINNY, "sm_90a", space.source_digest())
    assert ma["launch"]["grid"] == [1, 1, 132] and mb["launch"]["grid"] == [1, 1, 114]
    assert (ma["device"]["id"], ma["device"]["sm_count"]) == ("H200_SXM", 132)
    assert (mb["device"]["id"], mb["device"]["sm_count"]) == ("H100_PCIE", 114)
    assert (ma["launch"]["decomposition_sms"], mb["launch"]["decomposition_sms"]) == (132, 114)
    # The workspace (a partial tile and a flag per CTA and warpgroup) is sized per GPU, and
    # the compiled kernel itself differs (the plan's CTA count is compiled in).
    assert f"{132 * (64 * 128 * 4 + 4)}ull" in sa and f"{114 * (64 * 128 * 4 + 4)}ull" in sb
    assert ca != cb


def _loader(monkeypatch, sms: int):
    """workers/loader.py with the GPU's SM-count query simulated (there is no GPU here): one
    visible device of ``sms`` SMs."""
    import torch

    from tsopt.workers import loader

    monkeypatch.setattr(loader, "gpu_sm_count", lambda device: sms)  # simulated GPU query
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "simulated GPU")
    return loader


def _artifact(directory: Path, decomposition_sms: int | None, device: str) -> Path:
    directory.mkdir(parents=True)
    launch = {"grid": [1, 1, decomposition_sms or 64]}
    if decomposition_sms is not None:
        launch["decomposition_sms"] = decomposition_sms
    (directory / "artifact.json").write_text(json.dumps({
        "abi": 1, "genome_hash": "f" * 64, "space": "gemm", "problem": SKINNY.to_dict(),
        "arch": "sm_90a", "launch": launch, "device": {"id": device},
        "tensors": [{"name": "a", "role": "input", "shape": [128, 8192], "dtype": "bf16"}]}))
    return directory


def test_the_loader_refuses_a_kernel_built_for_another_sm_count(monkeypatch, tmp_path) -> None:
    loader = _loader(monkeypatch, 114)  # a simulated H100 PCIe
    built_for_h200 = _artifact(tmp_path / "k132", 132, "H200_SXM")
    manifest = loader.KernelManifest.read(built_for_h200)
    assert (manifest.decomposition_sms, manifest.device) == (132, "H200_SXM")
    with pytest.raises(loader.KernelLoadError) as refused:
        loader.check_decomposition(built_for_h200, manifest.decomposition_sms, manifest.device)
    line = str(refused.value)
    assert "built for 132 SMs (H200_SXM)" in line and "has 114 SMs" in line and "\n" not in line
    # LoadedKernel refuses at load, before the library's module is loaded.
    kernel = object.__new__(loader.LoadedKernel)
    kernel.directory, kernel.manifest, kernel._loaded = built_for_h200, manifest, False
    with pytest.raises(loader.KernelLoadError, match="132 SMs"):
        kernel.load_module()
    # Its own SM count, or a grid sized for none, loads.
    ok = _artifact(tmp_path / "k114", 114, "H100_PCIE")
    loader.check_decomposition(ok, loader.KernelManifest.read(ok).decomposition_sms)
    free = _artifact(tmp_path / "free", None, "H200_SXM")
    assert loader.KernelManifest.read(free).decomposition_sms is None


def test_tune_refuses_an_unknown_device_with_exit_2(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tsopt", "tune", "gemm", "--m", "128", "--n", "8192", "--k",
         "8192", "--device", "H300", "--trials", "1", "--db", f"sqlite:///{tmp_path}/t.db"],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = [line for line in (done.stderr + done.stdout).splitlines() if "H300" in line]
    assert len(lines) == 1 and "H100_PCIE" in lines[0], done.stderr + done.stdout
    assert not (tmp_path / "t.db").exists()  # refused before anything was recorded


SK_WHOLE_WAVE_ON_PCIE = Problem.of("gemm", "bf16", m=128, n=64 * 114, k=4096)
"""Swapped, 114 tiles of 64x128: one whole wave on an H100 PCIe, 0.86 of one on an H200."""


def test_a_verdict_is_for_the_target_gpu(space) -> None:
    from tsopt.verify.verifier import VerdictCache, judged_key, verify_genome

    g = space.genome(**STREAM_K)
    verdicts, keys = {}, {}
    for profile in (H200, PCIE):
        judged = get_space("gemm")
        judged.device = profile
        verdicts[profile.id] = verify_genome(g, SK_WHOLE_WAVE_ON_PCIE, space=judged,
                                             cache=VerdictCache())
        keys[profile.id] = judged_key(judged, g, SK_WHOLE_WAVE_ON_PCIE)
    assert verdicts["H200_SXM"].valid, verdicts["H200_SXM"].summary()
    refused = verdicts["H100_PCIE"]
    assert not refused.valid and refused.rule == "tsopt.stream_k"
    assert "1 whole wave(s) of 114 CTAs: nothing to balance" in refused.message
    # Whole verdicts are memoised (and shared through the database) per SM count.
    assert keys["H200_SXM"].arch == "sm_90a" and keys["H100_PCIE"].arch == "sm_90a/114SM"


def _tune(tmp_path: Path, **fields):
    import io

    from rich.console import Console

    from tsopt.search.driver import Driver
    from tsopt.search.request import TuneRequest

    out = io.StringIO()
    request = TuneRequest(
        space="copy", problem=Problem.of("copy", "fp16", rows=256, cols=512), trials=1,
        sampler="random", db_url=f"sqlite:///{tmp_path}/tune.db", cache_dir=tmp_path / "art",
        bundle_dir=tmp_path / "bundles" / str(fields.get("study")), measure="never",
        warm_start=False, library=False, **fields)
    driver = Driver(request, Console(file=out, width=300))
    return driver, driver.run(), out.getvalue()


@pytest.mark.slow
def test_a_study_records_its_profile_and_a_resume_for_another_gpu_is_refused(tmp_path) -> None:
    from tsopt.db.store import Store

    driver, code, text = _tune(tmp_path, study="one")
    assert code == 0, text
    assert "device: H200_SXM (NVIDIA H200 SXM, 132 SMs): the sm_90a default, as no GPU measures" in text
    assert "built for H200_SXM" in text.split("device:")[-1]  # said again in the summary
    with Store(f"sqlite:///{tmp_path}/tune.db") as store:
        info = store.get_study("one")
        assert info is not None and info.config["device"] == {"id": "H200_SXM", "sm_count": 132}
        built = [c.build for c in store.candidates("one") if c.build is not None and c.build.ok]
    assert built
    manifest = json.loads((Path(built[0].artifact_dir) / "artifact.json").read_text())
    assert manifest["device"]["id"] == "H200_SXM" and manifest["device"]["sm_count"] == 132
    with pytest.raises(UserInputError, match=r"was built for H200_SXM \(132 SMs\); this run "
                                             r"targets H100_PCIE"):
        _tune(tmp_path, study="one", device="H100_PCIE")
    # Without --study, another GPU's run is another study.
    driver, code, text = _tune(tmp_path, device="H100_PCIE")
    assert code == 0 and driver.name.endswith("-sm_90a-H100_PCIE"), text
    assert "device: H100_PCIE (NVIDIA H100 PCIe, 114 SMs): chosen with --device" in text


def test_the_measuring_side_refuses_it_before_opening_the_library(monkeypatch, tmp_path) -> None:
    import torch

    from tsopt.core.artifact import ArtifactManifest
    from tsopt.workers import device as measuring_device

    loader = _loader(monkeypatch, 114)  # a simulated H100 PCIe
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    built = _artifact(tmp_path / "k132", 132, "H200_SXM")
    with pytest.raises(loader.KernelLoadError, match=r"built for 132 SMs \(H200_SXM\) but GPU 0 "
                                                     r"\(simulated GPU\) has 114 SMs"):
        measuring_device.open_library(built, ArtifactManifest.read(built))


def test_the_torch_op_refuses_it_before_registering_anything(monkeypatch, tmp_path) -> None:
    from tsopt.workers import torch_ops

    loader = _loader(monkeypatch, 114)  # a simulated H100 PCIe
    kernel = tmp_path / "gemm_bf16_128x8192x8192"
    _artifact(kernel, 132, "H200_SXM")
    doc = json.loads((kernel / "artifact.json").read_text())
    doc["tensors"] = [{"name": n, "role": r, "shape": s, "dtype": "bf16"} for n, r, s in (
        ("a", "input", [128, 8192]), ("b", "input", [8192, 8192]), ("d", "output", [128, 8192]))]
    (kernel / "artifact.json").write_text(json.dumps(doc))
    (tmp_path / "manifest.json").write_text(json.dumps({
        "format": "tsopt-export", "version": 2, "package": True, "files": {}, "kernels": [{
            "name": kernel.name, "op": "gemm", "dtype": "bf16", "dir": kernel.name,
            "sizes": [["m", 128], ["n", 8192], ["k", 8192]], "genome_hash": "f" * 64}]}))
    with pytest.raises(loader.KernelLoadError, match="built for 132 SMs .* has 114 SMs"):
        torch_ops.load(tmp_path, preload=False)
    assert kernel.name not in {k.name for k in torch_ops.registered()}


@pytest.mark.slow
def test_an_export_is_built_for_its_studys_profile(tmp_path) -> None:
    from tests.fixtures import FIXTURES
    from tsopt.app.export import export_candidate
    from tsopt.core.genome import Genome
    from tsopt.core.records import Measurement
    from tsopt.db.store import Store
    from tsopt.search.pipeline import CandidatePipeline

    evidence = FIXTURES / "copy_h200" / "copy-4096-fenced"  # cut from bench/copy_h200's
    manifest = json.loads((evidence / "manifest.json").read_text())
    results = json.loads((evidence / "results.json").read_text())
    doc = manifest["candidates"][0]
    # The H200's timing stands in for one on an H100 PCIe: the test is of the plumbing only.
    measured = next(m for m in results["measurements"] if m["genome_hash"] == doc["genome_hash"])
    problem = Problem.from_dict(manifest["problem"])
    copy = get_space("copy")
    genome = copy.genome(**{**Genome.from_dict(doc["genome"]).genes, "persistent": True,
                            "ctas_per_sm": 1})
    copy.device = PCIE
    store = Store(f"sqlite:///{tmp_path / 'tsopt.db'}")
    store.create_or_get_study("pcie", "copy", problem, "sm_90a", "tpe",
                              {"device": {"id": "H100_PCIE", "sm_count": 114}})
    pipeline = CandidatePipeline(store, copy, problem, "sm_90a", "pcie", tmp_path / "art")
    candidate = store.add_candidate("pcie", genome, "suggest")
    assert pipeline.verify(candidate, genome).valid
    assert pipeline.build(candidate, genome).ok
    assert store.record_measurement(candidate, Measurement.from_dict(
        {**measured, "genome_hash": genome.hash}), "stand-in")
    out = tmp_path / "out"
    export_candidate(store, "pcie", out)  # its build's cache key is the PCIe one: current
    exported = json.loads((out / "manifest.json").read_text())
    assert exported["kernels"][0]["built_for"] == {"id": "H100_PCIE", "sm_count": 114}
    artifact = json.loads((out / "artifact.json").read_text())
    assert artifact["device"]["sm_count"] == 114 and artifact["launch"]["decomposition_sms"] == 114
    assert "sm_count=114" in (out / "kernel.py").read_text()
