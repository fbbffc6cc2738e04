"""The shipped TS search memo: TS's exhaustive interleaving searches already run, which a new
study's database starts with.

The verifier memoises TS's exhaustive deadlock/race search (seconds to tens of seconds of CPU
on a deep or persistent pipeline) by the model TS explores under the DSL's checker
(``tsopt.verify.ts_model``: a digest of the checker's input, and
``tsopt.verify.verifier.search_version``), and the database shares each search across
workers and studies. A study on a fresh database would still run every search again that the
committed studies have run. This memo ships them: ``tsopt/data/ts_searches.json`` holds the
searches of the committed study archives (the measurement corpus's search table,
``corpus/ts_searches.v1.jsonl.xz``, of the sources ``tsopt.app.corpus.SHIPPED_SOURCES``
names) keyed that way, and :func:`seed_store` copies them into a study's database, so the
driver sends them to its workers like any search the database holds. An edit of a space or
of the verifier leaves them standing (a model it changes is another key); a search of another
DSL checker, or one keyed the old way (the corpus's searches, by a space's schedule key and
the verifier's version), is never used: its key does not match, and it is not copied.

Remade from the corpus by ``tsopt corpus products`` (``tsopt.app.corpus``).
``TSOPT_TS_MEMO`` names another file; ``TSOPT_TS_MEMO=none`` ships nothing (a
study that measures the verifier's cold cost).

Beside it, ``tsopt/data/ts_proofs.json`` (:data:`PROOFS`, the same format) holds the complete
searches of the seed library's genomes that TS's default bound cuts, run off the critical path
with a higher bound (``tsopt prove``; ``bench/proofs`` runs them on many cores) and shipped by
``tsopt prove --ship FILE``. :func:`seed_store` copies both; a complete search replaces the
memo's cut one of its key (``Store.record_searches``), so a study on a new database judges
those genomes complete. ``TSOPT_TS_MEMO=none`` switches the proofs off too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from tsopt.core.errors import UserInputError
from tsopt.core.records import TsSearch

if TYPE_CHECKING:
    from tsopt.core.space import SearchSpace
    from tsopt.db.store import Store

FORMAT = "tsopt-ts-searches-1"
MEMO_ENV = "TSOPT_TS_MEMO"
SHIPPED = Path(__file__).resolve().parents[1] / "data" / "ts_searches.json"
PROOFS = SHIPPED.with_name("ts_proofs.json")
"""The shipped complete searches (``tsopt prove --ship``)."""


def memo_path(path: Path | str | None = None) -> Path | None:
    """The memo file: ``path``, else ``TSOPT_TS_MEMO``, else the shipped one; None when the
    environment says ``none``."""
    chosen = path if path is not None else os.environ.get(MEMO_ENV) or SHIPPED
    if str(chosen).lower() == "none":
        return None
    return Path(chosen)


def load_memo(path: Path | str | None = None) -> list[TsSearch]:
    """Every search of the memo file (none when it does not exist or is switched off).
    Raises UserInputError naming the file and the first bad entry."""
    where = memo_path(path)
    if where is None or not where.exists():
        return []
    try:
        doc = json.loads(where.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserInputError(f"TS search memo {where}: not readable JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UserInputError(f"TS search memo {where}: not a {FORMAT} file")
    searches = []
    for i, item in enumerate(doc.get("searches", [])):
        try:
            searches.append(TsSearch.from_dict(item))
        except (KeyError, ValueError, TypeError) as exc:
            raise UserInputError(f"TS search memo {where}: search {i}: {exc}") from None
    return searches


def write_memo(searches: list[TsSearch], path: Path,
               doc: str = "TS exhaustive searches run by committed studies; "
                          "see tsopt/search/ts_memo.py") -> None:
    """Write ``searches`` as a memo file, one per key (the one saying most), in a stable
    order."""
    unique: dict[tuple[str, str, str, str], TsSearch] = {}
    for search in searches:
        held = unique.get(search.key)
        if held is None or search.supersedes(held):
            unique[search.key] = search
    memo = {"format": FORMAT, "doc": doc,
            "searches": [unique[k].to_dict() for k in sorted(unique)]}
    path.write_text(json.dumps(memo, indent=0, sort_keys=True) + "\n")


def shipped_searches(path: Path | str | None = None) -> list[TsSearch]:
    """The memo's searches and, with the shipped memo (no ``path``, no ``TSOPT_TS_MEMO``),
    the shipped proofs."""
    searches = load_memo(path)
    if path is None and not os.environ.get(MEMO_ENV):
        searches += load_memo(PROOFS)
    return searches


def seed_store(store: Store, space: SearchSpace, path: Path | str | None = None) -> int:
    """Copy the memo's and the shipped proofs' searches of ``space``, keyed for this DSL's
    checker, into ``store`` (those it does not hold yet, or saying more than the one it
    holds); how many were new."""
    from tsopt.verify.verifier import search_version

    version = search_version()
    mine = [s for s in shipped_searches(path)
            if s.space == space.name and s.tool_version == version]
    return store.record_searches(mine) if mine else 0
