"""Three ``tsopt tune`` processes on one study and one database at once, on SQLite and (when
``TSOPT_TEST_POSTGRES_URL`` names a server) on PostgreSQL.

The database is new, so the three race to create tsopt's and Optuna's tables. They must
cooperate: ``--trials N`` is the study's total across all of them, no genome is evaluated
(verified and built) by two of them, none crashes, and no trial is left RUNNING but those
waiting in the bundle for a GPU. Real processes, the real DSL compile for sm_90a on the CPU,
the real verifier; nothing is measured (no GPU here), so built candidates go to the bundle.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.test_db import db_url  # noqa: F401  (the SQLite + PostgreSQL fixture)
from tsopt.core.bundle import read_manifest
from tsopt.db.store import Store
from tsopt.search.study.claims import RUN_ATTR

ROOT = Path(__file__).resolve().parents[1]
PROCESSES = 3
TRIALS = 9
STUDY = "copy-fp16-256x512-sm_90a"


def start_tune(db: str, work: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, COLUMNS="250", PYTHONPATH=str(ROOT), CUTE_DSL_ARCH="sm_90a")
    return subprocess.Popen(
        [sys.executable, "-m", "tsopt", "tune", "copy", "--rows", "256", "--cols", "512",
         "--trials", str(TRIALS), "--sampler", "random", "--no-warm-start", "--db", db],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_three_tune_processes_share_one_study(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    processes = [start_tune(db_url, tmp_path) for _ in range(PROCESSES)]
    outputs = [p.communicate(timeout=900) for p in processes]
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert "Traceback" not in out + err, (out + err)[-4000:]
        assert process.returncode == 0, (out + err)[-4000:]
        assert not err.strip(), err  # not a warning, not a retry message

    with Store(db_url) as store:
        study = optuna.load_study(study_name=STUDY, storage=store.optuna_storage())
        trials = study.get_trials(deepcopy=False)
        candidates = store.candidates(STUDY)
        funnel = store.funnel(STUDY)
        info = store.get_study(STUDY)
        live = store.live_runs(STUDY)
    # The budget held across the processes: N trials in all, not N per process.
    asked = [t for t in trials if t.state != TrialState.WAITING]
    assert len(asked) == TRIALS
    # Every trial was finished by its run, or waits in the bundle for a GPU (none abandoned).
    for t in trials:
        assert t.state.is_finished() or "awaiting_measurement" in t.user_attrs, t
        assert t.user_attrs.get(RUN_ATTR), t  # asked by one of the runs, under the lock
    # No genome was evaluated twice: one candidate per genome, and the builds the processes
    # report add up to the builds the study holds (each process counts only its own).
    hashes = [c.genome_hash for c in candidates]
    assert len(hashes) == len(set(hashes))
    built_per_process = [int(re.search(r"(\d+) built", " ".join(out.split())).group(1))  # type: ignore[union-attr]
                         for out, _ in outputs]
    assert sum(built_per_process) == funnel["built"]
    # The bundle lists every built candidate once.
    bundle = read_manifest(tmp_path / ".tsopt" / "bundles" / STUDY)
    built = {c.genome_hash for c in candidates if c.build is not None and c.build.ok}
    assert [c.genome_hash for c in bundle.candidates] == list(dict.fromkeys(
        c.genome_hash for c in bundle.candidates))
    assert {c.genome_hash for c in bundle.candidates} == built
    # Each process ran as a run of the study; when the last ended, the study finished.
    assert len({t.user_attrs[RUN_ATTR] for t in trials}) <= PROCESSES
    assert info is not None and info.status == "finished" and not live
