"""The HTML report, opened in a real headless Chromium, and the dashboard command.

The studies here are SYNTHETIC (tests/synthetic_study.py): made-up timings
recorded through the real Store. They exercise the report; they are not
figures. Chromium comes from ``bash .ci/chromium.sh``; without it the browser
tests skip, except under ``CI=true`` where that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.browser import Chromium, chromium_path
from tests.synthetic_study import PROBLEM, SPACE, make_study
from tsopt.core.errors import UserInputError
from tsopt.core.genome import Genome
from tsopt.db.store import Store
from tsopt.reports import schedule as schedule_module
from tsopt.reports.importance import importance
from tsopt.reports.report import _study_names, report_command
from tsopt.reports.schedule import OpView, TaskView, generic_schedule_view, op_kind, schedule_view

REPO = Path(__file__).resolve().parents[1]
PLOTS_TIMED = {"best", "convergence-trials", "convergence-time", "funnel", "rejections",
               "importance", "timeline"}
BIG = 10_000


def _require(ok: bool, reason: str) -> None:
    if ok:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One SQLite file with four SYNTHETIC studies: big (10,000), small, untimed, empty."""
    url = f"sqlite:///{tmp_path_factory.mktemp('reportdb') / 'tsopt.db'}"
    with Store(url) as store:
        started = time.perf_counter()
        make_study(store, "big", BIG, seed=1)
        elapsed = time.perf_counter() - started
        print(f"\nSYNTHETIC 10,000-candidate study recorded in {elapsed:.1f} s")
        make_study(store, "small", 300, seed=2)
        make_study(store, "untimed", 200, timed=False, seed=3)
        store.create_or_get_study("empty", SPACE, PROBLEM, "sm_90a", "random", {})
    yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    _require(chromium_path() is not None, "chromium is not installed (bash .ci/chromium.sh)")
    with Chromium(tmp_path_factory.mktemp("chromium") / "profile") as opened:
        yield opened


def write_report(
    db_url: str, out: Path, study: str | None, compare: list[str] | None = None,
) -> Path:
    console = Console(record=True, width=200)
    assert report_command(study, out, compare or [], db_url, console) == 0
    assert out.is_file(), console.export_text()
    return out


def open_page(browser: Chromium, path: Path) -> float:
    browser.console_errors.clear()
    browser.requests.clear()
    seconds = browser.open(path.resolve().as_uri())
    assert browser.evaluate("document.body.dataset.ready") == "1"
    return seconds


PLOT_CHECK = """
Array.from(document.querySelectorAll('figure.plot')).map(f => {
  const svg = f.querySelector('svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const drawn = svg ? Array.from(svg.querySelectorAll('rect, path, circle, line'))
      .filter(e => { const b = e.getBBox(); return b.width > 0 || b.height > 0; }).length : 0;
  return {plot: f.dataset.plot, width: box.width, height: box.height, drawn: drawn,
          study: f.closest('article').dataset.study};
})
"""


def assert_clean_and_offline(browser: Chromium, path: Path) -> None:
    assert browser.console_errors == []
    assert set(browser.requests) == {path.resolve().as_uri()}, "the page fetched something"


def plots(browser: Chromium) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = browser.evaluate(PLOT_CHECK)
    for plot in found:
        assert plot["width"] > 0 and plot["height"] > 0, plot
        assert plot["drawn"] > 0, f"plot {plot['plot']} has an empty SVG"
    return found


def column(browser: Chromium, study: str, index: int) -> list[str]:
    cells: list[str] = browser.evaluate(
        f"Array.from(document.querySelectorAll('article[data-study=\"{study}\"] "
        f"table.candidates tbody tr')).map(r => r.children[{index}].textContent)"
    )
    return cells


# -- the page in a browser --------------------------------------------------------------


