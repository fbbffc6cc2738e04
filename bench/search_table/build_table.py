"""Build the search table's candidates: every verifier-valid point of the table's sub-space
(``table_space.RESTRICT``) for gemm:bf16:8192x8192x8192, plus the recorded best schedules,
verified and built for sm_90a, into bundles of ~500 under ``carry/table-8192/partN``.

Resumable: ``index.jsonl`` records each genome's verdict and build as it goes; a rerun skips
what it holds (and the artifact cache skips a rebuild). The index records the git commit and
the sha256 of search_spaces/gemm/kernel.py at build time, and each build's cache key::

    CUTE_DSL_ARCH=sm_90a nice -n 10 .venv/bin/python bench/search_table/build_table.py
    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/search_table/build_table.py --bundles-only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from table_space import LEVELS, PROBLEM_SPEC, RESTRICT, genome_of, in_product, points  # noqa: E402

from tsopt.build.builder import build_candidate  # noqa: E402
from tsopt.core.bundle import BundleEntry, write_bundle  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import parse_problem_spec  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.verify.verifier import VerdictCache, verify_genome  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "carry" / "table-8192"
PART_SIZE = 500


def known_good(problem_dict: dict) -> list[Genome]:
    """The recorded best GEMM schedules at 8192^3 (epilogue sweep and the paired re-runs)."""
    doc = json.loads((ROOT / "bench" / "gemm_h200" / "gemm-epilogue.json").read_text())
    rows = [r for r in doc["results"] if r["problem"] == problem_dict
            and (r.get("measurement") or {}).get("status") == "ok"]
    rows.sort(key=lambda r: r["measurement"]["median_us"])
    return [Genome.from_dict(r["genome"]) for r in rows]


def provenance() -> dict:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "search_spaces/gemm"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    kernel = (ROOT / "search_spaces" / "gemm" / "kernel.py").read_bytes()
    return {"commit": commit, "gemm_dirty": dirty,
            "kernel_sha256": hashlib.sha256(kernel).hexdigest()}


def load_index(path: Path) -> dict[str, dict]:
    """The last row of each genome; a failed build is left out, to be tried again (the tree
    may have been mid-edit: another kernel change is built, and recorded, when it compiles)."""
    done: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["genome_hash"]] = row
    return {h: r for h, r in done.items() if not r["valid"] or r.get("build_ok")}


def candidates(space) -> list[tuple[Genome, str]]:
    """Known-good first, then the nested products of ``LEVELS``, each in a
    fixed shuffled order (a partial table then leaves holes spread evenly)."""
    problem = parse_problem_spec(PROBLEM_SPEC)
    out: dict[str, tuple[Genome, str]] = {}
    for g in known_good(problem.to_dict()):
        # Only those the product holds: no proposal of a replay reaches the others.
        if in_product(space.params_of(g), RESTRICT):
            out.setdefault(g.hash, (g, "known"))
    grid = points(RESTRICT)
    random.Random(8192).shuffle(grid)
    # The small product first, then the core, then the rest (stable: shuffled within each).
    grid.sort(key=lambda values: next(i for i, level in enumerate(LEVELS)
                                      if in_product(values, level)))
    for values in grid:
        g = genome_of(space, values)
        out.setdefault(g.hash, (g, "table"))
    return list(out.values())


def write_parts(space_name: str, problem, index: dict[str, dict]) -> None:
    """Bundle what is built and in no bundle yet, into new parts of at most PART_SIZE: a part
    once written is never changed (it may be on its way to a GPU)."""
    held: set[str] = set()
    parts = sorted(OUT.glob("part*"), key=lambda p: int(p.name[4:]))
    for part in parts:
        if (part / "manifest.json").exists():
            held |= {c["genome_hash"] for c in
                     json.loads((part / "manifest.json").read_text())["candidates"]}
    new = sorted((r for r in index.values() if r.get("artifact_dir")
                  and r["genome_hash"] not in held), key=lambda r: r["order"])
    number = max((int(p.name[4:]) for p in parts), default=0)
    for n in range(0, len(new), PART_SIZE):
        rows = new[n:n + PART_SIZE]
        number += 1
        part = OUT / f"part{number}"
        write_bundle(part, study=f"table-8192-part{number}", space=space_name,
                     problem=problem, arch="sm_90a",
                     candidates=[BundleEntry(Genome.from_dict(r["genome"]),
                                             Path(r["artifact_dir"]), origin=r["origin"])
                                 for r in rows])
        print(f"{part}: {len(rows)} candidates", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundles-only", action="store_true")
    parser.add_argument("--limit", type=int, default=0, help="stop after this many genomes")
    parser.add_argument("--shard", default="0/1", help="i/n: build every n-th genome from i")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    problem = parse_problem_spec(PROBLEM_SPEC)
    space = get_space("gemm")
    index_path = OUT / "index.jsonl"
    index = load_index(index_path)
    if not args.bundles_only:
        shard, shards = (int(x) for x in args.shard.split("/"))
        todo = candidates(space)
        prov = provenance()
        verdicts = VerdictCache()
        start, n_new, failing = time.time(), 0, 0
        with open(index_path, "a") as log:
            for order, (genome, origin) in enumerate(todo):
                if order % shards != shard or genome.hash in index:
                    continue
                if args.limit and n_new >= args.limit:
                    break
                # tsopt's own checks first: cheap, and most of the product fails them; the
                # verifier runs them too (after TS's BFS), so the verdict is the same.
                findings = space.tsopt_checks(genome, problem)
                if findings:
                    valid, summary = False, f"rejected by tsopt checks: {findings[0].rule}"
                else:
                    verdict = verify_genome(genome, problem, space=space, cache=verdicts)
                    valid, summary = verdict.valid, verdict.summary()
                row = {"genome_hash": genome.hash, "order": order, "origin": origin,
                       "genome": genome.to_dict(), "valid": valid,
                       "verdict": summary, **prov}
                if valid:
                    built = build_candidate(space, genome, problem, "sm_90a",
                                            cache_dir=ROOT / ".tsopt" / "artifacts")
                    seconds = built.compile_seconds + built.export_seconds + built.link_seconds
                    row.update(build_ok=built.ok, build_s=round(seconds, 2),
                               build_error=(built.error or "")[:500],
                               cache_key=built.cache_key,
                               artifact_dir=built.artifact_dir if built.ok else None)
                log.write(json.dumps(row, sort_keys=True) + "\n")
                log.flush()
                failing = failing + 1 if valid and not row.get("build_ok") else 0
                if failing >= 4:
                    print(f"{time.strftime('%H:%M:%S')} 4 builds failed in a row "
                          f"({row['build_error'][:160]!r}): the kernel does not compile now; "
                          "stopping (rerun to resume)", flush=True)
                    sys.exit(3)
                index[genome.hash] = row
                n_new += 1
                if n_new % 25 == 0:
                    ok = sum(1 for r in index.values() if r.get("artifact_dir"))
                    print(f"{time.strftime('%H:%M:%S')} {len(index)}/{len(todo)} judged, "
                          f"{ok} built, {(time.time() - start) / n_new:.2f} s each", flush=True)
    if args.bundles_only:
        write_parts(space.name, problem, index)


if __name__ == "__main__":
    main()
