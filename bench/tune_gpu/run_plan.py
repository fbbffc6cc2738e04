"""Run `tsopt tune gemm` studies on the GPU machine itself, one after another.

Each study is the command a user types (default sampler, seed library and warm start unless a
run says otherwise), with ``--pool processes --workers W``: W build processes and one
measuring worker on the machine's GPU. Each study gets its own SQLite database, so no study
warm-starts from another one of this plan (each is "fresh"). The database and the command's
log are packed into ``--out``/``tune-plan.tar.xz`` as soon as the study ends, so a call cut
short keeps what finished (one archive: a device call brings back at most 8 files).

    python3 bench/tune_gpu/run_plan.py --out $OUT --deadline 560 \\
        --run s1:8192:8192:8192:1:2m --run nolib:8192:8192:8192:0:5m:nolib

A run is ``NAME:M:N:K:SEED:TIME[:nolib]``; ``nolib`` adds ``--no-library --no-warm-start``.
A run that cannot finish before the deadline (its time plus ``--slack``) is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def seconds(text: str) -> float:
    unit = {"s": 1, "m": 60, "h": 3600}[text[-1]]
    return float(text[:-1]) * unit


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", action="append", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/tunes"))
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--deadline", type=float, default=560.0, help="seconds from start")
    parser.add_argument("--monitor", type=float, default=0.0,
                        help="every N s, the GPU's state and py-spy stacks into <study>.monitor")
    parser.add_argument("--slack", type=float, default=45.0,
                        help="seconds a study needs beyond --time (start-up, final round)")
    args = parser.parse_args()
    start = time.monotonic()
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.work / "results"
    results.mkdir(exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    summary = []
    for spec in args.run:
        name, m, n, k, seed, budget, *flags = spec.split(":")
        left = args.deadline - (time.monotonic() - start)
        if seconds(budget) + args.slack > left:
            print(f"== {name}: skipped ({left:.0f} s left)", flush=True)
            summary.append({"name": name, "skipped": True})
            continue
        db = args.work / f"{name}.db"
        cmd = [sys.executable, "-m", "tsopt", "tune", "gemm", "--m", m, "--n", n, "--k", k,
               "--seed", seed, "--time", budget, "--pool", "processes",
               "--workers", str(args.workers), "--db", f"sqlite:///{db}", "--study", name]
        if "nolib" in flags:
            cmd += ["--no-library", "--no-warm-start"]
        t0 = time.time()
        with open(results / f"{name}.log", "w") as log:
            # A hard stop past the budget: SIGINT lets the study close its records (exit 130).
            proc = subprocess.Popen(["timeout", "-s", "INT", "-k", "20",
                                     str(int(seconds(budget) + args.slack)), *cmd],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=args.work, env=env)
            watcher = None
            if args.monitor > 0:
                watcher = subprocess.Popen(
                    [str(Path(__file__).with_name("monitor.sh")), str(proc.pid),
                     str(args.monitor)], stdout=open(results / f"{name}.monitor", "w"),
                    stderr=subprocess.STDOUT)
            rc = proc.wait()
            if watcher is not None:
                watcher.wait(timeout=60)
        wall = time.time() - t0
        if db.exists():
            shutil.copy(db, results / db.name)
        row = {"name": name, "command": " ".join(cmd[1:]), "rc": rc, "wall_s": round(wall, 1),
               "started_unix": t0}
        summary.append(row)
        tail = (results / f"{name}.log").read_text(errors="replace").splitlines()
        print(f"== {name} rc {rc} wall {wall:.0f} s", flush=True)
        for line in tail:
            if "winner" in line or "best:" in line or line.startswith("proposed"):
                print("   " + line.strip()[:200], flush=True)
        (results / "plan.json").write_text(json.dumps(summary, indent=1))
        subprocess.run(["tar", "-cJf", str(args.out / "tune-plan.tar.xz"), "-C", str(results),
                        "."], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