@pytest.mark.slow
def test_a_timed_study_renders_every_plot_and_the_table_sorts_on_click(
    db_url: str, browser: Chromium, tmp_path: Path,
) -> None:
    path = write_report(db_url, tmp_path / "small.html", "small")
    open_page(browser, path)
    assert_clean_and_offline(browser, path)
    assert {p["plot"] for p in plots(browser)} == PLOTS_TIMED

    with Store(db_url) as store:
        funnel = store.funnel("small")
        rejections = store.rejections("small")
        ranked = store.ranked("small")
    # The funnel and the rejection table show the store's counts.
    funnel_text = browser.evaluate(
        "Array.from(document.querySelectorAll('[data-plot=funnel] g.bar text:last-of-type'))"
        ".map(t => t.textContent)")
    assert [int(t.split(" ")[0].replace(",", "")) for t in funnel_text] == list(funnel.values())
    shown = browser.evaluate(
        "Array.from(document.querySelectorAll('table.rejections tbody tr'))"
        ".map(r => Array.from(r.children).map(c => c.textContent))")
    assert shown == [[r.stage, r.rule, str(r.count), r.example] for r in rejections]
    best_text = browser.evaluate(
        "document.querySelector('[data-section=best] .kpi .v').textContent")
    assert best_text == f"{float(f'{ranked[0].median_us:.4g}'):g} \u00b5s"

    # The table: the fastest 100, in rank order; a click on a header re-sorts the rows.
    assert column(browser, "small", 0) == [str(r.rank) for r in ranked[:100]]
    hashes = [r.genome_hash[:12] for r in ranked[:100]]
    browser.click("article[data-study=small] table.candidates th[data-key=hash]")
    assert column(browser, "small", 1) == sorted(hashes)
    browser.click("article[data-study=small] table.candidates th[data-key=hash]")
    assert column(browser, "small", 1) == sorted(hashes, reverse=True)
    browser.click("article[data-study=small] table.candidates th[data-key=rate]")
    rates = [float(v.replace(",", "")) for v in column(browser, "small", 7)]
    assert rates == sorted(rates, reverse=True) and rates != [
        float(f"{r.measurement.rate:.4g}") for r in ranked[:100]
    ][::-1]
    assert browser.evaluate(
        "document.querySelector('th[data-key=rate]').getAttribute('aria-sort')") == "descending"

    # The schedule: the best candidate's lanes, then another row's on a click.
    best = ranked[0].genome
    lanes = browser.evaluate(
        "Array.from(document.querySelectorAll('svg.timeline g.op title')).map(t => t.textContent)")
    assert lanes == [f"{p.op} \u2014 {op_kind(p.op)} in {p.section}"
                     for t in best.schedule for p in t.ops]
    store_warps = int(best["store_warps"])  # type: ignore[arg-type]
    expected = ["warp 0", "warp 1" if store_warps == 1 else f"warps 1\u2013{store_warps}"]
    assert browser.evaluate(
        "Array.from(document.querySelectorAll('svg.timeline text.muted'))"
        ".map(t => t.textContent).filter(t => t.startsWith('warp'))") == expected
    other = browser.evaluate(
        "document.querySelector('article[data-study=small] table.candidates tbody tr:nth-child(5)')"
        ".dataset.hash")
    browser.click("article[data-study=small] table.candidates tbody tr:nth-child(5)")
    caption = browser.evaluate(
        "document.querySelector('[data-plot=timeline] figcaption').textContent")
    assert other[:12] in caption
    assert browser.console_errors == []


@pytest.mark.slow
def test_a_study_with_nothing_timed_says_so(db_url: str, browser: Chromium, tmp_path: Path) -> None:
    path = write_report(db_url, tmp_path / "untimed.html", "untimed")
    open_page(browser, path)
    assert_clean_and_offline(browser, path)
    assert {p["plot"] for p in plots(browser)} == {"funnel", "rejections", "timeline"}
    best = browser.evaluate("document.querySelector('[data-section=best]').textContent")
    assert "Nothing was timed yet" in best
    assert "200 candidates proposed" in best
    assert browser.evaluate("document.querySelectorAll('table.candidates').length") == 0
    note = browser.evaluate("document.querySelector('[data-section=schedule] h3').textContent")
    assert "nothing timed yet" in note


