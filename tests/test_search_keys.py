"""A TS search is keyed by the model TS's checker explores (tsopt/verify/ts_model.py), not by
the code that built it: a refactor of a space that leaves its schedules alone keeps every
search and shipped proof, and a change the checker sees voids them.

Everything is real: the copy space's package copied and edited on disk, imported as a space
of its own, TS's verifier on the host (the skeleton and its BFS checker), the shipped proofs.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.search.ts_memo import PROOFS, load_memo  # noqa: E402
from tsopt.verify.verifier import (  # noqa: E402
    VerdictCache,
    judge_for,
    proof_of,
    search_keys,
    search_version,
    verifier_version,
    verify_genome,
)

ROOT = Path(__file__).resolve().parents[1]
# An edited package's shipped screen is stale by design (its template differs): recomputed.
pytestmark = pytest.mark.filterwarnings(
    "ignore::tsopt.search_spaces.common.screen_cache.StaleScreenWarning")
PROBLEM = Problem.of("copy", "fp16", rows=4096, cols=4096)


def _edited_copy_space(tmp_path: Path, package: str, edits: dict[str, list[tuple[str, str]]]
                       ) -> Any:
    """The copy space's package copied under another name with ``edits`` (file -> (old,
    new) replacements, each of which must apply), imported and made a space."""
    target = tmp_path / package
    shutil.copytree(ROOT / "search_spaces" / "copy", target)
    for path in target.glob("*.py"):
        text = path.read_text().replace("tsopt.search_spaces.copy", package)
        for old, new in edits.get(path.name, []):
            assert old in text, (path.name, old)
            text = text.replace(old, new)
        path.write_text(text)
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(f"{package}.space")
    finally:
        sys.path.remove(str(tmp_path))
    space = module.CopySpace()
    space.judge = judge_for(space)
    return space


# A refactor: the kernel's builder renamed everywhere, a helper inlined away, comments added;
# the TS skeleton it builds is the one it built before.
REFACTOR = {
    "kernel.py": [("def build_task_manager(", "# The TS lifecycle, top to bottom.\n"
                                              "def make_task_manager("),
                  ("    consumer_threads = cfg.fault(\"consumer_threads\", cfg.store_threads)",
                   "    # A planted fault may narrow the consumer group; else every store thread.\n"
                   "    consumer_threads = cfg.fault(\"consumer_threads\", cfg.store_threads)")],
    "space.py": [("build_task_manager", "make_task_manager")],
    "export.py": [],
}
# A change TS's checker sees: one more pipeline stage than the genome says.
RESCHEDULE = {"kernel.py": [("        num_stages=cfg.stages,\n",
                             "        num_stages=cfg.stages + 1,\n")]}


@pytest.fixture(scope="module")
def copy() -> Any:
    space = get_space("copy")
    space.judge = judge_for(space)
    return space


def _library_copy_genome() -> tuple[Genome, Problem]:
    import json

    doc = json.loads((ROOT / "tsopt" / "data" / "seed_library.json").read_text())
    entry = next(e for e in doc["entries"] if e["space"] == "copy")
    return Genome.from_dict(entry["genome"]), Problem.from_dict(entry["problem"])


def test_a_refactor_that_keeps_the_schedule_keeps_its_searches(copy: Any, tmp_path: Path,
                                                               monkeypatch: Any) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    refactored = _edited_copy_space(tmp_path, "copy_refactored", REFACTOR)
    genome = copy.seed_genome(PROBLEM)
    # The whole-verdict key moved (the space's code is not the same bytes)...
    assert verifier_version(refactored) != verifier_version(copy)
    # ...the search key did not: the same model.
    assert search_keys(refactored, genome, PROBLEM) == search_keys(copy, genome, PROBLEM) != []

    ran = VerdictCache()
    first = verify_genome(genome, PROBLEM, space=copy, cache=ran)
    (search,) = ran.take_searches()
    assert first.valid and search.complete and search.tool_version == search_version()
    reader = VerdictCache()
    reader.keep_search(search)
    again = verify_genome(genome, PROBLEM, space=refactored, cache=reader)
    assert (reader.bfs_runs, reader.bfs_hits) == (0, 1)  # read back, not searched
    fresh = verify_genome(genome, PROBLEM, space=refactored, cache=VerdictCache())
    assert (again.valid, again.stage, again.rule, again.message) == (
        fresh.valid, fresh.stage, fresh.rule, fresh.message)


def test_a_refactor_keeps_the_shipped_proofs(copy: Any, tmp_path: Path,
                                             monkeypatch: Any) -> None:
    """The seed library's copy winner, proven by the shipped proofs, is still proven through
    a refactored space: its proof rests on the same shipped search."""
    monkeypatch.syspath_prepend(str(tmp_path))
    refactored = _edited_copy_space(tmp_path, "copy_refactored_b", REFACTOR)
    genome, problem = _library_copy_genome()
    cache = VerdictCache()
    for search in load_memo(PROOFS):
        if search.tool_version == search_version():
            cache.keep_search(search)
    proofs = proof_of(genome, problem, refactored, cache)
    assert proofs and all(p.complete for p in proofs)
    assert proofs == proof_of(genome, problem, copy, cache)
    assert {p.search.key for p in proofs if p.search} <= {s.key for s in load_memo(PROOFS)}


def test_a_change_to_the_schedule_voids_them(copy: Any, tmp_path: Path,
                                             monkeypatch: Any) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    changed = _edited_copy_space(tmp_path, "copy_restaged", RESCHEDULE)
    genome = copy.seed_genome(PROBLEM)
    # The genome and every key made of it alone are the same; the model is not.
    assert changed.ts_schedule_key(genome, PROBLEM) == copy.ts_schedule_key(genome, PROBLEM)
    assert search_keys(changed, genome, PROBLEM) != search_keys(copy, genome, PROBLEM)
    ran = VerdictCache()
    verify_genome(genome, PROBLEM, space=copy, cache=ran)
    (search,) = ran.take_searches()
    reader = VerdictCache()
    reader.keep_search(search)
    verify_genome(genome, PROBLEM, space=changed, cache=reader)
    (again,) = reader.take_searches()
    assert (reader.bfs_runs, reader.bfs_hits) == (1, 0)  # searched anew
    assert again.key != search.key and again.states != search.states
    # The shipped proof of the library's copy winner does not prove the changed kernel.
    genome, problem = _library_copy_genome()
    shipped = VerdictCache()
    for kept in load_memo(PROOFS):
        shipped.keep_search(kept)
    assert [p.search for p in proof_of(genome, problem, changed, shipped)] == [None]


def test_numeric_variants_and_problems_share_one_model(copy: Any) -> None:
    """What the checker never reads (register budgets, the problem's size) is not in the key;
    the stage count is."""
    genome = copy.seed_genome(PROBLEM)
    other = Problem.of("copy", "fp16", rows=8192, cols=2048)
    keys = search_keys(copy, genome, PROBLEM)
    assert search_keys(copy, genome.replace(load_regs=56, store_regs=120), PROBLEM) == keys
    assert search_keys(copy, genome, other) == keys
    stages = int(genome["stages"])
    assert search_keys(copy, genome.replace(stages=stages + 1), PROBLEM) != keys


def test_the_shipped_proofs_are_what_a_fresh_search_finds() -> None:
    """Every shipped proof cheap enough to run here (under 80,000 states: 30 of 43), searched
    again from nothing under its model key, gives the same search: states, outcome, complete.
    The carried-over proofs (bench/proofs/rekey.py) among them were run under the old key."""
    import json

    from tsopt.verify.verifier import searching_up_to

    shipped = {s.key: s for s in load_memo(PROOFS)}
    doc = json.loads((ROOT / "tsopt" / "data" / "seed_library.json").read_text())
    spaces: dict[str, Any] = {}
    checked: set[tuple[str, str, str, str]] = set()
    for entry in doc["entries"]:
        genome, problem = Genome.from_dict(entry["genome"]), Problem.from_dict(entry["problem"])
        if genome.space not in spaces:
            spaces[genome.space] = get_space(genome.space)
            spaces[genome.space].judge = judge_for(spaces[genome.space])
        space = spaces[genome.space]
        keys = [(space.name, model, "model", search_version())
                for _, model in search_keys(space, genome, problem)]
        assert keys and all(k in shipped for k in keys)  # every library genome is proven
        if any((shipped[k].states or 0) >= 80_000 for k in keys) or set(keys) <= checked:
            continue
        cache = VerdictCache()
        with searching_up_to(10_000_000):
            verdict = verify_genome(genome, problem, space=space, cache=cache)
        assert verdict.valid and verdict.message is None
        for search in cache.take_searches():
            kept = shipped[search.key]
            assert (search.states, search.error, search.complete) == (
                kept.states, kept.error, kept.complete), genome.short_hash
            checked.add(search.key)
    assert len(checked) >= 30
