"""The report's data: one JSON-ready document per study, read through the Store.

Everything the page shows is computed here; the page's script only draws it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.db.store import Store
from tsopt.db.views import CandidateInfo, RankedCandidate, StudyInfo
from tsopt.reports.importance import METHOD, MIN_TIMED, RELIABLE_TIMED, importance
from tsopt.reports.schedule import schedule_view
from tsopt.verify.verifier import search_bound

TOP_ROWS = 100
"""Rows of the top-candidates table (the fastest correct candidates)."""

FUNNEL_LABELS: dict[str, str] = {
    "proposed": "proposed (raw)",
    "dataflow_legal": "dataflow-legal",
    "ts_valid": "TS-valid",
    "tsopt_checked": "tsopt-checked",
    "built": "built",
    "correct": "correct",
    "timed": "timed",
}


def _num(value: float | None, digits: int = 4) -> float | None:
    """Rounded to significant digits: keeps a 10,000-point page small."""
    if value is None:
        return None
    return float(f"{value:.{digits}g}")


def _best_block(best: RankedCandidate, baselines: list[dict[str, Any]]) -> dict[str, Any]:
    m = best.measurement
    baseline_us, baseline_rate, baseline_name = (
        m.baseline_median_us, m.baseline_rate, m.baseline_name
    )
    if baseline_us is None and baselines:
        # No baseline in the candidate's own run: the newest one recorded for the problem.
        latest = baselines[-1]
        baseline_us, baseline_rate, baseline_name = (
            latest["median_us"], latest["rate"], latest["name"]
        )
    s = best.standing
    ratio = s.ratio if s is not None and s.ratio is not None else m.ratio
    if ratio is None and baseline_us and m.median_us:
        ratio = baseline_us / m.median_us
    interval = (None if s is None or s.ratio_lo is None or s.ratio_hi is None
                else [s.ratio_lo, s.ratio_hi])
    return {
        "interval": interval, "measurements": s.measurements if s is not None else 1,
        "hash": best.genome_hash,
        "median_us": m.median_us, "p10_us": m.p10_us, "p90_us": m.p90_us,
        "rate": m.rate, "rate_unit": m.rate_unit, "rel_err": m.rel_err,
        "baseline_name": baseline_name or "baseline",
        "baseline_median_us": baseline_us, "baseline_rate": baseline_rate,
        "ratio": ratio, "device": m.device, "run_id": best.run_id, "runs": m.runs,
    }


def _convergence(info: StudyInfo, candidates: Sequence[CandidateInfo]) -> dict[str, Any]:
    by_trial: list[list[float | None]] = []
    by_time: list[list[float | None]] = []
    for position, candidate in enumerate(candidates, start=1):
        best = candidate.best
        if best is None:
            continue
        median = best.measurement.median_us
        by_trial.append([position, _num(median)])
        # Proposal time, not measurement time: a bundle measured elsewhere is recorded all at
        # once when ingested, which would pile every point onto one instant.
        elapsed = (candidate.created_at - info.created_at).total_seconds()
        by_time.append([_num(max(elapsed, 0.0), 6), _num(median)])
    by_time.sort(key=lambda p: (p[0] or 0.0))
    return {"by_trial": by_trial, "by_time": by_time, "proposed": len(candidates)}


def _schedule(genome: Genome, label: str) -> dict[str, Any]:
    views, note = schedule_view(genome)
    return {"hash": genome.hash, "label": label, "note": note,
            "tasks": [v.to_dict() for v in views]}


def _row(r: RankedCandidate, genes: Sequence[str], first: RankedCandidate) -> dict[str, Any]:
    m = r.measurement
    build = r.build
    values = r.genome.genes
    s = r.standing
    ratio = s.ratio if s is not None and s.ratio is not None else m.ratio
    interval = ("" if s is None or s.ratio_lo is None or s.ratio_hi is None
                else f"{s.ratio_lo:.3f}\u2013{s.ratio_hi:.3f}")
    # Rank 1's interval overlapping this one's: the noise cannot tell them apart.
    close = (r.rank > 1 and s is not None and first.standing is not None
             and not first.standing.separable_from(s))
    return {
        "rank": r.rank, "hash": r.genome_hash, "origin": r.origin, "trial": r.trial_number,
        "median_us": m.median_us, "p10_us": m.p10_us, "p90_us": m.p90_us,
        "rate": _num(m.rate), "ratio": _num(ratio), "interval": interval,
        "measurements": s.measurements if s is not None else 1,
        "unseparated": "\u2248 #1" if close else "",
        "flags": ", ".join(s.abnormal) if s is not None else "",
        "rel_err": _num(m.rel_err, 2),
        "registers": build.registers if build else None,
        "smem_bytes": build.smem_bytes if build else None,
        "genes": [_gene_text(values.get(g)) for g in genes],
    }


def _gene_text(value: object) -> str | int | None:
    """Integers stay numbers so that the table sorts them as numbers."""
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, tuple):
        return "x".join(str(v) for v in value)
    return str(value)


def _fallback_schedule(candidates: Sequence[CandidateInfo]) -> dict[str, Any] | None:
    """With nothing timed, draw a valid candidate (else the first proposed)."""
    valid = [c for c in candidates if c.verdict is not None and c.verdict.valid]
    if valid:
        return _schedule(valid[0].genome, "first valid candidate (nothing timed yet)")
    if candidates:
        return _schedule(candidates[0].genome, "first proposed candidate (none valid yet)")
    return None


def _bounded(candidates: Sequence[CandidateInfo]) -> dict[str, Any]:
    """How many valid candidates rest on an exhaustive TS search that stopped at its state
    bound (no counterexample, no complete proof), of how many valid, and the bound."""
    valid = [c.verdict for c in candidates if c.verdict is not None and c.verdict.valid]
    bounds = [b for b in map(search_bound, valid) if b is not None]
    return {"count": len(bounds), "valid": len(valid), "bound": max(bounds, default=None)}


LAUNCH_TEXT = {
    "graph": "graph: back-to-back launches in one CUDA graph per side (GPU time)",
    "eager": "eager: calls through the export's loader (GPU plus launch cost)",
    "isolated": "isolated: each launch after a spin kernel (a study made before the modes)",
}


def launch_text(launch: str, measured: dict[str, int]) -> str:
    """The study's launch mode in words, and any measurement it holds of another mode."""
    others = {mode: n for mode, n in measured.items() if mode != launch}
    return LAUNCH_TEXT.get(launch, launch) + "".join(
        f"; {n} measurement{'s' if n != 1 else ''} in {mode} mode" for mode, n in others.items())