@pytest.mark.slow
def test_an_empty_study_renders(db_url: str, browser: Chromium, tmp_path: Path) -> None:
    path = write_report(db_url, tmp_path / "empty.html", "empty")
    open_page(browser, path)
    assert_clean_and_offline(browser, path)
    assert {p["plot"] for p in plots(browser)} == {"funnel"}
    assert "No candidate recorded" in browser.evaluate(
        "document.querySelector('[data-section=schedule]').textContent")


@pytest.mark.slow
def test_two_studies_side_by_side(db_url: str, browser: Chromium, tmp_path: Path) -> None:
    # `tsopt report --compare small untimed` arrives as compare=["small"], study="untimed".
    path = write_report(db_url, tmp_path / "cmp.html", "untimed", ["small"])
    open_page(browser, path)
    assert_clean_and_offline(browser, path)
    assert browser.evaluate(
        "Array.from(document.querySelectorAll('article.study')).map(a => a.dataset.study)"
    ) == ["small", "untimed"]
    assert browser.evaluate(
        "Array.from(document.querySelectorAll('table.compare thead th')).map(t => t.textContent)"
    ) == ["", "small", "untimed"]
    by_study: dict[str, set[str]] = {}
    for plot in plots(browser):
        by_study.setdefault(plot["study"], set()).add(plot["plot"])
    assert by_study == {"small": PLOTS_TIMED, "untimed": {"funnel", "rejections", "timeline"}}


@pytest.mark.slow
def test_ten_thousand_candidates_stay_small_and_load_fast(
    db_url: str, browser: Chromium, tmp_path: Path, record_property: Any,
) -> None:
    started = time.perf_counter()
    path = write_report(db_url, tmp_path / "big.html", "big")
    written_s = time.perf_counter() - started
    size = path.stat().st_size
    load_s = open_page(browser, path)
    timing = browser.evaluate(
        "(() => { const n = performance.getEntriesByType('navigation')[0];"
        " return {load: n.loadEventEnd, dom: n.domContentLoadedEventEnd}; })()")
    assert_clean_and_offline(browser, path)
    drawn = plots(browser)
    figures = {"html_bytes": size, "write_s": round(written_s, 2), "load_wall_s": round(load_s, 3),
               "load_event_ms": round(timing["load"], 1)}
    for key, value in figures.items():
        record_property(key, value)
    print(f"\n10,000-candidate SYNTHETIC report: {json.dumps(figures)}")
    assert {p["plot"] for p in drawn} == PLOTS_TIMED
    assert size < 5 * 1024 * 1024
    assert load_s < 3.0 and timing["load"] < 3000
    # Every timed candidate is a point of the convergence plot.
    with Store(db_url) as store:
        timed = store.funnel("big")["timed"]
    points = browser.evaluate(
        "document.querySelector('[data-plot=convergence-trials] path.points')"
        ".getAttribute('d').split('M').length - 1")
    assert points == timed
    assert browser.evaluate("document.querySelectorAll('table.candidates tbody tr').length") == 100


# -- the command ------------------------------------------------------------------------


@pytest.mark.slow
def test_no_study_lists_them(db_url: str) -> None:
    console = Console(record=True, width=240)
    assert report_command(None, None, [], db_url, console) == 0
    text = console.export_text()
    with Store(db_url) as store:
        for name in ("big", "small", "untimed", "empty"):
            f = store.funnel(name)
            counts = f"{f['timed']}/{f['tsopt_checked']}/{f['proposed']}"
            assert re.search(rf"^\s*{name}\b.*\s{counts}\s", text, re.MULTILINE), text


@pytest.mark.slow
def test_bad_input_is_one_clear_line(db_url: str, tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match=r"no study named 'nope'; studies in the database: "
                                             r"big, empty, small, untimed"):
        report_command("nope", tmp_path / "x.html", [], db_url, Console())
    missing = tmp_path / "absent.db"
    with pytest.raises(UserInputError, match="no database at"):
        report_command(None, None, [], f"sqlite:///{missing}", Console())
    assert not missing.exists(), "a read-only command must not create a database"
    assert not (tmp_path / "x.html").exists()


