"""Search efficiency from recorded studies: candidates measured until within a target of the best.

The question: how many candidates does a sampler measure before it holds one within
``within`` (2 %) of the best a long random search found? The reference is that random study;
the runs are studies of the samplers under comparison (each possibly in its own database),
recorded by ``tsopt tune``. A study is read from a database (``URL:STUDY``) or from a JSON dump
of one (``DUMP.json[.xz]:STUDY``, written by :func:`dump_studies`), so a figure can be
recomputed after the database is gone.

Counting. The target is the reference's best correct median x (1 + ``within``). A run's count
is its candidates measured, in the order they were measured (each candidate's first recorded
measurement, ties by trial number, then candidate id), up to and including the first correct
one within the target. Every measured candidate counts one, correct or not (``wrong``,
``timeout`` ...); candidates the verifier rejected or that failed to build cost no measurement
and do not count. A run that never gets there reports None with the number it measured.

Random orders. For the reference, the count is also given for measuring its candidates in a
uniformly random order without replacement (:func:`random_order`): exactly (T + 1) / (m + 1) on
average for m of T measured candidates on target, with exact quartiles and those of seeded
shuffles. A random sampler's order is exchangeable, so this is the proper "random search"
figure; the single order of a real random run is one draw of it.

Re-measured costs. On a GPU whose drift between studies exceeds the target, "within the
target" is judged on a paired re-measurement instead (:func:`remeasured_scores`: the near-best
candidates timed back to back in rounds alternating with the vendor baseline; the cost is the
candidate's time over the baseline's, the target the reference's best cost x (1 +
``within``)); a candidate not re-measured is off target.

:func:`studies` computes the figure, :func:`markdown` and :func:`plot` render it and
:func:`write_figure` writes the JSON, markdown and plot together.
"""

from __future__ import annotations

import json
import lzma
import math
import random
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tsopt.core.genome import Genome
from tsopt.core.problem import Problem

DUMP_SUFFIXES = (".json", ".json.xz")
_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9_.+-]*")


# -- naming a study ------------------------------------------------------------------------


@dataclass(frozen=True)
class StudySource:
    """A study named on a command line: ``[LABEL=]URL:STUDY`` or ``[LABEL=]DUMP:STUDY``."""

    text: str  # as given
    option: str  # the option that gave it, for messages
    label: str | None
    url: str  # a database URL, or the path of a JSON dump
    study: str

    @property
    def is_dump(self) -> bool:
        return "://" not in self.url

    def where(self) -> str:
        return f"{self.option} {self.text!r}"


