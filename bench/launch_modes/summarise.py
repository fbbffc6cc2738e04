"""Per winner: does tsopt's runner in graph mode agree with the independent graph script?

Reads what bench/launch_modes/device.sh brought back (the folder, or launch_modes.tar.gz):
two passes of the runner (``runner.pass{1,2}.json``) and two of the script
(``script.pass{1,2}.json``), interleaved in one device call. For each kernel:

- R = the runner's ratio (cuBLAS time / kernel time, both in CUDA graphs), mean of its passes;
  S = the script's, likewise;
- the pass-to-pass spread P = the larger of |R1 - R2| / R and |S1 - S2| / S;
- the gap G = |R - S| / S.

"agrees" when G <= P (the issue's test: within the pass-to-pass spread). Because two passes in
one call can happen to land close together, a second column also allows the passes' own 95 %
half-widths (H, the largest of the four): "within P or H". Prints a markdown table and the
verdict counts; the figures are the runner's and the script's own, nothing adjusted.

    python3 bench/launch_modes/summarise.py RESULTS_DIR_OR_TAR [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any


def load(path: Path) -> dict[str, Any]:
    if path.is_file():
        tmp = Path(tempfile.mkdtemp())
        with tarfile.open(path) as tar:
            tar.extractall(tmp, filter="data")
        path = tmp
    docs: dict[str, Any] = {}
    for name in ("runner.pass1", "runner.pass2", "script.pass1", "script.pass2"):
        file = path / f"{name}.json"
        docs[name] = json.loads(file.read_text()) if file.exists() else None
    winners = path / "winners.json"
    docs["winners"] = json.loads(winners.read_text()) if winners.exists() else {}
    docs["calls"] = (path / "calls.log").read_text() if (path / "calls.log").exists() else ""
    return docs


def by_genome(doc: dict[str, Any] | None, key: str) -> dict[str, dict[str, Any]]:
    if doc is None:
        return {}
    return {row["genome_hash"]: row for row in doc[key]}


def rows(docs: dict[str, Any]) -> list[dict[str, Any]]:
    runner = [by_genome(docs["runner.pass1"], "measurements"),
              by_genome(docs["runner.pass2"], "measurements")]
    script = [by_genome(docs["script.pass1"], "kernels"), by_genome(docs["script.pass2"], "kernels")]
    hashes = sorted({h for d in runner + script for h in d},
                    key=lambda h: next((d[h].get("problem_key") or "" for d in runner if h in d),
                                       ""))
    out = []
    for h in hashes:
        r = [d.get(h) for d in runner]
        s = [d.get(h) for d in script]
        row: dict[str, Any] = {"genome": h[:12], "problem": next(
            (x["problem_key"] for x in r if x), None) or next(
            (f"gemm-{x['problem']['dtype']}-{x['problem']['m']}x{x['problem']['n']}x"
             f"{x['problem']['k']}" for x in s if x and "problem" in x), None) or next(
            (x["bundle"].removeprefix("launch-") for x in s if x and "bundle" in x), "?")}
        bad = [f"runner pass {i + 1}: {x.get('status') if x else 'missing'} "
               f"{(x or {}).get('error') or ''}".strip()
               for i, x in enumerate(r) if not x or x.get("status") != "ok"]
        bad += [f"script pass {i + 1}: {(x or {}).get('error', 'missing')}"
                for i, x in enumerate(s) if not x or "ratio" not in x]
        if bad:
            row["failed"] = "; ".join(bad)
            out.append(row)
            continue
        rr = [x["ratio"] for x in r]  # type: ignore[index]
        ss = [x["ratio"] for x in s]  # type: ignore[index]
        R, S = sum(rr) / 2, sum(ss) / 2
        P = max(abs(rr[0] - rr[1]) / R, abs(ss[0] - ss[1]) / S)
        H = max((x["ratio_hi"] - x["ratio_lo"]) / (2 * x["ratio"]) for x in r + s)  # type: ignore[index]
        G = abs(R - S) / S
        row.update(
            runner=rr, runner_ci=[[x["ratio_lo"], x["ratio_hi"]] for x in r],  # type: ignore[index]
            script=ss, script_ci=[[x["ratio_lo"], x["ratio_hi"]] for x in s],  # type: ignore[index]
            script_p10_p90=[[x["ratio_p10"], x["ratio_p90"]] for x in s],  # type: ignore[index]
            runner_us=[[x["median_us"], x["baseline_median_us"]] for x in r],  # type: ignore[index]
            script_us=[[x["median_us"], x["baseline_median_us"]] for x in s],  # type: ignore[index]
            launches_per_sample=[x["conditions"].get("launches_per_sample") for x in r],  # type: ignore[index]
            launch=[x.get("launch") for x in r],  # type: ignore[union-attr]
            rel_err=[x["rel_err"] for x in s],  # type: ignore[index]
            R=R, S=S, P=P, H=H, G=G, agrees=G <= P, agrees_with_intervals=G <= max(P, H))
        out.append(row)
    return out


def markdown(table: list[dict[str, Any]], docs: dict[str, Any]) -> str:
    lines = ["| problem | genome | runner graph ratio, 2 passes [95 %] | script graph ratio, 2 "
             "passes [95 %] | runner us kernel / cuBLAS | script us kernel / cuBLAS | gap G | "
             "pass-to-pass P | half-width H | agrees (G <= P) | within P or H |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in table:
        if "failed" in row:
            lines.append(f"| {row['problem']} | {row['genome']} | failed: {row['failed']} "
                         "| | | | | | | | |")
            continue

        def pair(values: list[float], cis: list[list[float]]) -> str:
            return ", ".join(f"{v:.3f} [{lo:.3f}, {hi:.3f}]" for v, (lo, hi) in zip(values, cis, strict=True))

        def us(values: list[list[float]]) -> str:
            return ", ".join(f"{a:.2f}/{b:.2f}" for a, b in values)

        lines.append(
            f"| {row['problem']} | {row['genome']} | {pair(row['runner'], row['runner_ci'])} | "
            f"{pair(row['script'], row['script_ci'])} | {us(row['runner_us'])} | "
            f"{us(row['script_us'])} | {100 * row['G']:.2f} % | {100 * row['P']:.2f} % | "
            f"{100 * row['H']:.2f} % | {'**yes**' if row['agrees'] else 'no'} | "
            f"{'yes' if row['agrees_with_intervals'] else 'no'} |")
    timed = [r for r in table if "failed" not in r]
    lines += ["", f"{sum(r['agrees'] for r in timed)} of {len(table)} winners agree within the "
              f"pass-to-pass spread; {sum(r['agrees_with_intervals'] for r in timed)} within it "
              f"or the passes' half-widths; {len(table) - len(timed)} failed to time."]
    for name in ("runner.pass1", "runner.pass2", "script.pass1", "script.pass2"):
        doc = docs.get(name)
        lines.append(f"- {name}: " + (f"{doc['seconds']} s" if doc else "missing"))
    if docs.get("calls"):
        lines.append("- calls: " + "; ".join(docs["calls"].split("\n")).strip("; "))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("results", type=Path)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    docs = load(args.results)
    table = rows(docs)
    print(markdown(table, docs))
    if args.json is not None:
        args.json.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
