"""``tsopt library show`` and ``tsopt library update``: the seed library (tsopt.search.library).

``update`` reads finished studies from a database (``--db``, their standings: paired ratios
with intervals) and/or measured evidence files (``--evidence FILE``, each entry's source is
the file), read as the measurement corpus reads them (:mod:`tsopt.app.corpus`): study
databases and ``tar.xz`` of them, study dumps (``bench/*/studies*.json[.xz]``, a list of
studies with their candidates), experiment result files (``results`` with genome and
measurement), paired headline rounds (``results`` with ``genome_hash`` and ``median_ratio``)
and bundle results (``format: tsopt-bundle-results``, a ``genome_hash`` per measurement). A
file that names genomes by hash only takes them from the other files given, from a
``manifest.json`` beside it, or from the space's own seed and ``diverse_genomes``.

The shipped library is not made here: ``tsopt corpus products`` makes it (and the shipped TS
search memo) from the measurement corpus, ``corpus/`` (``tests/test_corpus.py`` remakes both
and compares). Either way the entries are :func:`tsopt.search.library.entries_from_records`
of corpus records: a study's best three by its standing; the cross-checks re-measured
studies' winners beside hand-made schedules (``bench/stream_k``), so the library holds the
best known schedule of a problem whoever found it, and its ``source`` says which: a study
(``...studies.db.tar.xz: study NAME (FILE.db)``) or a file of measurements. A genome measured
more than once keeps its newest paired figure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tsopt.app.corpus import records_from_evidence
from tsopt.core.errors import UserInputError
from tsopt.search.library import (
    LibraryEntry,
    entries_from_records,
    entries_from_store,
    library_path,
    load_library,
    merge,
    save_library,
    shape_class,
)


def entries_from_evidence(paths: Sequence[Path], root: Path | None = None,
                          ) -> list[LibraryEntry]:
    """Library entries from measured evidence files (see the module doc); each names its
    file (relative to ``root``) and the row it came from."""
    return entries_from_records(records_from_evidence(paths, root))


def library_update(db: str | None, studies: Sequence[str], evidence: Sequence[Path],
                   path: Path | None, console: Console) -> int:
    """Merge the best of ``db``'s finished studies (or ``studies``) and of ``evidence`` into
    the library at ``path``, less any genome measured on a held-out problem
    (:mod:`tsopt.app.heldout`: said, never merged); prints what changed. Returns 0."""
    if db is None and not evidence:
        raise UserInputError("tsopt library update: give --db URL (finished studies) or "
                             "--evidence FILE (committed results)")
    for p in evidence:
        if not p.exists():
            raise UserInputError(f"--evidence {p}: no such file")
    new: list[LibraryEntry] = []
    if db is not None:
        from tsopt.db.store import Store

        store = Store(db)
        try:
            known = {s.name for s in store.list_studies()}
            missing = [s for s in studies if s not in known]
            if missing:
                raise UserInputError(f"--study {missing[0]!r}: no such study in {db}")
            new += entries_from_store(store, list(studies) or None, source=db)
        finally:
            store.close()
    new += entries_from_evidence(list(evidence))
    # The held-out problems are judged, never learned from (tsopt/data/heldout.json).
    from tsopt.app.heldout import load_heldout

    heldout = load_heldout()
    kept = [e for e in new if not heldout.holds(e.problem)]
    if len(kept) < len(new):
        console.print(f"held-out problems: {len(new) - len(kept)} measured genomes of "
                      + ", ".join(sorted({e.problem.key for e in new if heldout.holds(e.problem)}))
                      + " left out (tsopt heldout list)", highlight=False)
    new = kept
    where = library_path(path)
    before = load_library(where)
    after = merge(before, new)
    save_library(after, where)
    held = {(e.space, e.problem.key, e.genome.hash) for e in before}
    added = [e for e in after if (e.space, e.problem.key, e.genome.hash) not in held]
    console.print(f"seed library {where}: {len(after)} entries ({len(added)} new, from "
                  f"{len(new)} measured genomes read)", highlight=False)
    for e in added:
        console.print(f"  + {e.space} {e.problem.key} {e.genome.short_hash} {e.ratio:.3f}x "
                      f"({'paired' if e.paired else 'unpaired'}; {e.source})", highlight=False)
    return 0


def library_show(path: Path | None, space: str | None, console: Console,
                 as_json: bool = False) -> int:
    where = library_path(path)
    # `library update` starts from a missing file; `show` has nothing to show from one.
    if not where.is_file():
        raise UserInputError(f"--library {str(where)!r}: no library file there"
                             + ("" if where.exists() else " (it does not exist)"))
    if space is not None:
        from tsopt.core.registry import get_space

        get_space(space)  # UserInputError naming an unknown space and the known ones
    entries = [e for e in load_library(path) if space is None or e.space == space]
    if as_json:
        console.print_json(json.dumps([e.to_dict() for e in entries]))
        return 0
    table = Table(title=f"seed library {library_path(path)}")
    for column in ("space", "shape class", "problem", "genome", "ratio", "evidence", "source"):
        table.add_column(column)
    for e in sorted(entries, key=lambda e: (e.space, shape_class(e.problem), e.problem.key,
                                            e.rank_key())):
        interval = (f" [{e.ratio_lo:.3f}, {e.ratio_hi:.3f}]"
                    if e.ratio_lo is not None and e.ratio_hi is not None else "")
        table.add_row(e.space, e.shape_class, e.problem.key, e.genome.short_hash,
                      f"{e.ratio:.3f}x{interval}", "paired" if e.paired else "unpaired",
                      e.source)
    console.print(table)
    return 0