def parse_source(value: str, option: str, labelled: bool) -> StudySource:
    """``URL:STUDY`` or ``DUMP.json[.xz]:STUDY`` (split at the last colon), after ``LABEL=`` when
    ``labelled``.

    Raises ValueError naming the option and the bad value."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    form = "LABEL=URL:STUDY (e.g. tpe=sqlite:///t0.db:gemm-tpe-0)" if labelled else \
        "URL:STUDY (e.g. sqlite:///r.db:gemm-random)"

    def bad(why: str) -> ValueError:
        return ValueError(f"{option} {value!r}: {why}; expected {form}, or a JSON dump "
                          "(DUMP.json[.xz]:STUDY) in place of the URL")

    label = None
    rest = value.strip()
    if labelled:
        label, sep, rest = rest.partition("=")
        if not sep or not _LABEL.fullmatch(label):
            raise bad("no sampler label before '='" if not sep or ":" in label or "/" in label
                      else f"label {label!r} is not a name (letters, digits, _ . + -)")
    url, sep, study = rest.rpartition(":")
    dump = bool(sep) and url.endswith(DUMP_SUFFIXES) and "://" not in url
    if "://" in rest and "://" not in url:  # the last colon is the URL's own
        raise bad("no study name: nothing like ':STUDY' after the URL")
    if not sep or ("://" not in url and not dump):
        raise bad("no database URL before the last ':' (a URL looks like sqlite:///tsopt.db)")
    if not study.strip() or "/" in study:
        raise bad(f"no study name after the last ':' (got {study!r}); did you forget :STUDY?")
    if not dump:
        try:
            make_url(url)
        except ArgumentError as exc:
            raise bad(f"{url!r} is not a database URL ({exc})") from None
    return StudySource(value, option, label, url, study)


# -- reading a study -----------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """A measured candidate of a study as the search saw it: its first measurement."""

    candidate_id: int
    genome_hash: str
    trial_number: int | None
    measured_at: datetime
    status: str
    median_us: float | None  # None unless status == "ok"
    measurements: int
    device: str
    genome: Genome

    @property
    def correct(self) -> bool:
        return self.median_us is not None


@dataclass(frozen=True)
class RecordedStudy:
    """What the figure needs of a recorded study: its header, how many candidates it proposed,
    and its measured candidates in the order they were measured."""

    name: str
    source: str  # where it was read, for the figure (a URL's password masked)
    space: str
    problem: Problem
    arch: str
    sampler: str
    config: dict[str, Any]
    proposed: int
    measured: list[Measured] = field(default_factory=list)

    @property
    def problem_key(self) -> str:
        return self.problem.key


class StudyReader:
    """Reads studies from databases and JSON dumps, opening each once; close it (or use it as a
    context manager) to close the databases."""

    def __init__(self) -> None:
        self._stores: dict[str, Any] = {}
        self._dumps: dict[str, list[dict[str, Any]]] = {}

    def __enter__(self) -> StudyReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()

    def load(self, source: StudySource) -> RecordedStudy:
        """The study ``source`` names; raises ValueError naming a missing file or study."""
        return self._from_dump(source) if source.is_dump else self._from_database(source)

    def _from_database(self, source: StudySource) -> RecordedStudy:
        from tsopt.db.engine import display_url, parse_url, sqlite_path
        from tsopt.db.store import Store

        if source.url not in self._stores:
            path = sqlite_path(parse_url(source.url))
            if path is not None and not path.exists():
                # Store() would create an empty database there: a typo must not look like no data.
                raise ValueError(f"{source.where()}: no database file {str(path)!r}")
            self._stores[source.url] = Store(source.url)
        store = self._stores[source.url]
        info = store.get_study(source.study)
        if info is None:
            names = ", ".join(s.name for s in store.list_studies()) or "none"
            raise ValueError(f"{source.where()}: no study {source.study!r} in that database "
                             f"(studies there: {names})")
        candidates = store.candidates(source.study)
        measured = []
        for c in candidates:
            if not c.measurements:
                continue
            first = min(c.measurements, key=lambda r: r.measured_at)
            m = first.measurement
            measured.append(Measured(
                c.id, c.genome_hash, c.trial_number, first.measured_at, m.status,
                m.median_us if m.status == "ok" else None, len(c.measurements), m.device,
                c.genome))
        return RecordedStudy(info.name, display_url(parse_url(source.url)), info.space,
                             info.problem, info.arch, info.sampler, dict(info.config),
                             len(candidates), _in_measured_order(measured))

    def _from_dump(self, source: StudySource) -> RecordedStudy:
        if source.url not in self._dumps:
            path = Path(source.url)
            if not path.exists():
                raise ValueError(f"{source.where()}: no dump file {str(path)!r}")
            opener = lzma.open if path.suffix == ".xz" else open
            with opener(path, "rt") as f:
                self._dumps[source.url] = json.load(f)
        studies = self._dumps[source.url]
        doc = next((s for s in studies if s["name"] == source.study), None)
        if doc is None:
            names = ", ".join(s["name"] for s in studies) or "none"
            raise ValueError(f"{source.where()}: no study {source.study!r} in that dump "
                             f"(studies there: {names})")
        missing = [k for k in ("sampler", "config") if k not in doc]
        if missing or any("measured_at" not in m for c in doc["candidates"]
                          for m in c["measurements"]):
            raise ValueError(f"{source.where()}: the dump lacks {', '.join(missing) or 'measured_at'}"
                             " (written before dump_studies recorded it): dump the database again")
        measured = []
        for index, c in enumerate(doc["candidates"]):
            if not c["measurements"]:
                continue
            stamped = [(datetime.fromisoformat(m["measured_at"]), m) for m in c["measurements"]]
            when, m = min(stamped, key=lambda x: x[0])
            measured.append(Measured(
                c.get("id", index), c["genome_hash"], c.get("trial"), when, m["status"],
                m.get("median_us") if m["status"] == "ok" else None, len(stamped),
                m.get("device") or "", Genome.from_dict(c["genome"])))
        return RecordedStudy(doc["name"], source.url, doc["space"],
                             Problem.from_dict(doc["problem"]), doc["arch"], doc["sampler"],
                             dict(doc["config"]), len(doc["candidates"]),
                             _in_measured_order(measured))


def _in_measured_order(measured: list[Measured]) -> list[Measured]:
    return sorted(measured, key=lambda r: (r.measured_at, math.inf if r.trial_number is None
                                           else r.trial_number, r.candidate_id))


def dump_studies(store: Any, skip: str = "") -> list[dict[str, Any]]:
    """Every study of ``store`` (a :class:`tsopt.db.store.Store`), except those whose name ends
    with ``skip``, as JSON-able documents: header, funnel, baselines, and every candidate with
    its verdict, build and measurements (each with the time it was recorded). This is the dump
    :class:`StudyReader` reads."""
    out = []
    for info in store.list_studies():
        if skip and info.name.endswith(skip):
            continue
        candidates = [{
            "id": c.id, "genome_hash": c.genome_hash, "origin": c.origin,
            "trial": c.trial_number, "created_at": c.created_at.isoformat(),
            "genome": c.genome.to_dict(),
            "verdict": c.verdict.to_dict() if c.verdict else None,
            "build": c.build.to_dict() if c.build else None,
            "measurements": [{"run_id": r.run_id, "measured_at": r.measured_at.isoformat(),
                              **r.measurement.to_dict()} for r in c.measurements],
        } for c in store.candidates(info.name)]
        out.append({
            "name": info.name, "space": info.space, "problem": info.problem.to_dict(),
            "arch": info.arch, "sampler": info.sampler, "status": info.status,
            "config": info.config, "created_at": info.created_at.isoformat(),
            "funnel": store.funnel(info.name), "baselines": store.baselines(info.problem.key),
            "candidates": candidates,
        })
    return out


# -- the figure ----------------------------------------------------------------------------


def quantile(values: list[float], p: float) -> float:
    """Linear-interpolation quantile of ``values`` (not empty)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * p
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def run_figure(measured: list[Measured], target: float, reference_best: float,
               score: dict[str, float] | None = None) -> dict[str, Any]:
    """Candidates measured until the first correct one within ``target`` (None: never), the
    best time and the best-so-far series ``[n_measured, best_us or None]``. With ``score``
    (genome hash -> re-measured cost, see :func:`remeasured_scores`), "within the target" is
    judged on that instead of the recorded time; a candidate without one is off target."""
    best: float | None = None
    reached: int | None = None
    series: list[list[Any]] = []
    for n, row in enumerate(measured, 1):
        if row.median_us is not None and (best is None or row.median_us < best):
            best = row.median_us
        cost = row.median_us if score is None else score.get(row.genome_hash)
        if reached is None and row.correct and cost is not None and cost <= target:
            reached = n
        series.append([n, best])
    return {"candidates_to_target": reached, "measured": len(measured),
            "correct": sum(r.correct for r in measured),
            "statuses": dict(sorted(_count(r.status for r in measured).items())),
            "remeasured_candidates": sum(r.measurements > 1 for r in measured),
            "best_us": best, "best_vs_reference": best / reference_best if best else None,
            "devices": sorted({r.device for r in measured if r.device}), "series": series}


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def random_order(total: int, on_target: int, shuffles: int, seed: int) -> dict[str, Any]:
    """Candidates measured to the first on-target one when ``total`` candidates (``on_target``
    of them on target) are measured in a uniformly random order, without replacement: the
    exact expectation (T + 1) / (m + 1), exact quartiles, and quartiles over ``shuffles``
    seeded random orders. None throughout when no candidate is on target."""
    out: dict[str, Any] = {"total": total, "on_target": on_target, "shuffles": shuffles,
                           "seed": seed}
    if on_target == 0 or total == 0:
        return out | {"expected": None, "exact": None, "shuffled": None}
    # P(count > k) = C(T - k, m) / C(T, m): the first k draws all miss.
    cdf = []
    survive = 1.0
    for k in range(1, total - on_target + 2):
        survive *= (total - on_target - (k - 1)) / (total - (k - 1))
        cdf.append(1.0 - survive)

    def exact(p: float) -> int:
        return next(k for k, c in enumerate(cdf, 1) if c >= p - 1e-12)

    rng = random.Random(seed)
    counts: list[float] = sorted(min(rng.sample(range(total), on_target)) + 1.0
                                 for _ in range(shuffles))
    return out | {
        "expected": (total + 1) / (on_target + 1),
        "exact": {"q1": exact(0.25), "median": exact(0.5), "q3": exact(0.75)},
        "shuffled": {"mean": statistics.fmean(counts), "q1": quantile(counts, 0.25),
                     "median": statistics.median(counts), "q3": quantile(counts, 0.75)}
        if counts else None,
    }


