"""Several GEMM studies in one run: the M buckets of ``tsopt tune gemm --m 1-256`` and the
projections of ``tsopt tune gemm --workload FILE``.

A served GEMM (tsopt.app.workload.ServedGemm: N and K fixed, M varying) becomes studies:

- an M **range** becomes one study per bucket (tsopt.core.buckets.bucket_ranges), each of the
  range problem ``gemm:<dtype>:<lo>-<hi>x<N>x<K>``: a runtime-M kernel for every M of the
  bucket, measured paired at several M inside it (tsopt.workers.range_measure);
- **exact** Ms (``--m 1,8,32``) become one fixed-M study each: a kernel for exactly that M,
  which the export's op prefers over any range holding it (faster where it is, and said so in
  the manifest: ``runtime_m`` false).

Until the runtime-M GEMM kernels exist (issue 30's runtime-M part), a bucket can be tuned as
a **fixed-M stand-in**: ``TSOPT_BUCKET_KERNELS=fixed-m-standin`` tunes each bucket as the
fixed-M problem of its top M, in a study named ``...-standin-<lo>-<hi>`` whose config says
``"kernel": "fixed-m-standin"``. It is what it is called: the kernel serves its one M (its
export says ``m_range`` [hi, hi]), and no figure of it stands for the bucket. It lets the
orchestration (one database, one progress view, resume, one package) run before the kernels
do.

Every study is run by :func:`tsopt.search.driver.run_tune` in turn, with the options of the
command (each study's own budget: ``--trials``, ``--built``, ``--measured`` are per study;
``--time`` bounds the whole run, shared out among the studies still to run). One database
holds them all; the view above each study's live view shows every study of the run
(tsopt.search.progress.ACROSS_STUDIES). Ctrl-C stops the study at hand as a single study stops
(exit 130); the same command then resumes it and runs the rest; finished studies are not run
again beyond their budget.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console, RenderableType
from rich.table import Table

from tsopt.app.workload import ServedGemm, Workload
from tsopt.core.buckets import bucket_ranges, sample_ms, summary_of
from tsopt.core.errors import EXIT_INTERRUPTED, UserInputError
from tsopt.core.problem import Problem

if TYPE_CHECKING:
    from tsopt.db.store import Store
    from tsopt.db.views import RankedCandidate
    from tsopt.search.request import TuneRequest

KERNEL_ENV = "TSOPT_BUCKET_KERNELS"
RUNTIME_M, FIXED_M, STANDIN = "runtime-m", "fixed-m", "fixed-m-standin"
KERNEL_WORDS = {RUNTIME_M: "runtime M", FIXED_M: "fixed M", STANDIN: "fixed-M stand-in"}


def bucket_kernel_kind() -> str:
    """What a bucket is tuned as: ``runtime-m`` (the default) or, where ``TSOPT_BUCKET_KERNELS``
    says ``fixed-m-standin``, the stand-in (see the module doc)."""
    kind = os.environ.get(KERNEL_ENV, RUNTIME_M) or RUNTIME_M
    if kind not in (RUNTIME_M, STANDIN):
        raise UserInputError(f"{KERNEL_ENV}={kind!r} is not {RUNTIME_M} or {STANDIN}")
    return kind


def range_problem(dtype: str, lo: int, hi: int, n: int, k: int) -> Problem:
    """The GEMM problem of a runtime M in ``lo..hi`` (``Problem.m_range``; ``m`` is ``hi``, the
    size its buffers are allocated for). UserInputError where this tree's problems have no
    runtime M yet."""
    fixed = Problem.of("gemm", dtype, m=hi, n=n, k=k)
    if "m_range" not in {f.name for f in dataclasses.fields(Problem)}:
        raise UserInputError(
            f"M {lo}-{hi}: this tsopt has no runtime-M GEMM kernels yet (issue 30), so an M range "
            f"cannot be tuned as one; give exact Ms (--m {lo},{hi}) for fixed-M kernels, or "
            f"{KERNEL_ENV}={STANDIN} to tune each bucket as a fixed-M stand-in at its top M")
    return dataclasses.replace(fixed, m_range=(lo, hi))  # type: ignore[call-arg]


@dataclass(frozen=True)
class PlannedStudy:
    """One study of a run of several: the problem it tunes, the Ms its kernel will serve, what
    kind of kernel, and the served GEMMs (by name) it tunes for."""

    names: tuple[str, ...]
    problem: Problem
    m_range: tuple[int, int]
    kernel: str  # RUNTIME_M | FIXED_M | STANDIN
    bucket: tuple[int, int] | None  # the bucket tuned for (a stand-in's too); None: exact M
    study: str | None  # an explicit name (the stand-in's), else the request's default

    @property
    def samples(self) -> tuple[int, ...]:
        """The Ms its kernel is measured at."""
        return sample_ms(*self.m_range) if self.kernel == RUNTIME_M else (self.problem["m"],)

    @property
    def m_text(self) -> str:
        if self.bucket is not None:
            return f"{self.bucket[0]}-{self.bucket[1]}"
        return str(self.problem["m"])

    def config(self, workload: str) -> dict[str, Any]:
        """What the study's config records of it."""
        return {"serving": {"workload": workload, "names": list(self.names),
                            "kernel": self.kernel, "m_range": list(self.m_range),
                            "bucket": list(self.bucket) if self.bucket else None,
                            "m_samples": list(self.samples)}}


