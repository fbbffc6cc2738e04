"""README.md's figures, made from the committed results: the results table and the figures in prose.

    .venv/bin/python scripts/results_table.py --write   # rewrite README.md between its markers
    .venv/bin/python scripts/results_table.py --check   # exit 1 naming every figure that differs
    .venv/bin/python scripts/results_table.py --print   # the table alone, on stdout

The table comes from the measurement corpus (``corpus/``, :mod:`tsopt.core.corpus`) and what
``scripts/results_table.toml`` declares of each row that no record says (the kernel, who found
it, the seed library's mode, which files are its passes, which machine measured which file).
A figure in prose sits between ``<!-- figure:NAME -->`` and ``<!-- /figure -->`` and is made
by the function :data:`FIGURES` names, from the corpus or a small committed summary.

A row's **passes** are the kernel's paired, correct measurements in the row's evidence files,
one per measuring run (a record's ``pass_id``: a study's first measurement, each re-check and
confirmation, each bundle's results); a pass reads the median of its records. The row shows
the median over passes and their **spread**, lowest to highest pass, never one pass's 95 %
interval: the spread between passes and machines is wider than a pass's interval (at
128x8192x8192 several times wider). The verdict follows the spread alone: **beats** when
every pass reads above the vendor, **below** when every pass reads under it, else **matches
(within spread)**; a row of fewer than two passes has no spread and is refused.

Standard library and ``tsopt.core`` / ``tsopt.app.heldout`` only (no DSL, no database).
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import itertools
import json
import re
import statistics
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: this checkout's tsopt
    sys.path.insert(0, str(ROOT))

from tsopt.app.heldout import load_heldout  # noqa: E402
from tsopt.core.corpus import MEASUREMENTS_FILE, CorpusRecord, read_manifest, read_records  # noqa: E402
from tsopt.core.problem import Problem, parse_problem_spec  # noqa: E402
from tsopt.core.records import Measurement  # noqa: E402
from tsopt.core.standing import rank, standing  # noqa: E402

SPEC = ROOT / "scripts" / "results_table.toml"
CORPUS = ROOT / "corpus"
README = ROOT / "README.md"
BEGIN = "<!-- results-table:begin: scripts/results_table.py --write makes it, do not edit -->"
END = "<!-- results-table:end -->"
FIGURE = re.compile(r"<!-- figure:([a-z0-9_]+) -->(.*?)<!-- /figure -->", re.S)
LIBRARY_MODES = {"on": "on", "off": "off", "leave-one-out": "leave-one-out",
                 "none": "n/a (no tune)"}
ROW_KEYS = {"kernel", "winner_of", "space", "problem", "found", "library", "library_evidence",
            "sources", "exclude"}
MACHINE_KEYS = {"name", "evidence", "sources", "studies"}
MIN_PASSES = 2


class SpecError(ValueError):
    """The table spec or the README's markers are wrong: the message names what."""


@dataclass(frozen=True)
class Machine:
    name: str
    sources: tuple[str, ...]
    studies: tuple[str, ...]

    def holds(self, record: CorpusRecord) -> bool:
        return (any(fnmatch.fnmatchcase(record.source, g) for g in self.sources)
                and (not self.studies or record.study in self.studies))


@dataclass(frozen=True)
class Pass:
    """One measuring run of a kernel: the median of its records' ratios."""

    pass_id: str
    ratio: float
    machine: str | None
    launch: str


@dataclass(frozen=True)
class Line:
    """One row of the table, every figure computed."""

    genome_hash: str
    kernel: str
    problem: Problem
    vendor: str
    found: str
    library: str
    heldout: bool
    passes: tuple[Pass, ...]
    machines: int
    machines_exact: bool

    @property
    def median(self) -> float:
        return float(statistics.median(p.ratio for p in self.passes))

    @property
    def low(self) -> float:
        return min(p.ratio for p in self.passes)

    @property
    def high(self) -> float:
        return max(p.ratio for p in self.passes)

    @property
    def verdict(self) -> str:
        return verdict(self.low, self.high)


def verdict(low: float, high: float) -> str:
    """The claim the spread between passes allows against the vendor (ratio 1)."""
    if low > 1.0:
        return "beats"
    if high < 1.0:
        return "below"
    return "matches (within spread)"