def _label_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    costs = [r["candidates_to_target"] for r in runs]
    got = [c for c in costs if c is not None]
    # A run that never got there would have needed more than it measured: its count is at
    # least measured + 1 (a lower bound on the median) and at most unbounded (an upper one).
    low = statistics.median([c if c is not None else r["measured"] + 1
                             for c, r in zip(costs, runs, strict=True)])
    high = statistics.median([c if c is not None else math.inf for c in costs])
    return {"studies": [r["study"] for r in runs], "seeds": [r["seed"] for r in runs],
            "candidates_to_target": costs, "measured": [r["measured"] for r in runs],
            "reached": f"{len(got)}/{len(costs)}",
            "median": low if low == high else None,
            "median_bounds": [low, None if math.isinf(high) else high],
            "best_us": min((r["best_us"] for r in runs if r["best_us"] is not None), default=None)}


def remeasured_scores(path: Path) -> dict[str, float]:
    """Genome hash -> cost from a paired A/B re-measurement (a JSON whose ``results`` hold
    ``genome_hash``, ``correct`` and ``median_ratio`` = baseline time / candidate time, the
    drift-free speed): the cost is its inverse (1.0 = the baseline's time). Incorrect
    candidates are left out."""
    doc = json.loads(path.read_text())
    out = {r["genome_hash"]: 1.0 / r["median_ratio"] for r in doc.get("results", [])
           if r.get("correct") and r.get("median_ratio")}
    if not out:
        raise ValueError(f"--remeasured {str(path)!r}: no correct re-measured candidate in it")
    return out


