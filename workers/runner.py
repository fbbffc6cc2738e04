"""The measuring side's command line: the watchdog's children, and measuring by hand.

The watchdog starts this module with ``--child`` (tsopt.workers.watchdog.runner_argv): by
default one persistent ``--child worker`` (tsopt.workers.measuring_worker) measures candidate
after candidate, reusing its CUDA context, buffers and baseline; ``--isolation process`` runs
``--child measure`` once per candidate (tsopt.workers.candidate) and ``--child baseline`` for
the vendor alone. A child reports on the watchdog's pipe and exits without teardown.

It runs from a bare source tree (the GPU machine gets the tree, not an installation):
``tsopt/__init__.py`` finds ``workers/`` beside it as ``tsopt.workers``. Torch and the
standard library only.

Command line::

    python -m tsopt.workers.runner --bundle DIR [--runs 50] [--warmup 10] [--limit N]
    python -m tsopt.workers.runner --artifact DIR [--artifact DIR ...] [--runs 50] [--gpu 0]
        [--isolation worker|process] [--max-candidates 200] [--baseline once|paired]
        [--launch graph|eager|isolated]
    python -m tsopt.workers.runner --child measure|baseline|worker ...   (the watchdog's; internal)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from tsopt.core.artifact import ArtifactError, ArtifactManifest
from tsopt.core.errors import UserInputError
from tsopt.core.problem import Problem
from tsopt.core.records import DEFAULT_LAUNCH, LAUNCH_MODES, Measurement
from tsopt.workers import device
from tsopt.workers.bundle_measure import measure_bundle
from tsopt.workers.candidate import MIN_RUNS, failure_report, measure_artifact, time_baseline
from tsopt.workers.faults import KernelFault, fault_from_torch
from tsopt.workers.gpus import parse_gpus
from tsopt.workers.measure import ISOLATIONS, measure_artifacts
from tsopt.workers.measurer import MeasureError
from tsopt.workers.measuring_worker import MeasuringWorker
from tsopt.workers.protocol import CommandReader, Reporter
from tsopt.workers.worker_measurer import BASELINE_MODES, REBASELINE_EVERY, WORKER_MAX_CANDIDATES


# -- the watchdog's children ---------------------------------------------------------------
def _exit_now(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter and CUDA teardown: after a fault it can block, and nothing is left to do.
    os._exit(code)


def child_main(args: argparse.Namespace) -> None:
    """Run one measurement and report it on the watchdog's pipe; exits without teardown."""
    reporter = Reporter.from_env()
    code = 0
    try:
        _child_work(args, reporter)
    except Exception as exc:  # noqa: BLE001 - any runner failure is reported as a status
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        print(traceback.format_exc(), file=sys.stderr)
        try:
            hash_ = _artifact_hash(Path(args.artifact)) if args.artifact else "baseline"
            reporter.send("result", measurement=failure_report(
                hash_, "", "crash", f"runner error: {detail}"))
        except OSError:
            code = 1
    _exit_now(code)


def _artifact_hash(artifact_dir: Path) -> str:
    """The genome hash an artifact's manifest names (its directory's name when unreadable: a
    builder cache directory is named by cache key, not genome hash)."""
    try:
        return ArtifactManifest.read(artifact_dir).genome_hash
    except ArtifactError:
        return artifact_dir.name


def _child_work(args: argparse.Namespace, reporter: Reporter) -> None:
    if args.child == "baseline":
        problem = Problem.from_dict(json.loads(args.problem))
        no_gpu = device.why_no_gpu()
        if no_gpu is not None:
            reporter.send("result", measurement=failure_report("baseline", problem.key,
                                                               "launch_error", no_gpu))
            return
        reporter.send("ready", environment=device.environment())
        try:
            baseline, env = time_baseline(problem, args.runs, args.warmup)
        except (KernelFault, RuntimeError) as exc:  # RuntimeError: CUDA error or OOM in torch
            fault = exc if isinstance(exc, KernelFault) else fault_from_torch(
                exc, None, f"the {problem} baseline")
            reporter.send("result", measurement=failure_report(
                "baseline", problem.key, fault.status, fault.message))
            return
        reporter.send("baseline", baseline=baseline.to_dict(), environment=env)
        return
    artifact = Path(args.artifact)
    if device.why_no_gpu() is None:
        reporter.send("ready", environment=device.environment())
    measured = measure_artifact(
        artifact, runs=args.runs, warmup=args.warmup, checks=args.checks,
        on_checked=lambda info: reporter.send("checked", **info),
        launch=args.launch or DEFAULT_LAUNCH,
    )
    reporter.send("result", measurement=measured.to_dict())


