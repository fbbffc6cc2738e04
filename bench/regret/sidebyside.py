"""Winners and oracle picks of one problem in one bundle, measured by the runner in one call.

Shared by both protocols: ``gpuless.py pairs`` (here: builds, writes the bundles; the GPU
machine measures them with ``measure_bundles.py``) and ``gpu_tune.py`` (the GPU machine:
builds, writes and measures after each study).

A pair bundle holds each genome once (a winner that is also an oracle pick, or two seeds'
same winner, is one candidate with several roles) and is written twice, in opposite orders
(``fwd``, ``rev``): two passes, each one runner call (``python -m tsopt.workers.runner
--bundle``, paired against cuBLAS in the bundle's launch mode, ``graph``). ``roles.json``
beside each bundle names what each genome is, so the results come back meaningful.

Building needs the DSL (``tsopt.build``, ``tsopt.verify``); writing and measuring do not.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ORDERS = ("fwd", "rev")
ROLES_NAME = "roles.json"


def read_oracle_best(path: Path = HERE / "oracle-best.json") -> dict[str, dict[str, Any]]:
    """name -> the oracle-best.json entry of a held-out problem."""
    doc = json.loads(path.read_text())
    return {p["name"]: p for p in doc["problems"]}


def oracle_items(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The oracle picks of one problem as items to put in a pair bundle."""
    return [{"genome": o["genome"], "genome_hash": o["genome_hash"],
             "role": {"kind": "oracle", "rank": o["rank"], "oracle_ratio": o["ratio"]}}
            for o in entry["oracle"]]


