"""Property test: no wrong kernel from a valid GEMM schedule (issue #13, item 3).

Random verifier-valid genomes of the GEMM space, each on a random shape (M, N, K in
1..8192, log-uniform, with forced edge cases: dims below the tiles, non-multiples of them,
K not a multiple of tile_k, ones, 8192s). Every pair must be correct on the GPU, or rejected
before the GPU by a rule that names the geometry it cannot handle.

Three sub-commands::

    # build machine (DSL): draw, verify, compile for sm_90a, write one bundle per pair
    CUTE_DSL_ARCH=sm_90a nice -n 10 .venv/bin/python bench/gemm_property/gemm_property.py \
        build --count 300 --seed 1
    # GPU machine (torch + stdlib): check every built pair, one table to $OUT
    python3 bench/gemm_property/gemm_property.py run --index carry/gemm-property/index.json
    # here: the table as bench/gemm_property/README.md's summary
    .venv/bin/python bench/gemm_property/gemm_property.py report RESULTS.json

How a pair is drawn (``build``). A genome comes from the space's own sampler
(``space.suggest`` with a trial that picks uniformly among each knob's choices: whatever
knobs the space declares when this runs) and is judged by the verifier on a reference
problem (8192x8192x8192). A genome rejected there is rejected for itself, not for a
geometry: it is counted by rule and drawn again. A genome accepted there gets a shape
(:func:`draw_shape`) and is judged again on it: accepted pairs are built and bundled;
rejected pairs are rows of the table, with the rule and whether its message names the
geometry (a shape-dependent rejection whose message does not is reported as such).

How a pair is checked (``run``): the measuring side's own pieces (tsopt.workers: the loader,
the GEMM reference and its tolerance, the NaN-poisoned outputs), no timing: two isolated
launches on fresh inputs, then two launches back to back on two buffer sets, each output
compared with the fp32 torch reference. The checks run in one child process for all pairs;
the parent (standard library only) gives each pair a deadline, and a pair that hangs or
kills its context costs a new child, not the run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = ROOT / "carry" / "gemm-property"
INDEX_NAME = "index.json"
RESULTS_NAME = "gemm-property.json"
INDEX_FORMAT = "tsopt-gemm-property-index"
RESULTS_FORMAT = "tsopt-gemm-property-results"
ARCH = "sm_90a"
MAX_DIM = 8192
REFERENCE_SIZES = {"m": 8192, "n": 8192, "k": 8192}
"""The problem a genome is first judged on: every dim a multiple of every tile, K deep enough
for any head; a genome rejected here is rejected for itself, whatever the shape."""

SHAPE_KINDS = ("k_ragged", "below_tile", "non_multiple", "ones", "random", "random", "random",
               "max")
"""The shape of the i-th pair drawn is of kind ``SHAPE_KINDS[i % len]``: any prefix of the
draws (a test's handful, a partial build) covers the edge cases first."""
LOOSE_ALIGNMENT = 0.1
"""Chance that a random N or K is left as drawn (most not a multiple of 8, which the space
refuses: a rejection row); otherwise it is rounded to a multiple of 8."""

# What a rejection message must mention to name the geometry it cannot handle: a size
# (``K=12``, ``n=100``), K slices, the problem, or the words of the alignment rule.
GEOMETRY_WORDS = re.compile(
    r"\b[MNKmnk]\s*=\s*\d+|K slices?|\bproblem\b|\brows?\b.*\bmultiple\b|\bmultiple of\b")


# ------------------------------------------------------------------------------------------
# Shapes
# ------------------------------------------------------------------------------------------
def log_uniform(rng: random.Random, low: int = 1, high: int = MAX_DIM) -> int:
    return min(high, max(low, int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))))


