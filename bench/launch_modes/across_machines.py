"""Issue #28 item 3's check across machines: the runner's graph ratio against the independent
script's, with the spread between passes AND machines (the brief's measure of uncertainty).

Reads the three rounds' archives, each one H200 (round 1, 2026-12-03, ``results/``; rounds 2
and 3, 2026-12-04, ``results2/`` and ``results3/``: GPU serials 1654124044822 and
1654524155874 in their ``gpu.csv``): per round two runner passes and two passes of the script as
first written (20 calls per graph, each replay waited for: ``script.pass*`` in round 1,
``script-c20-wait.pass*`` after). Per kernel:

- R, S: the mean of the runner's six passes and of the script's six;
- G = |R - S| / S, the gap;
- P, the spread between passes and machines: the larger of (max - min) / mean over the runner's
  six passes and over the script's six;
- "agrees" when G <= P;
- per machine, the gap (R_m - S_m) / S_m, signed: a gap of one sign on every machine is a bias
  of the protocol, not noise, whatever P says.

    python3 bench/launch_modes/across_machines.py [--json OUT]   (unpacks evidence/launch_modes.tar.xz)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from scripts.evidence import raw_files  # noqa: E402  (the rounds' archives, from evidence/)

ROUNDS = [("round 1", HERE / "results/launch_modes.tar.gz", "script"),
          ("round 2", HERE / "results2/launch_modes_factorial.tar.gz", "script-c20-wait"),
          ("round 3", HERE / "results3/launch_modes_factorial.tar.gz", "script-c20-wait")]
# Round 4 (2026-12-05): the held-out decode winners (build_heldout.py), one H100 (serial
# 1752824022824), device.sh twice on the warm machine: two runs, not two machines.
HELDOUT = [("run 1", HERE / "results4/launch_heldout.run1.tar.gz", "script"),
           ("run 2", HERE / "results4/launch_heldout.run2.tar.gz", "script")]
# Round 5 (2026-12-05, stop 45): the same winners on two more H100s (serials 1651624110432 and
# 1752524018395), factorial.sh with the script as written and on the runner's layout (regions).
HELDOUT_MACHINES = [*HELDOUT,
                    ("H100 2", HERE / "results5/launch_modes_factorial.tar.gz", "script-c20-wait"),
                    ("H100 3", HERE / "results5b/launch_modes_factorial.tar.gz", "script-c20-wait")]
HELDOUT_REGIONS = [
    ("H100 2", HERE / "results5/launch_modes_factorial.tar.gz", "script-c20-wait-regions"),
    ("H100 3", HERE / "results5b/launch_modes_factorial.tar.gz", "script-c20-wait-regions")]
SETS = {"suite": (ROUNDS, "machines"), "heldout": (HELDOUT, "runs on one machine"),
        "heldout-machines": (HELDOUT_MACHINES, "runs: two on one H100, one on each of two more"),
        "heldout-regions": (HELDOUT_REGIONS, "machines, the script on the runner's layout")}


def ratios(tar: Path, name: str, key: str) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp())
    with tarfile.open(tar) as t:
        t.extractall(tmp, filter="data")
    doc = json.loads((tmp / f"{name}.json").read_text())
    return {r["genome_hash"][:12]: r["ratio"] for r in doc[key] if r.get("ratio")}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    parser.add_argument("--set", choices=sorted(SETS), default="suite",
                        help="suite: the seed library's decode winners on three H200s (rounds "
                             "1-3); heldout: the held-out decode winners (round 4); "
                             "heldout-machines: those on three H100s (rounds 4-5); "
                             "heldout-regions: the script on the runner's layout, two H100s "
                             "(round 5)")
    args = parser.parse_args()
    raw_files("launch_modes")
    rounds, unit = SETS[args.set]
    runner: dict[str, list[float]] = {}
    script: dict[str, list[float]] = {}
    per_machine: dict[str, list[float]] = {}
    for _label, tar, prefix in rounds:
        r = [ratios(tar, f"runner.pass{p}", "measurements") for p in (1, 2)]
        s = [ratios(tar, f"{prefix}.pass{p}", "kernels") for p in (1, 2)]
        for g in set(r[0]) & set(r[1]) & set(s[0]) & set(s[1]):
            runner.setdefault(g, []).extend([r[0][g], r[1][g]])
            script.setdefault(g, []).extend([s[0][g], s[1][g]])
            rm, sm = (r[0][g] + r[1][g]) / 2, (s[0][g] + s[1][g]) / 2
            per_machine.setdefault(g, []).append((rm - sm) / sm)
    rows = []
    for g in sorted(runner):
        rv, sv = runner[g], script[g]
        rm, sm = statistics.fmean(rv), statistics.fmean(sv)
        gap = abs(rm - sm) / sm
        spread = max((max(rv) - min(rv)) / rm, (max(sv) - min(sv)) / sm)
        signed = per_machine[g]
        one_sign = len(signed) == len(rounds) and (all(x > 0 for x in signed)
                                                   or all(x < 0 for x in signed))
        rows.append({"genome": g, "runner": rv, "script": sv, "R": rm, "S": sm, "gap": gap,
                     "spread": spread, "agrees": gap <= spread,
                     "gap_per_machine": signed, "one_sign_on_every_machine": one_sign})
    agree = sum(r["agrees"] for r in rows)
    biased = sum(r["one_sign_on_every_machine"] for r in rows)
    n = len(rounds)
    print(f"{agree} of {len(rows)} agree within the spread between passes and {unit} "
          f"({n} {unit}, {2 * n} passes a side); {biased} have a gap of one sign in "
          f"every one of the {n}\n")
    print(f"| genome | runner, {n} x 2 passes | script, same | R | S | gap G | spread P "
          "| agrees | gap per run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['genome']} | {', '.join(f'{x:.3f}' for x in r['runner'])} | "
              f"{', '.join(f'{x:.3f}' for x in r['script'])} | {r['R']:.3f} | {r['S']:.3f} | "
              f"{100 * r['gap']:.2f} % | {100 * r['spread']:.2f} % | "
              f"{'yes' if r['agrees'] else 'no'} | "
              f"{', '.join(f'{100 * x:+.1f} %' for x in r['gap_per_machine'])} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
