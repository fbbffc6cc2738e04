"""The build cache and what a candidate's build recorded: its artifact files' sha256 (what
``tsopt ingest`` checks a bundle against), the node that built it and its wait for a slot."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from tsopt.core.bundle import artifact_checksums
from tsopt.core.records import BuildResult
from tsopt.db import queries
from tsopt.db.database import Database
from tsopt.db.models import BUILD_STATUSES, BuildRow, CandidateRow, StudyRow


@dataclass(frozen=True)
class RecordedBuild:
    """A candidate's build as the database recorded it: ``files`` the {name: sha256} of its
    artifact's bundled files (None for a build recorded before revision 0007)."""

    candidate_id: int
    genome_hash: str
    problem_key: str
    arch: str
    status: str
    artifact_dir: str | None
    files: dict[str, str] | None


class BuildRecords(Database):
    """Builds cached by their cache key, each attached to the candidates it built."""

    def find_build(self, cache_key: str) -> BuildResult | None:
        """The cached build (``cache_hit=True``) or None."""
        with self._reading() as session:
            row = session.scalar(select(BuildRow).where(BuildRow.cache_key == cache_key))
            return queries.build_record(row) if row is not None else None

    def record_build(self, candidate_id: int, build: BuildResult, node: str | None = None,
                     wait_s: float | None = None) -> None:
        """Attach the build to the candidate, caching it by ``build.cache_key``; ``node``
        (the Ray node or host whose worker built it) and ``wait_s`` (how long it waited for a
        build slot) are the candidate's, not the cached build's.

        A cached successful build is kept; a cached failure is replaced by a
        later success under the same key (a retry that worked); and a cached success whose
        artifact is not on this machine is pointed at the same build made again here (a
        study moved to another machine's GPU: tsopt.search.study.new_card).
        """
        if not build.cache_key:
            raise ValueError(f"build of {build.genome_hash[:12]} has no cache_key")
        if build.status not in BUILD_STATUSES:
            raise ValueError(f"build status {build.status!r} is not one of {BUILD_STATUSES}")
        values = dict(
            genome_hash=build.genome_hash, problem_key=build.problem_key, arch=build.arch,
            status=build.status, artifact_dir=build.artifact_dir, library=build.library,
            compile_seconds=build.compile_seconds, export_seconds=build.export_seconds,
            link_seconds=build.link_seconds, registers=build.registers,
            smem_bytes=build.smem_bytes, spill_bytes=build.spill_bytes, error=build.error,
            versions_json=json.dumps(build.versions, sort_keys=True),
        )
        # What ingest checks a bundle of this build against (a bundle's own manifest is
        # written by whoever last edited the bundle).
        files = (artifact_checksums(Path(build.artifact_dir))
                 if build.ok and build.artifact_dir and Path(build.artifact_dir).is_dir() else {})
        values["files_json"] = json.dumps(files, sort_keys=True) if files else None
        with self._writing() as session:
            candidate = self._candidate_row(session, candidate_id)

            def lookup() -> BuildRow | None:
                return session.scalar(select(BuildRow).where(BuildRow.cache_key == build.cache_key))

            fresh = BuildRow(cache_key=build.cache_key, **values)
            row = self._insert_or_get(session, fresh, lookup)
            if row.status != "ok" and build.ok:
                for key, value in values.items():
                    setattr(row, key, value)
            elif row.files_json is None and row.status == "ok" and files:
                row.files_json = values["files_json"]  # a build recorded before revision 0007
            if (row.status == "ok" and build.ok and files and row.artifact_dir != build.artifact_dir
                    and not Path(row.artifact_dir or "").is_dir()):
                # Its artifact is not on this machine (built on another, or its cache cleared):
                # the same build made again here is where it is now.
                row.artifact_dir, row.files_json = build.artifact_dir, values["files_json"]
            candidate.build_id = row.id
            if node is not None:
                candidate.build_node = node[:255]
            if wait_s is not None:
                candidate.build_wait_s = max(0.0, wait_s)

    def build_nodes(self, study: str) -> dict[str, int]:
        """How many of the study's candidates each node built (recorded ones only)."""
        with self._reading() as session:
            study_id = self._study_row(session, study).id
            rows = session.execute(select(CandidateRow.build_node).where(
                CandidateRow.study_id == study_id, CandidateRow.build_node.is_not(None))).all()
        counts: dict[str, int] = {}
        for (node,) in rows:
            counts[node] = counts.get(node, 0) + 1
        return counts

    def recorded_build(self, study: str, genome_hash: str) -> RecordedBuild | None:
        """What this database recorded of the build of ``genome_hash`` in ``study``: None when
        the study has no such candidate or the candidate no build."""
        with self._reading() as session:
            study_row = session.scalar(select(StudyRow).where(StudyRow.name == study))
            if study_row is None:
                return None
            candidate = session.scalar(select(CandidateRow).where(
                CandidateRow.study_id == study_row.id, CandidateRow.genome_hash == genome_hash))
            if candidate is None or candidate.build_id is None:
                return None
            row = session.get(BuildRow, candidate.build_id)
            if row is None:
                return None
            files = json.loads(row.files_json) if row.files_json is not None else None
            return RecordedBuild(candidate.id, row.genome_hash, row.problem_key, row.arch,
                                 row.status, row.artifact_dir, files)
