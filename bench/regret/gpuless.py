"""Goal (a), the GPU-less protocol: two rounds of a default `tsopt tune gemm` built here,
measured on the H200, leave-one-shape-out, then each round's winner beside the oracle.

Steps (here: the DSL, optuna, SQLAlchemy; the GPU machine: ``measure_bundles.py``, torch only):

    python3 bench/regret/gpuless.py round --round 1 --seed 1 --seed 2   # 16 built per study
    #   GPU: measure_bundles.py .tsopt/regret/ship/r1 --out $OUT/r1.json
    python3 bench/regret/gpuless.py ingest --round 1 RESULTS/r1.json     # + round-1 winners
    python3 bench/regret/gpuless.py round --round 2 --seed 1 --seed 2   # resumed to 32 built
    #   GPU: measure_bundles.py .tsopt/regret/ship/r2 --out $OUT/r2.json
    python3 bench/regret/gpuless.py ingest --round 2 RESULTS/r2.json     # + round-2 winners
    python3 bench/regret/gpuless.py pairs                               # winners + oracle picks
    #   GPU: measure_bundles.py .tsopt/regret/pairs --out $OUT/pairs.json
    python3 bench/regret/gpuless.py sidebyside RESULTS/pairs.json --out bench/regret/results/gpuless.json

One study per (seed, problem), each in its own SQLite file (``--work``/s<S>/<name>.db), so no
study warm-starts from another held-out problem; every study is the command a user types,
``tsopt tune gemm --m M --n N --k K --dtype D --built 16R --library-exclude-self --seed S``
(sampler, library re-fit and warm start at their defaults; the library without the problem's
own entries: leave-one-shape-out). Building uses ``--workers auto`` (here, 2 cores: one at a
time in the driver's process). The study's bundle grows by 16 each round; what travels is a
*ship* bundle of the candidates not measured yet (``ship/r<R>/s<S>-<name>``, the same study,
the same files, so ``tsopt ingest`` takes it), so a round moves 16 candidates (1.3 MB) a study.
``ingest`` puts each measured ship bundle's ``results.json`` back, ingests it into its study
and records the study's winner (rank 1, paired, ``store.ranked``) in ``winners.json``.
``pairs`` puts each problem's winners (every seed, rounds 1 and 2) and the oracle picks
(``oracle-best.json``) into one bundle, twice, in opposite orders (``sidebyside.py``).
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
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (ROOT, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import sidebyside  # noqa: E402
from regret import FORMAT  # noqa: E402

BUILT_PER_ROUND = 16
PROTOCOL = "gpuless"
LIBRARY = "exclude-self"


def heldout() -> list[Any]:
    from tsopt.app.heldout import load_heldout

    return list(load_heldout().problems)


def chosen(names: list[str]) -> list[Any]:
    problems = heldout()
    known = {p.name: p for p in problems}
    for name in names:
        if name not in known:
            raise SystemExit(f"error: {name!r} is not a held-out problem "
                             f"({', '.join(known)})")
    return [known[n] for n in names] if names else problems


def study_name(name: str, seed: int) -> str:
    return f"regret-{name}-s{seed}"


def db_url(work: Path, name: str, seed: int) -> str:
    return f"sqlite:///{work / f's{seed}' / f'{name}.db'}"


def tune_command(problem: Any, seed: int, built: int, work: Path,
                 cost_prior: str | None = None) -> list[str]:
    """The user's command; ``cost_prior`` None keeps tsopt's default (an A/B of the prior
    runs each side in its own ``--work``)."""
    sizes = problem.problem.sizes
    prior = ["--cost-prior", cost_prior] if cost_prior else []
    return [sys.executable, "-m", "tsopt", "tune", "gemm", "--m", str(sizes["m"]),
            "--n", str(sizes["n"]), "--k", str(sizes["k"]), "--dtype", problem.problem.dtype,
            "--built", str(built), "--library-exclude-self", "--seed", str(seed),
            "--db", db_url(work, problem.name, seed), "--study", study_name(problem.name, seed),
            "--bundle", str(work / f"s{seed}" / "bundles" / problem.name), *prior]


def env() -> dict[str, str]:
    out = dict(os.environ, CUTE_DSL_ARCH="sm_90a")
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), out.get("PYTHONPATH")) if p)
    return out


def shipped_hashes(work: Path, seed: int, name: str) -> set[str]:
    """Candidates an earlier round's ship bundle already holds."""
    from tsopt.core.bundle import read_manifest

    found: set[str] = set()
    for manifest in (work / "ship").glob(f"r*/s{seed}-{name}/manifest.json"):
        found |= {c.genome_hash for c in read_manifest(manifest.parent, False).candidates}
    return found