# --- the spec -------------------------------------------------------------------------------

def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{where}: expected a string or a list of strings, got {value!r}")
    return tuple(value)


def load_spec(path: Path = SPEC) -> tuple[list[Machine], list[dict[str, Any]]]:
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: {exc}") from None
    machines = []
    for i, entry in enumerate(doc.get("machine", [])):
        where = f"{path.name}: machine {i + 1}"
        unknown = set(entry) - MACHINE_KEYS
        if unknown or not {"name", "evidence", "sources"} <= set(entry):
            raise SpecError(f"{where}: needs name, evidence and sources (unknown: "
                            f"{sorted(unknown)})")
        machines.append(Machine(entry["name"], _strings(entry["sources"], where),
                                _strings(entry.get("studies", []), where)))
    rows = doc.get("row", [])
    for i, row in enumerate(rows):
        where = f"{path.name}: row {i + 1}"
        unknown = set(row) - ROW_KEYS
        if unknown:
            raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}")
        if ("kernel" in row) == ("winner_of" in row):
            raise SpecError(f"{where}: give exactly one of kernel and winner_of")
        for key in ("space", "problem", "found", "library"):
            if not isinstance(row.get(key), str):
                raise SpecError(f"{where}: {key} missing or not a string")
        if row["library"] not in LIBRARY_MODES:
            raise SpecError(f"{where}: library {row['library']!r} is not one of "
                            f"{', '.join(LIBRARY_MODES)}")
        if row["library"] != "none" and "library_evidence" not in row:
            raise SpecError(f"{where}: library {row['library']!r} needs library_evidence "
                            "(the README that says so)")
    return machines, rows


# --- the computation ------------------------------------------------------------------------

def _matches(source: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(source, g) for g in globs)


def _measurement(record: CorpusRecord) -> Measurement:
    return Measurement(genome_hash=record.genome_hash, problem_key=record.problem.key,
                       status=record.status,  # type: ignore[arg-type]
                       median_us=record.median_us, ratio=record.ratio,
                       ratio_lo=record.ratio_lo, ratio_hi=record.ratio_hi,
                       rounds=record.rounds, conditions={"abnormal": list(record.abnormal)})


def study_winner(records: Sequence[CorpusRecord], study: str, where: str) -> tuple[str, Problem]:
    """A study's winner as its driver names one: the best standing over the study's own
    measurements (tsopt.core.standing)."""
    held = [r for r in records if r.kind == "study-database" and r.study == study]
    if not held:
        raise SpecError(f"{where}: no study {study!r} in the corpus")
    by_genome: dict[str, list[Measurement]] = {}
    for record in held:
        by_genome.setdefault(record.genome_hash, []).append(_measurement(record))
    stands = [s for h, ms in by_genome.items() if (s := standing(h, ms)) is not None]
    if not stands:
        raise SpecError(f"{where}: study {study!r} has no correct measurement")
    return rank(stands)[0].genome_hash, held[0].problem


def study_label(study: str) -> str:
    """A study's name without its problem (``r8-nolib-8192x8192x8192``: ``r8-nolib``); a name
    that is only its problem stays whole."""
    short = re.sub(r"-\d+(?:x\d+)+(?:-sm_\w+)?$", "", study)
    return study if re.fullmatch(r"[a-z]+-(?:bf16|fp16|int16|fp32)", short) else short


def _kernel_records(records: Sequence[CorpusRecord], row: dict[str, Any], problem: Problem,
                    ) -> list[CorpusRecord]:
    """The records that may count as passes of a kernel of ``row``: its space and problem,
    paired, correct, in its evidence files."""
    sources = _strings(row.get("sources", ["*"]), "sources")
    exclude = _strings(row.get("exclude", []), "exclude")
    return [r for r in records if r.space == row["space"] and r.problem == problem
            and r.paired and r.ok and _matches(r.source, sources)
            and not _matches(r.source, exclude)]


