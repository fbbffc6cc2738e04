"""A cost model that ranks proposals before they are built or measured.

Two parts, one prediction: the log of a candidate's relative time (time over the vendor
baseline's, the study's objective; lower is better).

- **Analytical** (:func:`gemm_estimate`): a GEMM schedule's time from first principles of an
  H200-class GPU, read from its gene values and the problem's sizes: tiles and waves over
  the SMs (the last wave's idle SMs), CTAs per SM from SMEM and registers, the wgmma shape
  (narrow N and one consumer warpgroup issue less), bytes each tile moves from L2 (halved
  along the cluster's multicast), and the pipeline: ``stages - 1`` K slices in flight must
  cover the load latency (Little's law), else the loop runs at latency / (stages - 1) per
  slice. A one-tile-per-CTA grid pays its fill and epilogue per tile, a persistent one once
  per SM. Absolute values are rough; what matters is the order, and the learned part
  corrects the rest. A skinny problem streams at the HBM roof, and there the schedules differ
  by what they add to it (fill and epilogue per wave, the split's reduction, empty tiles of a
  swizzle band), so those add to the compulsory traffic's time rather than hide under it.
  Genes are read by name (:data:`ANALYTICAL_GENES`; ``split_k`` / ``swap_ab`` /
  ``raster`` / ``swizzle`` when a space has them); a space without tiles gets no estimate.
- **Learned** (:class:`CostModel`): from the study's own measurements, a least-squares line
  over the analytical estimate and then gradient-boosted regression stumps (numpy only, as
  MetaSchedule's XGBoost in miniature) on the residuals, over :func:`features` (every gene
  value one-hot or numeric, plus the analytical terms). Below :data:`MIN_FIT` measurements
  the analytical estimate ranks alone.
- **Prior** (``CostModel.prior``, optional): a ranking learned before the study, across
  other shapes (:mod:`tsopt.search.transfer`'s shipped model), which then stands where the
  analytical estimate stood: it ranks alone until the study has measured :data:`MIN_FIT`
  candidates, and the study's line and stumps are fitted over it.

Pure functions and numpy: no GPU, no database, usable by any simulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tsopt.core.devices import PROFILES, DeviceProfile

DEFAULT_DEVICE = PROFILES["H200_SXM"]
"""The GPU an estimate is for when none is named: the one the constants below were measured
on. A study's own (``CostModel.device``, the driver's device profile) sets the SMs the waves
are counted over, the tensor peak and the HBM bandwidth."""
L2_BYTES_PER_S_PER_SM = 10.0e12 / 132
"""Effective L2 -> SMEM bandwidth (TMA loads) per SM: 10 TB/s over an H200's 132 SMs."""
LOAD_LATENCY_S = 1.0e-6
"""Time from a TMA load's issue to its SMEM arrival, under load."""
SMEM_PER_SM = 232_448
REGISTERS_PER_SM = 65_536
LAUNCH_S = 3.0e-6
SPLIT_SYNC_S = 1.0e-6
"""A split-K tile's cluster handshake before its partials are summed."""
STREAM_K_UNIT_S = 5.0e-6
"""What each stream-K unit of a CTA costs beyond its K slices, as measured on the H200
(bench/stream_k: 128x8192x8192, 1024^3, 3000x2008x1000 ran 5-13 us slower with two or three
units a CTA than their data-parallel twins, where the decomposition itself predicts no loss)."""
DSMEM_BYTES_PER_S = 2.0e11
"""One SM's rate of reading a peer's SMEM (distributed shared memory)."""
MIN_FIT = 8
"""Measured candidates before the learned part is used."""
ANALYTICAL_GENES = ("tile_m", "tile_n", "tile_k", "stages", "consumers", "arrangement",
                    "cluster", "persistent", "epilogue", "split_k", "swap_ab", "producer_regs",
                    "consumer_regs", "raster", "swizzle", "stream_k")
"""The genes :func:`gemm_estimate` reads: the knobs whose moves the model can rank."""
Prior = Callable[[Sequence[Mapping[str, Any]]], np.ndarray]
"""Genes of a batch of candidates -> their log relative time as a model learned elsewhere
predicts it (lower is faster; only the order within a study matters)."""


def _int(genes: Mapping[str, Any], name: str, default: int) -> int:
    value = genes.get(name, default)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def _cluster(genes: Mapping[str, Any]) -> tuple[int, int]:
    text = str(genes.get("cluster", "1x1"))
    try:
        m, n = text.split("x")
        return max(1, int(m)), max(1, int(n))
    except ValueError:
        return 1, 1