def ship(work: Path, rnd: int, seed: int, name: str) -> int:
    """The study bundle's candidates no earlier round shipped, as ``ship/r<rnd>/s<S>-<name>``."""
    from tsopt.core.bundle import BundleEntry, read_manifest, write_bundle

    study_bundle = work / f"s{seed}" / "bundles" / name
    manifest = read_manifest(study_bundle)
    before = shipped_hashes(work, seed, name)
    new = [c for c in manifest.candidates if c.genome_hash not in before]
    target = work / "ship" / f"r{rnd}" / f"s{seed}-{name}"
    if not new or (target / "manifest.json").exists():
        return 0
    write_bundle(target, study=manifest.study, space=manifest.space, problem=manifest.problem,
                 arch=manifest.arch, launch=manifest.launch,
                 candidates=[BundleEntry(c.genome, study_bundle / c.artifact, origin=c.origin)
                             for c in new])
    return len(new)


def cmd_round(args: argparse.Namespace) -> int:
    if args.round > 1:
        winners = read_winners(args.work)
        for seed in args.seed:
            for p in chosen(args.problem):
                if str(args.round - 1) not in winners.get(str(seed), {}).get(p.name, {}):
                    raise SystemExit(f"error: round {args.round - 1} of {p.name} seed {seed} "
                                     "is not ingested yet (`gpuless.py ingest`)")
    logs = args.work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for seed in args.seed:
        for p in chosen(args.problem):
            (args.work / f"s{seed}").mkdir(parents=True, exist_ok=True)
            cmd = tune_command(p, seed, BUILT_PER_ROUND * args.round, args.work,
                               args.cost_prior)
            start = time.time()
            log = logs / f"r{args.round}-s{seed}-{p.name}.log"
            with open(log, "w") as out:
                out.write("$ " + " ".join(cmd[1:]) + "\n")
                out.flush()
                rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=env(),
                                     cwd=ROOT)
            shipped = ship(args.work, args.round, seed, p.name) if rc == 0 else 0
            print(f"round {args.round} seed {seed} {p.name}: rc {rc} in "
                  f"{time.time() - start:.0f} s, {shipped} shipped ({log})", flush=True)
            if rc != 0:
                return rc
    return 0


def read_winners(work: Path) -> dict[str, Any]:
    path = work / "winners.json"
    return json.loads(path.read_text()) if path.exists() else {}


def winner_of(url: str, study: str) -> dict[str, Any] | None:
    from tsopt.db.store import Store

    with Store(url) as store:
        ranked = store.ranked(study, limit=1)
        measured = len(store.measured_hashes(study))
    if not ranked:
        return None
    top, s = ranked[0], ranked[0].standing
    return {"genome_hash": top.genome_hash, "genome": top.genome.to_dict(),
            "ratio": s.ratio if s else top.measurement.ratio,
            "ratio_lo": s.ratio_lo if s else top.measurement.ratio_lo,
            "ratio_hi": s.ratio_hi if s else top.measurement.ratio_hi,
            "measurements": s.measurements if s else 1, "origin": top.origin,
            "measured_candidates": measured}


def cmd_ingest(args: argparse.Namespace) -> int:
    winners = read_winners(args.work)
    problems = {p.name: p for p in heldout()}
    for results_file in args.results:
        doc = json.loads(results_file.read_text())
        for item in doc["bundles"]:
            if Path(item.get("folder") or f"r{args.round}").name != f"r{args.round}":
                continue  # a call may measure two rounds' folders: each is ingested by its own
            seed_part, name = item["path"].split("-", 1)
            seed = int(seed_part.removeprefix("s"))
            target = args.work / "ship" / f"r{args.round}" / item["path"]
            if item["results"] is None:
                print(f"{item['path']}: nothing measured (rc {item['rc']}); skipped")
                continue
            (target / "results.json").write_text(json.dumps(item["results"], indent=1) + "\n")
            url = db_url(args.work, name, seed)
            rc = subprocess.call([sys.executable, "-m", "tsopt", "ingest", str(target),
                                  "--db", url], env=env(), cwd=ROOT)
            if rc != 0:
                print(f"error: tsopt ingest {target} exited {rc}", file=sys.stderr)
                return rc
            best = winner_of(url, study_name(name, seed))
            winners.setdefault(str(seed), {}).setdefault(name, {})[str(args.round)] = {
                **(best or {}), "problem": problems[name].spec,
                "ingested": results_file.name, "device": item["results"].get("device"),
                "host": doc.get("host")}
            print(f"round {args.round} seed {seed} {name}: winner "
                  f"{(best or {}).get('genome_hash', '-')[:12]} "
                  f"{(best or {}).get('ratio', float('nan')):.3f}", flush=True)
    (args.work / "winners.json").write_text(json.dumps(winners, indent=1, sort_keys=True) + "\n")
    return 0


