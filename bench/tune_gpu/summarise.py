"""Tables, a figure and one JSON from what `run_plan.py` and `crosscheck.py` brought back.

    .venv/bin/python bench/tune_gpu/summarise.py RESULTS_DIR [RESULTS_DIR ...] --out bench/tune_gpu

RESULTS_DIR holds ``<study>.db`` and ``<study>.log`` (run_plan.py) and optionally
``crosscheck/*.results.json`` + ``labels.json``. Writes ``tune-gpu.json`` (every study's
timeline of paired measurements, its winner, its CPU accounting; every cross-check row),
``tune-gpu.md`` (the tables) and ``tune-gpu-8192.png`` (best-so-far against wall time).
``--library FILE`` takes the best known of a problem that has no cross-check from that seed
library's best paired entry.

Issue #12's clock: a study "reaches within 2 %" at the first measurement whose paired ratio is
at least 0.98 x the problem's best known ratio. The best known is the highest mean ratio in
the cross-check of that problem (the best-known genomes and every study's winner measured side
by side, twice); a problem with no cross-check has no reference and no such time.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
from datetime import UTC, datetime
from pathlib import Path

HBM_TBS = 4.30  # bench/hbm_copy: device-to-device copy, bytes read + written


def _when(text: str) -> float:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def study_facts(db: Path) -> list[dict]:
    from tsopt.db.store import Store

    con = sqlite3.connect(db)
    facts = []
    with Store(f"sqlite:///{db}") as store:
        for info in store.list_studies():
            sid, created, config = con.execute(
                "select id, created_at, config_json from tsopt_study where name=?",
                (info.name,)).fetchone()
            started = min(_when(r[0]) for r in con.execute(
                "select started_at from tsopt_run r where study_id=?", (sid,)))
            rows = con.execute(
                "select c.genome_hash, m.status, m.ratio, m.ratio_lo, m.ratio_hi, m.median_us, "
                "m.baseline_median_us, m.measured_at, m.run_id, c.origin, m.seconds "
                "from tsopt_measurement m join tsopt_candidate c on m.candidate_id=c.id "
                "where c.study_id=? order by m.measured_at", (sid,)).fetchall()
            timeline = [{"t": round(_when(r[7]) - started, 2), "genome": r[0][:12],
                         "status": r[1], "ratio": r[2], "lo": r[3], "hi": r[4],
                         "us": r[5], "cublas_us": r[6], "run": r[8], "origin": r[9],
                         "gpu_s": r[10]} for r in rows]
            counts = dict(con.execute(
                "select 'candidates', count(*) from tsopt_candidate where study_id=?",
                (sid,)).fetchall())
            built = con.execute(
                "select count(*), coalesce(sum(b.compile_seconds+b.export_seconds+b.link_seconds),0)"
                " from tsopt_candidate c join tsopt_build b on c.build_id=b.id "
                "where c.study_id=? and b.status='ok'", (sid,)).fetchone()
            judged = con.execute("select count(*), coalesce(sum(seconds),0), "
                                 "coalesce(sum(valid),0) from tsopt_judged").fetchone()
            ranked = store.ranked(info.name, limit=3)
            winner = None
            if ranked:
                s = ranked[0].standing
                winner = {"genome": ranked[0].genome_hash[:12], "genes": dict(ranked[0].genome.genes),
                          "ratio": s.ratio if s else ranked[0].measurement.ratio,
                          "lo": s.ratio_lo if s else None, "hi": s.ratio_hi if s else None,
                          "measurements": s.measurements if s else 1,
                          "median_us": ranked[0].median_us,
                          "first_measured_t": next((x["t"] for x in timeline
                                                    if x["genome"] == ranked[0].genome_hash[:12]), None)}
            p = info.problem
            facts.append({
                "study": info.name, "problem": p.key, "sizes": p.sizes, "dtype": p.dtype,
                "config": json.loads(config), "sampler": info.sampler,
                "measurements": timeline, "candidates": counts["candidates"],
                "built": built[0], "build_cpu_s": round(built[1], 1),
                "judged": judged[0], "judged_valid": judged[2],
                "judging_cpu_s": round(judged[1], 1), "winner": winner,
                "bytes_moved": p.bytes_moved() if callable(getattr(p, "bytes_moved", None)) else None,
            })
    return facts


def crosscheck_facts(folder: Path) -> dict:
    out: dict = {}
    labels_file = folder / "labels.json"
    labels = json.loads(labels_file.read_text()) if labels_file.exists() else {}
    for path in sorted(folder.glob("*.results.json")):
        doc = json.loads(path.read_text())
        spec_key = path.name.split(".results")[0].rsplit("-", 1)[0]
        rows = out.setdefault(spec_key, {})
        for m in doc["measurements"]:
            spec = spec_key.removeprefix("cc-").replace("-", ":", 2)
            names = labels.get(spec, {}).get(m["genome_hash"], [])
            rows.setdefault(m["genome_hash"][:12], {"labels": names, "passes": []})["passes"].append(
                {k: m.get(k) for k in ("status", "ratio", "ratio_lo", "ratio_hi", "median_us",
                                       "baseline_median_us", "rounds")})
    return out


WITHIN = 0.98


def references(cross: dict) -> dict[str, dict]:
    """problem key -> the cross-check's best (genome, labels, mean ratio)."""
    out: dict[str, dict] = {}
    for spec, rows in cross.items():
        problem = spec.removeprefix("cc-")
        for genome, row in rows.items():
            ratios = [x["ratio"] for x in row["passes"] if x["ratio"]]
            if len(ratios) < 2:
                continue  # one pass is not side by side with the others' both orders
            mean = statistics.mean(ratios)
            if mean > out.get(problem, {}).get("ratio", 0.0):
                out[problem] = {"genome": genome, "labels": row["labels"], "ratio": mean}
    return out


