"""The store: the one API the rest of tsopt uses to record and read results.

``Store(url)`` opens (and creates or migrates) the database; every method
runs in its own short transaction (or in the caller's ``with store.batch():``)
and returns plain data (``tsopt.core.records`` and ``tsopt.db.views``), never ORM
objects. Writes are idempotent where a caller may repeat them (a candidate
proposed twice, a bundle ingested twice) and never overwrite a recorded
result (the one exception: a cached build failure gives way to a later
success under the same cache key), so nothing already recorded is lost.

``Store`` is the union of the store's roles, one module each, all over one open
:class:`~tsopt.db.database.Database` (engine, transactions, Optuna's storage):

- :mod:`tsopt.db.studies`: studies, their candidates, the views of a study;
- :mod:`tsopt.db.claims`: runs, heartbeats, claims on candidates, killed runs reaped (several
  processes may share one study);
- :mod:`tsopt.db.caches`: the verdict, whole-verdict and TS search caches every study shares;
- :mod:`tsopt.db.builds`: the build cache and each build's artifact files (ingest's check);
- :mod:`tsopt.db.measurements`: measurements and vendor baselines.

A database that cannot be used (corrupted, read-only, altered, of a newer schema) raises
:class:`~tsopt.core.errors.DatabaseUnusable` naming it and saying what to do.
"""

from __future__ import annotations

from tsopt.core.errors import DatabaseUnusable
from tsopt.db.builds import BuildRecords, RecordedBuild
from tsopt.db.caches import (
    VERDICT_KEY_LENGTH,
    JudgedCache,
    SearchCache,
    VerdictCache,
    stored_verdict_key,
)
from tsopt.db.claims import HEARTBEAT_S, HOST, STALE_LOCAL_S, STALE_S, Claim, ClaimRecords, run_alive
from tsopt.db.measurements import MeasurementRecords
from tsopt.db.studies import StudyRecords

__all__ = [
    "HEARTBEAT_S",
    "HOST",
    "STALE_LOCAL_S",
    "STALE_S",
    "VERDICT_KEY_LENGTH",
    "Claim",
    "RecordedBuild",
    "Store",
    "run_alive",
    "stored_verdict_key",
]


class Store(StudyRecords, ClaimRecords, VerdictCache, JudgedCache, SearchCache, BuildRecords,
            MeasurementRecords):
    """tsopt's database: studies, candidates, runs and claims, the verdict, search and build
    caches, measurements.

    Raises :class:`UserInputError` naming the URL when it is malformed, its
    driver is missing or the database cannot be opened.
    """

    def __init__(self, url: str) -> None:
        super().__init__(url)
        try:
            self.reap_killed()
        except DatabaseUnusable as exc:
            # A read-only database is read as it is (a report needs no write); any other
            # failure shows again at the first query, with its message.
            if "read-only" not in str(exc):
                raise