def passes_of(held: Sequence[CorpusRecord], genome_hash: str,
              machines: Sequence[Machine]) -> tuple[Pass, ...]:
    """A kernel's passes, in time order. Records the GPU's readings flagged (throttling) are
    used only when the kernel has no other, as tsopt.core.standing uses them."""
    mine = [r for r in held if r.genome_hash == genome_hash]
    normal = [r for r in mine if not r.abnormal]
    by_pass: dict[str, list[CorpusRecord]] = {}
    for record in normal or mine:
        by_pass.setdefault(record.pass_id, []).append(record)
    out = []
    for pass_id, group in by_pass.items():
        machine = next((m.name for m in machines if m.holds(group[0])), None)
        out.append((min(r.measured_at or "" for r in group), Pass(
            pass_id, float(statistics.median(r.ratio or 0.0 for r in group)), machine,
            "/".join(sorted({r.launch for r in group})))))
    return tuple(p for _, p in sorted(out, key=lambda item: (item[0], item[1].pass_id)))


def describe(genome: dict[str, Any] | None) -> str:
    """A kernel in a few words, read from its genome."""
    if not genome:
        return ""
    n, s = genome.get("numeric", {}), genome.get("structure", {})
    if genome.get("space") == "gemm":
        kind = ("stream-K" if s.get("stream_k") else
                f"split-K {n['split_k']}" if n.get("split_k", 1) > 1 else
                "persistent" if s.get("persistent") else "tile per CTA")
        swap = ", swap-AB" if s.get("swap_ab") else ""
        return (f"{kind}{swap}, {n.get('tile_m')}x{n.get('tile_n')}x{n.get('tile_k')}, "
                f"{n.get('stages')} stages, cluster {s.get('cluster')}")
    if genome.get("space") == "copy":
        return f"TMA box {n.get('box_rows')}x{n.get('box_cols')}, {n.get('stages')} stages"
    if genome.get("space") == "gridstride":
        return f"vector {n.get('vector')}, {n.get('warps')} warps, grid {n.get('grid')}"
    return ""


def compute(records: Sequence[CorpusRecord], machines: Sequence[Machine],
            rows: Sequence[dict[str, Any]], heldout: Callable[[Problem], bool],
            spec_name: str = SPEC.name) -> list[Line]:
    lines: list[Line] = []
    for i, row in enumerate(rows):
        where = f"{spec_name}: row {i + 1} ({row['problem']})"
        problem = parse_problem_spec(row["problem"])
        held = _kernel_records(records, row, problem)
        picks: dict[str, list[str]] = {}
        if "winner_of" in row:
            for study in _strings(row["winner_of"], where):
                winner, of = study_winner(records, study, where)
                if of != problem:
                    raise SpecError(f"{where}: study {study!r} is of {of.key}")
                picks.setdefault(winner, []).append(study_label(study))
        elif row["kernel"] == "best":
            counted = {h: passes_of(held, h, machines) for h in {r.genome_hash for r in held}}
            ranked = sorted((statistics.median(p.ratio for p in ps), h)
                            for h, ps in counted.items() if len(ps) >= MIN_PASSES)
            if not ranked:
                raise SpecError(f"{where}: no kernel with {MIN_PASSES} passes in its sources")
            picks[ranked[-1][1]] = []
        else:
            full = {r.genome_hash for r in held if r.genome_hash.startswith(row["kernel"])}
            if len(full) != 1:
                raise SpecError(f"{where}: kernel {row['kernel']!r} names {len(full)} genomes "
                                "with measurements in the row's sources")
            picks[full.pop()] = []
        for genome_hash, studies in picks.items():
            passes = passes_of(held, genome_hash, machines)
            if len(passes) < MIN_PASSES:
                raise SpecError(f"{where}: {genome_hash[:12]} has {len(passes)} pass(es) in "
                                f"the row's sources; a verdict needs the spread of at least "
                                f"{MIN_PASSES}")
            named = {p.machine for p in passes if p.machine is not None}
            record = next(r for r in held if r.genome_hash == genome_hash)
            found = row["found"] + (f"; winner of {', '.join(studies)}" if studies else "")
            lines.append(Line(
                genome_hash=genome_hash,
                kernel=f"`{genome_hash[:12]}` {describe(record.genome)}".strip(),
                problem=problem, vendor=record.baseline_name, found=found,
                library=LIBRARY_MODES[row["library"]], heldout=heldout(problem),
                passes=passes, machines=max(1, len(named)),
                machines_exact=all(p.machine is not None for p in passes)))
    return lines


