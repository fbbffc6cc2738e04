"""The PyTorch op module of an export (workers/torch_ops.py) on the CPU: registration, the fake
(meta) implementation, torch.compile(fullgraph=True) tracing, the input checks and the dispatch
table's fallback to torch with its warning.

The packages here are written by the test: real ``manifest.json``/``artifact.json`` files of
the export format, for kernels whose library is never opened. Nothing here launches (no GPU):
every path tested ends before the library would be loaded, which the absent ``libkernel.so``
proves (a launch attempt would raise KernelLoadError, not the error each test expects). The
real exports are loaded the same way in tests/test_export.py. The exception, named as such: the
last section's SIMULATED device, a ``libkernel.so`` compiled here that records its launches
(for the checks once per signature and the pointers a launch passes).
"""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tsopt.workers import torch_ops
from tsopt.workers.torch_ops import FallbackWarning, KernelInputError, KernelLoadError

ROOT = Path(__file__).resolve().parents[1]
GEMM = "gemm_bf16_64x16x32"
COPY = "copy_fp16_128x256"


def write_kernel(directory: Path, op: str, dtype: str, sizes: dict[str, int], genome: str) -> dict[str, Any]:
    """A kernel directory's artifact.json; returns its manifest entry."""
    if op == "gemm":
        tensors = [("a", "input", [sizes["m"], sizes["k"]]), ("b", "input", [sizes["n"], sizes["k"]]),
                   ("d", "output", [sizes["m"], sizes["n"]])]
    else:
        shape = [sizes["rows"], sizes["cols"]]
        tensors = [("src", "input", shape), ("dst", "output", shape)]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "artifact.json").write_text(json.dumps({
        "library": "libkernel.so", "genome_hash": genome,
        "tensors": [{"name": n, "role": r, "shape": s, "dtype": dtype} for n, r, s in tensors]}))
    name = "_".join([op, dtype, "x".join(str(v) for v in sizes.values())])
    return {"name": name, "op": op, "dtype": dtype, "sizes": [[k, v] for k, v in sizes.items()],
            "genome_hash": genome}


def write_package(top: Path, kernels: list[tuple[str, str, dict[str, int], str]]) -> Path:
    entries = []
    for op, dtype, sizes, genome in kernels:
        name = "_".join([op, dtype, "x".join(str(v) for v in sizes.values())])
        entry = write_kernel(top / name, op, dtype, sizes, genome)
        entries.append({**entry, "dir": name})
    (top / "manifest.json").write_text(json.dumps({"format": "tsopt-export", "version": 2,
                                                   "package": True, "kernels": entries, "files": {}}))
    return top


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> torch_ops.KernelPackage:
    top = write_package(tmp_path_factory.mktemp("package"), [
        ("gemm", "bf16", {"m": 64, "n": 16, "k": 32}, "a" * 64),
        ("copy", "fp16", {"rows": 128, "cols": 256}, "c" * 64),
    ])
    return torch_ops.load(top, preload=False)


def bf16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(torch.bfloat16)


# -- registration --------------------------------------------------------------------------------


def test_load_registers_an_op_per_kernel_and_one_dispatcher_per_op(package, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert [k.name for k in package.kernels] == [GEMM, COPY]
    for name in (GEMM, COPY, "gemm", "copy"):
        assert hasattr(torch.ops.tsopt, name), name
    assert package.op(GEMM) is torch.ops.tsopt.gemm_bf16_64x16x32
    assert {k.name for k in torch_ops.registered()} >= {GEMM, COPY}
    # The same kernel again is a no-op; another kernel for the same problem is refused.
    assert torch_ops.load(package.directory, preload=False).kernels == package.kernels
    rival = write_package(tmp_path / "rival", [("gemm", "bf16", {"m": 64, "n": 16, "k": 32}, "b" * 64)])
    with pytest.raises(KernelLoadError, match=r"two kernels for gemm bf16 64x16x32: aaaaaaaaaaaa"):
        torch_ops.load(rival, preload=False)


def test_a_directory_that_is_not_an_export_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KernelLoadError, match="not a tsopt export"):
        torch_ops.load(tmp_path, preload=False)


def test_an_export_written_before_packages_loads_as_one_kernel(tmp_path: Path) -> None:
    # Version 1 manifests have no "kernels" list: the one kernel sits at the top.
    write_kernel(tmp_path, "gemm", "fp16", {"m": 48, "n": 16, "k": 64}, "d" * 64)
    (tmp_path / "manifest.json").write_text(json.dumps({
        "format": "tsopt-export", "version": 1, "genome_hash": "d" * 64,
        "problem": {"dtype": "fp16", "k": 64, "m": 48, "n": 16, "op": "gemm"}}))
    loaded = torch_ops.load(tmp_path, preload=False)
    assert [k.name for k in loaded.kernels] == ["gemm_fp16_48x16x64"]
    assert loaded.kernels[0].sizes == (("m", 48), ("n", 16), ("k", 64))