def test_compare_takes_exactly_two_studies() -> None:
    assert _study_names(None, []) == []
    assert _study_names("a", []) == ["a"]
    assert _study_names("b", ["a"]) == ["a", "b"]
    assert _study_names(None, ["a", "b"]) == ["a", "b"]
    with pytest.raises(UserInputError, match="two studies, got 3"):
        _study_names("c", ["a", "b"])
    with pytest.raises(UserInputError, match="'a' twice"):
        _study_names(None, ["a", "a"])


@pytest.mark.slow
def test_the_cli_writes_a_report_and_refuses_an_unknown_study(db_url: str, tmp_path: Path) -> None:
    out = tmp_path / "nested" / "cli.html"
    ok = subprocess.run(
        [sys.executable, "-m", "tsopt", "report", "small", "--out", str(out), "--db", db_url],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert out.is_file() and "Wrote" in ok.stdout
    page = out.read_text()
    external = re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)=", page)
    assert external is None, f"not self-contained: {external.group(0) if external else ''}"
    bad = subprocess.run(
        [sys.executable, "-m", "tsopt", "report", "nope", "--db", db_url],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "'nope'" in bad.stderr


# -- pieces -----------------------------------------------------------------------------


def test_importance_finds_the_gene_that_decides_the_time() -> None:
    timed = []
    for a in (1, 2):
        for b in ("x", "y"):
            for c in range(3):
                g = Genome.make(SPACE, numeric={"a": a, "c": c}, structure={"b": b})
                timed.append((g, 10.0 if a == 1 else 20.0))
    found = {g.gene: g for g in importance(timed)}
    assert found["a"].eta_squared == pytest.approx(1.0)
    assert found["a"].best_value == "1"
    assert found["b"].eta_squared == pytest.approx(0.0)
    assert found["c"].eta_squared == pytest.approx(0.0)
    assert importance(timed[:2]) == []


def test_generic_schedule_view_reads_warps_from_genes() -> None:
    g = Genome.make(
        "nospace",
        schedule={
            "load": [("try_acquire", "head"), ("acquire", "loop"), ("tma", "loop"),
                     ("smem.commit", "loop")],
            "mma": [("wait", "loop"), ("wgmma_wait", "loop"), ("release", "tail")],
            "epilogue": [("store", "tail")],
        },
        numeric={"load_warp": 0, "mma_warpgroups": 2, "epilogue_num_warps": 4},
    )
    views = generic_schedule_view(g)
    assert [(v.task, v.warps_label) for v in views] == [
        ("load", "warp 0"), ("mma", "warps 1\u20138"), ("epilogue", "warps 9\u201312"),
    ]
    assert [op.kind for op in views[0].ops] == ["acquire", "acquire", "work", "commit"]
    assert [op.kind for op in views[1].ops] == ["wait", "work", "release"]
    # The copy template's spelling: store warps from store_warp, load warp after them.
    copy_like = Genome.make(
        "nospace", schedule={"load": [("acquire", "loop")], "store": [("wait", "loop")]},
        numeric={"load_warp": 4, "store_warp": 0, "store_warps": 4},
    )
    assert [v.warps_label for v in generic_schedule_view(copy_like)] == ["warp 4", "warps 0\u20133"]
    unknown = generic_schedule_view(Genome.make("nospace", schedule={"t": [("x", "loop")]}))
    assert unknown[0].warps_label == "warps ?"


class HookedSpace:
    """A space that draws its own schedule (its schedule_view, which the report calls), for the test
    below."""

    def schedule_view(self, genome: Genome) -> list[TaskView]:
        if genome.get("broken"):
            raise RuntimeError("cannot draw this one")
        return [TaskView("producer", 4, 4, (OpView("acquire", "loop", "acquire"),))]


def test_a_space_hook_draws_the_schedule_and_a_failing_one_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tsopt.core import registry

    monkeypatch.setitem(registry.SPACES, "hooked",
                        registry.SpaceEntry("hooked", f"{__name__}:HookedSpace", "copy", ""))
    schedule_module._loaded_space.cache_clear()
    try:
        views, note = schedule_view(Genome.make("hooked", schedule={"load": [("acquire", "loop")]}))
        assert [v.warps_label for v in views] == ["warp 4"] and "drawn by space" in note
        broken = Genome.make("hooked", schedule={"load": [("acquire", "loop")]},
                             numeric={"broken": 1, "load_warp": 2})
        views, note = schedule_view(broken)
        assert [v.warps_label for v in views] == ["warp 2"]
        assert "cannot draw this one" in note
    finally:
        schedule_module._loaded_space.cache_clear()


# -- dashboard --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
def test_dashboard_serves_the_optuna_studies_of_the_same_database(tmp_path: Path) -> None:
    import importlib.util

    _require(importlib.util.find_spec("optuna_dashboard") is not None,
             "optuna-dashboard is not installed (pip install optuna-dashboard)")
    import optuna

    url = f"sqlite:///{tmp_path / 'dash.db'}"
    with Store(url) as store:
        store.create_or_get_study("dash", SPACE, PROBLEM, "sm_90a", "tpe", {})
        study = optuna.create_study(storage=store.optuna_storage(), study_name="dash")
        study.tell(study.ask(), 3.0)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tsopt", "dashboard", "--db", url, "--port", str(port)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        deadline, body = time.monotonic() + 60, None
        while time.monotonic() < deadline and body is None:
            assert server.poll() is None, server.stdout.read().decode() if server.stdout else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=2) as r:
                    body = json.load(r)
            except OSError:
                time.sleep(0.2)
        assert body is not None, "optuna-dashboard did not answer within 60 s"
        assert [s["study_name"] for s in body["study_summaries"]] == ["dash"]
    finally:
        server.terminate()
        server.wait(timeout=20)
        if server.stdout is not None:
            server.stdout.close()


