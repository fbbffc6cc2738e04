"""The torch op's routing by M (workers/torch_ops.py): a package of fixed-M and runtime-M GEMM
kernels for one (N, K); exact fixed-M first, then the narrowest range holding M, else
torch.matmul with one warning per shape; a runtime-M kernel's own op naming the expected size
of whatever differs; torch.compile(fullgraph=True) with a dynamic M tracing once.

There is no GPU here: the kernels run on a SIMULATED device, named as such. Each kernel's
``libkernel.so`` is compiled here from a few lines of C that record the launches they get and
launch nothing; CPU tensors pass as if on the device (the device check is the one problem
dropped), the current device and stream are constants. What stays real: the manifests and
artifact.json files of the export format, the registration, the routing, the checks, the
signature caches, the output allocation and the ctypes call. The runtime-M kernels are
stand-ins too: an artifact.json that says ``m_range`` beside a recording library (runtime-M
kernels themselves are the runtime-m work of issue 30). On the GPU machine,
``bench/serving/check_dispatch.py`` runs the same routing on real kernels.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tsopt.workers import torch_ops
from tsopt.workers.torch_ops import FallbackWarning, KernelInputError, KernelLoadError

N, K = 24, 128  # sizes no other test module registers (the registry is the process's)

RECORDING_LAUNCH_C = """
static int launches;
static void *first;
int tsopt_load(void) { return 0; }
static int last_m;
int tsopt_launch(void **data, int n, void *stream) { (void)n; (void)stream; first = data[0];
  return ++launches > 0 ? 0 : 1; }
int tsopt_launch_m(void **data, int n, int m, void *stream) { last_m = m;
  return tsopt_launch(data, n, stream); }
int sim_launches(void) { return launches; }
int sim_last_m(void) { return last_m; }
void *sim_first(void) { return first; }
"""


def _kernel_dir(directory: Path, m: int, m_range: tuple[int, int] | None, genome: str,
                n: int = N) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"library": "libkernel.so", "genome_hash": genome, "tensors": [
        {"name": "a", "role": "input", "shape": [m, K], "dtype": "bf16"},
        {"name": "b", "role": "input", "shape": [n, K], "dtype": "bf16"},
        {"name": "d", "role": "output", "shape": [m, n], "dtype": "bf16"}]}
    if m_range is not None:  # as the builder writes a runtime-M kernel's: A's and D's rows
        doc["m_range"] = list(m_range)
        for tensor in (doc["tensors"][0], doc["tensors"][2]):
            tensor["runtime_dims"] = [0]
    (directory / "artifact.json").write_text(json.dumps(doc))
    (directory / "sim.c").write_text(RECORDING_LAUNCH_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(directory / "libkernel.so"),
                    str(directory / "sim.c")], check=True)


def write_package(top: Path, kernels: list[tuple[str, int, tuple[int, int] | None, str]],
                  entry_extra: dict[str, dict[str, Any]] | None = None, n: int = N,
                  vendor_routes: list[dict[str, Any]] | None = None) -> Path:
    """``kernels``: (name, M the tensors are listed at, m_range or None for fixed-M, genome)."""
    entries = []
    for name, m, m_range, genome in kernels:
        _kernel_dir(top / name, m, m_range, genome, n)
        entry = {"name": name, "op": "gemm", "dtype": "bf16", "dir": name,
                 "sizes": [["m", m], ["n", n], ["k", K]], "genome_hash": genome,
                 "m_range": list(m_range) if m_range else [m, m],
                 "runtime_m": m_range is not None}
        entries.append({**entry, **(entry_extra or {}).get(name, {})})
    doc: dict[str, Any] = {"format": "tsopt-export", "version": 2, "package": True,
                           "kernels": entries, "files": {}}
    if vendor_routes is not None:
        doc["vendor_routes"] = vendor_routes
    (top / "manifest.json").write_text(json.dumps(doc))
    return top


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The SIMULATED device (see the module doc) and a package of four kernels for bf16
    N=24 K=128: fixed M=8, runtime 1-16, 17-32 and 1-32; returns each one's recorder."""
    loader = torch_ops._loader
    patch = pytest.MonkeyPatch()
    real = loader.tensor_problems
    patch.setattr(loader, "tensor_problems", lambda spec, t, tracing=False, m_range=None: [
        p for p in real(spec, t, tracing, m_range) if not p.startswith("not on a CUDA device")])
    patch.setattr(loader, "current_device_index", lambda: None)
    patch.setattr(loader, "current_stream_handle", lambda index: 0x5EED)
    top = write_package(tmp_path_factory.mktemp("ranged"), [
        ("gemm_bf16_8x24x128", 8, None, "8" * 64),
        ("gemm_bf16_1_16x24x128", 16, (1, 16), "1" * 64),
        ("gemm_bf16_17_32x24x128", 32, (17, 32), "2" * 64),
        ("gemm_bf16_1_32x24x128", 32, (1, 32), "3" * 64),
    ])
    package = torch_ops.load(top, preload=False)
    recorders = {}
    for kernel in package.kernels:
        recorder = ctypes.CDLL(str(kernel.directory / "libkernel.so"))
        recorder.sim_first.restype = ctypes.c_void_p
        recorders[kernel.name] = recorder
    yield package, recorders
    patch.undo()