def studies(reference: str, runs: list[str], within: float = 0.02, shuffles: int = 10000,
            seed: int = 0, remeasured: Path | None = None) -> dict[str, Any]:
    """The search-efficiency figure from recorded studies (see the module docstring).

    ``reference``: ``URL:STUDY`` (or ``DUMP:STUDY``) of the long random study that sets the
    target (its best correct median x (1 + ``within``)); ``runs``: ``LABEL=URL:STUDY`` each;
    ``remeasured``: a paired re-measurement that decides "within the target" instead
    (:func:`remeasured_scores`). Raises ValueError naming a bad argument."""
    ref_source = parse_source(reference, "--reference", labelled=False)
    run_sources = [parse_source(r, "--run", labelled=True) for r in runs]
    if not run_sources:
        raise ValueError("--run: give at least one LABEL=URL:STUDY")
    if within < 0:
        raise ValueError(f"--within {within}: must be >= 0")
    with StudyReader() as reader:
        ref = reader.load(ref_source)
        timed = [r.median_us for r in ref.measured if r.median_us is not None]
        if not timed:
            raise ValueError(f"{ref_source.where()}: the study has no correct, timed candidate "
                             f"({len(ref.measured)} measured)")
        base = min(timed)
        target = base * (1 + within)
        on_target = sum(1 for t in timed if t <= target)
        score = remeasured_scores(remeasured) if remeasured is not None else None
        paired: dict[str, Any] | None = None
        if score is not None:
            ref_scores = [score[r.genome_hash] for r in ref.measured
                          if r.median_us is not None and r.genome_hash in score]
            if not ref_scores:
                raise ValueError(f"--remeasured {str(remeasured)!r}: none of the reference's "
                                 "candidates was re-measured")
            paired_target = min(ref_scores) * (1 + within)
            paired = {"file": str(remeasured), "candidates": len(score),
                      "reference_best_cost": min(ref_scores), "target_cost": paired_target,
                      "reference_on_target": sum(1 for c in ref_scores if c <= paired_target)}
            on_target = paired["reference_on_target"]
        loaded = [(s, reader.load(s)) for s in run_sources]

    def describe(source: StudySource, study: RecordedStudy) -> dict[str, Any]:
        return {"study": source.study, "source": study.source,
                "recorded_sampler": study.sampler, "seed": study.config.get("seed"),
                "knobs": list(study.config.get("knobs", []))}

    ref_best = next(r for r in ref.measured if r.median_us == base)
    result_runs = []
    for source, study in loaded:
        clash = [f"{f} {have!r} (reference: {want!r})" for f, have, want in (
            ("space", study.space, ref.space), ("problem", study.problem_key, ref.problem_key),
            ("arch", study.arch, ref.arch)) if have != want]
        if clash:
            raise ValueError(f"{source.where()}: not comparable with the reference: "
                             + ", ".join(clash))
        result_runs.append({"label": source.label, **describe(source, study),
                            "proposed": study.proposed,
                            **run_figure(study.measured,
                                         paired["target_cost"] if paired else target, base,
                                         score)})
    labels: dict[str, list[dict[str, Any]]] = {}
    for run in result_runs:
        labels.setdefault(run["label"], []).append(run)
    return {
        "kind": "studies", "synthetic": False, "space": ref.space,
        "problem": ref.problem_key, "arch": ref.arch, "within": within,
        "target_us": target,
        "reference": {**describe(ref_source, ref), "proposed": ref.proposed,
                      "measured": len(ref.measured), "correct": len(timed), "best_us": base,
                      "best_genome": ref_best.genome_hash, "on_target": on_target,
                      "devices": sorted({r.device for r in ref.measured if r.device}),
                      "random_order": random_order(len(ref.measured), on_target, shuffles,
                                                   seed)},
        "runs": result_runs,
        "by_label": {label: _label_summary(group) for label, group in labels.items()},
        "remeasured": paired,
    }


