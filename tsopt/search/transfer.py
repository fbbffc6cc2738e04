"""A GEMM cost model trained across shapes: what the corpus's other shapes say of a new one.

:mod:`tsopt.search.cost_model` ranks a study's candidates by an analytical estimate and then
learns from that study's own measurements. This model is learned before the study starts,
from every measured GEMM of the measurement corpus (``tsopt.core.corpus``), on features that
carry across shapes: the schedule's genes crossed with the shape (waves over the SMs, tiles
and their padding along M and N, K steps, bytes per flop, the problem's sizes), beside the
analytical estimate and its terms.

Targets are per shape: a candidate's log time over the vendor's, less the mean of its shape
(a shape's vendor efficiency is no property of a schedule), and so is the analytical
estimate. The fit is a least-squares line over the centred estimate, then boosted stumps on
the residual (:func:`tsopt.search.cost_model.fit_stumps`); every shape weighs the same (at
most :data:`PER_SHAPE` candidates of each, drawn with a fixed seed).

It ships (:data:`SHIPPED_MODEL`, made by ``tsopt corpus products``) and is the prior of
``evolve``'s cost model (:func:`study_prior`): it picks a new study's survey and ranks its
proposals until the study has measured enough to fit its own line over it. Judged
leave-one-shape-out on the corpus and on issue #28's held-out oracle tables in
``bench/transfer_model``: the survey it picks (the best-ranked schedule of each family, as
``evolve`` surveys) holds a faster schedule than the analytical estimate's on both.

Numpy only; the file it is saved to is JSON.
"""
from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tsopt.search.cost_model import Stump, analytical_log, features, fit_stumps, predict_stumps

if TYPE_CHECKING:
    from tsopt.core.corpus import CorpusRecord
    from tsopt.core.devices import DeviceProfile
    from tsopt.core.problem import Problem
    from tsopt.search.cost_model import Prior

SHIPPED_MODEL = Path(__file__).resolve().parents[1] / "data" / "cost_model.json"
"""The shipped model (``tsopt corpus products`` makes it from ``corpus/``)."""
FORMAT = "tsopt-transfer-model-1"
MODEL_DEVICE = "H200_SXM"
"""The device profile the model's measurements were made on, which it knows alone."""
MODEL_GPU = "NVIDIA H200"
"""That card's name as the measuring process records it: the corpus also holds other cards'
measurements (bench/llama_layer's H100 runs), which rank kernels differently."""
COST_PRIORS = ("transfer", "analytical")
"""What ``--cost-prior`` takes: the shipped cross-shape model (the default), or the
analytical estimate alone (as every study before it)."""
PER_SHAPE = 400
MIN_SHAPE = 20
"""A shape with fewer measured genomes is left out of the fit and of the judgement."""
ROUNDS = 150
RATE = 0.2

Extra = Callable[[Mapping[str, Any], Mapping[str, int]], Mapping[str, float]]
"""More features of a candidate on a shape (a prior's, e.g. a vendor heuristic's)."""


def genes_of(genome: Mapping[str, Any]) -> dict[str, Any]:
    """A genome's structural and numeric genes as one mapping (as the samplers name them)."""
    return {**genome.get("structure", {}), **genome.get("numeric", {})}


