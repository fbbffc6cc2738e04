"""README.md says what the committed data says: its results table and its figures in prose are
what scripts/results_table.py makes from corpus/ and the committed summaries, and every code
reference in it resolves (scripts/readme_refs.py). Each check is also shown failing on a copy
of the README with a disagreement planted in it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TABLE = ROOT / "scripts" / "results_table.py"
REFS = ROOT / "scripts" / "readme_refs.py"


def run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The script as a user runs it, in a process of its own."""
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def _script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table_script() -> ModuleType:
    return _script(TABLE)


Check = Callable[..., tuple[int, str]]


@pytest.fixture
def check(table_script: ModuleType, capsys: pytest.CaptureFixture[str]) -> Check:
    """``results_table.py ARGS`` in this process (the corpus read once): (exit code, stderr)."""
    def call(*args: str) -> tuple[int, str]:
        code = table_script.main(list(args))
        return code, capsys.readouterr().err
    return call


@pytest.fixture
def readme_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "README.md"
    copy.write_text(README.read_text())
    return copy


def test_the_readme_s_table_and_figures_are_what_the_data_makes() -> None:
    done = run(TABLE, "--check")
    assert done.returncode == 0, done.stderr


def test_a_planted_figure_in_the_table_fails_the_check(readme_copy: Path, check: Check) -> None:
    text = readme_copy.read_text()
    # The stream-K row at 8192^3: its median, one figure of one row, moved by a thousandth.
    row = next(line for line in text.splitlines()
               if line.startswith("| `6453970a5e0b`") and "by hand" in line)
    median = re.findall(r"\| (\d\.\d{3})× \|", row)[0]
    planted = row.replace(f"| {median}× |", f"| {float(median) + 0.001:.3f}× |", 1)
    readme_copy.write_text(text.replace(row, planted))
    code, err = check("--check", "--readme", str(readme_copy))
    assert code == 1
    assert "results table" in err and planted in err, err


def test_a_planted_verdict_fails_the_check(readme_copy: Path, check: Check) -> None:
    """A row whose passes straddle the vendor may not claim to beat it."""
    text = readme_copy.read_text()
    row = next(line for line in text.splitlines() if "| matches (within spread) |" in line)
    readme_copy.write_text(text.replace(row, row.replace("matches (within spread)", "beats")))
    code, err = check("--check", "--readme", str(readme_copy))
    assert code == 1 and "results table" in err, err


def test_a_planted_figure_in_prose_fails_the_check(readme_copy: Path, check: Check) -> None:
    text = readme_copy.read_text()
    # The README's own prose figures are checked above; this one names the copy's bandwidth as
    # an earlier session read it, which the committed bench/hbm_copy result does not say.
    text += "\nThe device copy moves <!-- figure:hbm_copy -->4.30 TB/s<!-- /figure -->.\n"
    readme_copy.write_text(text)
    code, err = check("--check", "--readme", str(readme_copy))
    assert code == 1
    assert "figure hbm_copy: README has '4.30 TB/s', the data makes '4.21 TB/s'" in err


def test_a_figure_marker_of_no_known_figure_is_refused(readme_copy: Path, check: Check) -> None:
    readme_copy.write_text(readme_copy.read_text()
                           + "\n<!-- figure:typed_by_hand -->1.10×<!-- /figure -->\n")
    code, err = check("--check", "--readme", str(readme_copy))
    assert code == 2 and "typed_by_hand" in err, err


def test_write_restores_what_check_refused(readme_copy: Path, check: Check) -> None:
    text = readme_copy.read_text()
    readme_copy.write_text(text.replace("| beats |", "| below |", 1))
    assert check("--check", "--readme", str(readme_copy))[0] == 1
    assert check("--write", "--readme", str(readme_copy))[0] == 0
    assert readme_copy.read_text() == text


def test_a_row_of_one_pass_is_refused(tmp_path: Path, check: Check) -> None:
    """One pass has no spread, so no verdict: the spec may not list such a kernel."""
    spec = tmp_path / "spec.toml"
    spec.write_text('''
[[row]]
kernel = "6b3dc6745318"
space = "copy"
problem = "copy:fp16:16384x16384"
found = "the copy sweeps, bench/paired_h200's single call alone"
library = "none"
sources = ["bench/paired_h200/*"]
''')
    code, err = check("--print", "--spec", str(spec))
    assert code == 2
    assert "1 pass(es)" in err and "at least 2" in err, err


def test_every_code_reference_in_the_readme_resolves() -> None:
    done = run(REFS)
    assert done.returncode == 0, done.stderr


def test_a_planted_reference_that_does_not_resolve_fails(readme_copy: Path) -> None:
    readme_copy.write_text(readme_copy.read_text() + "\n".join([
        "", "- `tsopt.stream_k` checks the handshake.",  # a module that does not exist
        "- `tsopt/search/evolve.py::NO_SUCH_NAME` is the survey's size.",  # a name not defined
        "- `bench/proposals/no_such_script.py` counts it.",  # a file that does not exist
        "- at most `NOT_THERE` in `tsopt/search/evolve.py`.", ""]))
    done = run(REFS, "--readme", str(readme_copy))
    assert done.returncode == 1
    for why in ("`tsopt.stream_k`: tsopt/__init__.py defines no stream_k",
                "tsopt/search/evolve.py defines no NO_SUCH_NAME",
                "`bench/proposals/no_such_script.py`: no such file or folder",
                "tsopt/search/evolve.py defines no NOT_THERE"):
        assert why in done.stderr, done.stderr


def test_references_that_resolve_pass(readme_copy: Path) -> None:
    readme_copy.write_text("\n".join([
        "`tsopt.core.standing.standing`, `workers/paired.py::PairedTimer._time`,",
        "`tsopt.workers.paired.PairedSettings.target`, `SURVEY` in `tsopt/search/evolve.py`,",
        "`bench/oracle/`, `corpus/*.jsonl.xz`, `search_spaces/<name>/`.",
        "```", "`tsopt.not_checked_inside_a_fence`", "```", ""]))
    done = run(REFS, "--readme", str(readme_copy))
    assert done.returncode == 0, done.stderr