def round8(value: int) -> int:
    return min(MAX_DIM, max(8, -(-value // 8) * 8))


def ragged_multiple_of_8(rng: random.Random, tile: int, high: int = MAX_DIM) -> int:
    """A multiple of 8 in 8..high that is not a multiple of ``tile`` (tile > 8)."""
    while True:
        value = round8(log_uniform(rng, 8, high))
        if value % tile:
            return value


def problem_tiles(cfg: Any) -> dict[str, Any]:
    """A configuration's tiles, and the tile of the problem's M, N and K each one is: with
    ``swap_ab`` the kernel computes Dᵀ, so its ``tile_n`` columns cover the problem's M and
    its CTA tile's rows the problem's N."""
    swap = bool(getattr(cfg, "swap_ab", False))
    return {"tile_m": cfg.tile_m, "tile_n": cfg.tile_n, "tile_k": cfg.tile_k,
            "cta_tile_m": cfg.cta_tile_m, "swap_ab": swap,
            "m_tile": cfg.tile_n if swap else cfg.cta_tile_m,
            "n_tile": cfg.cta_tile_m if swap else cfg.tile_n}


def draw_shape(rng: random.Random, kind: str, tiles: dict[str, int]) -> dict[str, int]:
    """A shape of ``kind`` for a genome whose tiles are ``tiles`` (:func:`problem_tiles`: the
    problem's M in tiles of ``m_tile`` rows, N of ``n_tile`` columns, K of ``tile_k``)."""
    tm, tn, tk = tiles["m_tile"], tiles["n_tile"], tiles["tile_k"]

    def loose(value: int) -> int:
        return value if rng.random() < LOOSE_ALIGNMENT else round8(value)

    if kind == "k_ragged":
        return {"m": log_uniform(rng), "n": round8(log_uniform(rng)),
                "k": ragged_multiple_of_8(rng, tk)}
    if kind == "below_tile":
        # At least one dim below its tile; each of the others below it half of the time.
        below = {d for d in "mnk" if rng.random() < 0.5} or {rng.choice("mnk")}
        m = rng.randint(1, tm - 1) if "m" in below else log_uniform(rng)
        n = round8(rng.randint(1, tn - 1)) if "n" in below and tn > 8 else round8(log_uniform(rng))
        k = round8(rng.randint(1, tk - 1)) if "k" in below and tk > 8 else round8(log_uniform(rng))
        return {"m": m, "n": n, "k": k}
    if kind == "non_multiple":
        m = log_uniform(rng, 2)
        while m % tm == 0:
            m = log_uniform(rng, 2)
        return {"m": m, "n": ragged_multiple_of_8(rng, tn) if tn > 8 else round8(log_uniform(rng)),
                "k": ragged_multiple_of_8(rng, tk)}
    if kind == "ones":
        # M = 1 is legal; N or K of 1 is not (16-byte rows): the space must refuse it by rule.
        return {"m": 1, "n": rng.choice((1, 8, round8(log_uniform(rng)))),
                "k": rng.choice((1, 8, round8(log_uniform(rng))))}
    if kind == "max":
        big = {d for d in "mnk" if rng.random() < 0.5} or {rng.choice("mnk")}
        return {"m": MAX_DIM if "m" in big else log_uniform(rng),
                "n": MAX_DIM if "n" in big else round8(log_uniform(rng)),
                "k": MAX_DIM if "k" in big else round8(log_uniform(rng))}
    if kind == "random":
        return {"m": log_uniform(rng), "n": loose(log_uniform(rng)), "k": loose(log_uniform(rng))}
    raise ValueError(f"shape kind {kind!r} is none of {sorted(set(SHAPE_KINDS))}")


def shape_flags(shape: dict[str, int], tiles: dict[str, int]) -> dict[str, bool]:
    """Which edge cases a shape is, against a genome's tiles."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    tm, tn, tk = tiles["m_tile"], tiles["n_tile"], tiles["tile_k"]
    return {
        "m_below_tile": m < tm, "n_below_tile": n < tn, "k_below_tile": k < tk,
        "m_ragged": m % tm != 0, "n_ragged": n % tn != 0, "k_ragged": k % tk != 0,
        "has_one": 1 in (m, n, k), "has_max": MAX_DIM in (m, n, k),
        "n_k_aligned8": n % 8 == 0 and k % 8 == 0,
    }


def names_geometry(message: str) -> bool:
    return bool(GEOMETRY_WORDS.search(message or ""))


# ------------------------------------------------------------------------------------------
# build (the build machine: DSL, verifier, builder)
# ------------------------------------------------------------------------------------------
class RandomTrial:
    """What ``space.suggest`` asks of an Optuna trial, answered uniformly at random."""

    def __init__(self, rng: random.Random, only: dict[str, list[str]] | None = None) -> None:
        self.rng = rng
        self.only = only or {}
        self.params: dict[str, Any] = {}

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        # ``--knob NAME=V1,V2``: draw NAME among those values only (to check new choices).
        allowed = [c for c in choices if str(c) in self.only[name]] if name in self.only else []
        value = self.rng.choice(allowed or list(choices))
        self.params[name] = value
        return value


def atomic_json(path: Path, doc: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _build_one(job: tuple[Any, ...]) -> dict[str, Any]:
    """Compile one pair (in a pool worker); the result as a dict (a BuildResult's fields)."""
    genome_doc, problem_doc, cache_dir = job
    from tsopt.build.builder import build_candidate
    from tsopt.core.genome import Genome
    from tsopt.core.problem import Problem
    from tsopt.core.registry import get_space

    genome, problem = Genome.from_dict(genome_doc), Problem.from_dict(problem_doc)
    started = time.perf_counter()
    result = build_candidate(get_space("gemm"), genome, problem, ARCH, cache_dir=cache_dir)
    doc = result.to_dict()
    doc["wall_s"] = round(time.perf_counter() - started, 2)
    return doc


_WORKER_CACHE: dict[str, Any] = {}


def _space_and_cache() -> tuple[Any, Any]:
    """This process's GEMM space (its judge injected) and verdict cache."""
    if not _WORKER_CACHE:
        from tsopt.core.registry import get_space
        from tsopt.verify.verifier import VerdictCache, judge_for

        space, cache = get_space("gemm"), VerdictCache()
        space.judge = judge_for(space, cache)
        _WORKER_CACHE.update(space=space, cache=cache)
    return _WORKER_CACHE["space"], _WORKER_CACHE["cache"]


def judge_candidate(job: tuple[dict[str, Any], str, dict[str, dict[str, int]]]) -> dict[str, Any]:
    """The verifier on one drawn genome: on the reference problem, then (when accepted there)
    on each shape drawn for it (one per kind; the planner keeps the one its turn needs).
    Runs in a pool worker: the TS skeleton of the genome is built once, there."""
    from tsopt.core.genome import Genome
    from tsopt.core.problem import Problem, ProblemError
    from tsopt.verify.verifier import verify_genome

    genome_doc, dtype, shapes = job
    space, cache = _space_and_cache()
    genome = Genome.from_dict(genome_doc)
    reference = Problem.of("gemm", dtype, **REFERENCE_SIZES)
    verdict = verify_genome(genome, reference, space=space, cache=cache)
    if not verdict.valid:
        return {"valid": False, "rule": str(verdict.rule)}
    shaped: dict[str, dict[str, Any]] = {}
    for kind, shape in shapes.items():
        try:
            v = verify_genome(genome, Problem.of("gemm", dtype, **shape), space=space,
                              cache=cache)
            shaped[kind] = {"valid": v.valid, "stage": v.stage, "rule": v.rule,
                            "message": v.message}
        except ProblemError as exc:  # the space refuses the problem itself (check_problem)
            shaped[kind] = {"valid": False, "stage": "problem", "rule": "space.check_problem",
                            "message": str(exc)}
    return {"valid": True, "shaped": shaped}


class Planner:
    """Draws pairs until ``count`` are accepted (:meth:`pairs` yields each accepted case and
    each shape rejection as it is judged); a genome rejected on the reference problem is
    counted by rule in ``redraws`` and drawn again.

    Deterministic for a seed whatever the pool: genomes come from one generator, and each
    drawn genome gets one shape per kind from a generator of its own (seed, draw number),
    judged together in a worker; the pairs are then taken in draw order, the i-th shape of
    the kind ``SHAPE_KINDS[i % len]``."""

    BATCH = 8

    def __init__(self, count: int, seed: int, max_attempts: int, pool: Any = None,
                 only: dict[str, list[str]] | None = None) -> None:
        from tsopt.core.problem import Problem

        self.count, self.seed, self.max_attempts, self.pool = count, seed, max_attempts, pool
        self.only = only or {}
        self.space, self.cache = _space_and_cache()
        self.rng = random.Random(seed)
        generic = Problem.of("gemm", "bf16", **REFERENCE_SIZES)
        self.knobs = {k.name: list(k.choices) for k in self.space.knobs(generic)}
        self.gene_domains = sorted(self.space.gene_domains(generic))
        self.redraws: dict[str, int] = {}
        self.attempts = 0
        self.seen: set[str] = set()

    def _redraw(self, rule: str) -> None:
        self.redraws[rule] = self.redraws.get(rule, 0) + 1

    def _candidates(self) -> list[dict[str, Any]]:
        """The next batch of drawn genomes that tsopt's own checks do not reject on the
        reference problem, each with its tiles and a shape per kind."""
        from tsopt.core.problem import Problem

        space, batch = self.space, []
        while len(batch) < self.BATCH:
            self.attempts += 1
            if self.attempts > self.max_attempts:
                raise SystemExit(f"gemm_property: {self.max_attempts} genome draws did not give "
                                 f"{self.count} accepted pairs (redraws by rule: {self.redraws})")
            dtype = self.rng.choice(list(space.dtypes))
            reference = Problem.of("gemm", dtype, **REFERENCE_SIZES)
            genome = space.suggest(RandomTrial(self.rng, self.only), reference)
            if genome.hash in self.seen:
                self._redraw("duplicate genome")
                continue
            self.seen.add(genome.hash)
            # tsopt's own checks are the verifier's last gate and cost microseconds: a genome
            # they reject on the reference problem is rejected whatever TS says, so the TS
            # skeleton (seconds) is built only for the others.
            findings = space.tsopt_checks(genome, reference)
            if findings:
                self._redraw(findings[0].rule)
                continue
            tiles = problem_tiles(space.config(genome, reference))
            shape_rng = random.Random(f"{self.seed}:{self.attempts}")
            shapes = {kind: draw_shape(shape_rng, kind, tiles) for kind in sorted(set(SHAPE_KINDS))}
            batch.append({"genome": genome, "dtype": dtype, "tiles": tiles, "shapes": shapes})
        return batch

    def pairs(self) -> Any:
        from tsopt.core.problem import Problem

        accepted, turns, rows = 0, 0, 0  # turns: genomes accepted on the reference problem
        while accepted < self.count:
            batch = self._candidates()
            jobs = [(c["genome"].to_dict(), c["dtype"], c["shapes"]) for c in batch]
            judged = (self.pool.map(judge_candidate, jobs, chunksize=1) if self.pool is not None
                      else [judge_candidate(job) for job in jobs])
            for cand, result in zip(batch, judged, strict=True):
                if accepted >= self.count:
                    break
                if not result["valid"]:
                    self._redraw(result["rule"])
                    continue
                genome, dtype, tiles = cand["genome"], cand["dtype"], cand["tiles"]
                # The genome's turn picks its shape's kind; when the verifier rejects that
                # shape (a row of the table), the kinds after it are tried in turn, so a genome
                # valid on 8192^3 mostly yields an accepted pair (a TS skeleton costs seconds);
                # one no kind accepts (a swizzle band wider than every small shape) yields none.
                first = turns % len(SHAPE_KINDS)
                order = list(dict.fromkeys(SHAPE_KINDS[first:] + SHAPE_KINDS[:first]))
                turns += 1
                for tried, kind in enumerate(order):
                    shape, verdict = cand["shapes"][kind], result["shaped"][kind]
                    row: dict[str, Any] = {
                        "draw": rows, "turn": turns - 1, "fallback": tried > 0,
                        "genome_hash": genome.hash, "genome": genome.to_dict(), "dtype": dtype,
                        "shape": shape, "kind": kind, "tiles": tiles,
                        "flags": shape_flags(shape, tiles)}
                    rows += 1
                    if verdict["valid"]:
                        problem = Problem.of("gemm", dtype, **shape)
                        row.update(id=accepted, verdict="accepted", problem=problem.to_dict(),
                                   problem_key=problem.key, build=None, bundle=None)
                        accepted += 1
                        yield row
                        break
                    row.update(verdict="rejected", stage=verdict["stage"], rule=verdict["rule"],
                               message=verdict["message"],
                               names_geometry=names_geometry(verdict["message"] or ""),
                               # Accepted on the reference problem: only the shape changed it.
                               shape_dependent=True)
                    yield row


def write_case_bundle(out: Path, case: dict[str, Any], artifact_dir: str) -> str:
    from tsopt.core.bundle import BundleEntry, write_bundle
    from tsopt.core.genome import Genome
    from tsopt.core.problem import Problem

    name = f"{case['id']:04d}-{case['problem_key']}"
    directory = out / "bundles" / name
    shutil.rmtree(directory, ignore_errors=True)
    write_bundle(directory, study=f"gemm-property-{case['id']:04d}", space="gemm",
                 problem=Problem.from_dict(case["problem"]), arch=ARCH,
                 candidates=[BundleEntry(Genome.from_dict(case["genome"]), Path(artifact_dir),
                                         origin="gemm-property")])
    return str(directory.relative_to(out))


def planner_knob_names() -> set[str]:
    from tsopt.core.problem import Problem

    space, _ = _space_and_cache()
    return {k.name for k in space.knobs(Problem.of("gemm", "bf16", **REFERENCE_SIZES))}


def build(args: argparse.Namespace) -> None:
    """Draw and judge pairs; compile each accepted one as soon as it is drawn (``--jobs``
    forked workers), bundle it, and rewrite the index after every event: a partial build is
    an index a GPU run can already use."""
    import threading

    from tsopt.core.dsl_env import ensure_arch

    ensure_arch(ARCH)
    out = Path(args.out)
    started = time.time()
    _space_and_cache()  # the DSL and the space imported once, before the workers fork
    pool = None
    if args.jobs > 1:
        import multiprocessing as mp

        # fork: the workers inherit the imported DSL instead of importing it again; they
        # judge the drawn genomes and compile the accepted pairs, in one queue.
        pool = mp.get_context("fork").Pool(args.jobs)
    only = {}
    for text in args.knob:
        name, _, values = text.partition("=")
        if name not in planner_knob_names() or not values:
            raise SystemExit(f"gemm_property: --knob {text!r}: expected NAME=V1,V2 with NAME one "
                             f"of {sorted(planner_knob_names())}")
        only[name] = values.split(",")
    planner = Planner(args.count, args.seed, args.max_attempts, pool, only)
    shutil.rmtree(out / "bundles", ignore_errors=True)
    (out / "bundles").mkdir(parents=True, exist_ok=True)
    index: dict[str, Any] = {
        "format": INDEX_FORMAT, "seed": args.seed, "count": args.count, "arch": ARCH,
        "reference_sizes": REFERENCE_SIZES, "knobs": planner.knobs,
        "gene_domains": planner.gene_domains, "shape_kinds": list(SHAPE_KINDS),
        "source_digest": planner.space.source_digest(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "genome_draws": 0, "redraws_by_rule": {}, "cases": [], "rejections": [],
        "planned": False, "knob_restrictions": only,
    }
    lock = threading.Lock()
    built = 0

    def save() -> None:
        index["genome_draws"] = planner.attempts
        index["redraws_by_rule"] = dict(sorted(planner.redraws.items()))
        atomic_json(out / INDEX_NAME, index)

    def record(case: dict[str, Any], result: dict[str, Any]) -> None:
        nonlocal built
        with lock:
            built += 1
            case["build"] = {k: result.get(k) for k in (
                "status", "error", "cache_hit", "compile_seconds", "wall_s", "registers",
                "spill_bytes", "smem_bytes")}
            if result.get("status") == "ok":
                try:
                    case["bundle"] = write_case_bundle(out, case, result["artifact_dir"])
                except Exception as exc:  # noqa: BLE001 - recorded; the pool must go on
                    case["build"].update(status="error", error=f"bundle: {exc}")
            save()
            print(f"built [{built}/{args.count}] {case['id']:04d} {case['genome_hash'][:12]} "
                  f"{case['problem_key']}: {result.get('status')} {result.get('wall_s')} s "
                  f"{(result.get('error') or '')[:160]}", flush=True, file=sys.__stdout__)

    pending = []
    for row in planner.pairs():
        with lock:
            if row["verdict"] == "accepted":
                index["cases"].append(row)
            else:
                index["rejections"].append(row)
            save()
        print(f"drawn {row['verdict']:<8} {row['kind']:<12} {row['dtype']} "
              f"{row['shape']['m']}x{row['shape']['n']}x{row['shape']['k']} tiles "
              f"{row['tiles']['m_tile']}x{row['tiles']['n_tile']}x{row['tiles']['tile_k']} "
              f"{row.get('rule') or ''} (genome draws {planner.attempts})", flush=True,
              file=sys.__stdout__)
        if row["verdict"] != "accepted" or args.plan_only:
            continue
        job = (row["genome"], row["problem"], args.cache_dir)
        if pool is None:
            record(row, _build_one(job))
        else:
            pending.append(pool.apply_async(
                _build_one, (job,), callback=lambda result, case=row: record(case, result),
                error_callback=lambda exc, case=row: record(
                    case, {"status": "error", "error": f"build worker: {exc!r}"})))
    with lock:
        index["planned"] = True
        index["plan_s"] = round(time.time() - started, 1)
        save()
    cases = index["cases"]
    print(f"plan: {len(cases)} accepted pairs "
          f"({sum(c['flags']['k_ragged'] for c in cases)} with K % tile_k != 0), "
          f"{len(index['rejections'])} shape rejections, {planner.attempts} genome draws in "
          f"{index['plan_s']} s; redraws {index['redraws_by_rule']}", flush=True)
    if pool is not None:
        pool.close()
        pool.join()
    if args.plan_only:
        return
    with lock:
        index["build_s"] = round(time.time() - started, 1)
        save()
    ok = sum(1 for c in cases if c["bundle"])
    print(f"built {ok}/{len(cases)} in {index['build_s']} s; index {out / INDEX_NAME}",
          flush=True)


# ------------------------------------------------------------------------------------------
# run (the GPU machine: torch + stdlib)
# ------------------------------------------------------------------------------------------
CASE_DEADLINE_S = 60.0
"""One pair's checks: milliseconds of kernel and reference even at 8192^3; more is a hang."""
START_DEADLINE_S = 120.0
"""A child's start: importing torch and creating the CUDA context."""
CHECKS = 2
BACK_TO_BACK = 2


def wrong_details(bset: Any, dtype: str) -> dict[str, Any]:
    """Where a wrong output is wrong: the reference's own elementwise rule, counted, and the
    range of rows and columns that hold a bad element."""
    import torch

    from tsopt.workers.reference import GEMM_ELEM_TOL

    a, b = bset.inputs
    out = bset.outputs[0].float()
    ref = a.float() @ b.float().t()
    diff = (out - ref).abs()
    rms = float(torch.linalg.vector_norm(ref, dtype=torch.float64)) / math.sqrt(ref.numel())
    nonfinite = ~torch.isfinite(out)
    bad = (diff > GEMM_ELEM_TOL[dtype] * (ref.abs() + rms)) | nonfinite
    rows = torch.nonzero(bad.any(dim=1)).flatten()
    cols = torch.nonzero(bad.any(dim=0)).flatten()
    finite = diff[~nonfinite]
    return {
        "bad_elements": int(bad.sum()), "elements": out.numel(),
        "nonfinite": int(nonfinite.sum()),
        "max_abs_err": float(finite.max()) if finite.numel() else None,
        "bad_rows": [int(rows.min()), int(rows.max())] if rows.numel() else None,
        "bad_cols": [int(cols.min()), int(cols.max())] if cols.numel() else None,
        "bad_row_count": int(rows.numel()), "bad_col_count": int(cols.numel()),
    }


def check_case(case: dict[str, Any], bundle_root: Path, generator: Any) -> dict[str, Any]:
    """One pair's checks in this (torch) process: verdict dict with ``result`` and details.

    Raises KernelFault for a CUDA fault (the caller decides whether the context survives)."""
    import torch

    from tsopt.core.artifact import ArtifactManifest
    from tsopt.core.bundle import read_manifest
    from tsopt.core.problem import Problem
    from tsopt.workers import device
    from tsopt.workers.buffers import fill_set, make_buffers
    from tsopt.workers.faults import KernelFault, status_of_cuda_error
    from tsopt.workers.reference import reference_for

    bundle = bundle_root / case["bundle"]
    manifest = read_manifest(bundle)  # every file's sha256 checked against the manifest
    candidate = manifest.candidates[0]
    artifact_dir = bundle / candidate.artifact
    art = ArtifactManifest.read(artifact_dir)
    problem = Problem.from_dict(art.problem)
    reference = reference_for(problem)
    reference.check_tensors(art.tensors)
    lib = device.open_library(artifact_dir, art)
    code = lib.load_module()
    if code:
        raise KernelFault(status_of_cuda_error(code),
                          f"tsopt_load returned {lib.cuda.runtime.describe(code)}")
    dev = torch.device("cuda", 0)
    buffers = make_buffers(art.tensors, reference.dtype, BACK_TO_BACK, dev)
    roles = [t.role for t in art.tensors]
    stream = torch.cuda.current_stream()

    def launch(bset: Any) -> None:
        code = lib.launch(bset.pointers(roles), int(stream.cuda_stream))
        if code:
            raise KernelFault(status_of_cuda_error(code),
                              f"tsopt_launch returned {lib.cuda.runtime.describe(code)}")

    def sync(when: str) -> None:
        for code in (lib.cuda.runtime.synchronize(int(stream.cuda_stream)),
                     lib.cuda.runtime.last_error()):
            if code:
                raise KernelFault(status_of_cuda_error(code),
                                  f"CUDA error {lib.cuda.runtime.describe(code)} during {when}")

    torch.set_float32_matmul_precision("highest")  # the reference must not use TF32
    worst = 0.0
    first = buffers.sets[0]
    # Past the end of the first set's D lie its alignment padding and the next set's D: kept
    # poisoned through the isolated runs, they show a store beyond the problem's rows.
    beyond = buffers.output_region[first.outputs[0].numel():]
    for i in range(CHECKS):
        seed = fill_set(first, reference, generator)
        reference.poison(beyond)
        launch(first)
        sync(f"checked run {i + 1}")
        stray = int((~reference.unwritten(beyond)).sum())
        if stray:
            return {"result": "wrong", "when": f"isolated run {i + 1} (input seed {seed})",
                    "message": f"{stray} elements written past the end of D "
                               f"({first.outputs[0].numel()} elements)", "out_of_bounds": stray}
        result = reference.compare(first.inputs, first.outputs)
        if not result.ok:
            return {"result": "wrong", "when": f"isolated run {i + 1} (input seed {seed})",
                    "rel_err": result.rel_err, "message": result.message,
                    **wrong_details(first, problem.dtype)}
        worst = max(worst, result.rel_err or 0.0)
    for bset in buffers.sets:
        fill_set(bset, reference, generator)
    for bset in buffers.sets:
        launch(bset)
    sync("the back-to-back runs")
    for j, bset in enumerate(buffers.sets):
        result = reference.compare(bset.inputs, bset.outputs)
        if not result.ok:
            return {"result": "wrong", "when": f"back-to-back run {j + 1} of {BACK_TO_BACK}",
                    "rel_err": result.rel_err, "message": result.message,
                    **wrong_details(bset, problem.dtype)}
        worst = max(worst, result.rel_err or 0.0)
    return {"result": "correct", "rel_err": worst, "launch": art.launch}


def child(args: argparse.Namespace) -> None:
    """Check the pairs ``--ids`` in order, one JSON line per event on stdout."""
    import torch

    from tsopt.workers.faults import STICKY_STATUSES, KernelFault, fault_from_torch
    from tsopt.workers.loader import KernelLoadError

    index = json.loads(Path(args.index).read_text())
    bundle_root = Path(args.index).resolve().parent
    cases = {c["id"]: c for c in index["cases"]}
    torch.cuda.init()  # type: ignore[no-untyped-call]
    generator = torch.Generator(device="cuda")

    def say(event: str, **fields: Any) -> None:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()

    say("ready", device=torch.cuda.get_device_name(0), torch=torch.__version__,
        cuda=torch.version.cuda)
    for case_id in (int(x) for x in args.ids.split(",") if x):
        case = cases[case_id]
        say("start", id=case_id)
        started = time.perf_counter()
        try:
            outcome = check_case(case, bundle_root, generator)
        except KernelFault as fault:
            outcome = {"result": fault.status, "message": fault.message}
        except (KernelLoadError, ValueError, OSError) as exc:
            # A bundle, artifact or problem that does not load (UserInputError, ArtifactError,
            # ProblemError are ValueErrors): the kernel never ran.
            outcome = {"result": "launch_error", "message": f"{type(exc).__name__}: {exc}"}
        except RuntimeError as exc:
            seen = fault_from_torch(exc, None, "the checks")
            outcome = {"result": seen.status, "message": seen.message}
        outcome["seconds"] = round(time.perf_counter() - started, 3)
        say("done", id=case_id, outcome=outcome)
        if outcome["result"] in STICKY_STATUSES:
            return  # the context is gone: the parent starts another child
        torch.cuda.empty_cache()


def run(args: argparse.Namespace) -> None:
    """Check every built pair under per-pair deadlines; write the table to ``--out``."""
    import queue
    import signal
    import tempfile
    import threading

    index_path = Path(args.index)
    index = json.loads(index_path.read_text())
    outcomes: dict[int, dict[str, Any]] = {}
    todo = []
    for c in index["cases"]:
        if not c.get("bundle"):
            continue
        if (index_path.parent / c["bundle"] / "manifest.json").is_file():
            todo.append(c["id"])
        else:  # listed by a build still writing while the folder was copied
            outcomes[c["id"]] = {"result": "not_carried",
                                 "message": f"{c['bundle']} is not beside the index"}
    if args.limit:
        todo = todo[:args.limit]
    env_info: dict[str, Any] = {}
    started = time.time()
    restarts = 0
    while todo:
        # stderr to a file: a pipe nobody reads fills up and stalls the child (a false hang).
        err_file = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "_child", "--index", str(index_path),
             "--ids", ",".join(map(str, todo))],
            stdout=subprocess.PIPE, stderr=err_file, text=True, start_new_session=True)
        lines: queue.Queue[str | None] = queue.Queue()

        def pump(stream: Any = proc.stdout, sink: queue.Queue[str | None] = lines) -> None:
            for line in stream:
                sink.put(line)
            sink.put(None)

        threading.Thread(target=pump, daemon=True).start()
        current: int | None = None
        ready = False
        limit = START_DEADLINE_S
        while True:
            try:
                line = lines.get(timeout=limit)
            except queue.Empty:  # the pair hangs (or the child never started)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                victim = current if current is not None else todo[0]
                outcomes[victim] = {
                    "result": "hang" if current is not None else "launch_error",
                    "message": f"no answer within {limit:.0f} s: killed"}
                todo = [i for i in todo if i != victim]
                break
            if line is None:  # the child ended
                proc.wait()
                err_file.seek(0)
                err = err_file.read()[-1500:].strip()
                if not ready:
                    raise SystemExit(f"gemm_property run: the checking process did not start "
                                     f"(exit {proc.returncode}): {err}")
                if current is not None:
                    outcomes[current] = {"result": "crash", "message": f"the checking process "
                                         f"died (exit {proc.returncode}): {err[-800:]}"}
                    todo = [i for i in todo if i != current]
                break
            event = json.loads(line)
            if event["event"] == "ready":
                ready = True
                env_info = {k: v for k, v in event.items() if k != "event"}
            elif event["event"] == "start":
                current = event["id"]
            elif event["event"] == "done":
                outcomes[event["id"]] = event["outcome"]
                todo = [i for i in todo if i != event["id"]]
                o = event["outcome"]
                print(f"{event['id']:04d} {o['result']:<12} {o.get('seconds', '')} s "
                      f"{(o.get('message') or '')[:140]}", flush=True)
                current = None
            limit = CASE_DEADLINE_S
        err_file.close()
        if todo:
            restarts += 1
    table = results_table(index, outcomes)
    doc = {"format": RESULTS_FORMAT, "index_seed": index["seed"],
           "index_created_at": index.get("created_at"), "source_digest": index.get("source_digest"),
           "environment": env_info, "run_s": round(time.time() - started, 1),
           "child_restarts": restarts, "genome_draws": index["genome_draws"],
           "redraws_by_rule": index["redraws_by_rule"], "rows": table}
    out = Path(args.out or Path(os.environ.get("OUT", ".")) / RESULTS_NAME)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    counts: dict[str, int] = {}
    for row in table:
        key = f"{row['verdict']}/{row['result']}"
        counts[key] = counts.get(key, 0) + 1
    print(f"{out}: {len(table)} rows in {doc['run_s']} s; {dict(sorted(counts.items()))}")


def results_table(index: dict[str, Any], outcomes: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per pair: accepted (with its GPU result) or rejected (with its rule)."""
    rows = []
    for c in index["cases"]:
        build = c.get("build") or {}
        if c.get("bundle"):
            outcome = outcomes.get(c["id"], {"result": "not_run"})
        elif build:
            outcome = {"result": "build_error", "message": build.get("error")}
        else:
            outcome = {"result": "not_built"}
        rows.append({"id": c["id"], "genome_hash": c["genome_hash"], "genome": c["genome"],
                     "dtype": c["dtype"], "shape": c["shape"], "kind": c["kind"],
                     "tiles": c["tiles"], "flags": c["flags"], "verdict": "accepted",
                     **outcome})
    for r in index["rejections"]:
        rows.append({"id": None, "genome_hash": r["genome_hash"], "genome": r["genome"],
                     "dtype": r["dtype"], "shape": r["shape"], "kind": r["kind"],
                     "tiles": r["tiles"], "flags": r["flags"], "verdict": "rejected",
                     "result": "rejected_by_rule" if r["names_geometry"]
                     else "rejected_unnamed_geometry",
                     "stage": r["stage"], "rule": r["rule"], "message": r["message"]})
    return rows


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------
REPORT_BEGIN = "<!-- gemm-property table: begin -->"
REPORT_END = "<!-- gemm-property table: end -->"


def genes_short(genome: dict[str, Any]) -> str:
    """A genome's genes in one line (the placements left out: the JSON has them)."""
    genes = {**genome.get("structure", {}), **genome.get("numeric", {})}
    return " ".join(f"{k}={v}" for k, v in sorted(genes.items()))


def table_text(doc: dict[str, Any]) -> str:
    """Every row of the results: genome hash, shape, verdict, result (or the rule)."""
    lines = ["# GEMM property test: every pair", "",
             f"Generated by `gemm_property.py report` from the results of index seed "
             f"{doc.get('index_seed')}; the JSON beside it has each genome in full.", "",
             "| id | genome | dtype | M x N x K | tiles of M x N x K | kind | verdict | result "
             "| detail |", "|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        s, t = r["shape"], r["tiles"]
        if r["verdict"] == "rejected":
            detail = f"{r['rule']}: {r.get('message') or ''}"
        elif r["result"] == "correct":
            detail = f"rel err {_g(r.get('rel_err'))}"
        elif r["result"] == "wrong":
            detail = (f"{r.get('bad_elements')} of {r.get('elements')} bad, max abs err "
                      f"{_g(r.get('max_abs_err'))}; {r.get('when')}")
        else:
            detail = r.get("message") or ""
        lines.append(
            f"| {'' if r['id'] is None else r['id']} | {r['genome_hash'][:12]} | {r['dtype']} "
            f"| {s['m']}x{s['n']}x{s['k']} | {t['m_tile']}x{t['n_tile']}x{t['tile_k']} "
            f"| {r['kind']} | {r['verdict']} | {r['result']} "
            f"| {detail.replace('|', '/')[:160]} |")
    return "\n".join(lines) + "\n"


def _g(value: float | None) -> str:
    return "-" if value is None else format(value, ".3g")


def report_text(doc: dict[str, Any], source: str) -> str:
    rows = doc["rows"]
    accepted = [r for r in rows if r["verdict"] == "accepted"]
    rejected = [r for r in rows if r["verdict"] == "rejected"]
    by_result: dict[str, int] = {}
    for r in accepted:
        by_result[r["result"]] = by_result.get(r["result"], 0) + 1
    by_rule: dict[str, int] = {}
    for r in rejected:
        named = r["result"] == "rejected_by_rule"
        key = f"{r['rule']} ({'names' if named else 'does NOT name'} the geometry)"
        by_rule[key] = by_rule.get(key, 0) + 1
    flags = ("m_below_tile", "n_below_tile", "k_below_tile", "m_ragged", "n_ragged", "k_ragged",
             "has_one", "has_max")
    env = doc.get("environment", {})
    lines = [
        f"Source: `{source}` (index seed {doc.get('index_seed')}, built {doc.get('index_created_at')},"
        f" template digest {doc.get('source_digest')}); device {env.get('device', '?')}, torch "
        f"{env.get('torch', '?')}, CUDA {env.get('cuda', '?')}; checks took {doc.get('run_s')} s "
        f"({doc.get('child_restarts', 0)} child restarts).",
        "",
        f"**{len(accepted)} verifier-accepted pairs** (genome, shape):",
        "",
        "| result | pairs |", "|---|---|",
        *[f"| {k} | {v} |" for k, v in sorted(by_result.items())],
        "",
        "Edge cases among the accepted pairs (against each genome's own tiles):",
        "",
        "| edge case | accepted pairs | of them correct |", "|---|---|---|",
        *[f"| {f} | {sum(r['flags'][f] for r in accepted)} | "
          f"{sum(r['flags'][f] and r['result'] == 'correct' for r in accepted)} |" for f in flags],
        "",
        f"**{len(rejected)} pairs rejected before the GPU** for their shape (each genome was "
        "accepted on 8192x8192x8192 first, so only the shape changed the verdict):",
        "",
        "| rule | pairs |", "|---|---|",
        *[f"| {k} | {v} |" for k, v in sorted(by_rule.items())],
        "",
        f"Genomes redrawn because the verifier rejected them on 8192^3 (for themselves, not "
        f"a geometry), out of {doc.get('genome_draws')} draws:",
        "",
        "| rule | redraws |", "|---|---|",
        *[f"| {k} | {v} |" for k, v in sorted(doc.get("redraws_by_rule", {}).items())],
        "",
    ]
    bad = [r for r in accepted if r["result"] != "correct"]
    lines += [f"**Accepted pairs that are not correct: {len(bad)}**", ""]
    if bad:
        lines += ["| id | genome | dtype | M x N x K | genes | result | detail |",
                  "|---|---|---|---|---|---|---|"]
        for r in bad:
            s = r["shape"]
            detail = r.get("message") or ""
            if r["result"] == "wrong":
                detail = (f"{r.get('bad_elements')} of {r.get('elements')} elements bad "
                          f"({r.get('nonfinite')} NaN/Inf), max abs err "
                          f"{_g(r.get('max_abs_err'))}, "
                          f"rows {r.get('bad_rows')} cols {r.get('bad_cols')}; {r.get('when')}")
            lines.append(f"| {r['id']} | {r['genome_hash'][:12]} | {r['dtype']} | "
                         f"{s['m']}x{s['n']}x{s['k']} | {genes_short(r['genome'])} | "
                         f"{r['result']} | {detail.replace('|', '/')[:300]} |")
        lines.append("")
    unnamed = [r for r in rejected if r["result"] != "rejected_by_rule"]
    if unnamed:
        lines += ["Rejections whose message does not name the geometry:", "",
                  "| genome | M x N x K | rule | message |", "|---|---|---|---|"]
        for r in unnamed:
            s = r["shape"]
            lines.append(f"| {r['genome_hash'][:12]} | {s['m']}x{s['n']}x{s['k']} | {r['rule']} "
                         f"| {(r['message'] or '').replace('|', '/')[:200]} |")
        lines.append("")
    return "\n".join(lines)


def report(args: argparse.Namespace) -> None:
    doc = json.loads(Path(args.results).read_text())
    if doc.get("format") != RESULTS_FORMAT:
        raise SystemExit(f"{args.results}: not a gemm-property results file "
                         f"(format {doc.get('format')!r})")
    readme = Path(args.readme)
    text = readme.read_text() if readme.exists() else ""
    block = f"{REPORT_BEGIN}\n{report_text(doc, args.results)}\n{REPORT_END}"
    if REPORT_BEGIN in text and REPORT_END in text:
        head, rest = text.split(REPORT_BEGIN, 1)
        text = head + block + rest.split(REPORT_END, 1)[1]
    else:
        text = text.rstrip() + "\n\n## Result\n\n" + block + "\n"
    readme.write_text(text)
    Path(args.table).write_text(table_text(doc))
    print(f"{readme}: summary of {len(doc['rows'])} rows; {args.table}: every row")


# ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="draw, verify, compile and bundle (build machine)")
    b.add_argument("--count", type=int, default=300)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--out", default=str(DEFAULT_OUT))
    b.add_argument("--cache-dir", default=str(ROOT / ".tsopt" / "artifacts"))
    b.add_argument("--jobs", type=int, default=1, help="compiles at once (forked workers)")
    b.add_argument("--max-attempts", type=int, default=200_000)
    b.add_argument("--plan-only", action="store_true", help="draw and verify; compile nothing")
    b.add_argument("--knob", action="append", default=[],
                   help="NAME=V1,V2: draw that knob among these values only (repeatable)")
    r = sub.add_parser("run", help="check every built pair on this GPU (torch + stdlib)")
    r.add_argument("--index", default=str(DEFAULT_OUT / INDEX_NAME))
    r.add_argument("--out", default=None, help=f"default: $OUT/{RESULTS_NAME}")
    r.add_argument("--limit", type=int, default=0)
    c = sub.add_parser("_child")
    c.add_argument("--index", required=True)
    c.add_argument("--ids", required=True)
    p = sub.add_parser("report", help="the results as README.md's table")
    p.add_argument("results")
    p.add_argument("--readme", default=str(HERE / "README.md"))
    p.add_argument("--table", default=str(HERE / "TABLE.md"))
    args = parser.parse_args(argv)
    if args.command == "build" and args.count < 1:
        parser.error(f"--count {args.count} must be at least 1")
    {"build": build, "run": run, "_child": child, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
