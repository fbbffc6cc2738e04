"""Parameter importance from a study's own timings.

Method: for every gene that takes more than one value among the timed
candidates, the share of the variance of log(best median time) explained by
grouping the candidates by that gene's value (the correlation ratio eta^2 of
a one-way ANOVA). Placements count as genes too (``store.release`` -> its
section). Log time, so that a gene halving the time weighs the same on a fast
and on a slow kernel. Each gene is judged alone: genes that act together share
credit, and eta^2 of genes need not sum to 1.

With few timed candidates eta^2 is large by chance: a gene with no effect at all,
taking v values over n candidates, explains (v - 1) / (n - 1) of the variance on
average (its ``chance``). The report shows how many candidates the figure rests
on, hides it below :data:`MIN_TIMED` and marks it unreliable below
:data:`RELIABLE_TIMED`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from tsopt.core.genome import GeneValue, Genome

METHOD = (
    "Variance of log(best median time) explained by each gene alone (eta\u00b2, one-way ANOVA "
    "over the timed candidates); placements count as genes. Computed by tsopt from this "
    "study's timings."
)
MIN_TIMED = 3
RELIABLE_TIMED = 30
"""Below this many timed candidates the figure is marked unreliable: a 4-valued gene with no
effect would still show eta^2 of 3/29 = 0.10 on average at 30, and 0.33 at 10."""


@dataclass(frozen=True)
class GeneImportance:
    gene: str
    eta_squared: float
    values: int
    best_value: str
    chance: float = 0.0  # the eta^2 a gene of this many values shows on average with no effect

    def to_dict(self) -> dict[str, object]:
        return {"gene": self.gene, "eta2": self.eta_squared, "values": self.values,
                "best_value": self.best_value, "chance": self.chance}


def chance_level(values: int, timed: int) -> float:
    """Mean eta^2 of a gene with ``values`` values and no effect over ``timed`` candidates."""
    return min(1.0, (values - 1) / (timed - 1)) if timed > 1 else 1.0


def _label(value: GeneValue) -> str:
    if isinstance(value, tuple):
        return "x".join(str(v) for v in value)
    return str(value)


def gene_table(genome: Genome) -> dict[str, str]:
    """Every gene and placement of a genome as label -> value text."""
    table = {name: _label(value) for name, value in genome.genes.items()}
    for schedule in genome.schedule:
        for placed in schedule.ops:
            table[f"{schedule.task}.{placed.op}"] = placed.section
    return table


def importance(timed: Sequence[tuple[Genome, float]]) -> list[GeneImportance]:
    """Genes by eta^2, largest first; empty when fewer than MIN_TIMED candidates are timed."""
    if len(timed) < MIN_TIMED:
        return []
    logs = [math.log(t) for _, t in timed if t > 0]
    if len(logs) != len(timed):
        raise ValueError("timings must be positive")
    mean = sum(logs) / len(logs)
    total = sum((y - mean) ** 2 for y in logs)
    tables = [gene_table(g) for g, _ in timed]
    genes = sorted({name for table in tables for name in table})
    found: list[GeneImportance] = []
    for gene in genes:
        groups: dict[str, list[float]] = defaultdict(list)
        for table, y in zip(tables, logs, strict=True):
            groups[table.get(gene, "(absent)")].append(y)
        if len(groups) < 2:
            continue
        between = sum(len(ys) * (sum(ys) / len(ys) - mean) ** 2 for ys in groups.values())
        best = min(groups, key=lambda v: (sum(groups[v]) / len(groups[v]), v))
        eta2 = between / total if total > 0 else 0.0
        found.append(GeneImportance(gene, min(1.0, eta2), len(groups), best,
                                    chance_level(len(groups), len(timed))))
    return sorted(found, key=lambda g: (-g.eta_squared, g.gene))