def pair_items(work: Path, name: str, winners: dict[str, Any]) -> list[dict[str, Any]]:
    items = []
    for seed, per_problem in sorted(winners.items()):
        for rnd, w in sorted(per_problem.get(name, {}).items()):
            if not w.get("genome_hash"):
                continue
            artifact = work / f"s{seed}" / "bundles" / name / "artifacts" / w["genome_hash"]
            items.append({"genome": w["genome"], "genome_hash": w["genome_hash"],
                          "artifact_dir": artifact if artifact.exists() else None,
                          "role": {"kind": "winner", "protocol": PROTOCOL, "seed": int(seed),
                                   "round": int(rnd), "study_ratio": w.get("ratio"),
                                   "study_ratio_lo": w.get("ratio_lo"),
                                   "study_ratio_hi": w.get("ratio_hi"),
                                   "origin": w.get("origin"),
                                   "measured_candidates": w.get("measured_candidates")}})
    return items


def cmd_pairs(args: argparse.Namespace) -> int:
    winners = read_winners(args.work)
    oracle = sidebyside.read_oracle_best()
    folder = args.work / "pairs"
    folder.mkdir(parents=True, exist_ok=True)
    for p in chosen(args.problem):
        items = pair_items(args.work, p.name, winners)
        if not items:
            print(f"{p.name}: no winner recorded; skipped")
            continue
        slots = sidebyside.merge_items(items + sidebyside.oracle_items(oracle[p.name]))
        sidebyside.build_missing(slots, p.spec, args.work / "artifacts", args.workers)
        bundles = sidebyside.write_pair_bundles(folder, p.name, p.spec, slots)
        print(f"{p.name}: {len(slots)} genomes -> {', '.join(b.name for b in bundles)}",
              flush=True)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """What ``device_pairs.py`` needs to write and measure the pairs on the GPU machine right
    after round 2 is measured there: every problem's oracle picks and round-1 winners, built and
    copied under ``<work>/pairs-pre/artifacts``, each study's round-1 standings (hash -> its
    paired ratio) and where its round-2 ship bundle is. A study whose round 1 is not ingested
    names its round-1 ship bundle instead: the device measures it and takes its best."""
    winners = read_winners(args.work)
    oracle = sidebyside.read_oracle_best()
    pre = args.work / "pairs-pre"
    shutil.rmtree(pre, ignore_errors=True)  # remade whole: a plan never points at stale copies
    (pre / "artifacts").mkdir(parents=True, exist_ok=True)

    def carried(slot: dict[str, Any], name: str) -> str:
        # per problem: a genome hash names a schedule, and one schedule is built per shape
        target = pre / "artifacts" / name / slot["genome_hash"]
        if not target.exists():
            shutil.copytree(slot["artifact_dir"], target)
        return target.relative_to(args.work).as_posix()

    problems = []
    for p in chosen(args.problem):
        picks = sidebyside.merge_items(sidebyside.oracle_items(oracle[p.name]))
        sidebyside.build_missing(picks, p.spec, args.work / "artifacts", args.workers)
        entry: dict[str, Any] = {"name": p.name, "problem": p.spec, "oracle": [], "studies": []}
        for slot in picks:
            if slot.get("artifact_dir"):
                entry["oracle"].append({**slot, "artifact_dir": carried(slot, p.name)})
        for seed in args.seed:
            study: dict[str, Any] = {"seed": seed, "round1": None, "round1_bundle": None,
                                     "round1_standings": {}, "round2_bundle": None}
            first = winners.get(str(seed), {}).get(p.name, {}).get("1")
            if first and first.get("genome_hash"):
                slot = {"genome_hash": first["genome_hash"], "artifact_dir":
                        args.work / f"s{seed}" / "bundles" / p.name / "artifacts"
                        / first["genome_hash"]}
                study["round1"] = {"genome_hash": first["genome_hash"],
                                   "genome": first["genome"], "ratio": first.get("ratio"),
                                   "origin": first.get("origin"),
                                   "measured_candidates": first.get("measured_candidates"),
                                   "artifact_dir": carried(slot, p.name)}
                study["round1_standings"] = standings(db_url(args.work, p.name, seed),
                                                      study_name(p.name, seed))
            elif (args.work / "ship" / "r1" / f"s{seed}-{p.name}" / "manifest.json").exists():
                study["round1_bundle"] = f"ship/r1/s{seed}-{p.name}"
            if (args.work / "ship" / "r2" / f"s{seed}-{p.name}" / "manifest.json").exists():
                study["round2_bundle"] = f"ship/r2/s{seed}-{p.name}"
            entry["studies"].append(study)
        problems.append(entry)
        print(f"{p.name}: {len(entry['oracle'])} oracle picks, "
              f"{sum(s['round1'] is not None for s in entry['studies'])} round-1 winners, "
              f"{sum(s['round2_bundle'] is not None for s in entry['studies'])} round-2 bundles",
              flush=True)
    plan = {"format": "tsopt-regret-pairs-plan", "version": 1, "protocol": PROTOCOL,
            "library": LIBRARY, "problems": problems}
    (pre / "plan.json").write_text(json.dumps(plan, indent=1, sort_keys=True) + "\n")
    print(f"{pre / 'plan.json'}: {len(problems)} problems")
    return 0