# --- the table ------------------------------------------------------------------------------

def _problem(problem: Problem) -> str:
    sizes = "x".join(str(v) for _, v in problem.dims)
    return f"{problem.op} {problem.dtype} {sizes}"


def render(lines: Sequence[Line]) -> str:
    head = ("| kernel | problem | found by | library | held-out or suite | launch | passes "
            "| machines | median | spread between passes | vs the vendor |")
    out = [
        "Each row is one kernel, measured paired against the vendor (cuBLAS through "
        "`torch.matmul`, or `torch.copy_`) in every pass the row's evidence holds; a ratio "
        "above 1 is faster than the vendor. *Passes*: separate measuring runs (a study's "
        "re-checks and confirmations, each bundle of a cross-check). *Spread*: the lowest "
        "and the highest pass, not one pass's 95 % interval. *Vs the vendor*: **beats** only "
        "when every pass reads above 1, **below** when every pass reads under 1, else "
        "**matches (within spread)**. *Machines*: separate machine leases that the "
        "experiments' READMEs name (≥: some passes ran on a machine no README names). "
        "*Library*: the seed library's mode in the study that found the kernel. "
        "Made by `scripts/results_table.py` from `corpus/` and `scripts/results_table.toml`.",
        "", head, "|" + "---|" * head.count(" | ") + "---|"]
    for line in lines:
        machines = f"{line.machines}" if line.machines_exact else f"≥ {line.machines}"
        launch = "/".join(sorted({p.launch for p in line.passes}))
        out.append(
            f"| {line.kernel} | {_problem(line.problem)} | {line.found} | {line.library} "
            f"| {'held-out' if line.heldout else 'suite'} | {launch} | {len(line.passes)} "
            f"| {machines} | {line.median:.3f}× | {line.low:.3f}–{line.high:.3f}× "
            f"| {line.verdict} |")
    return "\n".join(out)


# --- figures in prose -----------------------------------------------------------------------

def _json(path: str) -> Any:
    return json.loads((ROOT / path).read_text())


def _span(values: Sequence[float], fmt: str) -> str:
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}-{high}"


def fig_hbm_copy(_: Sequence[CorpusRecord]) -> str:
    """The device copy's median bandwidth (bench/hbm_copy)."""
    return f"{_json('bench/hbm_copy/hbm_copy.json')['tb_per_s_median']:.2f} TB/s"


def fig_survey_sizes(_: Sequence[CorpusRecord]) -> str:
    """The survey's size per problem over its seeds (bench/proposals/survey_size.json)."""
    doc = _json("bench/proposals/survey_size.json")
    groups: dict[str, list[str]] = {}
    for spec, sizes in doc["survey"].items():
        dims = parse_problem_spec(spec).dims
        shape = ("x".join(str(v) for _, v in dims) if len({v for _, v in dims}) > 1
                 else f"{dims[0][1]}³")
        groups.setdefault(_span(sizes, "{}"), []).append(shape)
    seeds = doc["seeds"]
    return (", ".join(f"{size} at {' and '.join(shapes)}" for size, shapes in groups.items())
            + f" for seeds {min(seeds)}-{max(seeds)}")


def fig_repaired_pass_rate(_: Sequence[CorpusRecord]) -> str:
    """The share of repaired GEMM proposals the verifier passes (bench/proposals)."""
    rates = [run["pass_rate"] * 100 for run in _json("bench/proposals/proposals-gemm.json")["runs"]
             if run["repair"]]
    return f"{_span(rates, '{:.0f}')} %"


def fig_memo_replay(_: Sequence[CorpusRecord]) -> str:
    """The share of TS search seconds the shipped memo would have spared round 10's 8192³
    studies, replayed (bench/driver_scale/ts_memo_replay.json)."""
    shares = [s["seconds_spared"] / s["seconds"] * 100
              for s in _json("bench/driver_scale/ts_memo_replay.json")["studies"]
              if s["study"].endswith("-8192x8192x8192")]
    return f"{_span(shares, '{:.0f}')} %"


def fig_copy_race(records: Sequence[CorpusRecord]) -> str:
    """The copy candidates measured wrong before the template fenced (bench/copy_h200)."""
    held = [r for r in records if r.source == "bench/copy_h200/copy-16384-r1/results.json"]
    wrong = sum(r.status == "wrong" for r in held)
    return f"{wrong} of {len(held)}"


