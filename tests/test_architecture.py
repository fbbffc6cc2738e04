"""The floors hold (ARCHITECTURE.md), the contract catches planted violations, and a
database written before the move still opens, reports and resumes."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests import import_contract
from tests.import_contract import ROOT, check

FOLDERS = ("tsopt", "db", "workers", "search_spaces", "reports")


def test_the_tree_keeps_every_floor_rule() -> None:
    violations = check(ROOT)
    assert not violations, "\n".join(str(v) for v in violations)


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """The package folders, copied: a tree to plant violations in."""
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "data"))
    return tmp_path


def plant(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_contract_fails_on_planted_violations(tree_copy: Path) -> None:
    before = {(v.rule, v.where) for v in check(tree_copy)}
    plant(tree_copy / "tsopt/core/genome.py", "from tsopt.search.driver import Driver")
    plant(tree_copy / "tsopt/core/problem.py", "import numpy")
    plant(tree_copy / "workers/loader.py", "import optuna")
    plant(tree_copy / "tsopt/verify/verifier.py", "from tsopt.build.builder import cache_key")
    plant(tree_copy / "tsopt/search/samplers.py", "def late():\n    from tsopt.app import ingest")
    plant(tree_copy / "db/views.py", "import workers.runner")
    found = {(v.rule, v.where.split(":")[0]) for v in check(tree_copy)
             if (v.rule, v.where) not in before}
    assert found >= {
        ("layers", "tsopt/core/genome.py"),
        ("ground-stdlib", "tsopt/core/problem.py"),
        ("measuring-torch", "workers/loader.py"),
        ("independent-roles", "tsopt/verify/verifier.py"),
        ("layers", "tsopt/search/samplers.py"),  # an import inside a function counts too
        ("namespace", "db/views.py"),
    }, found


def test_the_contract_finds_a_file_cycle(tree_copy: Path) -> None:
    plant(tree_copy / "tsopt/search/samplers.py", "from tsopt.search import progress")
    plant(tree_copy / "tsopt/search/progress.py", "from tsopt.search import samplers")
    cycles = [v for v in check(tree_copy) if v.rule == "cycle"]
    assert any("tsopt.search.progress" in v.where and "tsopt.search.samplers" in v.where
               for v in cycles), cycles


def test_the_contract_can_be_run_as_a_command() -> None:
    result = subprocess.run([sys.executable, "-m", "tests.import_contract"], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
    assert "0 violation(s)" in result.stdout


def test_every_package_folder_is_mapped_and_installed_under_one_namespace() -> None:
    setup_py = (ROOT / "setup.py").read_text()
    for package, folder in import_contract.MAPPED.items():
        assert f'"{package}": "{folder}"' in setup_py
    import tsopt.db
    import tsopt.reports
    import tsopt.search_spaces
    import tsopt.workers

    for module, folder in ((tsopt.db, "db"), (tsopt.workers, "workers"),
                           (tsopt.search_spaces, "search_spaces"), (tsopt.reports, "reports")):
        assert Path(module.__file__ or "").parent == ROOT / folder


# -- a database from before the move ------------------------------------------------------

PRE_FLOORS_DB = Path(__file__).parent / "data" / "pre_floors.db"
PRE_FLOORS_STUDY = "copy-fp16-1024x1024-sm_90a"  # `tsopt tune copy --rows 1024 --cols 1024
# --trials 8` at commit 7bd68c9, on a machine with no GPU


def tsopt(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", CUTE_DSL_ARCH="sm_90a")
    return subprocess.run([sys.executable, "-m", "tsopt", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_a_database_written_before_the_move_opens_reports_and_resumes(tmp_path: Path) -> None:
    db = tmp_path / "tsopt.db"
    shutil.copy(PRE_FLOORS_DB, db)
    url = f"sqlite:///{db}"
    listed = tsopt(["report", "--db", url], tmp_path)
    assert listed.returncode == 0 and PRE_FLOORS_STUDY in listed.stdout, listed.stderr
    report = tsopt(["report", PRE_FLOORS_STUDY, "--out", str(tmp_path / "r.html"), "--db", url],
                   tmp_path)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "r.html").stat().st_size > 10_000
    resumed = tsopt(["tune", "copy", "--rows", "1024", "--cols", "1024", "--trials", "10",
                     "--db", url], tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    with sqlite3.connect(db) as conn:
        trials = conn.execute("select count(*) from trials t join studies s using (study_id) "
                              "where s.study_name = ?", (PRE_FLOORS_STUDY,)).fetchone()[0]
    assert trials == 10  # the 8 trials of the first run kept, 2 more asked


@pytest.mark.slow
def test_the_wheel_installs_one_namespace_with_its_data(tmp_path: Path) -> None:
    import zipfile

    had_build = (ROOT / "build").exists()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", str(ROOT), "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path)], check=True, capture_output=True)
    if not had_build:  # setuptools stages the wheel in the source tree's build/
        shutil.rmtree(ROOT / "build", ignore_errors=True)
    (wheel,) = tmp_path.glob("tsopt-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # no generic top-level name (db, workers, ...) lands in site-packages
    assert {name.split("/")[0] for name in names} == {"tsopt", "tsopt-0.1.0.dist-info"}
    for expected in ("tsopt/db/migrations/versions/0001_initial.py",
                     "tsopt/reports/assets/report.js", "tsopt/workers/loader.py",
                     "tsopt/core/genome.py", "tsopt/search_spaces/gemm/kernel.py"):
        assert expected in names, expected


def test_architecture_md_names_every_module() -> None:
    """The map stays true: every module of the floors is named in ARCHITECTURE.md."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    missing = []
    for folder in ("tsopt/core", "tsopt/search", "tsopt/search/pools", "tsopt/app",
                   "tsopt/verify", "tsopt/build", "workers"):
        for path in sorted((ROOT / folder).glob("*.py")):
            named = (f"`{path.name}`" in text or f"{folder}/{path.name}" in text
                     or f"{path.stem}," in text or f"{path.stem})" in text)
            if path.name != "__init__.py" and not named:
                missing.append(f"{folder}/{path.name}")
    assert not missing, f"ARCHITECTURE.md does not name: {missing}"
