"""Does sharing TS's exhaustive searches through the database cut a study's CPU per built
candidate (issue #12 item 2)? Three GPU-less `tsopt tune gemm` studies, each the command a
user types (default sampler, seed library, 2 build processes, nothing measured here):

  A  8192^3 seed 1 in a fresh database `shared.db`;
  B  4096^3 seed 2 in the same database, after A (warm: A's searches are there);
  C  4096^3 seed 2 in a fresh database `cold.db` (B's control: the same proposals, cold).

Each study's CPU is the CPU time of its process tree, read from ``/proc`` every 0.2 s by
role: the driver (the ``tsopt tune`` process), its build workers, and their build processes
(compile, export, link). ``RUSAGE_CHILDREN`` is not used: the build workers are not waited
for when the study ends, so it misses most of their time. From the databases: the exhaustive
searches each study ran (``tsopt_ts_search`` rows written during its run), how many the
state bound cut, and the seconds its verdicts took.

    python bench/driver_scale/shared_searches/shared_searches.py --out DIR [--built 12]

Writes ``shared_searches.json`` and ``shared_searches.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STUDIES = (("A", "a8192", 8192, 1, "shared.db"), ("B", "b4096", 4096, 2, "shared.db"),
           ("C", "b4096", 4096, 2, "cold.db"))


TICK = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds so far) of every process."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        found[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK)
    return found


def tree_cpu(proc: subprocess.Popen) -> dict[str, float]:
    """Poll ``proc``'s process tree until it exits: the CPU seconds of each process, summed by
    role (the last reading of each; a process that lives less than one poll is missed)."""
    last: dict[int, tuple[str, float]] = {}
    while True:
        done = proc.poll() is not None
        table = _processes()
        for pid, (_, cpu) in table.items():
            chain, up = [], pid
            while up in table and up not in (proc.pid, 1) and len(chain) < 8:
                chain.append(up)
                up = table[up][0]
            if pid != proc.pid and up != proc.pid:
                continue
            role = ("driver" if pid == proc.pid else "build workers" if len(chain) == 1
                    else "build processes")
            last[pid] = (role, max(cpu, last.get(pid, ("", 0.0))[1]))
        if done:
            break
        time.sleep(0.2)
    roles: dict[str, float] = {}
    for role, cpu in last.values():
        roles[role] = round(roles.get(role, 0.0) + cpu, 1)
    return roles


def run(work: Path, name: str, size: int, seed: int, db: str, built: int) -> dict:
    cmd = [sys.executable, "-m", "tsopt", "tune", "gemm", "--m", str(size), "--n", str(size),
           "--k", str(size), "--seed", str(seed), "--built", str(built), "--workers", "2",
           "--pool", "processes", "--db", f"sqlite:///{work / db}", "--study", name]
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.time()
    # One working folder (and so one artifact cache) per database: C must compile what B
    # compiled, or its builds are cache hits.
    folder = work / Path(db).stem
    folder.mkdir(exist_ok=True)
    with open(work / f"{name}-{db}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
        roles = tree_cpu(proc)
    return {"study": name, "db": db, "command": " ".join(cmd[1:]), "rc": proc.returncode,
            "cpu_s": round(sum(roles.values()), 1), "cpu_by_role": roles,
            "wall_s": round(time.time() - start, 1), "started": start}


def facts(work: Path, row: dict) -> dict:
    con = sqlite3.connect(work / row["db"])
    sid, = con.execute("select id from tsopt_study where name=?", (row["study"],)).fetchone()
    first, last = con.execute("select min(started_at), max(finished_at) from tsopt_run "
                              "where study_id=?", (sid,)).fetchone()
    searches = con.execute(
        "select count(*), coalesce(sum(seconds), 0), coalesce(sum(bounded is not null), 0) "
        "from tsopt_ts_search where created_at between ? and ?", (first, last)).fetchone()
    built, build_s = con.execute(
        "select count(*), coalesce(sum(b.compile_seconds + b.export_seconds + b.link_seconds), 0)"
        " from tsopt_candidate c join tsopt_build b on c.build_id = b.id "
        "where c.study_id = ? and b.status = 'ok'", (sid,)).fetchone()
    verdicts = con.execute("select count(*), coalesce(sum(seconds), 0) from tsopt_judged "
                           "where created_at between ? and ?", (first, last)).fetchone()
    genomes = [h[:12] for (h,) in con.execute(
        "select genome_hash from tsopt_candidate where study_id=? order by id", (sid,))]
    return {**row, "built": built, "build_wall_s": round(build_s, 1),
            "searches_run": searches[0], "search_wall_s": round(searches[1], 1),
            "searches_cut_by_bound": searches[2], "verdicts": verdicts[0],
            "verdict_wall_s": round(verdicts[1], 1), "genomes": genomes,
            "cpu_per_built": round(row["cpu_s"] / built, 2) if built else None}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--built", type=int, default=12)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in ("shared", "cold"):
        (args.out / f"{stale}.db").unlink(missing_ok=True)
        shutil.rmtree(args.out / stale, ignore_errors=True)
    rows = [facts(args.out, run(args.out, name, size, seed, db, args.built))
            for _, name, size, seed, db in STUDIES]
    doc = {"machine": f"{os.cpu_count()} CPUs, load {os.getloadavg()}", "studies": rows}
    (args.out / "shared_searches.json").write_text(json.dumps(doc, indent=1))
    lines = ["| run | study | database | built | exhaustive searches run (cut by the bound) | "
             "their wall s | verdicts' wall s | CPU s: driver / build workers / build processes"
             " | CPU s per built |", "|---|---|---|---|---|---|---|---|---|"]
    for label, row in zip("ABC", rows, strict=True):
        roles = row["cpu_by_role"]
        split = " / ".join(str(roles.get(k, 0.0)) for k in ("driver", "build workers",
                                                            "build processes"))
        lines.append(f"| {label} | {row['study']} | {row['db']} | {row['built']} | "
                     f"{row['searches_run']} ({row['searches_cut_by_bound']}) | "
                     f"{row['search_wall_s']} | {row['verdict_wall_s']} | {split} | "
                     f"{row['cpu_per_built']} |")
    same = rows[1]["genomes"] == rows[2]["genomes"]
    lines.append(f"\nB and C proposed the same genomes: {same}.")
    (args.out / "shared_searches.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
