"""tsopt.load_kernel on a real built artifact: signature, checks and errors (no GPU here)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tsopt import load_kernel
from tsopt.build.builder import build_candidate
from tsopt.core.problem import Problem
from tsopt.core.registry import get_space
from tsopt.workers.loader import KernelInputError, KernelLoadError, LoadedKernel

PROBLEM = Problem.of("copy", "bf16", rows=256, cols=512)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    space = get_space("copy")
    result = build_candidate(space, space.genome(box_rows=16, box_cols=128, chunk=4), PROBLEM,
                             "sm_90a", tmp_path_factory.mktemp("artifacts"))
    assert result.ok, result.error
    return Path(result.artifact_dir or "")


def test_loader_reads_the_signature(artifact: Path) -> None:
    kernel = load_kernel(str(artifact))
    assert isinstance(kernel, LoadedKernel)
    assert [t.name for t in kernel.inputs] == ["src"]
    assert [t.name for t in kernel.outputs] == ["dst"]
    assert "bf16[256, 512]" in repr(kernel)


def test_loader_checks_arguments_before_any_launch(artifact: Path) -> None:
    kernel = load_kernel(artifact)
    with pytest.raises(TypeError, match="takes 1 inputs"):
        kernel()
    with pytest.raises(ValueError, match=r"shape \(8, 8\) != \(256, 512\)"):
        kernel(torch.zeros(8, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="dtype torch.float16"):
        kernel(torch.zeros(256, 512, dtype=torch.float16))
    with pytest.raises(ValueError, match="not on a CUDA device"):
        kernel(torch.zeros(256, 512, dtype=torch.bfloat16))


def test_the_checks_name_a_misaligned_or_strided_tensor(artifact: Path) -> None:
    kernel = load_kernel(artifact)
    offset = torch.zeros(256 * 512 + 1, dtype=torch.bfloat16)[1:].view(256, 512)
    with pytest.raises(KernelInputError, match=r"src: not on a CUDA device \(on cpu\); data pointer "
                       r"0x[0-9a-f]+ not 16-byte aligned"):
        kernel(offset)
    with pytest.raises(KernelInputError, match=r"not contiguous \(row-major; strides \(1, 256\)\)"):
        kernel(torch.zeros(512, 256, dtype=torch.bfloat16).t())


def test_a_kernel_directory_loads_as_dot_from_inside_it(
        artifact: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # dlopen searches the system's library path for a name without a slash ("libkernel.so"):
    # the loader resolves the directory first, so `load_kernel('.')` in an export works.
    monkeypatch.chdir(artifact)
    kernel = load_kernel(".")
    assert kernel.library.path == artifact.resolve() / "libkernel.so"
    assert kernel.directory == artifact.resolve()


def test_not_a_kernel_directory(tmp_path: Path) -> None:
    with pytest.raises(KernelLoadError, match="no artifact.json"):
        load_kernel(tmp_path)
    (tmp_path / "artifact.json").write_text("{broken")
    with pytest.raises(KernelLoadError, match="malformed"):
        load_kernel(tmp_path)


def test_loader_imports_only_torch_and_the_standard_library() -> None:
    code = (
        "import sys, tsopt.workers.loader\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('cutlass', 'sqlalchemy', 'optuna', 'ray', 'rich', 'typer', 'db', 'search_spaces')]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]"