def standings(url: str, study: str) -> dict[str, float]:
    """genome hash -> paired ratio of every ranked candidate of a study (its standing)."""
    from tsopt.db.store import Store

    with Store(url) as store:
        return {r.genome_hash: (r.standing.ratio if r.standing else r.measurement.ratio)
                for r in store.ranked(study)
                if (r.standing.ratio if r.standing else r.measurement.ratio) is not None}


def choice_checks(results: list[Path], winners: dict[str, Any]) -> list[dict[str, Any]]:
    """Each winner ``device_pairs.py`` chose on the GPU machine beside the one the study's
    database ranks first once that round is ingested here: they must be the same genome."""
    checks = []
    for results_file in results:
        for c in json.loads(results_file.read_text()).get("chosen", []):
            ranked = winners.get(str(c["seed"]), {}).get(c["name"], {}).get(str(c["round"]), {})
            checks.append({"name": c["name"], "seed": c["seed"], "round": c["round"],
                           "device": c["genome_hash"], "database": ranked.get("genome_hash"),
                           "agrees": ranked.get("genome_hash") == c["genome_hash"]})
    return checks


def cmd_sidebyside(args: argparse.Namespace) -> int:
    problems: dict[str, dict[str, Any]] = {}
    hosts, started = set(), []
    for results_file in args.results:
        doc = json.loads(results_file.read_text())
        hosts.add(doc.get("host"))
        started.append(doc.get("started"))
        for item in doc["bundles"]:
            roles = item.get("roles")
            if not roles:
                continue
            entry = problems.setdefault(roles["name"], {
                "name": roles["name"], "problem": roles["problem"],
                "entries": roles["entries"], "not_built": roles["not_built"], "passes": []})
            entry["passes"].append({"order": roles["order"], "bundle": item["path"],
                                    "rc": item["rc"], "seconds": item["seconds"],
                                    "tail": item.get("tail"),
                                    "results": item["results"] or {"measurements": []}})
    checks = choice_checks(args.results, read_winners(args.work))
    for c in checks:
        if not c["agrees"]:
            print(f"warning: {c['name']} seed {c['seed']} round {c['round']}: the device chose "
                  f"{c['device'][:12]}, the study's database ranks {str(c['database'])[:12]} "
                  "first", flush=True)
    out = {"format": FORMAT, "version": 1, "protocol": PROTOCOL, "library": LIBRARY,
           "device_choices": checks,
           "hosts": sorted(h for h in hosts if h), "host": ",".join(sorted(h for h in hosts if h)),
           "started": min((s for s in started if s), default=None),
           "rounds": {"built_per_round": BUILT_PER_ROUND, "winners": read_winners(args.work)},
           "problems": list(problems.values())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{args.out}: {len(problems)} problems")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=ROOT / ".tsopt" / "regret",
                        help="studies, bundles, winners (git-ignored; default .tsopt/regret)")
    sub = parser.add_subparsers(dest="step", required=True)
    r = sub.add_parser("round", help="one round of every study, its new candidates shipped")
    r.add_argument("--round", type=int, required=True, choices=(1, 2))
    r.add_argument("--seed", type=int, action="append", required=True)
    r.add_argument("--problem", action="append", default=[])
    r.add_argument("--cost-prior", choices=("transfer", "analytical"), default=None,
                   help="tsopt tune's --cost-prior (default: tsopt's own default)")
    i = sub.add_parser("ingest", help="a measured round back into its studies")
    i.add_argument("--round", type=int, required=True, choices=(1, 2))
    i.add_argument("results", type=Path, nargs="+")
    p = sub.add_parser("pairs", help="each problem's winners and oracle picks, two bundles")
    p.add_argument("--problem", action="append", default=[])
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    q = sub.add_parser("plan", help="oracle picks and round-1 winners carried, for "
                                    "device_pairs.py after round 2 is measured there")
    q.add_argument("--problem", action="append", default=[])
    q.add_argument("--seed", type=int, action="append", required=True)
    q.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    s = sub.add_parser("sidebyside", help="measured pair bundles -> a side-by-side document")
    s.add_argument("results", type=Path, nargs="+")
    s.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    return {"round": cmd_round, "ingest": cmd_ingest, "pairs": cmd_pairs,
            "plan": cmd_plan, "sidebyside": cmd_sidebyside}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
