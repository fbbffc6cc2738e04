"""The bundle writer: built candidates that nothing measures here, for another machine's GPU.

When no GPU measures (none here, ``--measure never``, or a GPU that turned out unable to),
each built candidate is added to the study's bundle (:func:`tsopt.core.bundle.write_bundle`,
appending: other runs of the study may write it too) once per turn of the loop. Its trial
stays RUNNING with the user attribute ``awaiting_measurement`` (the bundle's folder) until
``tsopt measure`` and ``tsopt ingest`` tell it; duplicates asked meanwhile are told that
they wait on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tsopt.search.study.jobs import Job, Teller, duplicate_outcome

if TYPE_CHECKING:
    from tsopt.core.problem import Problem
    from tsopt.search.progress import TuneStats


class BundleWriter:
    """Writes the built candidates of study ``name`` to ``bundle_dir``."""

    def __init__(self, bundle_dir: Path, name: str, space: str, problem: Problem, arch: str,
                 launch: str, stats: TuneStats, teller: Teller) -> None:
        self.bundle_dir, self.name, self.space = bundle_dir, name, space
        self.problem, self.arch, self.launch = problem, arch, launch
        self.stats, self.teller = stats, teller
        self.waiting: list[Any] = []  # jobs built since the last flush

    def add(self, jobs: list[Any]) -> None:
        self.waiting.extend(jobs)

    def flush(self) -> None:
        """Add the built candidates to the bundle; their trials wait for `tsopt ingest`."""
        if not self.waiting:
            return
        from tsopt.core.bundle import BundleEntry, write_bundle

        jobs: list[Job]
        jobs, self.waiting = self.waiting, []
        write_bundle(
            self.bundle_dir, study=self.name, space=self.space, problem=self.problem,
            arch=self.arch, append=True,  # other runs of the study may write it too
            launch=self.launch,
            candidates=[BundleEntry(j.genome, Path(j.build.artifact_dir or ""), j.origin)
                        for j in jobs if j.build is not None],
        )
        for job in jobs:
            job.awaiting = True
            self.stats.awaiting += 1
            if job.trial is not None:
                job.trial.set_user_attr("awaiting_measurement", str(self.bundle_dir))
            for waiter in job.waiters:
                self.teller.tell(waiter, duplicate_outcome(None, job.label))
            job.waiters.clear()