# -- the fake implementation and torch.compile ----------------------------------------------------


def test_the_fake_implementation_gives_the_output_on_meta_tensors(package) -> None:  # type: ignore[no-untyped-def]
    a, b = bf16(64, 32).to("meta"), bf16(16, 32).to("meta")
    d = torch.ops.tsopt.gemm_bf16_64x16x32(a, b)
    assert (d.shape, d.dtype, d.device.type) == ((64, 16), torch.bfloat16, "meta")
    assert torch.ops.tsopt.gemm(bf16(8, 32).to("meta"), b).shape == (8, 16)
    with pytest.raises(KernelInputError, match=r"a: dtype torch.float16 != torch.bfloat16"):
        torch.ops.tsopt.gemm_bf16_64x16x32(a.to(torch.float16), b)


def test_torch_compile_fullgraph_traces_both_ops_without_a_graph_break(package) -> None:  # type: ignore[no-untyped-def]
    graphs: list[torch.fx.GraphModule] = []

    def recording(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward  # runs the fake implementation on meta tensors: nothing launches

    def model(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        tuned = torch.ops.tsopt.gemm_bf16_64x16x32(x, w)
        dispatched = torch.ops.tsopt.gemm(y, w)  # another shape: the dispatcher's fake
        return tuned.float().relu().sum() + dispatched.float().sum() + torch.ops.tsopt.copy(x).sum()

    compiled = torch.compile(model, fullgraph=True, backend=recording)
    out = compiled(bf16(64, 32).to("meta"), bf16(16, 32).to("meta"), bf16(8, 32).to("meta"))
    assert out.device.type == "meta" and len(graphs) == 1
    targets = {str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"}
    assert {"tsopt.gemm_bf16_64x16x32", "tsopt.gemm", "tsopt.copy"} <= targets


def test_torch_export_records_the_op_from_cpu_tensors(package) -> None:  # type: ignore[no-untyped-def]
    class Layer(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return torch.ops.tsopt.gemm(x, w) * 2

    # Tracing runs the fake only: the CPU tensors never reach the kernel.
    exported = torch.export.export(Layer(), (bf16(64, 32), bf16(16, 32)))
    calls = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
    assert "tsopt.gemm.default" in calls


def test_compiling_with_a_wrong_shape_fails_at_trace_time_naming_it(package) -> None:  # type: ignore[no-untyped-def]
    compiled = torch.compile(lambda x, w: torch.ops.tsopt.gemm_bf16_64x16x32(x, w), fullgraph=True,
                             backend="eager")
    with pytest.raises(Exception, match=r"b: shape \(16, 16\) != \(16, 32\)"):
        compiled(bf16(64, 32).to("meta"), bf16(16, 16).to("meta"))


# -- input checks before any launch ---------------------------------------------------------------


def _misaligned(rows: int, cols: int) -> torch.Tensor:
    """Contiguous, right shape and dtype, but its data starts 2 bytes into an allocation."""
    return torch.zeros(rows * cols + 1, dtype=torch.bfloat16)[1:].view(rows, cols)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: (bf16(64, 32), bf16(16, 32)), r"a: not on a CUDA device \(on cpu\); b: not on a CUDA"),
        (lambda: (bf16(64, 32).half(), bf16(16, 32)), r"a: dtype torch.float16 != torch.bfloat16"),
        (lambda: (bf16(8, 32), bf16(16, 32)), r"a: shape \(8, 32\) != \(64, 32\)"),
        (lambda: (bf16(32, 64).t(), bf16(16, 32)), r"a: .*not contiguous \(row-major; strides \(1, 64\)\)"),
        (lambda: (_misaligned(64, 32), bf16(16, 32)), r"a: .*data pointer 0x[0-9a-f]+ not 16-byte aligned"),
    ],
    ids=["cpu", "dtype", "shape", "non-contiguous", "misaligned"],
)
def test_bad_inputs_raise_one_error_naming_what_is_wrong(package, make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KernelInputError, match=message) as raised:
        torch.ops.tsopt.gemm_bf16_64x16x32(*make())
    text = str(raised.value)
    assert text.startswith("torch.ops.tsopt.gemm_bf16_64x16x32 (tuned for gemm bf16 64x16x32")
    assert "\n" not in text
    assert GEMM not in torch_ops._LOADED  # checked before the library was opened


def test_every_problem_of_every_input_is_in_the_one_message(package) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KernelInputError) as raised:
        torch.ops.tsopt.gemm_bf16_64x16x32(bf16(8, 32).half(), bf16(32, 16).t())
    text = str(raised.value)
    for part in ("a: shape (8, 32) != (64, 32), dtype torch.float16", "b: not on a CUDA device",
                 "b: not on a CUDA device (on cpu), not contiguous"):
        assert part in text, text