def bf16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(torch.bfloat16)


def _launched(recorders: dict[str, Any]) -> dict[str, int]:
    return {name: int(r.sim_launches()) for name, r in recorders.items()}


def test_the_manifest_says_which_kernel_serves_which_ms(simulated: Any) -> None:
    package, _ = simulated
    found = {k.name: (k.m_range, k.runtime_m) for k in package.kernels}
    assert found == {"gemm_bf16_8x24x128": ((8, 8), False),
                     "gemm_bf16_1_16x24x128": ((1, 16), True),
                     "gemm_bf16_17_32x24x128": ((17, 32), True),
                     "gemm_bf16_1_32x24x128": ((1, 32), True)}


@pytest.mark.parametrize(("m", "kernel"), [
    (8, "gemm_bf16_8x24x128"),        # the exact fixed-M kernel, though 1-16 and 1-32 hold 8
    (1, "gemm_bf16_1_16x24x128"),     # the narrowest range holding M
    (16, "gemm_bf16_1_16x24x128"),
    (17, "gemm_bf16_17_32x24x128"),   # 17-32 and 1-32 hold it: the narrower
    (32, "gemm_bf16_17_32x24x128"),
])
def test_the_dispatcher_routes_by_m(simulated: Any, m: int, kernel: str) -> None:
    _, recorders = simulated
    a, b = bf16(m, K), bf16(N, K)
    before = _launched(recorders)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a routed call never warns
        d = torch.ops.tsopt.gemm(a, b)
    after = _launched(recorders)
    assert {n: after[n] - before[n] for n in after if after[n] != before[n]} == {kernel: 1}
    assert recorders[kernel].sim_first() == a.data_ptr()
    assert (d.shape, d.dtype) == ((m, N), torch.bfloat16)  # the call's M rows


def test_an_m_outside_every_bucket_falls_back_with_one_warning_per_shape(simulated: Any) -> None:
    _, recorders = simulated
    b = bf16(N, K)
    before = _launched(recorders)
    for m in (33, 40):
        a = bf16(m, K)
        with pytest.warns(FallbackWarning, match=rf"gemm bf16 m={m} n=24 k=128: no tuned kernel "
                          r"for this shape and dtype \(tuned: .*gemm bf16 1-16x24x128.*\); "
                          r"running torch.matmul"):
            d = torch.ops.tsopt.gemm(a, b)
        assert torch.equal(d, torch.matmul(a, b.t()))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.ops.tsopt.gemm(a, b)  # the same shape: no second warning
    assert _launched(recorders) == before
    seen = {f.sizes: f.calls for f in torch_ops.fallbacks() if f.op == "gemm"}
    assert seen[(("m", 33), ("n", N), ("k", K))] == 2


def test_an_m_the_export_left_to_the_vendor_runs_torch_without_a_warning(
        simulated: Any, tmp_path: Path) -> None:
    # A package for N=40 whose bucket 17-32 the export left to cuBLAS (--vendor-floor): its
    # Ms run torch.matmul silently, counted with the export's reason; an M in no bucket and in
    # no vendor route still warns.
    n = 40
    why = "its best, 0123456789ab, reads 0.950x torch.matmul (cuBLAS), below --vendor-floor 1"
    top = write_package(tmp_path / "floored", [("gemm_bf16_1_16x40x128", 16, (1, 16), "4" * 64)],
                        n=n, vendor_routes=[{"op": "gemm", "dtype": "bf16", "names": ["up"],
                                             "n": n, "k": K, "m_range": [17, 32], "why": why}])
    package = torch_ops.load(top, preload=False)
    assert [(r.m_range, r.why) for r in package.vendor_routes] == [((17, 32), why)]
    b = bf16(n, K)
    for m in (17, 32):
        a = bf16(m, K)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            d = torch.ops.tsopt.gemm(a, b)
        assert torch.equal(d, torch.matmul(a, b.t()))
    reasons = {f.sizes: f.reasons for f in torch_ops.fallbacks() if f.op == "gemm"}
    assert reasons[(("m", 17), ("n", n), ("k", K))] == (
        f"left to torch.matmul(a, b.t()) by the export: {why}",)
    with pytest.warns(FallbackWarning, match=r"m=33 n=40 k=128: no tuned kernel"):
        torch.ops.tsopt.gemm(bf16(33, K), b)
    bad = write_package(tmp_path / "bad", [("gemm_bf16_1_16x40x128", 16, (1, 16), "4" * 64)],
                        n=n, vendor_routes=[{"op": "gemm", "dtype": "bf16", "n": n, "k": K,
                                             "m_range": [17], "why": why}])
    with pytest.raises(KernelLoadError, match=r"manifest.json: vendor route .* is malformed"):
        torch_ops.load(bad, preload=False)


