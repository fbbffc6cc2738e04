"""The Python API (tsopt.tune / report / export): the README's example run as it is, on this
CPU (no GPU: the tune bundles, the report is written, the export is refused), and `import
tsopt` staying standard-library only."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tsopt
from tsopt.app.api import TuneSummary
from tsopt.core.errors import UserInputError

ROOT = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Python API", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "README.md's Python API section has no python example"
    return found.group(1)


def test_import_tsopt_stays_standard_library_only() -> None:
    code = ("import sys, tsopt\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'optuna', 'sqlalchemy', "
            "'rich', 'typer', 'cutlass', 'ray', 'numpy'}), sorted(m for m in sys.modules "
            "if m.startswith('tsopt.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[] []"
    for name in ("tune", "report", "export", "load_kernel"):
        assert callable(getattr(tsopt, name))


@pytest.mark.slow
def test_the_readme_example_runs_on_a_machine_without_a_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(readme_example(), namespace)  # noqa: S102 - the README's own example, under test
    printed = capsys.readouterr().out
    summary = namespace["summary"]
    assert isinstance(summary, TuneSummary)
    assert summary.study == "copy-fp16-256x512-sm_90a" and summary.exit_code == 0
    assert summary.built == 2 and summary.measured == 0 and summary.best is None
    assert summary.trials >= summary.built - 1  # the seed is built without a trial
    assert dict(summary.funnel)["built"] == 2 and dict(summary.funnel)["timed"] == 0
    assert summary.stop_reason == "the study holds 2 built candidates (--built 2)"
    assert summary.bundle is not None and (summary.bundle / "manifest.json").is_file()
    assert json.loads(json.dumps(summary.to_dict()))["funnel"]["built"] == 2
    assert (tmp_path / "demo.html").is_file() and "report: demo.html" in printed
    assert "not exported: study 'copy-fp16-256x512-sm_90a' has no correct timed candidate" in printed
    assert not (tmp_path / "best-copy").exists()
    with pytest.raises(UserInputError, match="unknown option"):
        tsopt.tune("copy", "copy:fp16:256x512", db="sqlite:///demo.db", trails=5)
    with pytest.raises(UserInputError, match="one study or two different ones"):
        tsopt.report([summary.study, summary.study], db="sqlite:///demo.db")