# -- the dispatch table ---------------------------------------------------------------------------


def test_dispatch_falls_back_to_torch_and_warns_once_per_shape(package) -> None:  # type: ignore[no-untyped-def]
    a, b = bf16(64, 32), bf16(16, 32)
    with pytest.warns(FallbackWarning, match=r"gemm bf16 m=64 n=16 k=32: torch.ops.tsopt."
                      r"gemm_bf16_64x16x32 cannot take these tensors \(a: not on a CUDA device"):
        d = torch.ops.tsopt.gemm(a, b)
    assert torch.equal(d, torch.matmul(a, b.t()))
    small = bf16(24, 32)
    with pytest.warns(FallbackWarning, match=r"m=24 n=16 k=32: no tuned kernel for this shape and "
                      r"dtype \(tuned: [^)]*gemm bf16 64x16x32[^)]*\); running torch.matmul"):
        torch.ops.tsopt.gemm(small, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per shape: a second call is silent
        torch.ops.tsopt.gemm(small, b)
        torch.ops.tsopt.gemm(a, b)
    seen = {f.sizes: f for f in torch_ops.fallbacks() if f.op == "gemm"}
    assert seen[(("m", 24), ("n", 16), ("k", 32))].calls == 2
    assert seen[(("m", 64), ("n", 16), ("k", 32))].calls == 2
    assert "no tuned kernel" in seen[(("m", 24), ("n", 16), ("k", 32))].reasons[0]


def test_dispatched_copy_falls_back_to_a_contiguous_clone(package) -> None:  # type: ignore[no-untyped-def]
    src = torch.randn(256, 96).half().t()  # 96x256, not contiguous
    with pytest.warns(FallbackWarning, match="copy fp16 rows=96 cols=256: no tuned kernel"):
        dst = torch.ops.tsopt.copy(src)
    assert torch.equal(dst, src) and dst.is_contiguous() and dst.data_ptr() != src.data_ptr()


def test_dispatch_refuses_what_the_op_cannot_mean(package) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KernelInputError, match=r"computes a @ b.T of a \(m, k\) and b \(n, k\)"):
        torch.ops.tsopt.gemm(bf16(64, 32), bf16(16, 31))
    with pytest.raises(KernelInputError, match="copies a 2-D tensor"):
        torch.ops.tsopt.copy(torch.zeros(4, 4, 4, dtype=torch.float16))


# -- torch and the standard library only ----------------------------------------------------------


def test_the_module_needs_only_torch_the_standard_library_and_its_loader(tmp_path: Path) -> None:
    for name in ("torch_ops.py", "loader.py"):
        (tmp_path / name).write_text((ROOT / "workers" / name).read_text())
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('torch_ops', {str(tmp_path / 'torch_ops.py')!r})\n"
        "module = importlib.util.module_from_spec(spec); sys.modules['torch_ops'] = module\n"
        "spec.loader.exec_module(module)\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'tsopt', 'cutlass', 'sqlalchemy', "
        "'optuna', 'ray', 'rich', 'typer', 'numpy_financial'})\n"
        "print(heavy, module._loader.__file__)\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, check=True)
    assert done.stdout.split()[0] == "[]" and done.stdout.strip().endswith(str(tmp_path / "loader.py"))


# -- the checks once per signature ----------------------------------------------------------------