def library_references(path: Path) -> dict[str, dict]:
    """problem key -> the seed library's best paired entry (genome, its source, ratio)."""
    from tsopt.core.problem import Problem

    out: dict[str, dict] = {}
    for e in json.loads(path.read_text())["entries"]:
        if e["space"] != "gemm" or not e["paired"]:
            continue
        key = Problem.from_dict(e["problem"]).key
        if e["ratio"] > out.get(key, {}).get("ratio", 0.0):
            out[key] = {"genome": e["genome_hash"][:12], "ratio": e["ratio"],
                        "labels": [f"seed library: {e['source']}"]}
    return out


def reached_at(study: dict, reference: dict | None) -> float | None:
    """Seconds from the study's start to its first paired ratio within 2 % of the reference."""
    if reference is None:
        return None
    return next((x["t"] for x in study["measurements"] if x["status"] == "ok" and x["ratio"]
                 and x["ratio"] >= WITHIN * reference["ratio"]), None)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--library", type=Path, default=None,
                        help="for a problem with no cross-check here: the best known is this "
                             "seed library's best paired entry of that problem")
    args = parser.parse_args()
    studies, cross, plans = [], {}, []
    for d in args.dirs:
        for db in sorted(d.glob("*.db")):
            studies += study_facts(db)
        if (d / "plan.json").exists():
            plans += json.loads((d / "plan.json").read_text())
        if (d / "crosscheck").is_dir():
            cross.update(crosscheck_facts(d / "crosscheck"))
    refs = references(cross)
    if args.library is not None:
        for problem, ref in library_references(args.library).items():
            refs.setdefault(problem, ref)
    for s in studies:
        ref = refs.get(s["problem"])
        s["reference"] = ref
        s["within_2pct_at_s"] = reached_at(s, ref)
    doc = {"plans": plans, "studies": studies, "crosscheck": cross, "references": refs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tune-gpu.json").write_text(json.dumps(doc, indent=1))
    lines = ["| study | problem | seed | library | measured | built | CPU s / built | "
             "winner | ratio [95 %] | first measured at | HBM | within 2 % of best known at |",
             "|" + "---|" * 12]
    for s in studies:
        w = s["winner"] or {}
        measured = sum(1 for x in s["measurements"] if x["status"] == "ok")
        cpu = (s["build_cpu_s"] + s["judging_cpu_s"]) / s["built"] if s["built"] else None
        hbm = ""
        sz = s["sizes"]
        if w and sz["m"] <= 128 and w.get("median_us"):
            nbytes = 2 * (sz["m"] * sz["k"] + sz["n"] * sz["k"] + sz["m"] * sz["n"])
            hbm = f"{nbytes / (w['median_us'] * 1e-6) / 1e12 / HBM_TBS:.0%}"
        lib = "off" if "nolib" in s["study"] or any(
            p.get("name") == s["study"] and "--no-library" in p.get("command", "")
            for p in plans) else "on"
        ratio = (f"{w['ratio']:.3f} [{w['lo']:.3f}, {w['hi']:.3f}]" if w.get("lo") is not None
                 else (f"{w['ratio']:.3f}" if w else "-"))
        if cpu is None:  # nothing built: nothing to account for
            lines.append(f"| {s['study']} | {s['problem']} | - | - | {measured} | 0 | - | - | - | "
                         "- | - | - |")
            continue
        lines.append(f"| {s['study']} | {s['problem']} | {s['config'].get('seed')} | {lib} | "
                     f"{measured} | {s['built']} | {cpu:.2f} | {w.get('genome', '-')} | {ratio} | "
                     f"{w.get('first_measured_t') or 0:.0f} s | {hbm} | {_reach(s)} |")
    cl = ["", "| problem | genome | labels | ratio per pass | mean |", "|---|---|---|---|---|"]
    for spec, rows in cross.items():
        for h, r in sorted(rows.items(), key=lambda kv: -statistics.mean(
                [p["ratio"] or 0 for p in kv[1]["passes"]])):
            ratios = [p["ratio"] for p in r["passes"] if p["ratio"]]
            cl.append(f"| {spec} | {h} | {'; '.join(r['labels'])} | "
                      f"{', '.join(f'{x:.3f}' for x in ratios)} | "
                      f"{statistics.mean(ratios) if ratios else 0:.3f} |")
    rl = ["", "| problem | best known (cross-check, else --library) | mean ratio | labels |",
          "|---|---|---|---|"]
    rl += [f"| {k} | {v['genome']} | {v['ratio']:.3f} | {'; '.join(v['labels'])} |"
           for k, v in sorted(refs.items())]
    cl += rl
    (args.out / "tune-gpu.md").write_text("\n".join(lines + cl) + "\n")
    print("\n".join(lines + cl))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return 0
    fig, ax = plt.subplots(figsize=(7, 4))
    for s in studies:
        if s["problem"] != "gemm-bf16-8192x8192x8192":
            continue
        best, xs, ys = 0.0, [], []
        for x in s["measurements"]:
            if x["status"] == "ok" and x["ratio"] and x["ratio"] > best:
                best = x["ratio"]
                xs.append(x["t"])
                ys.append(best)
        if xs:
            ax.step(xs, ys, where="post", label=s["study"])
    ref = refs.get("gemm-bf16-8192x8192x8192")
    if ref is not None:
        ax.axhline(WITHIN * ref["ratio"], color="grey", ls="--", lw=1,
                   label=f"2 % below the best known ({ref['genome']}, {ref['ratio']:.3f})")
    ax.set_ylim(0.9, 1.08)  # the first measurements (0.4-0.8x) would flatten what matters
    ax.set_xlabel("seconds since the study started")
    ax.set_ylabel("best paired ratio to cuBLAS so far")
    ax.set_title("tsopt tune gemm 8192^3 on one H200, 15 build processes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out / "tune-gpu-8192.png", dpi=120)
    return 0


def _reach(study: dict) -> str:
    if study.get("reference") is None:
        return "no reference"
    at = study.get("within_2pct_at_s")
    return "not reached" if at is None else f"{at:.0f} s"


if __name__ == "__main__":
    raise SystemExit(main())
