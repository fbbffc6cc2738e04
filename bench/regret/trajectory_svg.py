"""Goal (b) as a picture: each 5-minute study's best-so-far over the oracle's best, against time.

For every ``gpu-inline`` problem of ``regret.json``, the study's trajectory (its own inline
measurements, ``results/gpu-s1-<name>.json``) divided by the oracle picks' best as the
side-by-side passes read it (``oracle_best_mean``). The two come from different runner calls
on the same GPU, both paired against cuBLAS in graph mode, so the curve is the study's view of
its regret, not the side-by-side regret the table reports. The dashed line is goal (b)'s bound
(2 % regret); above 1 the study holds a kernel faster than every oracle pick. Standard library
only::

    python3 -m scripts.evidence unpack regret
    python3 bench/regret/trajectory_svg.py          # writes bench/regret/trajectory.svg
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 760, 380, 60, 190, 20, 45
Y_LOW, Y_HIGH, X_HIGH = 0.80, 1.10, 320.0
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")


def curves(regret: dict, results: Path) -> list[tuple[str, str, list[tuple[float, float]]]]:
    """(problem, card, [(t, best so far / oracle best)]) per gpu-inline problem."""
    found = []
    for problem in regret["problems"]:
        if problem["protocol"] != "gpu-inline":
            continue
        doc = json.loads((results / problem["source"]).read_text())
        study = doc["problems"][0]["studies"][0]
        oracle = problem["oracle_best_mean"]
        points: list[tuple[float, float]] = []
        for x in study["trajectory"]:
            if x.get("best") is None:
                continue
            if not points or float(x["best"]) / oracle != points[-1][1]:
                points.append((float(x["t"]), float(x["best"]) / oracle))  # where it steps
        card = "H200" if any("H200" in d for d in problem["device"]) else "H100"
        seed = study.get("seed", 1)
        budget = study.get("budget", "5m")
        name = problem["name"] + (f" s{seed}" if seed != 1 else "")
        found.append((name + (f", {budget}" if budget != "5m" else ""), card, points))
    return sorted(found)


def _x(t: float) -> float:
    return LEFT + (min(t, X_HIGH) / X_HIGH) * (WIDTH - LEFT - RIGHT)


def _y(v: float) -> float:
    v = min(max(v, Y_LOW), Y_HIGH)
    return TOP + (Y_HIGH - v) / (Y_HIGH - Y_LOW) * (HEIGHT - TOP - BOTTOM)


def svg(lines: list[tuple[str, str, list[tuple[float, float]]]]) -> str:
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>']
    for v in (0.80, 0.85, 0.90, 0.95, 1.00, 1.05, 1.10):
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_y(v):.1f}" y2="{_y(v):.1f}" '
                   f'stroke="#ddd"/><text x="{LEFT - 6}" y="{_y(v) + 4:.1f}" '
                   f'text-anchor="end">{v:.2f}</text>')
    out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_y(0.98):.1f}" y2="{_y(0.98):.1f}" '
               'stroke="black" stroke-dasharray="5,4"/>')
    for t in range(0, int(X_HIGH) + 1, 60):
        out.append(f'<text x="{_x(t):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                   f'{t}</text>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 8}" text-anchor="middle">'
               'seconds into the study</text>')
    out.append(f'<text x="14" y="{(TOP + HEIGHT - BOTTOM) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(TOP + HEIGHT - BOTTOM) / 2})">best so far / '
               'oracle best</text>')
    for index, (name, card, points) in enumerate(lines):
        colour = COLOURS[index % len(COLOURS)]
        steps = []
        for (t0, v0), (t1, _v1) in zip(points, points[1:], strict=False):
            steps += [f"{_x(t0):.1f},{_y(v0):.1f}", f"{_x(t1):.1f},{_y(v0):.1f}"]
        if points:
            steps.append(f"{_x(X_HIGH):.1f},{_y(points[-1][1]):.1f}")
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" '
                   f'points="{" ".join(steps)}"/>')
        y = TOP + 14 + 16 * index
        out.append(f'<line x1="{WIDTH - RIGHT + 12}" x2="{WIDTH - RIGHT + 30}" y1="{y - 4}" '
                   f'y2="{y - 4}" stroke="{colour}" stroke-width="2"/><text '
                   f'x="{WIDTH - RIGHT + 34}" y="{y}">{name} ({card})</text>')
    out.append(f'<text x="{WIDTH - RIGHT + 12}" y="{TOP + 14 + 16 * len(lines) + 8}">'
               '- - goal (b): 2 % regret</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> int:
    regret = json.loads((HERE / "regret.json").read_text())
    lines = curves(regret, HERE / "results")
    if not lines:
        print("no gpu-inline problem in regret.json", file=sys.stderr)
        return 1
    (HERE / "trajectory.svg").write_text(svg(lines))
    for name, card, points in lines:
        print(f"{name} ({card}): {len(points)} steps, last at {points[-1][0]:.0f} s, "
              f"{points[-1][1]:.3f} of the oracle best")
    return 0


if __name__ == "__main__":
    sys.exit(main())