def ranked_on(devices: dict[str, int], card: str | None) -> str:
    """The page's line on the GPUs a study was measured on, and the one its ranking reads
    (:meth:`tsopt.db.store.Store.ranking_gpu`: another card ranks kernels differently, so they
    are never pooled)."""
    listed = ", ".join(f"{d} ({n})" for d, n in devices.items()) or "nothing measured yet"
    if card is None:
        return listed
    return (f"{listed}; ranked on {card} alone (the study's target card where it measured "
            "it, else the most measured; `tsopt export --measured-on` picks the card)")


def study_document(store: Store, name: str, top: int = TOP_ROWS) -> dict[str, Any]:
    """Everything the page shows for one study."""
    info = store.get_study(name)
    if info is None:
        raise UserInputError(f"no study named {name!r} in the database; `tsopt report` lists them")
    candidates = store.candidates(name)
    funnel = store.funnel(name)
    card = store.ranking_gpu(name)
    measured_on = ranked_on(store.measured_devices(name), card)
    ranked = store.ranked(name, limit=top, device=card)
    timed: list[tuple[Genome, float]] = []
    for c in candidates:
        best = c.best
        if best is not None and best.measurement.median_us:
            timed.append((c.genome, best.measurement.median_us))
    genes = sorted({g for r in ranked for g in r.genome.genes})
    rows = [_row(r, genes, ranked[0]) for r in ranked]
    schedules = [_schedule(r.genome, f"rank {r.rank}") for r in ranked]
    if not schedules:
        fallback = _fallback_schedule(candidates)
        schedules = [fallback] if fallback is not None else []
    statuses: dict[str, int] = {}
    launches: dict[str, int] = {}
    for c in candidates:
        for recorded in c.measurements:
            status = recorded.measurement.status
            statuses[status] = statuses.get(status, 0) + 1
            launches[recorded.measurement.launch] = launches.get(recorded.measurement.launch,
                                                                 0) + 1
    imp = importance(timed)
    return {
        "name": info.name,
        "space": info.space,
        "problem": str(info.problem),
        "problem_key": info.problem_key,
        "arch": info.arch,
        "sampler": info.sampler,
        # What the study started from (on, off, exclude-self); older studies did not record it.
        "library": info.config.get("library") or "not recorded",
        # What evolve's cost model started from (--cost-prior); older studies: the estimate.
        "cost_prior": info.config.get("cost_prior") or "not recorded",
        "launch": info.launch,
        "launch_text": launch_text(info.launch, launches),
        "measurement_launches": launches,
        "measured_on_text": measured_on,
        "status": info.status,
        "config": info.config,
        "created_at": info.created_at.isoformat(timespec="seconds"),
        "updated_at": info.updated_at.isoformat(timespec="seconds"),
        "funnel": [{"key": k, "label": FUNNEL_LABELS[k], "count": v} for k, v in funnel.items()],
        "rejections": [
            {"stage": r.stage, "rule": r.rule, "count": r.count, "example": r.example}
            for r in store.rejections(name)
        ],
        "measurement_statuses": statuses,
        "bounded": _bounded(candidates),
        "best": _best_block(ranked[0], store.baselines(info.problem_key)) if ranked else None,
        "convergence": _convergence(info, candidates),
        "importance": {
            "method": METHOD,
            "min_timed": MIN_TIMED,
            "reliable_timed": RELIABLE_TIMED,
            "reliable": len(timed) >= RELIABLE_TIMED,
            "timed": len(timed),
            "genes": [g.to_dict() for g in imp],
        },
        "table": {"genes": genes, "rows": rows},
        "schedules": schedules,
    }


def report_document(store: Store, names: Sequence[str], db_label: str) -> dict[str, Any]:
    """The page's whole document: one or two studies side by side."""
    studies = [study_document(store, n) for n in names]
    return {
        "title": " vs ".join(names),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "database": db_label,
        "studies": studies,
    }