def test_another_n_or_k_falls_back_through_the_dispatcher(simulated: Any) -> None:
    with pytest.warns(FallbackWarning, match=r"m=8 n=25 k=128: no tuned kernel"):
        torch.ops.tsopt.gemm(bf16(8, K), bf16(N + 1, K))


@pytest.mark.parametrize(("a_shape", "b_shape", "message"), [
    ((20, K), (N + 1, K), r"b: N=25, expected N=24"),
    ((20, K - 8), (N, K - 8), r"a: K=120, expected K=128; b: K=120, expected K=128"),
    ((40, K), (N, K), r"a: M=40, outside the kernel's range 17-32"),
], ids=["n", "k", "m"])
def test_a_runtime_m_kernel_names_the_expected_size(simulated: Any, a_shape: tuple[int, int],
                                                    b_shape: tuple[int, int], message: str) -> None:
    _, recorders = simulated
    before = _launched(recorders)
    with pytest.raises(KernelInputError, match=message) as raised:
        torch.ops.tsopt.gemm_bf16_17_32x24x128(bf16(*a_shape), bf16(*b_shape))
    text = str(raised.value)
    assert text.startswith("torch.ops.tsopt.gemm_bf16_17_32x24x128 (tuned for gemm bf16 "
                           "17-32x24x128, inputs a bf16[M, 128] for M in 17-32, b bf16[24, 128]")
    assert "\n" not in text and _launched(recorders) == before


def test_a_runtime_m_kernel_takes_every_m_of_its_range(simulated: Any) -> None:
    _, recorders = simulated
    op = torch.ops.tsopt.gemm_bf16_17_32x24x128
    b = bf16(N, K)
    before = recorders["gemm_bf16_17_32x24x128"].sim_launches()
    for m in (17, 23, 32):
        assert op(bf16(m, K), b).shape == (m, N)
    assert recorders["gemm_bf16_17_32x24x128"].sim_launches() == before + 3


def test_compiled_with_a_dynamic_m_the_dispatcher_traces_once_without_a_graph_break(
        simulated: Any) -> None:
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    weight = bf16(N, K)

    def layer(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.tsopt.gemm(x, weight).float().relu()

    compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend=counter)
    _, recorders = simulated
    before = _launched(recorders)
    for m in (5, 9, 20, 31):
        assert compiled(bf16(m, K)).shape == (m, N)
    assert counter.frame_count == 1, counter.frame_count  # one graph for every M
    # M = 1 is a size dynamo specializes: the op adds no frame beyond what torch.matmul makes.
    assert compiled(bf16(1, K)).shape == (1, N)
    torch._dynamo.reset()
    vendor = CompileCounter()
    on_matmul = torch.compile(lambda x: (x @ weight.t()).float().relu(), fullgraph=True,
                              dynamic=True, backend=vendor)
    for m in (5, 9, 20, 31, 1):
        on_matmul(bf16(m, K))
    assert counter.frame_count == vendor.frame_count == 2, (counter.frame_count,
                                                           vendor.frame_count)
    after = _launched(recorders)
    assert after["gemm_bf16_1_16x24x128"] - before["gemm_bf16_1_16x24x128"] == 3
    assert after["gemm_bf16_17_32x24x128"] - before["gemm_bf16_17_32x24x128"] == 2
    # A runtime-M kernel's own op traces with a dynamic M too.
    torch._dynamo.reset()
    own = torch.compile(lambda x: torch.ops.tsopt.gemm_bf16_17_32x24x128(x, weight),
                        fullgraph=True, dynamic=True, backend=counter)
    for m in (18, 25, 30):
        assert own(bf16(m, K)).shape == (m, N)
    assert counter.frame_count == 3, counter.frame_count


def test_a_manifest_whose_range_disagrees_with_its_kernel_is_refused(tmp_path: Path) -> None:
    top = write_package(tmp_path / "a", [("gemm_bf16_4_8x24x128", 8, None, "4" * 64)],
                        {"gemm_bf16_4_8x24x128": {"m_range": [4, 8], "runtime_m": True}})
    with pytest.raises(KernelLoadError, match=r"runtime-M kernel for M 4-8, its artifact.json "
                       r"m_range is None"):
        torch_ops.load(top, preload=False)
    top = write_package(tmp_path / "b", [("gemm_bf16_8x24x128", 8, None, "5" * 64)],
                        {"gemm_bf16_8x24x128": {"m_range": [1, 8]}})
    with pytest.raises(KernelLoadError, match=r"a fixed-M kernel for M=8 cannot serve M 1-8"):
        torch_ops.load(top, preload=False)


def test_another_kernel_for_a_loaded_range_is_refused(simulated: Any, tmp_path: Path) -> None:
    top = write_package(tmp_path / "other", [("gemm_bf16_1_16x24x128", 16, (1, 16), "9" * 64)])
    with pytest.raises(KernelLoadError, match=r"two kernels for gemm bf16 1-16x24x128"):
        torch_ops.load(top, preload=False)