def worker_main(args: argparse.Namespace) -> None:
    """The watchdog's persistent child; exits without teardown (see :class:`MeasuringWorker`)."""
    reporter = Reporter.from_env()
    worker: MeasuringWorker | None = None
    code = 0
    try:
        worker = MeasuringWorker(reporter, args.max_candidates)
        worker.serve(CommandReader.from_env())
    except Exception as exc:  # noqa: BLE001 - any runner failure is reported as a status
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        print(traceback.format_exc(), file=sys.stderr)
        current = worker.current if worker is not None else None
        code = 1
        if current is not None:  # in the middle of a command: its answer is a crash
            try:
                reporter.send("result", measurement=failure_report(
                    current[0], current[1], "crash", f"runner error: {detail}"))
                code = 0
            except OSError:
                pass
    _exit_now(code)


# -- command line --------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tsopt.workers.runner",
                                description=__doc__.split("\n")[0])
    p.add_argument("--bundle", type=Path, help="measure a bundle (as `tsopt measure BUNDLE`)")
    p.add_argument("--artifact", action="append", default=None,
                   help="an artifact directory to measure (repeatable; each isolated)")
    p.add_argument("--child", choices=("measure", "baseline", "worker"), help=argparse.SUPPRESS)
    p.add_argument("--problem", help=argparse.SUPPRESS)
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--checks", type=int, default=2)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--gpu", type=int, default=None, help="the GPU index to use")
    p.add_argument("--gpus", default="all",
                   help="with --bundle: GPUs to measure on, one worker each: N or all")
    p.add_argument("--isolation", choices=ISOLATIONS, default="worker",
                   help="worker: persistent measuring processes, restarted after any failure "
                   "(default); process: a fresh process per candidate")
    p.add_argument("--max-candidates", type=int, default=WORKER_MAX_CANDIDATES,
                   help="candidates per worker process before it is recycled")
    p.add_argument("--baseline", choices=BASELINE_MODES, default="once",
                   help="once: time the vendor once per problem and worker, again every "
                   "--rebaseline-every candidates and at the end (default); paired: right after "
                   "each candidate")
    p.add_argument("--rebaseline-every", type=int, default=REBASELINE_EVERY,
                   help="with --baseline once: time it again after this many candidates")
    p.add_argument("--launch", choices=LAUNCH_MODES, default=None,
                   help="the launch mode candidate and baseline are timed in: graph (one CUDA "
                   "graph per side), eager (calls through the export's loader) or isolated "
                   f"(the old spin-kernel mode); default: a bundle's own, else {DEFAULT_LAUNCH}")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.child == "worker":
        worker_main(args)  # does not return
    if args.child:
        if args.child == "measure":
            args.artifact = (args.artifact or [None])[0]
        child_main(args)  # does not return
    if args.runs < MIN_RUNS:
        print(f"error: --runs {args.runs}: at least {MIN_RUNS} timed runs are needed",
              file=sys.stderr)
        return 2
    if args.max_candidates < 1 or args.rebaseline_every < 1:
        print("error: --max-candidates and --rebaseline-every must be at least 1",
              file=sys.stderr)
        return 2
    options = dict(isolation=args.isolation, max_candidates=args.max_candidates,
                   baseline=args.baseline, rebaseline_every=args.rebaseline_every)
    if args.bundle is None:
        options["launch"] = args.launch or DEFAULT_LAUNCH
    if args.bundle is not None:
        try:
            gpus = None if args.gpu is not None else parse_gpus(args.gpus)
            return measure_bundle(args.bundle, runs=args.runs, warmup=args.warmup,
                                  limit=args.limit, checks=args.checks, gpu=args.gpu, gpus=gpus,
                                  launch=args.launch, **options)
        except UserInputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.artifact:
        def show(_index: int, m: Measurement) -> None:
            print(json.dumps(m.to_dict()), flush=True)

        def note(text: str) -> None:
            print(text, file=sys.stderr, flush=True)

        try:
            measure_artifacts([Path(a) for a in args.artifact], runs=args.runs,
                              warmup=args.warmup, checks=args.checks, gpu=args.gpu,
                              on_result=show, log=note, **options)
        except MeasureError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    _parser().print_usage(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
