"""The driver's and the database's halves of a search, measured on this machine (issue #32,
item 5), for the paper estimate of an 8-GPU, 128-core Ray cluster in the README.

Two measurements, each on SQLite and on PostgreSQL (``--pg URL``; scripts/test.sh's
throwaway server, ``eval "$(bash .ci/postgres.sh)"``):

1. **driver**: a real ``tsopt tune`` driver (``Driver``: evolve sampler, proposals repaired
   into the legal set, predictions, claims, records, Optuna's ask/tell) over a real space,
   with real builds in one local build process (``--pool processes --workers 1``: their CPU
   is the child's, not the driver's) and a SIMULATED device (``SimulatedDevice``: made-up
   timings, zero GPU time, named so in every record; no figure of it is a GPU's). Read: the
   driver process's own CPU seconds (``getrusage(RUSAGE_SELF)``) in the search loop, per trial
   and per built candidate, and the SQL statements that write (INSERT/UPDATE/DELETE) and
   the commits, per trial.
2. **database**: one writer (the driver alone writes) replaying a built candidate's writes
   as the driver makes them, each in its own transaction: claim, verdict, build, measurement,
   and Optuna's ask, user attributes and tell on the same database. Read: candidates and
   write transactions per second, wall.

Writes ``scale_paper.json`` beside itself (or ``--out``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this tree's tsopt, not site's

from rich.console import Console  # noqa: E402
from sqlalchemy import event  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402

from tsopt.core.bundle import Baseline  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.records import BuildResult, Measurement, Verdict  # noqa: E402
from tsopt.search.driver import Driver  # noqa: E402
from tsopt.search.pools.protocol import MeasureDone, MeasureQueue, MeasureResult  # noqa: E402
from tsopt.search.request import TuneRequest  # noqa: E402

HERE = Path(__file__).resolve().parent
DEVICE = "SIMULATED DEVICE (bench/scale_paper: no GPU, made-up timings)"


class Statements:
    """Counts the SQL statements every engine of this process runs, by kind."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        event.listen(Engine, "before_cursor_execute", self._statement)
        event.listen(Engine, "commit", self._commit)

    def _statement(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.counts[statement.lstrip().split(None, 1)[0].upper()] += 1

    def _commit(self, _conn: Any) -> None:
        self.counts["COMMIT"] += 1

    def writes(self) -> int:
        return sum(self.counts[k] for k in ("INSERT", "UPDATE", "DELETE"))


class SimulatedDevice(MeasureQueue):
    """SIMULATED measuring pool: every candidate "measures" at once, ok, with a made-up time
    from its genome hash; the device name says so."""

    name = "simulated"
    slots = 1

    def pending(self) -> int:
        return len(self._queue)

    def poll(self, timeout: float) -> list[MeasureDone]:
        item = self._next_for(0)
        if item is None:
            return []
        tag, request = item
        key = Problem.from_dict(request.problem).key
        median = 10.0 + int(request.genome_hash[:4], 16) / 65536.0
        m = Measurement(request.genome_hash, key, "ok", median_us=median, runs=50, rate=1.0,
                        rate_unit="GB/s", baseline_name="baseline (simulated)",
                        baseline_median_us=11.0, ratio=11.0 / median, ratio_lo=11.0 / median * 0.99,
                        ratio_hi=11.0 / median * 1.01, rounds=8, device=DEVICE)
        baseline = Baseline(key, "baseline (simulated)", DEVICE, 11.0, 11.0, 11.0, 50,
                            rate_unit="GB/s")
        return [MeasureDone(tag, 0, MeasureResult(m, baseline))]

    def close(self) -> list[str]:
        return []


class TimedDriver(Driver):
    """The driver, with its own CPU and the SQL it runs counted over the search loop alone
    (set-up, the seed library and the sampler's binding are once per run, not per trial)."""

    statements: Statements
    loop: dict[str, float]

    def _search(self) -> int:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu0, wall0 = usage.ru_utime + usage.ru_stime, time.monotonic()
        writes0, commits0 = self.statements.writes(), self.statements.counts["COMMIT"]
        code = super()._search()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.loop = {"cpu_s": usage.ru_utime + usage.ru_stime - cpu0,
                     "wall_s": time.monotonic() - wall0,
                     "writes": self.statements.writes() - writes0,
                     "commits": self.statements.counts["COMMIT"] - commits0}
        return code


def driver_half(space: str, problem: Problem, trials: int, url: str, work: Path,
                statements: Statements) -> dict[str, Any]:
    request = TuneRequest(space=space, problem=problem, trials=trials, db_url=url,
                          study=f"scale-{space}-{uuid.uuid4().hex[:6]}", workers=1,
                          pool="processes", bundle_dir=work / "bundle",
                          cache_dir=work / "artifacts", measure="never", warm_start=False)
    console = Console(file=io.StringIO(), width=250)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    driver = TimedDriver(request, console, measure_pool=SimulatedDevice())
    driver.statements = statements
    code = driver.run()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    stats = driver.stats
    loop = driver.loop
    proposed = max(1, stats.proposed)
    return {
        "space": space, "problem": problem.key, "db": url.split(":", 1)[0], "exit": code,
        "trials": stats.proposed, "built": stats.built, "cache_hits": stats.build_cache_hits,
        "measured_simulated": sum(stats.measured.values()),
        "remeasured_simulated": stats.remeasured,
        "driver_cpu_s_whole_run": usage.ru_utime + usage.ru_stime - cpu0,
        "loop": loop,
        "driver_cpu_s_per_trial": loop["cpu_s"] / proposed,
        "driver_cpu_s_per_built": loop["cpu_s"] / max(1, stats.built),
        "writes_per_trial": loop["writes"] / proposed,
        "commits_per_trial": loop["commits"] / proposed,
        "build_worker_cpu_s": stats.seconds.get("cpu", 0.0),
        "summary_tail": console.file.getvalue().splitlines()[-8:],  # type: ignore[attr-defined]
    }


def database_half(url: str, candidates: int, statements: Statements) -> dict[str, Any]:
    """One writer replaying a built candidate's writes, each in its own transaction."""
    import optuna

    from tsopt.db.store import Store
    from tsopt.search.outcomes import Outcome, open_study, tell

    problem = Problem.of("copy", "fp16", rows=4096, cols=4096)
    name = f"dbhalf-{uuid.uuid4().hex[:8]}"
    run_id = str(uuid.uuid4())
    with Store(url) as store:
        store.create_or_get_study(name, "copy", problem, "sm_90a", "evolve", {})
        store.start_run(name, run_id)
        study = open_study(store, name, optuna.samplers.RandomSampler(seed=0))
        writes0, commits0 = statements.writes(), statements.counts["COMMIT"]
        start = time.monotonic()
        for i in range(candidates):
            trial = study.ask()
            trial.set_user_attr("tsopt_run", run_id)
            genome = Genome.make("copy", schedule={"load": [("tma_load", "loop")]},
                                 structure={}, numeric={"stages": 2, "i": i})
            trial.set_user_attr("genome_hash", genome.hash)
            claim = store.claim_candidate(name, genome, "suggest", trial.number, run_id)
            store.record_verdict(claim.candidate_id, "copy", f"k-{genome.hash}",
                                 Verdict.ok(genome.hash, seconds=0.01, domain=4))
            store.record_build(claim.candidate_id, BuildResult(
                genome.hash, problem.key, "sm_90a", "ok", artifact_dir=f"/sim/{genome.hash}",
                cache_key=f"sim-{genome.hash}"), node="simulated-node", wait_s=0.0)
            ratio = 1.0 + (i % 7) / 100
            store.record_measurement(claim.candidate_id, Measurement(
                genome.hash, problem.key, "ok", median_us=10.0 / ratio, runs=50,
                baseline_median_us=10.0, ratio=ratio, device=DEVICE, seconds=0.25), run_id,
                wait_s=0.0)
            tell(study, trial, Outcome(state="complete", value=1.0 / ratio))
        wall = time.monotonic() - start
        writes, commits = statements.writes() - writes0, statements.counts["COMMIT"] - commits0
    return {"db": url.split(":", 1)[0], "candidates": candidates, "wall_s": wall,
            "candidates_per_s": candidates / wall, "writes": writes, "commits": commits,
            "writes_per_candidate": writes / candidates,
            "commits_per_candidate": commits / candidates,
            "write_statements_per_s": writes / wall, "commits_per_s": commits / wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=os.environ.get("TSOPT_TEST_POSTGRES_URL"),
                        help="a PostgreSQL URL (default: $TSOPT_TEST_POSTGRES_URL)")
    parser.add_argument("--copy-trials", type=int, default=12)
    parser.add_argument("--gemm-trials", type=int, default=6)
    parser.add_argument("--db-candidates", type=int, default=200)
    parser.add_argument("--work", type=Path, default=Path("/tmp/scale_paper"))
    parser.add_argument("--out", type=Path, default=HERE / "scale_paper.json")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    statements = Statements()
    urls = [f"sqlite:///{args.work / f'scale-{uuid.uuid4().hex[:6]}.db'}"]
    if args.pg:
        urls.append(args.pg)
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "load_at_start": os.getloadavg(),
                    "python": platform.python_version()},
        "device": DEVICE, "driver": [], "database": []}
    problems = [("copy", Problem.of("copy", "fp16", rows=4096, cols=4096), args.copy_trials),
                ("gemm", Problem.of("gemm", "bf16", m=8192, n=8192, k=8192), args.gemm_trials)]
    for url in urls:
        for space, problem, trials in problems:
            if trials:
                print(f"driver: {space} on {url.split(':', 1)[0]}", flush=True)
                report["driver"].append(driver_half(space, problem, trials, url, args.work,
                                                    statements))
        print(f"database: {url.split(':', 1)[0]}", flush=True)
        report["database"].append(database_half(url, args.db_candidates, statements))
    report["machine"]["load_at_end"] = os.getloadavg()
    args.out.write_text(json.dumps(report, indent=1, sort_keys=True, default=str))
    for row in report["driver"]:
        print(f"driver {row['space']:5} {row['db']:10} trials {row['trials']:3} built "
              f"{row['built']:3}  CPU/trial {row['driver_cpu_s_per_trial']:.3f} s  "
              f"writes/trial {row['writes_per_trial']:.1f}")
    for row in report["database"]:
        print(f"database {row['db']:10} {row['candidates_per_s']:.1f} candidates/s, "
              f"{row['commits_per_s']:.0f} commits/s, {row['writes_per_candidate']:.1f} "
              "writes/candidate")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
