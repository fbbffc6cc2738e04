"""Goal (b), on the H200: a default `tsopt tune gemm` with inline measuring and 15 build
processes for 5 minutes per held-out problem, leave-one-shape-out, then its winner beside
the oracle's picks in one bundle, two passes.

On the GPU machine, the DSL (with optuna, SQLAlchemy, alembic) on PYTHONPATH as
``bench/device_dsl/README.md`` says; no Ray (``--pool processes``)::

    python3 bench/regret/gpu_tune.py --problem decode-wide --seed 1 --time 5m \
        --out $OUT/gpu-s1-decode-wide.json

Per problem given, in turn:

1. the study: ``python3 -m tsopt tune gemm --m M --n N --k K --dtype D --library-exclude-self
   --time T --pool processes --workers W --seed S --db sqlite:///<work>/<name>-s<S>.db
   --study regret-<name>-s<S>`` (sampler, library re-fit, warm start, ``--gpus all`` and
   ``--launch graph`` at their defaults: the process pool builds in W processes and measures
   inline on this machine's GPU, one measuring worker), stopped by SIGINT at T + ``--slack``
   if it has not ended (the study closes its records), SIGKILL 20 s later;
2. its trajectory from the database: every measurement with its time from the run's start
   and the best paired ratio so far; its winner (rank 1, ``store.ranked``);
3. the winner, the winners of earlier documents of the same problem (``--beside FILE``: e.g.
   another seed's call) and the oracle's picks (``oracle-best.json``) built (judged in full
   first; the study's own artifact cache makes the winner a cache hit) into one pair bundle
   written twice in opposite orders, each measured by ``python -m tsopt.workers.runner
   --bundle`` (one call each: the side-by-side passes).

``--out`` (ONE file: a call brings back at most 8) is a side-by-side document
(``regret.FORMAT``, protocol ``gpu-inline``, library ``exclude-self``), rewritten after every
problem; a copy goes to ``<work>/`` so a later call on the same warm machine can read it
(``--beside``). A problem that cannot finish before ``--deadline`` (seconds from the start)
is left, and said so.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import socket
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (ROOT, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import sidebyside  # noqa: E402
from regret import FORMAT, problem_regret  # noqa: E402

PROTOCOL = "gpu-inline"
SIDE_BY_SIDE_S = 120.0
"""What building and measuring the pair bundles may take after a study (two runner calls of
up to ~8 genomes at the runner's defaults, the oracle picks' builds): a problem starts only
when its budget, the slack and this fit before the deadline."""


def seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    if not text or text[-1] not in units:
        raise SystemExit(f"error: --time {text!r} is not like 300s, 5m or 1h")
    return float(text[:-1]) * units[text[-1]]


def tune_argv(problem: Any, seed: int, budget: str, workers: int, db: Path,
              extra: list[str]) -> list[str]:
    sizes = problem.problem.sizes
    return [sys.executable, "-m", "tsopt", "tune", "gemm", "--m", str(sizes["m"]),
            "--n", str(sizes["n"]), "--k", str(sizes["k"]), "--dtype", problem.problem.dtype,
            "--library-exclude-self", "--time", budget, "--pool", "processes",
            "--workers", str(workers), "--seed", str(seed), "--db", f"sqlite:///{db}",
            "--study", f"regret-{problem.name}-s{seed}",
            "--bundle", str(db.with_suffix(".bundle")), *extra]


def _when(text: str) -> float:
    moment = datetime.fromisoformat(text)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def trajectory(db: Path, study: str) -> dict[str, Any]:
    """Every measurement of ``study`` with its seconds from the first run's start, and the
    best paired ratio so far (correct measurements only)."""
    con = sqlite3.connect(db)
    try:
        sid, config = con.execute("select id, config_json from tsopt_study where name=?",
                                  (study,)).fetchone()
        started = min(_when(r[0]) for r in con.execute(
            "select started_at from tsopt_run where study_id=?", (sid,)))
        rows = con.execute(
            "select c.genome_hash, m.status, m.ratio, m.ratio_lo, m.ratio_hi, m.median_us, "
            "m.measured_at, c.origin from tsopt_measurement m join tsopt_candidate c "
            "on m.candidate_id=c.id where c.study_id=? order by m.measured_at", (sid,)).fetchall()
        built = con.execute("select count(*) from tsopt_candidate c join tsopt_build b on "
                            "c.build_id=b.id where c.study_id=? and b.status='ok'",
                            (sid,)).fetchone()[0]
    finally:
        con.close()
    best, points = None, []
    for h, status, ratio, lo, hi, us, at, origin in rows:
        if status == "ok" and ratio is not None and (best is None or ratio > best):
            best = ratio
        points.append({"t": round(_when(at) - started, 2), "genome": h[:12], "status": status,
                       "ratio": ratio, "lo": lo, "hi": hi, "us": us, "origin": origin,
                       "best": best})
    return {"config": json.loads(config), "built": built, "measurements": len(points),
            "trajectory": points}


def winner(db: Path, study: str) -> dict[str, Any] | None:
    from tsopt.db.store import Store

    with Store(f"sqlite:///{db}") as store:
        ranked = store.ranked(study, limit=1)
    if not ranked:
        return None
    top, s = ranked[0], ranked[0].standing
    return {"genome_hash": top.genome_hash, "genome": top.genome.to_dict(),
            "origin": top.origin, "ratio": s.ratio if s else top.measurement.ratio,
            "ratio_lo": s.ratio_lo if s else None, "ratio_hi": s.ratio_hi if s else None,
            "measurements": s.measurements if s else 1}


def run_study(problem: Any, args: argparse.Namespace, say: Any = print) -> dict[str, Any]:
    db = args.work / f"{problem.name}-s{args.seed}.db"
    argv = tune_argv(problem, args.seed, args.time, args.workers, db, args.tune_arg)
    log = args.work / f"{problem.name}-s{args.seed}.log"
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    start = time.time()
    with open(log, "w") as out:
        rc = subprocess.call(["timeout", "-s", "INT", "-k", "20",
                              str(int(seconds(args.time) + args.slack)), *argv],
                             stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    wall = round(time.time() - start, 1)
    say(f"{problem.name} seed {args.seed}: tune rc {rc} in {wall} s", flush=True)
    study = f"regret-{problem.name}-s{args.seed}"
    facts: dict[str, Any] = {"study": study, "seed": args.seed, "command": " ".join(argv[1:]),
                             "rc": rc, "wall_s": wall, "budget": args.time,
                             "log_tail": log.read_text(errors="replace")[-3000:]}
    if db.exists():
        facts.update(trajectory(db, study))
        facts["winner"] = winner(db, study)
    return facts


def beside(paths: list[Path], name: str) -> list[dict[str, Any]]:
    """Winner items of ``name`` from earlier side-by-side documents (another seed's call)."""
    items = []
    for path in paths:
        doc = json.loads(path.read_text())
        for entry in doc.get("problems", []):
            if entry["name"] != name:
                continue
            for study in entry.get("studies", []):
                w = study.get("winner")
                if w and study.get("protocol", doc.get("protocol")) == PROTOCOL:
                    items.append({"genome": w["genome"], "genome_hash": w["genome_hash"],
                                  "role": {"kind": "winner", "protocol": PROTOCOL,
                                           "seed": study["seed"], "round": None,
                                           "study_ratio": w.get("ratio"),
                                           "from": path.name}})
    return items


def measure_problem(problem: Any, facts: dict[str, Any], args: argparse.Namespace,
                    stop_at: float) -> dict[str, Any]:
    oracle = sidebyside.read_oracle_best()[problem.name]
    items = []
    w = facts.get("winner")
    if w:
        items.append({"genome": w["genome"], "genome_hash": w["genome_hash"],
                      "role": {"kind": "winner", "protocol": PROTOCOL, "seed": args.seed,
                               "round": None, "study_ratio": w["ratio"]}})
    items += [i for i in beside(args.beside, problem.name) if i["role"]["seed"] != args.seed]
    slots = sidebyside.merge_items(items + sidebyside.oracle_items(oracle))
    sidebyside.build_missing(slots, problem.spec, ROOT / ".tsopt" / "artifacts", args.workers)
    bundles = sidebyside.write_pair_bundles(args.work / "pairs", f"{problem.name}-s{args.seed}",
                                            problem.spec, slots)
    runs = [sidebyside.run_runner(b, max(30.0, stop_at - time.time())) for b in bundles]
    entry = sidebyside.problem_document(bundles, runs)
    entry.update(name=problem.name, studies=[{**facts, "protocol": PROTOCOL}])
    return entry


def keep_database(db: Path, out: Path) -> Path | None:
    """The study database, xz-compressed beside ``out`` (a call's ``$OUT``): which genomes the
    study built and how each measured, for reading afterwards (the trajectory names them by
    short hash only)."""
    if not db.exists():
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    target = out.parent / (db.name + ".xz")
    target.write_bytes(lzma.compress(db.read_bytes(), preset=6))
    return target


def write(out: Path, work: Path, doc: dict[str, Any]) -> None:
    text = json.dumps(doc, sort_keys=True) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    (work / out.name).write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", action="append", required=True,
                        help="a held-out problem's name (tsopt heldout list); repeatable")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--time", default="5m", help="each study's --time")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--slack", type=float, default=40.0,
                        help="seconds past --time before the study is stopped")
    parser.add_argument("--deadline", type=float, default=570.0, help="seconds from the start")
    parser.add_argument("--work", type=Path, default=Path("/tmp/regret-gpu"))
    parser.add_argument("--beside", type=Path, action="append", default=[],
                        help="an earlier document whose winners of the same problem join "
                             "the pair bundle (goal d: two seeds side by side)")
    parser.add_argument("--tune-arg", action="append", default=[],
                        help="an argument added to the tune command (repeatable)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from tsopt.app.heldout import load_heldout

    held = {p.name: p for p in load_heldout().problems}
    bad = [n for n in args.problem if n not in held]
    if bad:
        print(f"error: {bad[0]!r} is not a held-out problem ({', '.join(held)})",
              file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    start = time.time()
    stop_at = start + args.deadline
    doc: dict[str, Any] = {"format": FORMAT, "version": 1, "protocol": PROTOCOL,
                           "library": "exclude-self", "host": socket.gethostname(),
                           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
                           "problems": [], "left": []}
    for name in args.problem:
        need = seconds(args.time) + args.slack + SIDE_BY_SIDE_S
        if time.time() + need > stop_at:
            print(f"{name}: left ({stop_at - time.time():.0f} s left, {need:.0f} needed)",
                  flush=True)
            doc["left"].append(name)
            continue
        facts = run_study(held[name], args)
        kept = keep_database(args.work / f"{name}-s{args.seed}.db", args.out)
        if kept is not None:
            facts["database"] = kept.name
        entry = measure_problem(held[name], facts, args, stop_at)
        doc["problems"].append(entry)
        doc["wall_s"] = round(time.time() - start, 1)
        write(args.out, args.work, doc)
        row = problem_regret(entry)
        for w in row["winners"]:
            print(f"{name} {w['role']}: ratio {w['ratio_per_pass']} regret "
                  f"{w['regret_per_pass']} (oracle best {row['oracle_best_per_pass']})",
                  flush=True)
    doc["wall_s"] = round(time.time() - start, 1)
    write(args.out, args.work, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
