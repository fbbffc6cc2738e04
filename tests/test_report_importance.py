"""The report's parameter importance says how many timed candidates it rests on, and marks
itself unreliable below RELIABLE_TIMED (SYNTHETIC studies of tests/synthetic_study.py: made-up
timings through the real Store; not figures)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from tests.browser import Chromium, chromium_path
from tests.synthetic_study import SPACE, make_study
from tsopt.core.genome import Genome
from tsopt.db.store import Store
from tsopt.reports.data import study_document
from tsopt.reports.importance import RELIABLE_TIMED, chance_level, importance
from tsopt.reports.report import report_command


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('importance') / 'tsopt.db'}"
    with Store(url) as store:
        make_study(store, "few", 14, seed=4)
        make_study(store, "many", 200, seed=5)
    yield url


def test_each_gene_carries_its_chance_level() -> None:
    timed = [(Genome.make(SPACE, numeric={"a": i % 4, "c": 0}, structure={"b": "x"}), 10.0 + i)
             for i in range(9)]
    (gene,) = importance(timed)
    assert gene.gene == "a" and gene.values == 4
    assert gene.chance == pytest.approx(3 / 8) == chance_level(4, 9)


def test_the_document_says_what_importance_rests_on(db_url: str) -> None:
    with Store(db_url) as store:
        few, many = study_document(store, "few"), study_document(store, "many")
    assert 3 <= few["importance"]["timed"] < RELIABLE_TIMED
    assert few["importance"]["reliable"] is False
    assert few["importance"]["reliable_timed"] == RELIABLE_TIMED
    assert all(0 < g["chance"] <= 1 for g in few["importance"]["genes"])
    assert many["importance"]["timed"] >= RELIABLE_TIMED and many["importance"]["reliable"] is True


@pytest.mark.slow
def test_the_page_marks_a_thin_importance_unreliable(db_url: str, tmp_path: Path) -> None:
    if chromium_path() is None:
        pytest.skip("chromium is not installed (bash .ci/chromium.sh)")
    texts = {}
    with Chromium(tmp_path / "profile") as browser:
        for name in ("few", "many"):
            out = tmp_path / f"{name}.html"
            assert report_command(name, out, [], db_url, Console(record=True, width=200)) == 0
            browser.open(out.resolve().as_uri())
            assert browser.evaluate("document.body.dataset.ready") == "1"
            texts[name] = browser.evaluate(
                "document.querySelector('[data-section=importance]').textContent")
            assert browser.console_errors == []
    assert "Unreliable: Rests on" in texts["few"] and "chance" in texts["few"]
    assert "Rests on" in texts["many"] and "Unreliable" not in texts["many"]