def plan_studies(gemms: Sequence[ServedGemm], arch: str, device: str | None,
                 kind: str | None = None) -> list[PlannedStudy]:
    """The studies that tune ``gemms``, in order; one study for GEMMs that share a problem
    (two projections of one shape: their names joined)."""
    from tsopt.search.request import TuneRequest

    kind = bucket_kernel_kind() if kind is None else kind
    planned: dict[tuple[Any, ...], PlannedStudy] = {}
    for gemm in gemms:
        items: list[tuple[Problem, tuple[int, int], str, tuple[int, int] | None, str | None]] = []
        if gemm.m_range is not None:
            for lo, hi in bucket_ranges(*gemm.m_range):
                if kind == STANDIN:
                    fixed = Problem.of("gemm", gemm.dtype, m=hi, n=gemm.n, k=gemm.k)
                    name = TuneRequest(space="gemm", problem=fixed, arch=arch,
                                       device=device).study_name() + f"-standin-{lo}-{hi}"
                    items.append((fixed, (hi, hi), STANDIN, (lo, hi), name))
                else:
                    items.append((range_problem(gemm.dtype, lo, hi, gemm.n, gemm.k), (lo, hi),
                                  RUNTIME_M, (lo, hi), None))
        for m in gemm.exact_ms:
            items.append((Problem.of("gemm", gemm.dtype, m=m, n=gemm.n, k=gemm.k), (m, m),
                          FIXED_M, None, None))
        for problem, m_range, kernel, bucket, study in items:
            key = (problem.key, kernel, bucket)
            known = planned.get(key)
            names = (known.names if known else ()) + ((gemm.name,) if not known or gemm.name
                                                      not in known.names else ())
            planned[key] = PlannedStudy(names, problem, m_range, kernel, bucket, study)
    return list(planned.values())


# -- the view across studies -------------------------------------------------------------------
@dataclass
class StudyState:
    """What the view shows of one planned study."""

    planned: PlannedStudy
    name: str
    state: str = "waiting"  # waiting | running | done | interrupted | nothing valid | failed
    built: int = 0
    timed: int = 0
    ratio: float | None = None
    per_m: dict[str, Any] = dataclasses.field(default_factory=dict)

    def refresh(self, store: Store) -> None:
        """Its counts and best figures from the database."""
        if store.get_study(self.name) is None:
            return
        funnel = store.funnel(self.name)
        self.built, self.timed = funnel.get("built", 0), funnel.get("timed", 0)
        ranked = store.ranked_on_card(self.name, limit=1)
        if ranked:
            best = ranked[0]
            self.ratio = best.standing.ratio if best.standing is not None else best.measurement.ratio
            self.per_m = summary_of(best.measurement.per_m)


def overview(title: str, states: Sequence[StudyState], started: float) -> RenderableType:
    """The table of every study of the run, with where each stands."""
    done = sum(1 for s in states if s.state not in ("waiting", "running"))
    table = Table(title=f"{title}: {done} of {len(states)} studies run, "
                        f"{time.monotonic() - started:.0f} s", title_justify="left",
                  show_edge=False, pad_edge=False)
    for column in ("#", "for", "M", "kernel", "state", "built", "timed", "best x cuBLAS",
                   "median / worst over M"):
        table.add_column(column, justify="right" if column in ("#", "built", "timed") else "left")
    for index, s in enumerate(states, 1):
        figure = f"{s.ratio:.3f}" if s.ratio is not None else "-"
        if s.per_m:
            spread = (f"{s.per_m['median']:.3f} / {s.per_m['worst']:.3f} (M={s.per_m['worst_m']}"
                      f"; {len(s.per_m['ms'])} Ms)")
        else:
            spread = "-" if s.ratio is None else f"at M={s.planned.problem['m']} only"
        table.add_row(str(index), ",".join(s.planned.names), s.planned.m_text,
                      KERNEL_WORDS[s.planned.kernel], s.state, str(s.built), str(s.timed),
                      figure, spread)
    return table


