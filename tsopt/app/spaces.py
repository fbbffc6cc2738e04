"""``tsopt spaces``: list the search spaces, their knobs, and (optionally) the funnel."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from tsopt.core.errors import UserInputError


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def spaces_command(
    name: str | None,
    problem: str | None,
    funnel: bool,
    build: int,
    console: Console,
    json_out: Path | None = None,
) -> int:
    """``tsopt spaces``: every space (``name`` None), else one space's knobs for ``problem``
    and, with ``funnel``, its funnel (``build`` candidates sampled and built); returns 0."""
    from tsopt.core.registry import get_space, problem_for
    from tsopt.verify.verifier import judge_for

    if name is None:
        _list_spaces(console)
        return 0
    space = get_space(name)
    space.judge = judge_for(space)  # a stale shipped screen is recomputed, not trusted
    prob = problem_for(problem, space.name)
    space.check(prob)
    _show_knobs(space, prob, console)
    if funnel:
        _show_funnel(space, prob, build, console, json_out)
    return 0


def _list_spaces(console: Console) -> None:
    from tsopt.core.registry import SPACES, get_space
    from tsopt.verify.verifier import judge_for

    table = Table(title="tsopt search spaces", title_justify="left")
    for column in ("space", "op", "archs", "knobs", "description"):
        table.add_column(column)
    for space_name in SPACES:
        try:
            space = get_space(space_name)
        except ImportError as exc:
            table.add_row(space_name, "?", "?", "?", f"[red]not importable: {exc}[/]")
            continue
        space.judge = judge_for(space)  # a stale shipped screen is recomputed, not trusted
        table.add_row(
            space.name,
            space.op,
            ", ".join(space.archs),
            str(len(space.knobs())),
            space.description,
        )
    console.print(table)
    console.print(
        "`tsopt spaces NAME` lists a space's knobs; add --funnel to count raw -> built."
    )


def _show_knobs(space: Any, prob: Any, console: Console) -> None:
    table = Table(title=f"{space.name}: {space.description}", title_justify="left")
    for column in ("knob", "kind", "choices", "what it is"):
        table.add_column(column, overflow="fold")
    for knob in space.knobs(prob):
        choices = ", ".join(str(c) for c in knob.choices)
        if len(choices) > 90:
            choices = (
                f"{len(knob.choices)} choices: {', '.join(str(c) for c in knob.choices[:2])}, ..."
            )
        table.add_row(knob.name, knob.kind, choices, knob.doc)
    console.print(table)


def _show_funnel(space: Any, prob: Any, build: int, console: Console,
                 json_out: Path | None) -> None:
    """The funnel counted (raw -> built), ``build`` candidates sampled and built."""
    if build < 0:
        raise UserInputError(f"--build {build} must be >= 0")
    if build:
        from tsopt.core.devices import check_fits
        from tsopt.core.problem import ProblemError

        try:
            check_fits(prob, space.archs[0])  # what is built must be measurable
        except ProblemError as exc:
            raise UserInputError(str(exc)) from None

    from tsopt.verify.funnel import compute_funnel

    with _progress(console) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total or None)
            bar.update(tasks[what], completed=done, total=total or None)

        result = compute_funnel(space, prob, progress=progress)
    built = None
    attempted = 0
    build_seconds: list[float] = []
    if build:
        built, attempted, build_seconds = _build_sample(space, prob, build, console)
    _report_funnel(result, prob, built, attempted, build_seconds, console)
    if json_out is not None:
        doc = result.to_dict() | {"built": built, "build_attempted": attempted}
        json_out.write_text(json.dumps(doc, indent=2, sort_keys=True))


def _report_funnel(result: Any, prob: Any, built: int | None, attempted: int,
                   build_seconds: list[float], console: Console) -> None:
    table = Table(title=f"funnel for {prob}", title_justify="left")
    table.add_column("stage")
    table.add_column("candidates", justify="right")
    for stage, count in result.rows():
        if stage == "built":
            count_text = (
                f"{built} of {attempted} sampled" if built is not None else "(use --build N)"
            )
        else:
            count_text = f"{count:,}"
        table.add_row(stage, count_text)
    console.print(table)
    console.print(
        f"method: {result.method}; {result.verifications:,} verifier calls, "
        f"{result.verify_seconds:.1f} s in the verifier ({result.verdicts_per_second:,.0f} verdicts/s, "
        f"one process), {result.seconds:.1f} s in all"
    )
    if result.sample_size:
        console.print(
            f"factorisation checked on {result.sample_size} random genomes verified in full: "
            f"{result.sample_agreement}/{result.sample_size} agree"
        )
    if build_seconds:
        console.print(
            f"build: median {sorted(build_seconds)[len(build_seconds) // 2]:.2f} s per candidate"
        )
    if result.rejections:
        top = sorted(result.rejections.items(), key=lambda kv: -kv[1])[:8]
        console.print(
            "verifier rejections while counting: " + ", ".join(f"{r} {n}" for r, n in top)
        )


def _build_sample(
    space: Any, problem: Any, n: int, console: Console
) -> tuple[int, int, list[float]]:
    """Build ``n`` valid candidates drawn at random from the space (fixed seed)."""
    from tsopt.build.builder import DEFAULT_CACHE_DIR, build_isolated, build_memory_limit
    from tsopt.verify.verifier import verify_genome

    class _Trial:
        def __init__(self, rng: random.Random) -> None:
            self.rng = rng

        def suggest_categorical(self, _name: str, choices: list[Any]) -> object:
            return self.rng.choice(choices)

    rng = random.Random(0)
    built = attempted = 0
    seconds: list[float] = []
    tries = 0
    while attempted < n and tries < 200 * n:
        tries += 1
        genome = space.suggest(_Trial(rng), problem)
        if not verify_genome(genome, problem, space=space).valid:
            continue
        attempted += 1
        start = time.perf_counter()
        # In a process of its own under the build memory limit, as `tsopt tune` builds.
        result = build_isolated(space, genome, problem, space.archs[0], DEFAULT_CACHE_DIR,
                                build_memory_limit())
        seconds.append(time.perf_counter() - start)
        built += result.ok
        if not result.ok:
            console.print(f"[red]build failed[/] {genome.short_hash}: {result.error}")
    return built, attempted, seconds
