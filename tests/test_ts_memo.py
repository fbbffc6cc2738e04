"""The shipped TS search memo (tsopt/search/ts_memo.py): searches run once, by any committed
study, spare a new study's database the same search, and give the verdict a fresh search gives.

Everything here is real: the GEMM space, the TS verifier on the host (skeleton + exhaustive
BFS checker), a SQLite database through the Store, the committed study archives.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

pytest.importorskip("optuna")

from tsopt.app.corpus import SHIPPED_SOURCES, current_searches, load_corpus  # noqa: E402
from tsopt.core.errors import UserInputError  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.db.store import Store  # noqa: E402
from tsopt.search.ts_memo import MEMO_ENV, SHIPPED, load_memo, seed_store, write_memo  # noqa: E402
from tsopt.verify.verifier import VerdictCache, judge_for, search_version, verify_genome  # noqa: E402

PROBLEM = Problem.of("gemm", "bf16", m=4096, n=4096, k=4096)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gemm() -> Any:
    space = get_space("gemm")
    space.judge = judge_for(space)
    return space


def test_a_shipped_search_spares_a_new_database_the_search(gemm: Any, tmp_path: Path) -> None:
    genome = gemm.genome(consumers=1, tile_n=128, stages=4)
    ran = VerdictCache()
    first = verify_genome(genome, PROBLEM, space=gemm, cache=ran)
    searches = ran.take_searches()
    assert first.valid and ran.bfs_runs == 1 and len(searches) == 1
    memo = tmp_path / "memo.json"
    write_memo(searches, memo)
    with Store(f"sqlite:///{tmp_path / 'study.db'}") as store:
        assert seed_store(store, gemm, memo) == 1
        assert seed_store(store, gemm, memo) == 0  # kept once
        # As the driver's cache reads the database: the search is found, not run again.
        cache = VerdictCache(lookup=store.find_verdict, searches=store)
        again = verify_genome(genome, PROBLEM, space=gemm, cache=cache)
        assert (cache.bfs_runs, cache.bfs_hits) == (0, 1)
    assert (again.valid, again.stage, again.rule) == (first.valid, first.stage, first.rule)


def test_a_search_of_another_verifier_version_is_never_copied(gemm: Any, tmp_path: Path) -> None:
    genome = gemm.genome(consumers=1, tile_n=128, stages=4)
    ran = VerdictCache()
    verify_genome(genome, PROBLEM, space=gemm, cache=ran)
    (search,) = ran.take_searches()
    assert search.tool_version == search_version()
    memo = tmp_path / "memo.json"
    write_memo([replace(search, tool_version="0" * 16), replace(search, space="copy")], memo)
    with Store(f"sqlite:///{tmp_path / 'study.db'}") as store:
        assert seed_store(store, gemm, memo) == 0
        assert store.search_count() == 0


def test_a_bad_memo_file_is_named_and_none_switches_it_off(tmp_path: Path,
                                                           monkeypatch: Any) -> None:
    bad = tmp_path / "memo.json"
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(UserInputError, match=str(bad)):
        load_memo(bad)
    bad.write_text(json.dumps({"format": "tsopt-ts-searches-1", "searches": [{"space": "gemm"}]}))
    with pytest.raises(UserInputError, match="search 0"):
        load_memo(bad)
    monkeypatch.setenv(MEMO_ENV, "none")
    assert load_memo() == []
    monkeypatch.setenv(MEMO_ENV, str(tmp_path / "absent.json"))
    assert load_memo() == []


def test_the_shipped_memo_is_remade_from_the_corpus() -> None:
    # Only searches of each space's current verifier version, every one of them: after an
    # edit of a check, the kernel template or the DSL, remake it (`tsopt corpus products`)
    # and the stale searches go.
    _, searches = load_corpus(ROOT / "corpus")
    remade = {s.key: s for s in current_searches(searches, SHIPPED_SOURCES)}
    shipped = {s.key: s for s in load_memo(SHIPPED)}
    assert shipped.keys() == remade.keys()
    assert all((shipped[k].error, shipped[k].bounded) == (remade[k].error, remade[k].bounded)
               for k in shipped)
    # The corpus's searches are keyed the old way (a space's schedule key and the verifier's
    # version): none matches a model key, and the memo is empty until studies run again,
    # while the shipped proofs (tsopt/data/ts_proofs.json, tsopt prove --ship) are keyed by
    # model for this DSL's checker.
    from tsopt.search.ts_memo import shipped_searches

    current = search_version()
    assert any(s.space == "gemm" for s in shipped.values()) or any(
        s.space == "gemm" and s.tool_version == current and s.complete
        for s in shipped_searches())