# -- the run -----------------------------------------------------------------------------------
def requests_for(planned: Sequence[PlannedStudy], base: TuneRequest,
                 workload: str) -> list[TuneRequest]:
    """Each planned study's request: ``base`` (the command's options) with its problem, name
    and config; every one checked before any study starts."""
    if base.study:
        raise UserInputError(f"--study {base.study!r} names one study; a run of {len(planned)} "
                             "names each from its problem (drop --study)")
    if base.bundle_dir is not None:
        raise UserInputError(f"--bundle {base.bundle_dir} is one study's bundle; a run of "
                             f"{len(planned)} writes each to .tsopt/bundles/<study> (drop --bundle)")
    requests = [dataclasses.replace(base, problem=p.problem, study=p.study,
                                    study_config={**base.study_config, **p.config(workload)})
                for p in planned]
    for request in requests:
        request.validate()
    return requests


def run_studies(workload: Workload, base: TuneRequest, console: Console,
                kind: str | None = None) -> int:
    """Tune every study of ``workload`` in turn (see the module doc); the exit code: 130 when
    interrupted (the same command resumes), else the worst of the studies' (0 done, 1 nothing
    valid could be built)."""
    from tsopt.db.store import Store
    from tsopt.search.driver import run_tune
    from tsopt.search.progress import ACROSS_STUDIES

    planned = plan_studies(workload.gemms, base.arch, base.device, kind)
    requests = requests_for(planned, base, workload.name)
    states = [StudyState(p, r.study_name()) for p, r in zip(planned, requests, strict=True)]
    started = time.monotonic()
    deadline = None if base.time_budget_s is None else started + base.time_budget_s
    title = f"{workload.name}: {len(workload.gemms)} GEMM{'s' if len(workload.gemms) != 1 else ''}"
    console.print(f"{title}, {len(planned)} studies in {base.db_url} "
                  f"({', '.join(sorted({KERNEL_WORDS[p.kernel] for p in planned}))} kernels)",
                  highlight=False)
    if any(p.kernel == STANDIN for p in planned):
        console.print(f"{KERNEL_ENV}={STANDIN}: each bucket is tuned as a FIXED-M STAND-IN at its "
                      "top M (serves that M only; no bucket figure)", highlight=False)
    store = Store(base.db_url)
    try:
        for state in states:
            state.refresh(store)
    finally:
        store.close()
    worst = 0
    token = ACROSS_STUDIES.set(lambda: overview(title, states, started))
    try:
        for index, (state, request) in enumerate(zip(states, requests, strict=True)):
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    console.print(f"--time spent: {len(states) - index} studies left for a "
                                  "resume (the same command)", highlight=False)
                    break
                request = dataclasses.replace(request, time_budget_s=left / (len(states) - index))
            state.state = "running"
            console.print(f"\n[{index + 1}/{len(states)}] {','.join(state.planned.names)} M "
                          f"{state.planned.m_text} ({KERNEL_WORDS[state.planned.kernel]}): "
                          f"study {state.name}", highlight=False)
            try:
                code = run_tune(request, console)
            except KeyboardInterrupt:
                code = EXIT_INTERRUPTED
            state.state = {0: "done", 1: "nothing valid", EXIT_INTERRUPTED: "interrupted"}.get(
                code, f"exit {code}")
            store = Store(base.db_url)
            try:
                state.refresh(store)
            finally:
                store.close()
            if code == EXIT_INTERRUPTED:
                worst = EXIT_INTERRUPTED
                break
            worst = max(worst, code)
    except KeyboardInterrupt:  # between two studies
        worst = EXIT_INTERRUPTED
    finally:
        ACROSS_STUDIES.reset(token)
    console.print(overview(title, states, started))
    if worst == EXIT_INTERRUPTED:
        console.print("interrupted: run the same command to resume (nothing recorded is lost)",
                      highlight=False)
    names = ",".join(s.name for s in states if s.timed)
    if names:
        console.print(f"export them as one package: tsopt export --studies {names} --db "
                      f"{base.db_url} --out DIR", highlight=False, soft_wrap=True)
    return worst


# -- the studies of a workload, for the export ------------------------------------------------
def _serves(config: dict[str, Any], planned: PlannedStudy) -> bool:
    """Whether a study of ``planned``'s problem, with this config, is the one it plans: a
    stand-in only for its own bucket; an exact M by any study of it but a stand-in."""
    serving = config.get("serving") or {}
    if planned.kernel == STANDIN:
        return bool(serving.get("kernel") == STANDIN
                    and serving.get("bucket") == list(planned.bucket or ()))
    return serving.get("kernel") != STANDIN