def test_the_copy_spaces_seed_schedule_shows_its_warp_layout() -> None:
    from tsopt.core.problem import Problem
    from tsopt.core.registry import get_space

    space = get_space("copy")
    seed = space.seed_genome(Problem.of("copy", "fp16", rows=4096, cols=4096))
    views, note = schedule_view(seed)
    store_first, store_count = int(seed["store_warp"]), int(seed["store_warps"])  # type: ignore[arg-type]
    expected = {
        "load": f"warp {seed['load_warp']}",
        "store": f"warps {store_first}\u2013{store_first + store_count - 1}"
        if store_count > 1 else f"warp {store_first}",
    }
    assert {v.task: v.warps_label for v in views} == expected, note
    assert [(op.name, op.section) for v in views for op in v.ops] == [
        (p.op, p.section) for t in seed.schedule for p in t.ops
    ]


def test_the_document_counts_valid_candidates_whose_ts_search_was_cut(tmp_path: Path) -> None:
    """A valid verdict whose exhaustive TS search stopped at its state bound is valid but no
    complete proof: the report counts those among the valid candidates and names the bound."""
    from tests.synthetic_study import all_genomes
    from tsopt.core.records import Verdict
    from tsopt.reports.data import study_document
    from tsopt.verify.verifier import BOUNDED_NOTE

    with Store(f"sqlite:///{tmp_path / 'bounded.db'}") as store:
        store.create_or_get_study("cut", SPACE, PROBLEM, "sm_90a", "tpe", {})
        first, second, third = all_genomes(3)
        note = BOUNDED_NOTE.format(bound=1_000_000)
        for genome, verdict in (
                (first, Verdict(first.hash, True, "ok", None, note, 1.0, 6)),
                (second, Verdict.ok(second.hash, 0.1, 6)),
                (third, Verdict.reject(third.hash, "ts", "ts.deadlock", "blocked"))):
            cid = store.add_candidate("cut", genome, "suggest")
            store.record_verdict(cid, SPACE, genome.hash, verdict)
        assert study_document(store, "cut")["bounded"] == {
            "count": 1, "valid": 2, "bound": 1_000_000}