# -- rendering -----------------------------------------------------------------------------


def _fmt(value: Any, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def markdown(result: dict[str, Any], command: str) -> str:
    """The figure of :func:`studies` as markdown, with the command that made it."""
    ref = result["reference"]
    order = ref["random_order"]
    lines = [
        f"# Search efficiency (measured studies): {result['space']} {result['problem']} "
        f"{result['arch']}", "", f"Command: `{command}`  ",
        f"Reference: study `{ref['study']}` ({ref['recorded_sampler']}, seed {ref['seed']}) in "
        f"{ref['source']}: {ref['measured']} candidates measured ({ref['correct']} correct) of "
        f"{ref['proposed']} proposed; best {ref['best_us']:.2f} us; target "
        f"{result['target_us']:.2f} us (+{100 * result['within']:g} %), met by "
        f"{ref['on_target']} candidates. Devices: {', '.join(ref['devices']) or '?'}.  ",
        "A count is the candidates measured (correct or not; verifier rejections and failed "
        "builds cost none) up to and including the first correct one within the target.", "",
        *_remeasured_lines(result.get("remeasured")),
        "| sampler | study | seed | measured | candidates measured to target | best (us) "
        "| best / reference best |", "|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        cost = r["candidates_to_target"]
        lines.append(f"| {r['label']} | `{r['study']}` | {r['seed']} | {r['measured']} | "
                     f"{cost if cost is not None else 'not reached'} | {_fmt(r['best_us'], '.2f')} "
                     f"| {_fmt(r['best_vs_reference'], '.3f')} |")
    lines += ["", "| sampler | runs reaching target | candidates measured to target, per run "
              "| median |", "|---|---|---|---|"]
    for label, s in result["by_label"].items():
        per = ", ".join(str(c) if c is not None else f">{m}" for c, m in
                        zip(s["candidates_to_target"], s["measured"], strict=True))
        lo, hi = s["median_bounds"]
        median = _fmt(s["median"], "g") if s["median"] is not None else \
            f">= {lo:g}" + (f", <= {hi:g}" if hi is not None else "")
        lines.append(f"| {label} | {s['reached']} | {per} | {median} |")
    if order["expected"] is not None:
        shuffled = order["shuffled"]
        lines.append(
            f"| random order over the reference's {order['total']} measured candidates "
            f"(exact; {order['shuffles']} shuffles) | - | expected {order['expected']:.1f}; "
            f"exact quartiles {order['exact']['q1']}-{order['exact']['q3']}"
            + (f"; shuffled mean {shuffled['mean']:.1f}, q1-q3 {shuffled['q1']:g}-"
               f"{shuffled['q3']:g}" if shuffled else "")
            + f" | {order['exact']['median']} |")
    if result.get("plot"):
        lines += ["", f"![best so far vs candidates measured]({result['plot']})"]
    return "\n".join(lines) + "\n"


def _remeasured_lines(paired: dict[str, Any] | None) -> list[str]:
    if not paired:
        return []
    return [f"**Within the target is judged on a paired re-measurement** (`{paired['file']}`): "
            f"{paired['candidates']} near-best candidates timed back to back in one process, "
            "each in rounds alternating with cuBLAS; cost = candidate time / cuBLAS time. "
            f"Reference best cost {paired['reference_best_cost']:.3f}, target "
            f"{paired['target_cost']:.3f}, met by {paired['reference_on_target']} of the "
            "reference's candidates. A candidate not re-measured (its recorded time was further "
            "from the best) counts as off target. The times in the table are the recorded ones.",
            ""]


def plot(result: dict[str, Any], path: Path) -> bool:
    """Best so far vs candidates measured, one line per run; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in result["runs"]:
        points = [(n, b) for n, b in r["series"] if b is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.step(xs, ys, where="post", label=f"{r['label']} ({r['study']})")
    if not result.get("remeasured"):  # else the target is a re-measured cost, not these times
        ax.axhline(result["target_us"], color="k", linestyle="--", linewidth=1,
                   label=f"target (+{100 * result['within']:g} % of reference best)")
    ax.set_xscale("log")
    ax.set_xlabel("candidates measured")
    ax.set_ylabel("best correct median (us)")
    top = max((b for r in result["runs"] for _, b in r["series"] if b is not None), default=0.0)
    if top > 2 * result["target_us"]:  # slow first candidates would flatten the approach
        ax.set_ylim(top=2 * result["target_us"])
        ax.set_ylabel("best correct median (us; clipped at 2 x target)")
    ax.set_title(f"{result['problem']} {result['arch']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_figure(result: dict[str, Any], out: Path, command: str) -> str:
    """Write the figure: ``out`` (JSON, with ``command``), the markdown beside it (``.md``) and,
    when matplotlib is importable, the plot (``.png``). Returns the markdown."""
    result["command"] = command
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    if plot(result, png):
        result["plot"] = png.name
    text = markdown(result, command)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text(text)
    return text