@dataclass(frozen=True)
class LeftOut:
    """A planned study of a workload that the export leaves to the vendor: its Ms run
    torch.matmul, on purpose (the package's manifest lists it as a vendor route)."""

    names: tuple[str, ...]
    problem: Problem
    m_range: tuple[int, int]
    label: str
    why: str

    def line(self) -> str:
        return f"{self.label}: {self.why}; its Ms fall back to torch.matmul"

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``vendor_routes`` entry (workers/torch_ops.py reads it)."""
        return {"op": self.problem.op, "dtype": self.problem.dtype, "names": list(self.names),
                "n": self.problem["n"], "k": self.problem["k"], "m_range": list(self.m_range),
                "why": self.why}


def workload_studies(store: Store, workload: Workload, arch: str, kind: str | None = None,
                     vendor_floor: float | None = None,
                     measured_on: str | None = None) -> tuple[list[str], list[LeftOut]]:
    """The studies of ``store`` that tune ``workload`` (for ``arch``), and each planned study
    left out (its Ms fall back to torch.matmul): one with no correct timed
    candidate (on ``measured_on``, when named), and, with ``vendor_floor``, one whose best
    candidate's paired ratio to the vendor is below it (a serving stack is better off on
    cuBLAS there, as measured). UserInputError when a planned study matches two studies (two
    GPUs'): name them with --studies; and when one was measured on several GPUs and
    ``measured_on`` names none (:func:`tsopt.app.export.ranking_device`)."""
    from tsopt.app.export import ranking_device

    planned = plan_studies(workload.gemms, arch, None, kind)
    studies = [s for s in store.list_studies() if s.space == "gemm" and s.arch == arch]
    chosen, missing = [], []
    for p in planned:
        matches = [s for s in studies if s.problem == p.problem and _serves(s.config, p)]
        label = f"{','.join(p.names)} M {p.m_text} ({KERNEL_WORDS[p.kernel]})"
        if len(matches) > 1:
            raise UserInputError(f"{label}: studies {', '.join(s.name for s in matches)} all tune "
                                 f"{p.problem}; name the ones to export with --studies")
        unmeasured = bool(matches) and measured_on is not None and \
            measured_on not in store.measured_devices(matches[0].name)
        best = (store.ranked(matches[0].name, limit=1,
                             device=ranking_device(store, matches[0].name, measured_on))
                if matches and not unmeasured else [])
        why = ("no study in this database" if not matches else
               f"study {matches[0].name} has no correct timed candidate measured on "
               f"{measured_on}" if unmeasured else
               f"study {matches[0].name} has no correct timed candidate" if not best else
               _below_floor(best[0], vendor_floor))
        if why:
            missing.append(LeftOut(p.names, p.problem, p.m_range, label, why))
            continue
        if matches[0].name not in chosen:
            chosen.append(matches[0].name)
    return chosen, missing


def _below_floor(best: RankedCandidate, vendor_floor: float | None) -> str:
    """Why the study's best candidate is left to the vendor ('' when it is not)."""
    if vendor_floor is None:
        return ""
    ratio = best.standing.ratio if best.standing is not None else best.measurement.ratio
    if ratio is None or ratio >= vendor_floor:
        return ""
    return (f"its best, {best.genome_hash[:12]}, reads {ratio:.3f}x {best.measurement.baseline_name}, "
            f"below --vendor-floor {vendor_floor:g}")


def workload_export_studies(path: Any, arch: str, db_url: str, console: Console,
                            vendor_floor: float | None = None,
                            measured_on: str | None = None) -> tuple[list[str], list[LeftOut]]:
    """``tsopt export --workload FILE``: the studies to export and those left to the vendor
    (:func:`workload_studies`), each of those said in one line; UserInputError when none has a
    timed candidate."""
    from tsopt.app.workload import read_workload
    from tsopt.db.store import Store

    if vendor_floor is not None and not (math.isfinite(vendor_floor) and vendor_floor > 0):
        raise UserInputError(f"--vendor-floor {vendor_floor!r} must be a ratio above 0 "
                             "(1.0: the vendor's speed)")
    workload = read_workload(path)
    store = Store(db_url)
    try:
        chosen, missing = workload_studies(store, workload, arch, vendor_floor=vendor_floor,
                                           measured_on=measured_on)
    finally:
        store.close()
    for left in missing:
        console.print(f"left out: {left.line()}", highlight=False, soft_wrap=True)
    if not chosen:
        raise UserInputError(f"workload {path}: none of its {len(missing)} studies has a correct "
                             f"timed candidate in {db_url} to export"
                             + (f" at or above --vendor-floor {vendor_floor:g}"
                                if vendor_floor is not None else ""))
    return chosen, missing