def test_tensors_of_one_signature_fare_alike_in_every_check() -> None:
    # The ops check a signature once and launch every later call of it unchecked: sound only if
    # two tensors of one signature get the same verdict from tensor_problems, for any spec.
    loader = torch_ops._loader
    base = torch.zeros(64 * 32 + 64, dtype=torch.bfloat16)
    tensors = {
        "fresh": bf16(64, 32), "fresh2": bf16(64, 32), "other_shape": bf16(32, 64),
        "fp16": bf16(64, 32).half(), "transposed": bf16(32, 64).t(),
        "offset_2": base[1:1 + 64 * 32].view(64, 32), "offset_16": base[8:8 + 64 * 32].view(64, 32),
        "offset_18": base[9:9 + 64 * 32].view(64, 32),
        "padded_rows": torch.zeros(64, 40, dtype=torch.bfloat16)[:, :32],
    }
    specs = [loader.TensorSpec("a", "input", shape, dtype)
             for shape, dtype in (((64, 32), "bf16"), ((32, 64), "bf16"), ((64, 32), "fp16"))]
    keys = {name: loader.signature([t]) for name, t in tensors.items()}

    def verdict(spec: Any, tensor: torch.Tensor) -> list[str]:  # the pointer's value aside
        return [re.sub(r"0x[0-9a-f]+", "0x?", p) for p in loader.tensor_problems(spec, tensor)]

    for first, second in [(x, y) for x in keys for y in keys]:
        if keys[first] == keys[second]:
            for spec in specs:
                assert verdict(spec, tensors[first]) == verdict(spec, tensors[second]), (first, second)
    # What the checks tell apart, the signature does too.
    assert keys["fresh"] == keys["fresh2"] and keys["offset_16"][0][:4] == keys["offset_2"][0][:4]
    distinct = ["fresh", "other_shape", "fp16", "transposed", "offset_2", "padded_rows"]
    assert len({keys[n] for n in distinct}) == len(distinct)
    assert keys["offset_2"] == keys["offset_18"] != keys["offset_16"] == keys["fresh"]
    with pytest.raises(AttributeError):
        loader.signature([object()])


def test_a_signature_cache_starts_again_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    loader = torch_ops._loader
    monkeypatch.setattr(loader, "MAX_SIGNATURES", 3)
    cache: dict[Any, Any] = {}
    for key in range(3):
        loader.remember(cache, key, key)
    assert cache == {0: 0, 1: 1, 2: 2}
    loader.remember(cache, 3, 3)
    assert cache == {3: 3}