def shape_features(genes: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, float]:
    """The shape, and the schedule against the shape: sizes, bytes per flop, tiles along M
    and N and the share of them that is padding, K steps."""
    m, n, k = sizes["m"], sizes["n"], sizes["k"]
    if genes.get("swap_ab") is True:
        m, n = n, m
    chains = int(genes.get("consumers", 1)) if genes.get("arrangement") == "separate" else 1
    cta_m = int(genes.get("tile_m", 128)) * chains
    cta_n = int(genes.get("tile_n", 128))
    tile_k = int(genes.get("tile_k", 64))
    split = int(genes.get("split_k", 1) or 1)
    tiles_m, tiles_n = -(-m // cta_m), -(-n // cta_n)
    return {
        "shape.log2_m": math.log2(m), "shape.log2_n": math.log2(n), "shape.log2_k": math.log2(k),
        "shape.log2_flops": math.log2(2.0 * m * n * k),
        "shape.bytes_per_flop": (m * k + n * k + m * n) * 2 / (2.0 * m * n * k),
        "fit.log2_tiles": math.log2(tiles_m * tiles_n * split),
        "fit.pad_m": 1.0 - m / (tiles_m * cta_m), "fit.pad_n": 1.0 - n / (tiles_n * cta_n),
        "fit.log2_k_steps": math.log2(max(1, -(-k // (split * tile_k)))),
        "fit.m_over_tile": math.log2(m / cta_m), "fit.n_over_tile": math.log2(n / cta_n),
    }


def row_features(genes: Mapping[str, Any], sizes: Mapping[str, int],
                 extra: Extra | None = None) -> dict[str, float]:
    out = features(genes, sizes)
    out.update(shape_features(genes, sizes))
    if extra is not None:
        out.update(extra(genes, sizes))
    return out


@dataclass
class TransferModel:
    """Predicts a candidate's log time over the vendor's, up to a per-shape constant (lower
    is faster): ``slope`` times the analytical log, plus the stumps over ``columns``."""

    columns: list[str] = field(default_factory=list)
    slope: float = 1.0
    stumps: list[Stump] = field(default_factory=list)
    shapes: list[str] = field(default_factory=list)
    """The problems it was fitted on."""
    rows: int = 0

    def _matrix(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        index = {c: i for i, c in enumerate(self.columns)}
        x = np.zeros((len(rows), len(self.columns)))
        for r, row in enumerate(rows):
            for name, value in row.items():
                i = index.get(name)
                if i is not None:
                    x[r, i] = value
        return x

    def predict(self, genes: Sequence[Mapping[str, Any]], sizes: Mapping[str, int],
                extra: Extra | None = None) -> np.ndarray:
        """The predicted log relative time of each candidate on ``sizes``."""
        if not genes:
            return np.zeros(0)
        a = np.array([analytical_log(g, sizes) for g in genes])
        out = self.slope * a
        if self.stumps:
            out = out + predict_stumps(self.stumps, self._matrix(
                [row_features(g, sizes, extra) for g in genes]))
        return np.asarray(out)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "columns": self.columns, "slope": self.slope,
                "stumps": [[s.column, s.threshold, s.left, s.right] for s in self.stumps],
                "shapes": self.shapes, "rows": self.rows}

    @classmethod
    def from_dict(cls, doc: Any) -> TransferModel:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} document")
        return cls(columns=[str(c) for c in doc["columns"]], slope=float(doc["slope"]),
                   stumps=[Stump(int(c), float(t), float(lo), float(hi))
                           for c, t, lo, hi in doc["stumps"]],
                   shapes=[str(s) for s in doc.get("shapes", [])], rows=int(doc.get("rows", 0)))

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=0) + "\n")
        return path


def load_model(path: Path | None = None) -> TransferModel | None:
    """The model saved at ``path`` (default: the shipped one); None when there is none."""
    where = path or SHIPPED_MODEL
    if not where.exists():
        return None
    return TransferModel.from_dict(json.loads(where.read_text()))


@dataclass(frozen=True)
class ShapeTable:
    """One shape's measured genomes: genes, sizes, the median paired ratio of each."""

    problem_key: str
    sizes: dict[str, int]
    genes: list[dict[str, Any]]
    ratios: list[float]


def shape_tables(records: Sequence[CorpusRecord], min_genomes: int = MIN_SHAPE,
                 gpu: str = MODEL_GPU) -> list[ShapeTable]:
    """Per GEMM problem of the corpus, each genome's median paired ratio over its correct
    measurements on ``gpu`` (:data:`MODEL_GPU`) in the runner's isolated mode (every pass and machine of
    that card; one card and one launch mode, so no figure mixes two); shapes with fewer than
    ``min_genomes`` left out."""
    from tsopt.core.corpus import LAUNCH_ISOLATED

    by_shape: dict[str, dict[str, tuple[dict[str, Any], list[float]]]] = {}
    sizes: dict[str, dict[str, int]] = {}
    for r in records:
        if (r.space != "gemm" or not r.ok or not r.paired or r.genome is None
                or r.launch != LAUNCH_ISOLATED or r.device != gpu):
            continue
        table = by_shape.setdefault(r.problem.key, {})
        sizes[r.problem.key] = dict(r.problem.sizes)
        held = table.setdefault(r.genome_hash, (genes_of(r.genome), []))
        held[1].append(float(r.ratio or 0.0))
    tables = []
    for key in sorted(by_shape):
        table = by_shape[key]
        if len(table) < min_genomes:
            continue
        hashes = sorted(table)
        tables.append(ShapeTable(key, sizes[key], [table[h][0] for h in hashes],
                                 [float(statistics.median(table[h][1])) for h in hashes]))
    return tables


def fit_tables(tables: Sequence[ShapeTable], extra: Extra | None = None,
               per_shape: int = PER_SHAPE, rounds: int = ROUNDS, rate: float = RATE,
               seed: int = 0, clip: float | None = None) -> TransferModel:
    """Fit on ``tables`` (see the module doc). ``clip``: a candidate more than ``clip``
    (log) slower than its shape's best counts as only that slow, so the fit spends itself
    on the fast end, which a search measures, rather than on how bad the bad ones are."""
    rng = random.Random(seed)
    feats: list[dict[str, float]] = []
    a_all: list[float] = []
    y_all: list[float] = []
    for table in tables:
        picks = list(range(len(table.genes)))
        if len(picks) > per_shape:
            picks = sorted(rng.sample(picks, per_shape))
        a = np.array([analytical_log(table.genes[i], table.sizes) for i in picks])
        y = -np.log([table.ratios[i] for i in picks])
        if clip is not None:
            y = np.minimum(y, -math.log(max(table.ratios)) + clip)
        a_all += list(a - a.mean())
        y_all += list(y - y.mean())
        feats += [row_features(table.genes[i], table.sizes, extra) for i in picks]
    a_arr, y_arr = np.array(a_all), np.array(y_all)
    denominator = float((a_arr ** 2).sum())
    slope = max(0.0, float((a_arr * y_arr).sum()) / denominator) if denominator > 0 else 0.0
    model = TransferModel(columns=sorted({c for row in feats for c in row}), slope=slope,
                          shapes=[t.problem_key for t in tables], rows=len(y_arr))
    x = model._matrix(feats)
    model.stumps = fit_stumps(x, y_arr - slope * a_arr, rounds, rate, min_leaf=5)
    return model


def fit_transfer_model(records: Sequence[CorpusRecord]) -> TransferModel:
    """The cross-shape model of every GEMM shape the corpus measured."""
    return fit_tables(shape_tables(records))


def study_prior(mode: str, space: str, problem: Problem, device: DeviceProfile | None,
                exclude_self: bool, model: TransferModel | None = None,
                ) -> tuple[Prior | None, str]:
    """The prior of a study's cost model (``--cost-prior``), and one line saying which it is
    and why. None (the analytical estimate) for ``analytical``, for a space other than the
    GEMM, for another device than the one the corpus measured, where no model ships, and for
    a leave-one-shape-out run (``exclude_self``) of a problem the model was fitted on: its
    own measurements must not rank its first proposals."""
    if space != "gemm":
        return None, "the space's own estimate (the cross-shape model is the GEMM's)"
    if mode == "analytical":
        return None, "the analytical estimate (--cost-prior analytical)"
    if mode != "transfer":
        raise ValueError(f"cost prior {mode!r} is not one of {', '.join(COST_PRIORS)}")
    if device is not None and device.id != MODEL_DEVICE:
        return None, (f"the analytical estimate: the cross-shape model knows {MODEL_DEVICE} "
                      f"measurements only, and this study builds for {device.id}")
    model = model or load_model()
    if model is None:
        return None, f"the analytical estimate: no cross-shape model at {SHIPPED_MODEL}"
    if exclude_self and problem.key in model.shapes:
        return None, ("the analytical estimate: leave-one-shape-out, and the cross-shape "
                      f"model was fitted on {problem.key}'s own measurements")
    sizes = dict(problem.sizes)

    def prior(genes: Sequence[Mapping[str, Any]]) -> np.ndarray:
        return model.predict(genes, sizes)

    return prior, (f"the cross-shape model ({len(model.shapes)} corpus shapes, "
                   f"{model.rows} measured genomes), then this study's measurements")