@dataclass(frozen=True)
class Estimate:
    """An analytical estimate and the terms it came from (features for the learned part)."""

    relative: float
    """Estimated time over the ideal time (2MNK at peak): >= 1, lower is better."""
    terms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Tiling:
    """A GEMM schedule's genes as :func:`gemm_estimate` reads them, on the problem's sizes
    (M and N exchanged for a swapped schedule)."""

    m: int
    n: int
    k: int
    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    consumers: int
    split: int
    separate: bool
    split_n: bool
    """Cooperating warpgroups split the tile along N: each issues m64 x tile_n/consumers."""
    chains: int
    wgs_per_tile: int
    cta_m: int
    cta_n: int
    cm: int
    cn: int
    persistent: bool
    tma_store: bool
    swapped: bool
    stream_k: bool
    swizzle: int
    raster_m: bool
    producer_regs: int
    consumer_regs: int
    k_steps: int


@dataclass(frozen=True)
class _Grid:
    """How the tiling's CTAs fill the GPU: tiles (whole clusters, whole swizzle bands),
    CTAs per SM, and the waves over the SMs."""

    tiles: int
    smem: int
    per_sm: int
    slots: int
    waves: float
    wave_eff: float
    busy: int


def _tiling(genes: Mapping[str, Any], sizes: Mapping[str, int]) -> _Tiling | None:
    if not all(isinstance(genes.get(n), int) for n in ("tile_m", "tile_n", "tile_k")):
        return None
    if not all(n in sizes for n in ("m", "n", "k")):
        return None
    m, n, k = sizes["m"], sizes["n"], sizes["k"]
    if genes.get("swap_ab") is True:
        m, n = n, m
    tile_m, tile_n, tile_k = (_int(genes, "tile_m", 128), _int(genes, "tile_n", 128),
                              _int(genes, "tile_k", 64))
    consumers = max(1, _int(genes, "consumers", 2))
    split = max(1, _int(genes, "split_k", 1))
    separate = genes.get("arrangement") == "separate"
    split_n = genes.get("arrangement") == "split_n"
    chains = consumers if separate else 1
    cm, cn = _cluster(genes)
    k_part = -(-k // split)
    return _Tiling(
        m=m, n=n, k=k, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k,
        stages=max(1, _int(genes, "stages", 4)), consumers=consumers, split=split,
        separate=separate, split_n=split_n, chains=chains, wgs_per_tile=1 if separate else consumers,
        cta_m=tile_m * chains, cta_n=tile_n, cm=cm, cn=cn,
        persistent=genes.get("persistent") is True,
        tma_store=genes.get("epilogue") == "tma_store",
        swapped=genes.get("swap_ab") is True, stream_k=genes.get("stream_k") is True,
        swizzle=_int(genes, "swizzle", 1), raster_m=genes.get("raster", "m") == "m",
        producer_regs=_int(genes, "producer_regs", 40),
        consumer_regs=_int(genes, "consumer_regs", 232),
        k_steps=max(1, -(-k_part // tile_k)))


def _grid(t: _Tiling, element_bytes: int, sm_count: int) -> _Grid:
    # The grid runs whole clusters: a cluster wider than the problem's tiles adds CTAs that
    # load zeros and run their whole K loop (the kernel's ``overhang``), e.g. tile_m 128 in a
    # 2x1 cluster at M = 128 doubles the CTAs (measured at 0.11-0.80x on the H200,
    # bench/tune_gpu round 9).
    tiles_m = math.ceil(math.ceil(t.m / t.cta_m) / t.cm) * t.cm
    tiles_n = math.ceil(math.ceil(t.n / t.cta_n) / t.cn) * t.cn
    if t.persistent and t.swizzle > 1:
        # The scheduler rounds the clusters across its raster up to whole swizzle bands, and
        # walks the empty tiles through their whole K loop.
        if t.raster_m:
            across = -(-tiles_n // t.cn)
            tiles_n = -(-across // t.swizzle) * t.swizzle * t.cn
        else:
            across = -(-tiles_m // t.cm)
            tiles_m = -(-across // t.swizzle) * t.swizzle * t.cm
    tiles = tiles_m * tiles_n * t.split
    stage_bytes = (t.tile_m + t.tile_n) * t.tile_k * element_bytes * t.chains
    smem = t.stages * stage_bytes + (t.tile_m * 64 * element_bytes * t.consumers
                                     if t.tma_store else 0)
    threads = 128 * (t.consumers + 1)
    regs = 128 * (t.producer_regs + t.consumers * t.consumer_regs)
    per_sm = max(1, min(SMEM_PER_SM // max(1, smem), REGISTERS_PER_SM // max(1, regs),
                        2048 // threads))
    cluster = t.cm * t.cn
    slots = max(1, (sm_count // cluster) * cluster * per_sm)
    waves = tiles / slots
    wave_eff = tiles / (math.ceil(waves) * slots)
    return _Grid(tiles, smem, per_sm, slots, waves, wave_eff, min(tiles, slots))


def gemm_estimate(genes: Mapping[str, Any], sizes: Mapping[str, int],
                  element_bytes: int = 2, device: DeviceProfile | None = None) -> Estimate | None:
    """The analytical time of a GEMM schedule over its ideal (see the module doc) on
    ``device`` (None: :data:`DEFAULT_DEVICE`), or None when ``genes`` are not a GEMM tiling
    (no ``tile_m``/``tile_n``/``tile_k``)."""
    gpu = device or DEFAULT_DEVICE
    sm_count, peak_tflops, hbm_bytes_per_s = gpu.sm_count, gpu.bf16_tflops, gpu.hbm_bytes_per_s
    l2_bytes_per_s = L2_BYTES_PER_S_PER_SM * sm_count
    t = _tiling(genes, sizes)
    if t is None:
        return None
    g = _grid(t, element_bytes, sm_count)
    m, n, k, cta_m, cta_n, k_steps = t.m, t.n, t.k, t.cta_m, t.cta_n, t.k_steps
    tiles, busy = g.tiles, g.busy

    # wgmma m64nNk16: a narrow N issues more instructions per flop; one warpgroup per tile
    # leaves the tensor cores idle while it waits on its own wgmma.
    wg_n = t.tile_n / t.wgs_per_tile if t.split_n else t.tile_n
    wg_n_eff = wg_n / (wg_n + 24.0)
    wg_m = t.tile_m if t.separate or t.split_n else cta_m // max(1, t.wgs_per_tile)
    mma_eff = wg_n_eff * (0.82 if t.consumers == 1 else 1.0) * min(1.0, wg_m / 64.0)
    # Several CTAs per SM share its tensor cores: a tile takes per_sm times as long.
    peak_sm = peak_tflops * 1e12 / sm_count / g.per_sm
    step_compute = 2.0 * cta_m * cta_n * t.tile_k / (peak_sm * mma_eff)
    # L2 -> SMEM bytes per K slice, less what the cluster multicasts (A along N, B along M).
    step_bytes = (cta_m * t.tile_k / t.cn + cta_n * t.tile_k / t.cm) * element_bytes
    step_memory = step_bytes * busy / l2_bytes_per_s
    step_latency = LOAD_LATENCY_S / max(1, t.stages - 1)
    # Compulsory HBM traffic (each operand and D once), spread over every tile's K slices:
    # the busy tiles' share of it per slice. It bounds a skinny or short-K problem, and a
    # schedule's fixed costs (fill, epilogue, reduction, launch) add to it rather than hide
    # under it, which is what orders schedules that all stream at the HBM roof.
    hbm_bytes = (m * k + n * k + m * n) * element_bytes
    step_hbm = hbm_bytes / (tiles * k_steps) * busy / hbm_bytes_per_s
    step = max(step_compute, step_memory, step_latency, step_hbm)
    epilogue = cta_m * cta_n * element_bytes * busy / hbm_bytes_per_s
    # Swapped, a direct epilogue's stores run down D's columns: uncoalesced.
    epilogue *= 1.0 if t.tma_store else (4.0 if t.swapped else 1.6)
    fill = LOAD_LATENCY_S
    rounds = math.ceil(g.waves)
    if t.persistent and t.stream_k and tiles % sm_count:
        # Stream-K: the last partial wave and one full wave before it are shared evenly
        # by one CTA per SM, at the price of a piece's pipeline fill and a partial tile
        # handed over through L2 (written once, read once) per CTA.
        dp_rounds = max(0, tiles // sm_count - 1)
        share = (tiles - dp_rounds * sm_count) * k_steps / sm_count
        handover = 2 * cta_m * cta_n * 4 * busy / l2_bytes_per_s
        units = math.ceil(share / k_steps) + 1  # the tiles a CTA's run touches
        total = ((dp_rounds * k_steps + share) * step + (dp_rounds + 2) * 0.5 * epilogue
                 + 2 * fill + handover + units * STREAM_K_UNIT_S + LAUNCH_S)
    elif t.persistent:
        # The next tile's loads overlap this tile's epilogue: fill once per SM.
        total = rounds * (k_steps * step + 0.5 * epilogue) + fill + LAUNCH_S
    else:
        total = rounds * (k_steps * step + epilogue + fill) + LAUNCH_S
    if t.split > 1:
        # Per tile, the cluster's handshake and the fp32 partials summed through DSMEM.
        total += rounds * (SPLIT_SYNC_S + (t.split - 1) * cta_m * cta_n * 4 / DSMEM_BYTES_PER_S)
    total = max(total, hbm_bytes / hbm_bytes_per_s)
    ideal = 2.0 * m * n * k / (peak_tflops * 1e12)
    return Estimate(total / ideal, {
        "waves": g.waves, "wave_eff": g.wave_eff, "per_sm": float(g.per_sm), "mma_eff": mma_eff,
        "compute_bound": float(step == step_compute), "latency_bound": float(step == step_latency),
        "memory_bound": float(step == step_memory),
        "hide": min(1.0, (t.stages - 1) * step_compute / LOAD_LATENCY_S),
        "intensity": 2.0 * cta_m * cta_n / ((cta_m + cta_n) * element_bytes),
        "smem_frac": g.smem / SMEM_PER_SM, "k_steps": float(k_steps),
    })


def analytical_log(genes: Mapping[str, Any], sizes: Mapping[str, int],
                   device: DeviceProfile | None = None) -> float:
    """log of :func:`gemm_estimate`'s relative time, 0.0 where it makes none."""
    estimate = gemm_estimate(genes, sizes, device=device)
    return math.log(estimate.relative) if estimate is not None else 0.0


def features(genes: Mapping[str, Any], sizes: Mapping[str, int],
             device: DeviceProfile | None = None) -> dict[str, float]:
    """A flat numeric description of a candidate: every gene (a number as itself and its
    log2, a flag as 0/1, any other value one-hot as ``name=value``) and the analytical
    terms (``est.*``)."""
    out: dict[str, float] = {}
    for name, value in genes.items():
        if isinstance(value, bool):
            out[name] = float(value)
        elif isinstance(value, int):
            out[name] = float(value)
            out[f"log2:{name}"] = math.log2(value) if value > 0 else -1.0
        elif isinstance(value, float):
            out[name] = value
        else:
            out[f"{name}={value}"] = 1.0
    estimate = gemm_estimate(genes, sizes, device=device)
    if estimate is not None:
        out["est.log"] = math.log(estimate.relative)
        for key, value in estimate.terms.items():
            out[f"est.{key}"] = float(value)
    return out


@dataclass(frozen=True)
class Stump:
    """``left`` where feature ``column`` <= ``threshold``, else ``right``."""

    column: int
    threshold: float
    left: float
    right: float


def fit_stumps(x: np.ndarray, y: np.ndarray, rounds: int = 60, rate: float = 0.3,
               min_leaf: int = 2) -> list[Stump]:
    """Gradient boosting of regression stumps on squared error (``y`` minus the sum so far,
    fitted one best split at a time, shrunk by ``rate``)."""
    stumps: list[Stump] = []
    rows = len(y)
    if rows < 2 * min_leaf:
        return stumps
    residual = y.astype(float).copy()
    order = np.argsort(x, axis=0, kind="stable")
    for _ in range(rounds):
        best: tuple[float, int, float, float, float] | None = None
        total, total_sq = residual.sum(), (residual ** 2).sum()
        for column in range(x.shape[1]):
            idx = order[:, column]
            values, r = x[idx, column], residual[idx]
            csum = np.cumsum(r)
            counts = np.arange(1, rows + 1)
            # A split after position i (0-based) is valid where the next value differs.
            valid = np.zeros(rows, dtype=bool)
            valid[:-1] = values[:-1] < values[1:]
            valid &= (counts >= min_leaf) & (rows - counts >= min_leaf)
            if not valid.any():
                continue
            left_n, right_n = counts, rows - counts
            gain = np.where(valid, csum ** 2 / left_n + (total - csum) ** 2 / np.maximum(right_n, 1),
                            -np.inf)
            i = int(np.argmax(gain))
            sse = total_sq - gain[i]
            if best is None or sse < best[0]:
                left = csum[i] / left_n[i]
                right = (total - csum[i]) / right_n[i]
                best = (sse, column, (values[i] + values[i + 1]) / 2.0, left, right)
        if best is None:
            break
        _, column, threshold, left, right = best
        stump = Stump(column, threshold, rate * left, rate * right)
        stumps.append(stump)
        residual -= np.where(x[:, column] <= threshold, stump.left, stump.right)
    return stumps


def predict_stumps(stumps: Sequence[Stump], x: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x))
    for s in stumps:
        out += np.where(x[:, s.column] <= s.threshold, s.left, s.right)
    return out


class CostModel:
    """Predicts log relative time from gene values: analytical, then learned as the study
    measures (see the module doc). ``fit`` on (genes, value) pairs; ``predict`` a batch."""

    def __init__(self, sizes: Mapping[str, int] | None = None, min_fit: int = MIN_FIT,
                 rounds: int = 60, rate: float = 0.3,
                 device: DeviceProfile | None = None, prior: Prior | None = None) -> None:
        self.sizes = dict(sizes or {})
        self.device = device
        """The GPU its estimates are for (None: :data:`DEFAULT_DEVICE`)."""
        self.prior = prior
        """What ranks before the study has measured enough, and what its line is fitted over
        (None: the analytical estimate; see the module doc)."""
        self.min_fit = min_fit
        self.rounds = rounds
        self.rate = rate
        self.columns: list[str] = []
        self.line = (0.0, 1.0)  # intercept, slope over the analytical log
        self.stumps: list[Stump] = []
        self.fitted = 0

    def _base(self, genes: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """The prior's prediction where there is one, else the analytical estimate."""
        if self.prior is not None:
            return np.asarray(self.prior(genes), dtype=float)
        return np.array([analytical_log(g, self.sizes, self.device) for g in genes])

    def _matrix(self, genes: Sequence[Mapping[str, Any]]) -> np.ndarray:
        rows = [features(g, self.sizes, self.device) for g in genes]
        x = np.zeros((len(rows), len(self.columns)))
        index = {c: i for i, c in enumerate(self.columns)}
        for r, row in enumerate(rows):
            for name, value in row.items():
                i = index.get(name)
                if i is not None:
                    x[r, i] = value
        return x

    def fit(self, genes: Sequence[Mapping[str, Any]], values: Sequence[float]) -> CostModel:
        """Learn from measured candidates (``values``: relative times, > 0)."""
        pairs = [(g, v) for g, v in zip(genes, values, strict=True)
                 if v is not None and math.isfinite(v) and v > 0]
        self.fitted = len(pairs)
        if len(pairs) < self.min_fit:
            self.columns, self.line, self.stumps = [], (0.0, 1.0), []
            return self
        gs = [g for g, _ in pairs]
        y = np.log([v for _, v in pairs])
        a = self._base(gs)
        if np.ptp(a) > 1e-9:
            slope, intercept = np.polyfit(a, y, 1)
            # The estimate is trusted for its order: a line that inverts it is not kept.
            slope = max(float(slope), 0.0)
            intercept = float(np.mean(y) - slope * np.mean(a))
        else:
            slope, intercept = 0.0, float(np.mean(y))
        self.line = (intercept, slope)
        names: dict[str, None] = {}
        for g in gs:
            names.update(dict.fromkeys(features(g, self.sizes, self.device)))
        self.columns = sorted(names)
        x = self._matrix(gs)
        self.stumps = fit_stumps(x, y - (intercept + slope * a), self.rounds, self.rate)
        return self

    @property
    def reads(self) -> tuple[str, ...]:
        """The genes the analytical estimate reads for these sizes (none where it makes no
        estimate): the moves this model can tell apart before anything is measured."""
        return ANALYTICAL_GENES if all(n in self.sizes for n in ("m", "n", "k")) else ()

    @property
    def learned(self) -> bool:
        return self.fitted >= self.min_fit

    def predict(self, genes: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Predicted log relative time per candidate (lower is faster)."""
        if not genes:
            return np.zeros(0)
        a = self._base(genes)
        if not self.learned:
            return a
        intercept, slope = self.line
        out = intercept + slope * a
        if self.stumps:
            out = out + predict_stumps(self.stumps, self._matrix(genes))
        return out