def fig_launch_modes_agree(_: Sequence[CorpusRecord]) -> str:
    """How many committed decode winners' runner graph ratio agrees with the independent
    graph script within the pass-to-pass spread (bench/launch_modes/results/summary.md)."""
    lines = (ROOT / "bench/launch_modes/results/summary.md").read_text().splitlines()
    head = [cell.strip() for cell in lines[0].strip("|").split("|")]
    column = next(i for i, cell in enumerate(head) if cell.startswith("agrees"))
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]
            if line.startswith("| ")]
    agree = sum(row[column].strip("*") == "yes" for row in rows)
    return f"{agree} of {len(rows)}"


def _survey_regrets(path: str) -> str:
    """Mean survey regret of the shipped transfer model against the analytical estimate's,
    as ``loso.py`` wrote it (bench/transfer_model)."""
    mean = _json(path)["mean"]
    return (f"{mean['transfer']['regret_survey8'] * 100:.1f} %, against "
            f"{mean['analytical']['regret_survey8'] * 100:.1f} % for the estimate's")


def fig_prior_oracle(_: Sequence[CorpusRecord]) -> str:
    """The survey regret on the held-out oracle tables (bench/transfer_model/oracle.json)."""
    return _survey_regrets("bench/transfer_model/oracle.json")


def fig_prior_loso(_: Sequence[CorpusRecord]) -> str:
    """The survey regret leave-one-shape-out on the corpus (bench/transfer_model/loso.json)."""
    return _survey_regrets("bench/transfer_model/loso.json")


def heldout_verdict(passes: Sequence[float], machines: int) -> str:
    """The table's verdict where the passes span machines; on one machine its passes say
    nothing of the spread between machines (up to 7.6 % at one kernel, bench/launch_modes),
    so the row only says where its passes fell."""
    if len(passes) < MIN_PASSES:
        return "-"
    if machines > 1:
        return verdict(min(passes), max(passes))
    where = "above" if min(passes) > 1.0 else "under" if max(passes) < 1.0 else "across 1"
    return f"{where} in every pass; one machine, so no claim"


def _found_after(problem: dict[str, Any], winner: dict[str, Any]) -> str:
    """When a held-out winner was found: a GPU-less round, or a GPU study's budget."""
    if winner["round"] is not None:
        return f"after round {winner['round']} (16 built a round)"
    study = next((s for s in problem.get("studies", []) if s.get("seed") == winner["seed"]), {})
    argv = str(study.get("command", "")).split()
    workers = argv[argv.index("--workers") + 1] if "--workers" in argv[:-1] else "?"
    config = study.get("config", {})
    prior = config.get("cost_prior", "?")
    target = config.get("device", {}).get("id", "?")
    return (f"a {study.get('budget', '?')} study on the GPU ({workers} build processes, "
            f"measured inline; built for {target}, cost prior {prior})")