def test_a_remembered_fallback_is_forgotten_when_a_package_adds_its_kernel(
        package, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b = bf16(40, 32), bf16(16, 32)
    with pytest.warns(FallbackWarning, match=r"m=40 n=16 k=32: no tuned kernel"):
        torch.ops.tsopt.gemm(a, b)
    # The route for this signature is remembered; loading a kernel for the shape replaces it:
    # the next call is routed to the kernel, which refuses the CPU tensors (a fallback again,
    # now for that reason, not "no tuned kernel").
    more = write_package(tmp_path / "more", [("gemm", "bf16", {"m": 40, "n": 16, "k": 32}, "e" * 64)])
    torch_ops.load(more, preload=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.ops.tsopt.gemm(a, b)
    seen = {f.sizes: f for f in torch_ops.fallbacks() if f.op == "gemm"}[(("m", 40), ("n", 16), ("k", 32))]
    assert seen.calls == 2 and len(seen.reasons) == 2, seen
    assert any("gemm_bf16_40x16x32 cannot take these tensors (a: not on a CUDA device" in r
               for r in seen.reasons), seen.reasons
    assert caught == []  # warned once per shape, already


def test_the_ops_are_registered_without_custom_ops_wrapper(package) -> None:  # type: ignore[no-untyped-def]
    # torch.library.custom_op wraps every call in Python (tens of microseconds on the GPU
    # machine); the ops are plain Library kernels, tagged for torch.compile and torch.export.
    for name in (GEMM, "gemm"):
        overload = getattr(torch.ops.tsopt, name).default
        assert torch.Tag.pt2_compliant_tag in overload.tags
        assert torch._C._dispatch_has_kernel_for_dispatch_key(overload.name(), "CompositeExplicitAutograd")
        assert torch._C._dispatch_has_kernel_for_dispatch_key(overload.name(), "Meta")
    assert not isinstance(getattr(torch.ops.tsopt, GEMM), torch._library.custom_ops.CustomOpDef)


# -- the launch path, on a simulated device ---------------------------------------------------------

RECORDING_LAUNCH_C = """
static void *seen[8];
static void *seen_stream;
static int launches;
int tsopt_load(void) { return 0; }
int tsopt_launch(void **data, int n, void *stream) {
  for (int i = 0; i < n && i < 8; ++i) seen[i] = data[i];
  seen_stream = stream;
  return ++launches > 0 ? 0 : 1;
}
int sim_launches(void) { return launches; }
void *sim_seen(int i) { return seen[i]; }
void *sim_stream(void) { return seen_stream; }
"""


@pytest.fixture
def simulated_device(package, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:  # type: ignore[no-untyped-def]
    """A SIMULATED CUDA device (no GPU here): ``make(m)`` registers a kernel for gemm bf16
    m x 16 x 64 (one m per test: the registry is the process's) whose libkernel.so records what
    it was launched with and launches nothing; CPU tensors pass as if on the device (the device
    check is the one problem dropped), the current device and stream are constants. What stays
    real: the registration, the other checks, the signature caches, the output, the ctypes call.
    Returns the recorder library and the list that counts the op's input checks."""
    loader = torch_ops._loader
    real = loader.tensor_problems
    monkeypatch.setattr(loader, "tensor_problems", lambda spec, t, tracing=False, m_range=None: [
        p for p in real(spec, t, tracing, m_range) if not p.startswith("not on a CUDA device")])
    monkeypatch.setattr(loader, "current_device_index", lambda: None)
    monkeypatch.setattr(loader, "current_stream_handle", lambda index: 0x5EED)
    checked: list[int] = []
    real_input_problems = torch_ops.input_problems
    monkeypatch.setattr(torch_ops, "input_problems", lambda kernel, tensors, tracing=False: (
        checked.append(1), real_input_problems(kernel, tensors, tracing))[1])

    def make(m: int) -> tuple[Any, list[int]]:
        top = write_package(tmp_path / "sim", [("gemm", "bf16", {"m": m, "n": 16, "k": 64}, "f" * 64)])
        kernel_dir = top / f"gemm_bf16_{m}x16x64"
        (kernel_dir / "sim.c").write_text(RECORDING_LAUNCH_C)
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(kernel_dir / "libkernel.so"),
                        str(kernel_dir / "sim.c")], check=True)
        torch_ops.load(top, preload=False)
        recorder = ctypes.CDLL(str(kernel_dir / "libkernel.so"))
        recorder.sim_seen.restype = recorder.sim_stream.restype = ctypes.c_void_p
        recorder.sim_seen.argtypes = [ctypes.c_int]
        return recorder, checked

    return make


def test_a_known_signature_launches_unchecked_and_a_bad_one_is_still_refused(simulated_device) -> None:  # type: ignore[no-untyped-def]
    recorder, checked = simulated_device(32)
    op = torch.ops.tsopt.gemm_bf16_32x16x64
    a, b = bf16(32, 64), bf16(16, 64)
    d = op(a, b)
    assert (d.shape, d.dtype) == ((32, 16), torch.bfloat16) and recorder.sim_launches() == 1
    assert [recorder.sim_seen(i) for i in range(3)] == [a.data_ptr(), b.data_ptr(), d.data_ptr()]
    assert recorder.sim_stream() == 0x5EED and len(checked) == 1
    fresh = bf16(32, 64)  # another tensor of the same signature: no check again
    op(fresh, b)
    assert recorder.sim_launches() == 2 and len(checked) == 1 and recorder.sim_seen(0) == fresh.data_ptr()
    for bad, message in ((_misaligned(32, 64), "not 16-byte aligned"),
                         (bf16(64, 32).t(), "not contiguous"), (bf16(32, 64).half(), "dtype torch.float16")):
        with pytest.raises(KernelInputError, match=message):
            op(bad, b)
    assert recorder.sim_launches() == 2 and len(checked) == 4  # each refused one was checked
    # The dispatcher: routed once, then straight to the kernel; a misaligned input falls back.
    torch.ops.tsopt.gemm(a, b)
    torch.ops.tsopt.gemm(a, b)
    assert recorder.sim_launches() == 4 and len(checked) == 5
    misaligned = _misaligned(32, 64)
    with pytest.warns(FallbackWarning, match="m=32 n=16 k=64: torch.ops.tsopt.gemm_bf16_32x16x64 cannot "
                      "take these tensors .*not 16-byte aligned"):
        out = torch.ops.tsopt.gemm(misaligned, b)
    assert torch.equal(out, torch.matmul(misaligned, b.t())) and recorder.sim_launches() == 4


def test_the_loader_call_checks_once_per_signature_too(simulated_device) -> None:  # type: ignore[no-untyped-def]
    recorder, _ = simulated_device(48)
    kernel = torch_ops._library(next(k for k in torch_ops.registered() if k.name == "gemm_bf16_48x16x64"))
    a, b = bf16(48, 64), bf16(16, 64)
    out = torch.empty(48, 16, dtype=torch.bfloat16)
    before = recorder.sim_launches()
    assert kernel(a, b, out=out) is out
    assert [recorder.sim_seen(i) for i in range(3)] == [a.data_ptr(), b.data_ptr(), out.data_ptr()]
    kernel(a, b)
    assert recorder.sim_launches() == before + 2 and len(kernel._passed) == 2  # with out= and without
    with pytest.raises(KernelInputError, match=r"d: shape \(16, 48\) != \(48, 16\)"):
        kernel(a, b, out=torch.empty(16, 48, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        kernel(a, "b")
    assert recorder.sim_launches() == before + 2