def merge_items(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Items (genome, genome_hash, role, optional artifact_dir) -> one per genome, its roles
    gathered, in first-seen order."""
    merged: dict[str, dict[str, Any]] = {}
    for item in items:
        slot = merged.setdefault(item["genome_hash"], {
            "genome_hash": item["genome_hash"], "genome": item["genome"], "roles": [],
            "artifact_dir": None})
        slot["roles"].append(dict(item["role"]))
        if item.get("artifact_dir") and not slot["artifact_dir"]:
            slot["artifact_dir"] = str(item["artifact_dir"])
    return list(merged.values())


# -- building (the DSL) --------------------------------------------------------------------

def _build_one(job: tuple[dict[str, Any], str, str]) -> tuple[str, str | None, str | None]:
    """(genome, problem spec, cache dir) -> (hash, artifact dir or None, error)."""
    from tsopt.build.builder import build_candidate
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec
    from tsopt.core.registry import get_space
    from tsopt.verify.verifier import judge_for, verify_genome

    genome_dict, spec, cache_dir = job
    space = get_space("gemm")
    space.judge = judge_for(space)
    genome = Genome.from_dict(genome_dict)
    problem = parse_problem_spec(spec)
    verdict = verify_genome(genome, problem, space=space)
    if not verdict.valid:
        return genome.hash, None, "invalid: " + verdict.summary()
    built = build_candidate(space, genome, problem, "sm_90a", cache_dir=Path(cache_dir))
    return genome.hash, (built.artifact_dir if built.ok else None), (built.error or None)


def build_missing(slots: list[dict[str, Any]], spec: str, cache_dir: Path, workers: int,
                  say: Any = print) -> None:
    """Build (judged in full first) every slot without an artifact, ``workers`` at a time;
    a slot that fails keeps ``artifact_dir`` None and gets ``build_error``."""
    todo = [s for s in slots if not s.get("artifact_dir")]
    if not todo:
        return
    start = time.time()
    jobs = [(s["genome"], spec, str(cache_dir)) for s in todo]
    if workers <= 1:
        done = [_build_one(j) for j in jobs]
    else:
        with mp.get_context("spawn").Pool(min(workers, len(jobs))) as pool:
            done = pool.map(_build_one, jobs, chunksize=1)
    by_hash = {h: (a, e) for h, a, e in done}
    for s in todo:
        s["artifact_dir"], error = by_hash[s["genome_hash"]]
        if s["artifact_dir"] is None:
            s["build_error"] = (error or "not built")[:300]
            say(f"  {spec} {s['genome_hash'][:12]}: not built: {s['build_error']}", flush=True)
    say(f"  {spec}: built {len(todo)} in {time.time() - start:.0f} s", flush=True)


# -- bundles and the runner ----------------------------------------------------------------

def write_pair_bundles(folder: Path, name: str, spec: str, slots: Sequence[Mapping[str, Any]],
                       launch: str = "graph") -> list[Path]:
    """``folder/<name>-fwd`` and ``-rev``: the built slots in both orders, each with its
    ``roles.json``. An existing pair bundle is replaced (its results too)."""
    from tsopt.core.bundle import BundleEntry, write_bundle
    from tsopt.core.genome import Genome
    from tsopt.core.problem import parse_problem_spec

    built = [s for s in slots if s.get("artifact_dir")]
    if not any(r["kind"] == "oracle" for s in built for r in s["roles"]):
        raise ValueError(f"{name}: no oracle pick was built; nothing to take a regret against")
    problem = parse_problem_spec(spec)
    roles = {"format": "tsopt-regret-roles", "version": 1, "name": name, "problem": spec,
             "entries": [{"genome_hash": s["genome_hash"], "roles": s["roles"]} for s in built],
             "not_built": [{"genome_hash": s["genome_hash"], "roles": s["roles"],
                            "error": s.get("build_error")} for s in slots
                           if not s.get("artifact_dir")]}
    out = []
    for order in ORDERS:
        chosen = built if order == "fwd" else built[::-1]
        bundle = folder / f"{name}-{order}"
        shutil.rmtree(bundle, ignore_errors=True)
        write_bundle(bundle, study=f"regret-{name}-{order}", space="gemm", problem=problem,
                     arch="sm_90a", launch=launch,
                     candidates=[BundleEntry(Genome.from_dict(s["genome"]),
                                             Path(s["artifact_dir"]), origin="regret")
                                 for s in chosen])
        (bundle.parent / f"{bundle.name}.{ROLES_NAME}").write_text(
            json.dumps({**roles, "order": order}, indent=1, sort_keys=True) + "\n")
        out.append(bundle)
    return out


def run_runner(bundle: Path, timeout: float, runner_args: Sequence[str] = (),
               say: Any = print) -> dict[str, Any]:
    """``python -m tsopt.workers.runner --bundle`` on one bundle (results.json written into
    it; a second call resumes it); what happened and the results document."""
    start = time.time()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "tsopt.workers.runner", "--bundle", str(bundle), *runner_args]
    try:
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=max(10.0, timeout))
        rc, tail = proc.returncode, (proc.stdout[-1200:] + proc.stderr[-1200:])
    except subprocess.TimeoutExpired as exc:
        rc, tail = -9, "timed out: " + str(exc.stdout or "")[-800:]
    seconds = round(time.time() - start, 1)
    say(f"  runner {bundle.name}: rc {rc} in {seconds} s", flush=True)
    results_path = bundle / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else None
    return {"bundle": bundle.name, "rc": rc, "seconds": seconds, "tail": tail,
            "results": results}


def problem_document(bundles: Sequence[Path], runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One problem's entry of a side-by-side document (regret.FORMAT) from its pair bundles
    (their roles.json) and the runner calls that measured them."""
    roles = json.loads((bundles[0].parent / f"{bundles[0].name}.{ROLES_NAME}").read_text())
    passes = [{"order": json.loads((b.parent / f"{b.name}.{ROLES_NAME}").read_text())["order"],
               "bundle": b.name, "rc": r["rc"], "seconds": r["seconds"], "tail": r["tail"],
               "results": r["results"] or {"measurements": []}}
              for b, r in zip(bundles, runs, strict=True)]
    return {"name": roles["name"], "problem": roles["problem"], "entries": roles["entries"],
            "not_built": roles["not_built"], "passes": passes}
