"""The caches every study of a database shares: TS gate outcomes (``tsopt_verdict``), whole
verdicts (``tsopt_judged``) and TS's exhaustive searches (``tsopt_ts_search``).

A cache row is written once and read by any study, process or worker; a concurrent writer of
the same key wins, since what it writes is the same outcome. Only a verdict judged again (a
valid verdict whose search was cut, once its schedule's complete search is known) or a search
that says more replaces what is kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from tsopt.core.errors import UserInputError
from tsopt.core.records import TsSearch, Verdict
from tsopt.core.space import JudgedKey
from tsopt.db import queries
from tsopt.db.database import Database
from tsopt.db.models import JudgedRow, TsSearchRow, VerdictRow

VERDICT_KEY_LENGTH = 255  # tsopt_verdict.verdict_key is VARCHAR(255)


def stored_verdict_key(verdict_key: str) -> str:
    """The verdict key as stored: itself when it fits the column, else ``sha256:<digest>``
    (a space's key spells out the genes that reach TS and may be longer; SQLite would keep
    it whole, PostgreSQL refuses it)."""
    if len(verdict_key) <= VERDICT_KEY_LENGTH:
        return verdict_key
    return "sha256:" + hashlib.sha256(verdict_key.encode()).hexdigest()


class VerdictCache(Database):
    """TS gate outcomes by the space's verdict key, and the candidates' verdicts."""

    def find_verdict(self, space: str, verdict_key: str) -> Verdict | None:
        """The cached verdict (``cached=True``; ``genome_hash`` of the genome first judged)."""
        verdict_key = stored_verdict_key(verdict_key)
        with self._reading() as session:
            row = session.scalar(select(VerdictRow).where(
                VerdictRow.space == space, VerdictRow.verdict_key == verdict_key,
            ))
            return queries.verdict_record(row) if row is not None else None

    def record_verdict(
        self, candidate_id: int, space: str, verdict_key: str, verdict: Verdict,
    ) -> None:
        """Attach the verdict to the candidate, reusing the cached row for the key if present.

        The key caches the TS gate, which every genome of one key shares: a TS (or dataflow)
        rejection is one row for all of them. Past TS, tsopt's checks judge the genome itself
        (they see genes the key leaves out), so a ``tsopt`` or ``ok`` verdict is also kept in a
        row of its own genome, and the candidate points at that one: never at a verdict
        another genome of the key got.
        """
        keys = [stored_verdict_key(verdict_key)]
        if verdict.stage in ("tsopt", "ok"):
            keys.append(stored_verdict_key(f"{verdict_key}|genome={verdict.genome_hash}"))
        with self._writing() as session:
            candidate = self._candidate_row(session, candidate_id)
            for key in keys:
                fresh = VerdictRow(
                    space=space, verdict_key=key, genome_hash=verdict.genome_hash,
                    valid=verdict.valid, stage=verdict.stage, rule=verdict.rule,
                    message=verdict.message, seconds=verdict.seconds, domain=verdict.domain,
                )

                def lookup(key: str = key) -> VerdictRow | None:
                    return session.scalar(select(VerdictRow).where(
                        VerdictRow.space == space, VerdictRow.verdict_key == key,
                    ))

                candidate.verdict_id = self._insert_or_get(session, fresh, lookup).id

    def settle_verdict(self, space: str, verdict_key: str, verdict: Verdict) -> int:
        """Give the valid verdict rows a study's candidates point at (``verdict_key``'s and the
        genome's own, :meth:`record_verdict`) the message of ``verdict``, a valid verdict of
        the same genome judged again once its schedule's searches were complete (``tsopt
        prove``): the report then no longer counts it cut. How many rows changed."""
        if not verdict.valid:
            return 0
        keys = [stored_verdict_key(verdict_key),
                stored_verdict_key(f"{verdict_key}|genome={verdict.genome_hash}")]
        changed = 0
        with self._writing() as session:
            for row in session.scalars(select(VerdictRow).where(
                    VerdictRow.space == space, VerdictRow.verdict_key.in_(keys))).all():
                if row.valid and row.stage == "ok" and row.message != verdict.message:
                    row.message = verdict.message
                    changed += 1
        return changed


class JudgedCache(Database):
    """Whole verdicts by genome, problem, arch and verifier version (:class:`JudgedKey`)."""

    def find_judged(self, key: JudgedKey) -> Verdict | None:
        """The whole verdict recorded under ``key`` (any study's), ``cached=True``; None when
        this genome was never judged for this problem, arch and verifier version."""
        with self._reading() as session:
            row = session.scalar(select(JudgedRow).where(
                JudgedRow.space == key.space, JudgedRow.genome_hash == key.genome_hash,
                JudgedRow.problem_key == key.problem_key, JudgedRow.arch == key.arch,
                JudgedRow.tool_version == key.tool_version,
            ))
            return queries.verdict_record(row) if row is not None else None

    def record_judged(self, key: JudgedKey, verdict: Verdict) -> None:
        """Keep ``verdict`` under ``key`` (a concurrent writer of the same key wins: the
        verdict is the same)."""
        if verdict.genome_hash != key.genome_hash:
            raise UserInputError(f"verdict of genome {verdict.genome_hash[:12]} recorded under "
                                 f"genome {key.genome_hash[:12]}")
        with self._writing() as session:
            fresh = JudgedRow(
                space=key.space, genome_hash=key.genome_hash, problem_key=key.problem_key,
                arch=key.arch, tool_version=key.tool_version, valid=verdict.valid,
                stage=verdict.stage, rule=verdict.rule, message=verdict.message,
                seconds=verdict.seconds, domain=verdict.domain,
            )

            def lookup() -> JudgedRow | None:
                return session.scalar(select(JudgedRow).where(
                    JudgedRow.space == key.space, JudgedRow.genome_hash == key.genome_hash,
                    JudgedRow.problem_key == key.problem_key, JudgedRow.arch == key.arch,
                    JudgedRow.tool_version == key.tool_version,
                ))

            self._insert_or_get(session, fresh, lookup)

    def supersede_judged(self, key: JudgedKey, verdict: Verdict) -> None:
        """Keep ``verdict`` under ``key`` in place of the one recorded: a valid verdict whose
        exhaustive search was cut, judged again once a complete search of its schedule was
        recorded (``tsopt prove``)."""
        if verdict.genome_hash != key.genome_hash:
            raise UserInputError(f"verdict of genome {verdict.genome_hash[:12]} recorded under "
                                 f"genome {key.genome_hash[:12]}")
        with self._writing() as session:
            row = session.scalar(select(JudgedRow).where(
                JudgedRow.space == key.space, JudgedRow.genome_hash == key.genome_hash,
                JudgedRow.problem_key == key.problem_key, JudgedRow.arch == key.arch,
                JudgedRow.tool_version == key.tool_version,
            ))
            if row is None:
                session.add(JudgedRow(
                    space=key.space, genome_hash=key.genome_hash, problem_key=key.problem_key,
                    arch=key.arch, tool_version=key.tool_version, valid=verdict.valid,
                    stage=verdict.stage, rule=verdict.rule, message=verdict.message,
                    seconds=verdict.seconds, domain=verdict.domain))
                return
            row.valid, row.stage, row.rule = verdict.valid, verdict.stage, verdict.rule
            row.message, row.seconds, row.domain = verdict.message, verdict.seconds, verdict.domain

    def judged_count(self, space: str | None = None) -> int:
        """Whole verdicts kept (of ``space``, or all)."""
        from sqlalchemy import func

        with self._reading() as session:
            query = select(func.count(JudgedRow.id))
            if space is not None:
                query = query.where(JudgedRow.space == space)
            return int(session.scalar(query) or 0)


class SearchCache(Database):
    """TS's exhaustive searches by space, schedule, SMEM aliasing and tool version."""

    def find_search(self, space: str, schedule: str, aliasing: str,
                    tool_version: str) -> TsSearch | None:
        """The exhaustive search recorded under this key (any worker's or study's), or None."""
        with self._reading() as session:
            row = session.scalar(select(TsSearchRow).where(
                TsSearchRow.space == space, TsSearchRow.schedule == schedule,
                TsSearchRow.aliasing == aliasing, TsSearchRow.tool_version == tool_version))
            return queries.search_record(row) if row is not None else None

    def find_searches(self, space: str, schedule: str, tool_version: str) -> list[TsSearch]:
        """Every search recorded for ``schedule`` (one per SMEM aliasing seen): what a worker
        about to verify a genome of that schedule is sent."""
        with self._reading() as session:
            rows = session.scalars(select(TsSearchRow).where(
                TsSearchRow.space == space, TsSearchRow.schedule == schedule,
                TsSearchRow.tool_version == tool_version).order_by(TsSearchRow.id)).all()
            return [queries.search_record(row) for row in rows]

    def record_search(self, search: TsSearch) -> None:
        """Keep ``search``. A row of the same key is replaced only by a search that says more
        (:meth:`TsSearch.supersedes`: complete against cut, or cut at a higher bound); a
        concurrent writer of the same outcome wins."""
        self._keep_search(search)

    def _keep_search(self, search: TsSearch) -> bool:
        """:meth:`record_search`; whether the row is now ``search``'s."""
        with self._writing() as session:
            fresh = _search_row(search)

            def lookup() -> TsSearchRow | None:
                return session.scalar(select(TsSearchRow).where(
                    TsSearchRow.space == search.space, TsSearchRow.schedule == search.schedule,
                    TsSearchRow.aliasing == search.aliasing,
                    TsSearchRow.tool_version == search.tool_version))

            kept = self._insert_or_get(session, fresh, lookup)
            if kept is fresh:
                return True
            if search.supersedes(queries.search_record(kept)):
                _fill_search_row(kept, search)
                return True
            return False

    def record_searches(self, searches: Iterable[TsSearch]) -> int:
        """Keep every search of ``searches`` not kept yet, or saying more than the row kept
        (:meth:`TsSearch.supersedes`), in one transaction (the shipped memo and proofs a study
        starts with, ``tsopt.search.ts_memo``); how many were new or replaced a row. A
        concurrent writer of the same keys is met by keeping them one by one
        (:meth:`record_search`)."""
        wanted: dict[tuple[str, str, str, str], TsSearch] = {}
        for search in searches:
            held = wanted.get(search.key)
            if held is None or search.supersedes(held):
                wanted[search.key] = search
        if not wanted:
            return 0
        versions = sorted({key[3] for key in wanted})
        try:
            with self._writing() as session:
                kept = {(row.space, row.schedule, row.aliasing, row.tool_version): row
                        for row in session.scalars(select(TsSearchRow).where(
                            TsSearchRow.tool_version.in_(versions)))}
                fresh = [s for key, s in wanted.items() if key not in kept]
                better = [(kept[key], s) for key, s in wanted.items()
                          if key in kept and s.supersedes(queries.search_record(kept[key]))]
                session.add_all([_search_row(s) for s in fresh])
                for row, search in better:
                    _fill_search_row(row, search)
            return len(fresh) + len(better)
        except IntegrityError:
            return sum(self._keep_search(search) for search in wanted.values())

    def searches(self) -> list[TsSearch]:
        """Every search kept, oldest first (the evidence the shipped memo is made from)."""
        with self._reading() as session:
            rows = session.scalars(select(TsSearchRow).order_by(TsSearchRow.id)).all()
            return [queries.search_record(row) for row in rows]

    def search_count(self) -> int:
        """Exhaustive searches kept."""
        from sqlalchemy import func

        with self._reading() as session:
            return int(session.scalar(select(func.count(TsSearchRow.id))) or 0)


def _search_row(search: TsSearch) -> TsSearchRow:
    row = TsSearchRow(space=search.space, schedule=search.schedule, aliasing=search.aliasing,
                      tool_version=search.tool_version)
    _fill_search_row(row, search)
    return row


def _fill_search_row(row: TsSearchRow, search: TsSearch) -> None:
    row.error, row.bounded, row.seconds = search.error, search.bounded, search.seconds
    row.complete, row.domain = search.complete, search.domain
    row.states, row.max_states = search.states, search.max_states