def fig_heldout_regret(_: Sequence[CorpusRecord]) -> str:
    """The held-out problems' rows: each seed's winner of a default GPU-less tune after its last
    measured round, beside the oracle's picks in the same passes (bench/regret/regret.json,
    made by bench/regret/summarise.py). These measurements are kept out of the corpus, as every
    held-out one is, so the rows come from the regret summary, not from ``corpus/``."""
    doc = _json("bench/regret/regret.json")
    library = {"exclude-self": "leave-one-out", "off": "off", "on": "on"}
    head = ("| problem | winner | found by | library | held-out or suite | launch | passes "
            "| machines | median | spread between passes | vs the vendor "
            "| oracle picks' best | regret (worst pass) |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for problem in doc["problems"]:
        last: dict[int, dict[str, Any]] = {}
        for w in problem["winners"]:
            if w.get("retimed"):  # its row comes from its own study's document
                continue
            if w["seed"] not in last or w["round"] > last[w["seed"]]["round"]:
                last[w["seed"]] = w
        for seed, w in sorted(last.items()):
            passes = w["ratio_per_pass"]
            oracle = problem["oracle_best_per_pass"]
            # one device call measures both passes of a problem: one machine per source file
            source = problem["source"]
            calls = 1 if isinstance(source, str) else len(set(source))
            lines.append(
                f"| {problem['name']} `{problem['problem'].removeprefix('gemm:')}` "
                f"| `{w['genome_hash'][:12]}` "
                f"| `tsopt tune gemm` {w['protocol']}, seed {seed}, {_found_after(problem, w)} "
                f"| {library.get(problem['library'], problem['library'])} "
                f"| held-out | graph | {len(passes)} | {calls} "
                f"({', '.join(problem['device'])}) | {statistics.median(passes):.3f}× "
                f"| {_span(passes, '{:.3f}').replace('-', '–')}× "
                f"| {heldout_verdict(passes, calls)} "
                f"| {_span(oracle, '{:.3f}').replace('-', '–')}× "
                f"| {w['regret_max'] * 100:+.1f} % |")
    return "\n" + "\n".join(lines) + "\n"


FIGURES: dict[str, Callable[[Sequence[CorpusRecord]], str]] = {
    "heldout_regret": fig_heldout_regret,
    "hbm_copy": fig_hbm_copy, "survey_sizes": fig_survey_sizes,
    "repaired_pass_rate": fig_repaired_pass_rate, "memo_replay": fig_memo_replay,
    "copy_race": fig_copy_race, "launch_modes_agree": fig_launch_modes_agree,
    "prior_oracle": fig_prior_oracle, "prior_loso": fig_prior_loso,
}


# --- the README -----------------------------------------------------------------------------

def expected(text: str, table: str, records: Sequence[CorpusRecord]) -> str:
    """``text`` with the table and every figure as the data makes them."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SpecError(f"README: needs one {BEGIN!r} ... {END!r} pair")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    text = f"{head}{BEGIN}\n{table}\n{END}{tail}"
    unknown = sorted({name for name, _ in FIGURE.findall(text)} - set(FIGURES))
    if unknown:
        raise SpecError(f"README: figure marker(s) {unknown} name no function of FIGURES")
    made = {name: fn(records) for name, fn in FIGURES.items()}
    return FIGURE.sub(lambda m: f"<!-- figure:{m[1]} -->{made[m[1]]}<!-- /figure -->", text)


def differences(have: str, want: str) -> list[str]:
    """What differs, one line each: the table's first differing line, each wrong figure."""
    out = []

    def table(text: str) -> list[str]:
        return text.split(BEGIN)[1].split(END)[0].strip().splitlines()

    for a, b in itertools.zip_longest(table(have), table(want), fillvalue=""):
        if a != b:
            out.append(f"results table: README has {a!r}, the corpus makes {b!r}")
            break
    # ``want`` is ``have`` with every marker's figure remade: the markers pair one to one.
    for (name, a), (_, b) in zip(FIGURE.findall(have), FIGURE.findall(want), strict=True):
        if a != b:
            out.append(f"figure {name}: README has {a!r}, the data makes {b!r}")
    return out


@functools.lru_cache(maxsize=2)
def load_records(corpus: Path) -> tuple[CorpusRecord, ...]:
    """The corpus's measurements (read once per process: the records are frozen)."""
    read_manifest(corpus)
    return tuple(read_records(corpus / MEASUREMENTS_FILE))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when README differs")
    mode.add_argument("--write", action="store_true", help="rewrite README between markers")
    mode.add_argument("--print", action="store_true", help="print the table")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--spec", type=Path, default=SPEC)
    args = parser.parse_args(argv)
    try:
        records = load_records(args.corpus)
        machines, rows = load_spec(args.spec)
        held = load_heldout()
        table = render(compute(records, machines, rows, held.holds, args.spec.name))
        if args.print:
            print(table)
            return 0
        have = args.readme.read_text()
        want = expected(have, table, records)
    except (SpecError, ValueError, OSError) as exc:
        print(f"results_table: {exc}", file=sys.stderr)
        return 2
    if args.write:
        if want != have:
            args.readme.write_text(want)
        print(f"results_table: {args.readme} {'rewritten' if want != have else 'up to date'}")
        return 0
    wrong = differences(have, want)
    for line in wrong:
        print(f"{args.readme}: {line}", file=sys.stderr)
    if wrong:
        print("results_table: run scripts/results_table.py --write, or fix the data",
              file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
