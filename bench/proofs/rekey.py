"""Carry searches keyed the old way over to the model key, for the genomes given (one-off).

Until 2026-12-04 a TS search was keyed by its space's ``ts_schedule_key`` with the domain, the
skeleton's SMEM aliasing and ``verifier_version`` (a digest of the verifier, the space's whole
package and the DSL's version); it is now keyed by the model TS's checker explores
(``tsopt/verify/ts_model.py``) under the DSL's checker. A search kept the old way names no
genome, so it can be carried over only where the genome it was run for is known and the tree
that ran it is this one: for each genome and domain this builds the skeleton once, computes
both keys of each search it would run (the old one under ``--legacy-verifier``, the verifier
module of the commit that ran the searches, everything else read from this tree), and gives
the old search the new key. Sound where the spaces' code, ``tsopt/core/space.py`` and the DSL
are those that ran them: the old key's version is then recomputed exactly, a search found
under it was run on the very skeleton built here, and the model digest is that skeleton's.
An old key that meets two models is refused (reported, not carried).

    git show 82ef933:tsopt/verify/verifier.py > /tmp/verifier_legacy.py
    CUTE_DSL_ARCH=sm_90a .venv/bin/python bench/proofs/rekey.py --legacy-verifier /tmp/verifier_legacy.py \\
        --searches tsopt/data/ts_proofs.json --out bench/proofs/results/rekeyed.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import sys
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def legacy_version(space: Any, verifier_source: bytes) -> str:
    """``verifier_version`` as the old verifier computed it, with its own source."""
    import importlib.metadata

    from tsopt.core import space as space_module

    digest = hashlib.sha256(verifier_source)
    digest.update(Path(space_module.__file__ or "").read_bytes())
    package = Path(sys.modules[type(space).__module__].__file__ or "").parent
    for folder in (package, package.parent / "common"):
        for path in sorted(folder.glob("*.py")):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    digest.update(importlib.metadata.version("nvidia-cutlass-dsl").encode())
    return digest.hexdigest()[:16]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _legacy_aliasing(manager: Any) -> str:
    """The old key's aliasing: which resources' byte ranges overlap, by name."""
    from cutlass.experimental.task_scheduling.exhaustive_checker import (
        _collect_resources,
        build_alias_info,
    )

    resources = _collect_resources(manager.tasks)
    names = {id(r): str(getattr(r, "name", type(r).__name__)) for r in resources}
    maps = build_alias_info(resources)[:3]
    shape = tuple(tuple(sorted((names.get(a, "?"), tuple(sorted(names.get(b, "?") for b in bs)))
                               for a, bs in m.items())) for m in maps)
    return _digest(repr(shape))


def key_pairs(space: Any, genome: Any, problem: Any, version: str) -> list[tuple[Any, Any]]:
    """(old key, new key) of every search verifying ``genome`` runs, at each domain."""
    from cutlass.experimental.task_scheduling.task_manager import TaskManager

    from tsopt.verify import ts_model, verifier

    verifier._install_bfs_memo()
    patched = TaskManager._exhaustive_aliasing_races
    pairs: list[tuple[Any, Any]] = []
    n0 = space.verify_domain(genome)
    for n in [n0] + sorted(set(space.extra_verify_domains(genome, problem)) - {n0}):
        schedule = _digest(f"{space.ts_schedule_key(genome, problem)}|domain={n}|states=ts")
        aliases: list[str] = []

        def both(self: Any, aliases: list[str] = aliases) -> None:
            aliases.append(_legacy_aliasing(self))
            patched(self)  # under the listing, it keys the model and searches nothing

        listing: list[str | None] = []
        token = verifier._BFS_LISTING.set(listing)
        TaskManager._exhaustive_aliasing_races = both  # type: ignore[method-assign]
        try:
            with (contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings()):
                warnings.simplefilter("ignore")
                space.build_skeleton(genome, problem, n)
        except (ValueError, AssertionError, TypeError, KeyError, IndexError):
            pass
        finally:
            TaskManager._exhaustive_aliasing_races = patched  # type: ignore[method-assign]
            verifier._BFS_LISTING.reset(token)
        for alias, model in zip(aliases, listing, strict=True):
            if model is not None:
                pairs.append(((space.name, schedule, alias, version),
                              (space.name, model, ts_model.MODEL_ALIASING,
                               ts_model.search_version())))
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--legacy-verifier", type=Path, required=True)
    parser.add_argument("--searches", type=Path, required=True, help="a TS search memo file")
    parser.add_argument("--library", type=Path, default=ROOT / "tsopt/data/seed_library.json")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from tsopt.core.genome import Genome
    from tsopt.core.problem import Problem
    from tsopt.core.registry import get_space
    from tsopt.search.ts_memo import load_memo, write_memo
    from tsopt.verify.verifier import judge_for

    source = args.legacy_verifier.read_bytes()
    old = {s.key: s for s in load_memo(args.searches)}
    spaces: dict[str, Any] = {}
    mapped: dict[Any, set[Any]] = {}
    for entry in json.loads(args.library.read_text())["entries"]:
        genome, problem = Genome.from_dict(entry["genome"]), Problem.from_dict(entry["problem"])
        if genome.space not in spaces:
            spaces[genome.space] = get_space(genome.space)
            spaces[genome.space].judge = judge_for(spaces[genome.space])
        space = spaces[genome.space]
        if space.ts_schedule_key(genome, problem) is None:
            continue  # the space kept no searches the old way (gridstride)
        version = legacy_version(space, source)
        for legacy, new in key_pairs(space, genome, problem, version):
            mapped.setdefault(legacy, set()).add(new)
    carried, refused = [], []
    for key, search in old.items():
        targets = mapped.get(key, set())
        if len(targets) == 1:
            (new,) = targets
            carried.append(replace(search, schedule=new[1], aliasing=new[2], tool_version=new[3]))
        else:
            refused.append({"key": list(key), "models": sorted(t[1] for t in targets)})
    # Searches run apart under different old keys that meet at one model must have found the
    # same: one search (states, error, completeness), or the model key is wrong.
    met: dict[Any, set[Any]] = {}
    for search in carried:
        if search.complete:
            met.setdefault(search.key, set()).add((search.states, search.error))
    disagree = {k[1]: sorted(map(str, v)) for k, v in met.items() if len(v) > 1}
    write_memo(carried, args.out, doc="Searches carried over to the model key "
                                      "(bench/proofs/rekey.py)")
    print(json.dumps({"read": len(old), "carried": len(carried),
                      "distinct models": len({s.key for s in carried}),
                      "models met by several old searches": sum(
                          1 for k in met if sum(s.key == k for s in carried) > 1),
                      "disagreeing": disagree, "refused": refused}, indent=1))
    return 1 if disagree else 0


if __name__ == "__main__":
    raise SystemExit(main())
