"""What the TS verifier does not see in the Hopper GEMM, checked by tsopt.

The central one is the asynchronous consumer (:func:`async_consumer_findings`).
TS models ``Accumulator.wgmma`` as an ordinary (synchronous) producer work,
so for TS a stage is free once ``release`` runs. On the GPU the wgmma only
*issues* there; its SMEM reads end at the ``warpgroup.wait_group(N)`` that
retires its batch. The check replays one consumer warpgroup's schedule over
a concrete K domain and tracks, per op:

- ``wait``: which logical stage (K slice) the consumer now holds. With
  ``advance_on_wait`` the pipeline's wait cursor advances at once and
  ``release`` frees the *oldest* held stage from a lagging cursor; without it
  both use one cursor, so a wait before the previous release re-waits the
  stage already held and a release frees the stage just waited on;
- ``read_stage``/``wgmma``: which stage each wgmma batch reads (the i-th batch
  must read K slice i, or the GEMM sums a slice twice and skips another);
- ``wgmma_wait<N>``: all batches but the newest N are retired;
- ``release``: the released stage must have no batch still in flight;
- the epilogue: the accumulator may only be read once every batch is retired;
- ``try_wait``: the stage it probes. Its result is kept and handed to the
  next ``wait``, which skips waiting when it is true; probing one stage and
  then waiting on another (a release in between without ``advance_on_wait``,
  or a wait with no probe of its own) can skip the wait on a stage whose TMA
  has not landed. The producer's ``try_acquire``/``acquire`` pair is replayed
  the same way (:func:`producer_findings`).

Stage numbers are logical (K slice indices), so ring-buffer reuse does not hide
a wrong stage. Rules: ``tsopt.async_release`` (a stage released, or read,
while a wgmma reading it is in flight or after it was released),
``tsopt.stage_identity`` (a wgmma reading another K slice's stage, or a
wait or acquire consuming a probe of another stage),
``tsopt.async_acc_read`` (the epilogue reading an accumulator still being
written). Everything else here is resource feasibility TS does not judge, and the
shape rules of the instructions the kernel issues (:func:`shape_findings`):
``tsopt.wgmma_n`` and ``tsopt.wgmma_k`` (the wgmma each consumer warpgroup issues),
``tsopt.tma_box`` (the TMA boxes of A and B), ``tsopt.epilogue_coverage`` (the epilogue
writes every column of the tile) and ``tsopt.cluster_size`` (a portable cluster); and two
rules of the problem's geometry, ``tsopt.unit_extent`` (:func:`unit_extent_findings`: an
operand with a single row) and ``tsopt.swizzle_band`` (:func:`swizzle_band_findings`: a
persistent raster swizzle wider than the problem, whose empty tiles run in full). What
ptxas makes of a schedule these rules accept is checked after the compile, on the SASS
(:mod:`tsopt.build.sass`: an accumulator touched before the wait that retires its wgmma, the
cause of the race in bench/wrong_answer).

A kernel whose M is a launch argument (``cfg.m_range``) is judged by every rule above at
each M of :func:`range_sizes` (the extremes of its range, one tile, a partial last tile, the
persistent loop's shortest and longest runs: :func:`range_findings`), and by
``tsopt.runtime_m`` (:func:`runtime_m_findings`: what cannot follow M at run time).
"""

from __future__ import annotations

import dataclasses

from tsopt.core.space import Finding
from tsopt.search_spaces.gemm.config import SMEM_CAPACITY, GemmConfig

WGMMA_N = (8, 256, 8)
"""Hopper wgmma N for 16-bit inputs (bf16, fp16): from 8 to 256 in steps of 8 (the DSL's
``MmaF16BF16Op`` refuses any other, so such a kernel never builds)."""
WGMMA_K = 16
"""K of one 16-bit wgmma: the kernel issues ``tile_k // 16`` of them per K slice."""
TMA_INNER_BYTES = 16
"""A TMA box's inner dimension (bytes) is a positive multiple of 16 (``cuTensorMapEncodeTiled``;
the DSL's ``make_smem_layout_a``/``_b`` assert a K extent of whole 8-element groups)."""
PORTABLE_CLUSTER = 8
"""CTAs in a cluster that every sm_90 launch accepts; more need the kernel attribute
``cudaFuncAttributeNonPortableClusterSizeAllowed``, which no knob of this space sets."""


def consumer_trace(cfg: GemmConfig, k_tiles: int) -> list[str]:
    """One consumer warpgroup's ops for one tile over ``k_tiles`` K slices, then the epilogue."""
    head = list(cfg.section(cfg.mma_ops, "head"))
    loop = list(cfg.section(cfg.mma_ops, "loop"))
    tail = list(cfg.section(cfg.mma_ops, "tail"))
    return head + loop * max(0, k_tiles - cfg.inflight) + tail + ["epilogue"]


def async_consumer_findings(cfg: GemmConfig, k_tiles: int) -> list[Finding]:
    """Replay the consumer schedule; the first hazard of each rule (see the module doc)."""
    aow = cfg.advance_on_wait
    waits = 0  # advance_on_wait: the wait cursor, in K slices
    released = 0  # the release cursor, in K slices
    held: list[int] = []  # stages waited for and not released, oldest first
    last_waited: int | None = None
    token: int | None = None
    inflight: list[tuple[int, int]] = []  # (batch, stage read), oldest first
    batches = 0
    probed: int | None = None  # the stage the kept try_wait result is about
    findings: dict[str, Finding] = {}

    def find(rule: str, message: str) -> None:
        findings.setdefault(rule, Finding(rule, message))

    for i, op in enumerate(consumer_trace(cfg, k_tiles)):
        where = f"op #{i} ({op})"
        if op == "try_wait":
            probed = waits if aow else released
        elif op == "wait":
            stage = waits if aow else released
            if probed is not None and probed != stage:
                find("tsopt.stage_identity",
                     f"{where}: waits on the stage of K slice {stage} with the try_wait result "
                     f"of slice {probed}: a true result skips the wait before the TMA landed")
            if aow:
                waits += 1
            if stage not in held:
                held.append(stage)
            last_waited = stage
        elif op == "read_stage":
            token = last_waited
        elif op == "wgmma":
            if token is None:
                continue
            if token not in held:
                find("tsopt.async_release",
                     f"{where}: wgmma batch {batches} issued on stage {token} after it was "
                     "released")
            if token != batches:
                why = ("a wait before the previous release re-waits the stage already held: "
                       "delayed release needs advance_on_wait") if not aow else "stage order broken"
                find("tsopt.stage_identity",
                     f"{where}: wgmma batch {batches} reads the stage of K slice {token}, "
                     f"not slice {batches} ({why})")
            inflight.append((batches, token))
            batches += 1
        elif op.startswith("wgmma_wait"):
            pending = int(op.removeprefix("wgmma_wait"))
            inflight = inflight[len(inflight) - pending:] if pending else []
        elif op == "release":
            if aow:
                if not held:
                    continue
                stage = held.pop(0)
            else:
                stage = released
                if stage in held:
                    held.remove(stage)
            released += 1
            readers = [b for b, s in inflight if s == stage]
            if readers:
                find("tsopt.async_release",
                     f"{where}: stage of K slice {stage} released while wgmma batch {readers[0]} "
                     f"reading it is still in flight (no warpgroup.wait_group has retired it)")
        elif op == "epilogue" and inflight:
            find("tsopt.async_acc_read",
                 f"the epilogue reads the accumulator while {len(inflight)} wgmma batch(es) "
                 f"(the last {inflight[-1][0]}) may still be writing it: no wait_group(0) first")
    return list(findings.values())


def producer_findings(cfg: GemmConfig, k_tiles: int) -> list[Finding]:
    """The producer's kept ``try_acquire`` result must be about the stage ``acquire`` takes.

    Without ``advance_on_acquire`` (TMA pipelines have none) the producer's one
    cursor advances at ``commit``; a true probe of another stage lets
    ``acquire`` skip waiting for the consumers to release the one it refills.
    """
    head = list(cfg.section(cfg.load_ops, "head"))
    loop = list(cfg.section(cfg.load_ops, "loop"))
    trace = head + loop * max(0, k_tiles - cfg.prefetch) + list(cfg.section(cfg.load_ops, "tail"))
    cursor, probed = 0, None
    for i, op in enumerate(trace):
        if op == "try_acquire":
            probed = cursor
        elif op == "acquire" and probed is not None and probed != cursor:
            return [Finding(
                "tsopt.stage_identity",
                f"producer op #{i} (acquire): takes the stage of K slice {cursor} with the "
                f"try_acquire result of slice {probed}: a true result skips waiting for its "
                "release",
            )]
        elif op == "commit":
            cursor += 1
    return []


def shape_findings(cfg: GemmConfig) -> list[Finding]:
    """The instruction shapes the kernel issues, and the columns its epilogue writes.

    - ``tsopt.wgmma_n``: each consumer warpgroup issues ``m64 x wg_tile_n x k16`` wgmma, where
      ``wg_tile_n`` is ``tile_n`` (cooperating warpgroups split the tile along M, a separate
      warpgroup owns its tile) or ``tile_n // consumers`` (``split_n``): 8..256, a multiple
      of 8, and with ``split_n`` the warpgroups' columns must add up to ``tile_n``.
    - ``tsopt.wgmma_k``: ``tile_k // 16`` wgmma per K slice; a remainder is never multiplied.
    - ``tsopt.tma_box``: A and B are loaded in boxes of K extent ``tile_k`` (CuTe splits rows
      beyond 256 into more boxes by itself), so ``tile_k`` x element bytes must be a multiple
      of 16.
    - ``tsopt.epilogue_coverage``: both epilogues (``direct`` and ``tma_store``) drain a
      warpgroup's accumulator in subtiles of ``cfg.epi_cols`` columns (64, or the widest of
      32, 16 dividing its ``wg_tile_n`` columns); columns no subtile width divides (an odd
      multiple of 8: an 8-column TMA store box aborts the DSL compiler) would leave the last
      columns of every tile (of every warpgroup's half, ``split_n``) unwritten.
    - ``tsopt.cluster_size``: at most 8 CTAs (the portable cluster size).
    """
    findings: list[Finding] = []
    low, high, step = WGMMA_N
    wg_n = cfg.wg_tile_n
    named = (f"N={wg_n} (tile_n={cfg.tile_n} split along N by {cfg.mma_warpgroups} "
             "warpgroups)" if cfg.split_n else f"tile_n={cfg.tile_n}")
    if cfg.split_n and wg_n * cfg.mma_warpgroups != cfg.tile_n:
        findings.append(Finding(
            "tsopt.wgmma_n",
            f"tile_n={cfg.tile_n} does not split into {cfg.mma_warpgroups} equal column runs "
            "for the split_n warpgroups: the last columns of every tile would not be computed",
        ))
    elif not (low <= wg_n <= high and wg_n % step == 0):
        findings.append(Finding(
            "tsopt.wgmma_n",
            f"{named} is the N of the m64 x N x k16 wgmma each "
            f"consumer warpgroup issues; for {cfg.dtype} N must be a multiple of {step} from "
            f"{low} to {high}",
        ))
    inner = cfg.tile_k * cfg.element_bytes
    if inner % TMA_INNER_BYTES:
        findings.append(Finding(
            "tsopt.tma_box",
            f"tile_k={cfg.tile_k}: the TMA boxes of A and B are {inner} bytes wide along K, "
            f"not a multiple of {TMA_INNER_BYTES} bytes",
        ))
    elif cfg.tile_k % WGMMA_K:
        findings.append(Finding(
            "tsopt.wgmma_k",
            f"tile_k={cfg.tile_k} is not a multiple of the wgmma K ({WGMMA_K}): the "
            f"{cfg.tile_k // WGMMA_K} wgmma of a K slice multiply {cfg.tile_k // WGMMA_K * WGMMA_K} "
            f"of its {cfg.tile_k} columns and skip the rest",
        ))
    if cfg.epi_subtiles * cfg.epi_cols != wg_n:
        written = cfg.epi_subtiles * cfg.epi_cols
        wrote = (f"writes {cfg.epi_subtiles} subtile(s), columns 0..{written - 1}, and leaves"
                 if written else "writes no subtile and leaves")
        owner = (f"each split_n warpgroup's {wg_n} columns of tile_n={cfg.tile_n}"
                 if cfg.split_n else f"tile_n={cfg.tile_n}")
        findings.append(Finding(
            "tsopt.epilogue_coverage",
            f"{owner} is not a multiple of the epilogue's {cfg.epi_cols}-column subtile: "
            f"the {cfg.epilogue} epilogue {wrote} columns {written}..{wg_n - 1} of every "
            f"{'warpgroup' if cfg.split_n else 'tile'} unwritten",
        ))
    if cfg.cluster_size > PORTABLE_CLUSTER:
        findings.append(Finding(
            "tsopt.cluster_size",
            f"cluster={cfg.cluster_m}x{cfg.cluster_n} (x split_k={cfg.split_k}) has "
            f"{cfg.cluster_size} CTAs: more than the "
            f"portable {PORTABLE_CLUSTER}, and no knob of this space opts in to non-portable "
            "cluster sizes (the launch would need cudaFuncAttributeNonPortableClusterSizeAllowed)",
        ))
    return findings


def split_k_findings(cfg: GemmConfig) -> list[Finding]:
    """``tsopt.split_k``: what can be checked statically of the split-K reduction, which TS
    does not model (its barriers are not TS resources: a cross-CTA handshake after the K loop).

    The protocol (``Accumulator.reduce_split``): the ``split_k`` CTAs of one output tile form
    a cluster along z; split s > 0 writes its fp32 partial into its own SMEM buffer, arrives
    once per thread on split 0's ``ready`` barrier (count ``(split_k - 1) x 128``) and waits
    on its own ``done`` barrier (count 128); split 0 waits on ``ready``, adds the peers'
    partials through DSMEM in split order (deterministic), arrives on every peer's ``done``
    and alone stores D. This rule checks the geometry the protocol assumes:

    - one tile per CTA (``persistent`` False): each barrier completes one phase only, and the
      waits are on phase 0;
    - no multicast cluster (``cluster`` 1x1): the cluster's z extent is the split, and the
      TMA multicast masks and the pipelines' release targets assume a 2-D cluster;
    - at most 8 CTAs in the cluster (``tsopt.cluster_size`` counts the splits too);
    - every split has a K slice of its own: ``split_k <= `` K slices, and the last split
      starts inside K (a split past the end would only add zeros);
    - the exchange buffers' SMEM is counted by TS's own budget check (``ts.smem``).

    Not checked (no static handle): that the ``ready``/``done`` counts match the arrivals at
    run time (they are written from the same ``split_k`` and warpgroup size), the memory
    ordering of the DSMEM reads (release/acquire at cluster scope, by construction)."""
    if cfg.split_k == 1:
        return []
    problems = []
    if cfg.persistent:
        problems.append("a persistent tile loop (its barriers complete one phase: one tile "
                        "per CTA)")
    if (cfg.cluster_m, cfg.cluster_n) != (1, 1):
        problems.append(f"cluster {cfg.cluster_m}x{cfg.cluster_n} (the splits take the "
                        "cluster's z extent; multicast needs 1x1)")
    if cfg.split_k > cfg.k_tiles or (cfg.split_k - 1) * cfg.split_tiles >= cfg.k_tiles:
        problems.append(f"{cfg.k_tiles} K slice(s) of {cfg.tile_k}: a split would have none")
    if not problems:
        return []
    return [Finding("tsopt.split_k", f"split_k={cfg.split_k} cannot run with "
                    + "; ".join(problems))]


INT32_LIMIT = 2**31
"""The stream-K unit arithmetic (``StreamKPlan.segment``) runs in Int32 on the GPU."""


def stream_k_findings(cfg: GemmConfig) -> list[Finding]:
    """``tsopt.stream_k``: what the stream-K decomposition and its fix-up assume, which TS does
    not see (the fix-up is a handshake between CTAs through global memory, inside a work body).

    The protocol (``StreamKPlan``, ``Accumulator.fixup``): on the static persistent tile loop,
    one CTA per SM; a tile's later pieces write fp32 partials to their range's workspace slot
    and raise its flag (release, GPU scope); its first piece spins on each flag (acquire, GPU
    scope), adds the partials in range order and stores D. A CTA waits only for CTAs of a
    lower index. This rule checks the geometry the protocol assumes:

    - the persistent tile loop (``persistent``) without a raster swizzle, a cluster, split-K
      or warpgroups on their own tiles: a piece is one CTA's run of K slices of one tile;
    - a last wave that is not full: with whole waves there is nothing to balance, and the
      kernel would be the data-parallel one plus its fix-up;
    - a piece (and a dummy unit) of at least ``sk_granule`` K slices (one more than either
      head holds), so a unit commits as many stages as it consumes; TS judges the schedule at
      that shortest domain too (``extra_verify_domains``), and so does the replay above;
    - the unit arithmetic fits Int32.

    Not checked (no static handle): that every CTA is resident at once. The grid is one CTA
    per SM and each waits only for lower-numbered CTAs, which the hardware dispatches first,
    so it holds on a GPU this kernel has to itself; a GPU partitioned under it (MPS limits,
    green contexts) with fewer SMs than 132 could leave a waiting CTA's peer unscheduled. Nor
    the memory ordering at run time (release/acquire at GPU scope, by construction), nor that
    two launches on two streams at once share the one workspace (they must not)."""
    if not cfg.stream_k:
        return []
    problems = []
    if not cfg.persistent:
        problems.append("one tile per CTA (stream-K runs on the persistent tile loop)")
    if (cfg.cluster_m, cfg.cluster_n) != (1, 1):
        problems.append(f"cluster {cfg.cluster_m}x{cfg.cluster_n} (a multicast pair would "
                        "need the same tile and K run in both CTAs)")
    if cfg.split_k > 1:
        problems.append(f"split_k={cfg.split_k} (stream-K splits K itself)")
    if cfg.separate:
        problems.append("arrangement 'separate' (a piece is one tile of one chain)")
    if cfg.swizzle != 1:
        problems.append(f"swizzle {cfg.swizzle} (its tiles follow the raster only)")
    plan = cfg.sk_plan
    if plan is not None and not problems:
        if plan.sk_tiles == 0:
            problems.append(f"{plan.tiles} tiles, {plan.tiles // plan.ctas} whole wave(s) of "
                            f"{plan.ctas} CTAs: nothing to balance")
        if cfg.k_tiles < cfg.sk_granule:
            problems.append(f"{cfg.k_tiles} K slice(s) per tile, fewer than a piece's "
                            f"{cfg.sk_granule}")
        if (plan.sk_blocks * max(1, plan.sk_ctas) >= INT32_LIMIT
                or plan.blocks * plan.k_tiles >= INT32_LIMIT
                or plan.units >= INT32_LIMIT):
            problems.append(f"{plan.sk_blocks} blocks of {plan.k_tiles} K slices overflow the "
                            "kernel's Int32 unit arithmetic")
    if not problems:
        return []
    return [Finding("tsopt.stream_k", "stream_k cannot run with " + "; ".join(problems))]


def unit_extent_findings(cfg: GemmConfig) -> list[Finding]:
    """``tsopt.unit_extent``: a problem with a single row of A and D (M = 1).

    CuTe drops a mode of extent 1 when it builds a TMA descriptor: for a 1 x K operand,
    ``make_tiled_tma_atom`` returns the coordinate tensor ``(1,K):(0,1@0)``, one TMA
    dimension (K) with the row mode at stride 0, where 2 x K gives ``(2,K):(1@1,1@0)``. The
    kernel's loads address 2-D boxes of ``tile_m`` (``tile_n``) rows through it; on an H200
    every one of the 12 verifier-valid M = 1 pairs of the property test
    (``bench/gemm_property``) died with CUDA error 715 (illegal instruction), whatever the
    tile, split_k or epilogue. The extents are the kernel's (``cfg.m``, ``cfg.n``): with
    ``swap_ab`` the problem's M is the kernel's N (its B operand and D's columns), which
    builds the same 1-row descriptor (2 of the 12 crashes were swapped). N and K are
    multiples of 8 (``tsopt.alignment``).

    A runtime M is not such a mode: its extent is a dynamic value when the descriptor is
    built, so CuTe keeps the row mode whatever the call's M (``bench/runtime_m`` runs M = 1
    on the H200); the rule judges the extents compiled in."""
    findings = []
    dynamic = ("N" if cfg.swap_ab else "M") if cfg.runtime_m else None
    for mode, extent, operand in (("M", cfg.m, "A"), ("N", cfg.n, "B")):
        if extent != 1 or mode == dynamic:
            continue
        dim = {"M": "N", "N": "M"}[mode] if cfg.swap_ab else mode
        swapped = f" (the kernel's {mode}: swap_ab)" if cfg.swap_ab else ""
        findings.append(Finding(
            "tsopt.unit_extent",
            f"{dim}=1{swapped}: the kernel's {operand} operand has a single row, and CuTe drops "
            f"an extent-1 mode from its TMA descriptor (coordinates (1,K):(0,1@0), one "
            f"dimension) while the kernel loads {cfg.tile_m if mode == 'M' else cfg.tile_n}-row "
            f"2-D boxes: an illegal instruction on the GPU (CUDA error 715); use {dim} >= 2 "
            "(e.g. pad with a zero row)",
        ))
    return findings


def runtime_m_findings(cfg: GemmConfig) -> list[Finding]:
    """``tsopt.runtime_m``: what a kernel cannot do when M is a launch argument.

    Stream-K: its decomposition (``StreamKPlan``: which units of which tiles each CTA takes,
    the workspace's slots and its flags) is computed on the host from the tile count, which a
    runtime M changes; making that plan a launch-time computation (and the workspace sized
    for the range's largest) is not done, so a stream-K kernel serves one M (a fixed-M
    problem, ``gemm:dtype:MxNxK``). Split-K's decomposition is along K alone and follows M."""
    if not cfg.runtime_m or not cfg.stream_k:
        return []
    lo, hi = cfg.m_range  # type: ignore[misc]
    return [Finding(
        "tsopt.runtime_m",
        f"stream_k cannot take M at run time (range {lo}-{hi}): its split of the tiles into "
        "units, its workspace slots and flags are fixed at build time from M's tile count; "
        "tune a fixed M (gemm:dtype:MxNxK) for stream-K")]


def m_tile(cfg: GemmConfig) -> int:
    """Rows of the problem's M one work tile covers (swapped, the kernel's columns)."""
    return cfg.tile_n if cfg.swap_ab else cfg.cta_tile_m


def at_m(cfg: GemmConfig, m: int) -> GemmConfig:
    """``cfg`` launched at a problem M of ``m`` (a runtime-M kernel's configuration stays one:
    its stores predicated, its row mode dynamic)."""
    return dataclasses.replace(cfg, **({"n": m} if cfg.swap_ab else {"m": m}))


def range_sizes(cfg: GemmConfig) -> tuple[int, ...]:
    """The M values a runtime-M kernel is judged at, sorted: the range's smallest and largest,
    exactly one work tile, a partial last tile (one row past a whole tile, at both ends of the
    range), and the persistent loop's turns: its shortest run (every CTA one tile, at the
    smallest M) and the first M at which a CTA takes a second tile (the longest run is at
    the largest M)."""
    lo, hi = cfg.m_range  # type: ignore[misc]
    tile = m_tile(cfg)
    wanted = {lo, hi, tile, tile + 1, hi - hi % tile + 1, lo - lo % tile + tile + 1}
    if cfg.persistent:
        # One wave is sm_count // cluster_size clusters; the clusters across the fixed side
        # (N, or swapped the kernel's M) times those along M first outnumber it here.
        dyn, fixed = ((cfg.cluster_n, cfg.cluster_m) if cfg.swap_ab
                      else (cfg.cluster_m, cfg.cluster_n))
        across = -(-(cfg.tiles_m if cfg.swap_ab else cfg.tiles_n) // fixed)
        wave = max(1, cfg.sm_count // cfg.cluster_size)
        wanted.add(wave // across * tile * dyn + 1)
    return tuple(sorted(m for m in wanted if lo <= m <= hi))


def range_findings(cfg: GemmConfig) -> list[Finding]:
    """tsopt's checks of a runtime-M kernel: :func:`runtime_m_findings`, then every rule of
    :func:`gemm_checks` at each M of :func:`range_sizes`, the first finding of each rule named
    with the M it fails at."""
    findings = runtime_m_findings(cfg)
    rules = {f.rule for f in findings}
    lo, hi = cfg.m_range  # type: ignore[misc]
    for m in range_sizes(cfg):
        for finding in gemm_checks(at_m(cfg, m)):
            if finding.rule not in rules:
                rules.add(finding.rule)
                findings.append(Finding(finding.rule, f"{finding.message} (at M={m} of the "
                                                      f"runtime range {lo}-{hi})"))
    return findings


def gemm_checks(cfg: GemmConfig, k_tiles: int | None = None) -> list[Finding]:
    """All of tsopt's own checks for one configuration; empty when it may be built."""
    k = k_tiles if k_tiles is not None else cfg.split_tiles
    findings = async_consumer_findings(cfg, k) + producer_findings(cfg, k)
    plan = cfg.sk_plan
    if plan is not None and k_tiles is None and 0 < plan.granule < k:
        # A stream-K unit runs as few as granule K slices (a dummy): the same replay there.
        rules = {f.rule for f in findings}
        findings += [f for f in (async_consumer_findings(cfg, plan.granule)
                                 + producer_findings(cfg, plan.granule)) if f.rule not in rules]
    if any(op == "commit" for op, sec in cfg.load_ops if sec == "tail"):
        findings.append(Finding(
            "tsopt.stage_identity",
            "delayed commit needs advance_on_acquire, which TMA->async pipelines do not offer: "
            "commit would signal the wrong stage",
        ))
    for task in ("load", "mma"):
        if cfg.head_depth(task) >= cfg.split_tiles:
            findings.append(Finding(
                "tsopt.domain",
                f"{task} head holds {cfg.head_depth(task)} K slices but the problem has only "
                f"{cfg.split_tiles}" + (f" per split (split_k={cfg.split_k})" if cfg.split_k > 1
                                        else ""),
            ))
    if (cfg.separate or cfg.split_n) and cfg.consumers == 1:
        findings.append(Finding(
            "tsopt.arrangement",
            f"arrangement '{cfg.arrangement}' needs 2 consumer warpgroups: with one, it is the "
            "cooperative kernel",
        ))
    findings += shape_findings(cfg)
    findings += split_k_findings(cfg)
    findings += stream_k_findings(cfg)
    findings += unit_extent_findings(cfg)
    findings += _tile_findings(cfg)
    if cfg.smem_bytes > SMEM_CAPACITY:
        findings.append(Finding(
            "tsopt.smem",
            f"{cfg.stages} stages x {cfg.stage_bytes} B need {cfg.smem_bytes} B SMEM "
            f"> {SMEM_CAPACITY} B",
        ))
    for name, tile, mcast in (("B", cfg.tile_n, cfg.cluster_m), ("A", cfg.tile_m, cfg.cluster_n)):
        if mcast > 1 and (tile // mcast) % 8:
            findings.append(Finding(
                "tsopt.multicast",
                f"a {tile}-row {name} slice does not split into {mcast} multicast parts of 8 rows",
            ))
    if cfg.k % 8 or cfg.problem_n % 8:
        findings.append(Finding(
            "tsopt.alignment", f"K={cfg.k} and N={cfg.problem_n} must be multiples of 8 (16-byte rows)"
        ))
    if not cfg.persistent and (cfg.raster != "m" or cfg.swizzle != 1):
        findings.append(Finding(
            "tsopt.launch_shape",
            "raster order and swizzle belong to the persistent scheduler; a one-tile-per-CTA "
            "grid takes raster 'm', swizzle 1",
        ))
    findings += swizzle_band_findings(cfg)
    return findings


def _tile_findings(cfg: GemmConfig) -> list[Finding]:
    """``tsopt.tile_shape`` (the rows each consumer warpgroup accumulates are whole m64 wgmma
    rows) and ``tsopt.registers`` (its accumulator, ``wg_tile_m x wg_tile_n`` fp32 over 128
    threads, fits the consumer budget with ~40 registers for addressing).

    Every arrangement keeps the template's first cap, 128 accumulator registers a thread
    (``m_repeats x wg_tile_n <= 256``). ``split_n`` was first let past it (cuBLAS's coopB
    192x192 tile holds 192x96 per warpgroup, 144 registers), but this kernel does not hold
    them: compiled at 4096^3 with 232 consumer registers, 192x192 spills 624 bytes a thread
    and 256x192 1,744 (ptxas compiles the 384-thread kernel to 168 registers), and such
    kernels ran at 0.04-0.10x cuBLAS (bench/where_space_loses, stop 46)."""
    if cfg.tile_m % (64 * (1 if cfg.split_n else cfg.mma_warpgroups)):
        rows = cfg.tile_m / cfg.mma_warpgroups
        hint = (f" ({rows:g} rows each; split it along N instead, arrangement 'split_n')"
                if cfg.mma_warpgroups > 1 and cfg.tile_m % 64 == 0 else "")
        return [Finding(
            "tsopt.tile_shape",
            f"tile_m={cfg.tile_m} does not split into m64 wgmma rows for {cfg.mma_warpgroups} "
            f"consumer warpgroups splitting it along M{hint}",
        )]
    if cfg.m_repeats * cfg.wg_tile_n > 256:
        return [Finding(
            "tsopt.registers",
            f"{cfg.acc_registers} fp32 accumulator registers per thread "
            f"({cfg.wg_tile_m}x{cfg.wg_tile_n} per warpgroup): more than a warpgroup can hold "
            "without spilling (the cap is 128)",
        )]
    if cfg.acc_registers + 40 > cfg.consumer_regs:
        return [Finding(
            "tsopt.registers",
            f"{cfg.acc_registers} accumulator registers ({cfg.wg_tile_m}x{cfg.wg_tile_n} per "
            f"warpgroup) + ~40 for addressing exceed the consumer budget of "
            f"{cfg.consumer_regs}: it would spill",
        )]
    return []


def swizzle_band_findings(cfg: GemmConfig) -> list[Finding]:
    """``tsopt.swizzle_band``: the persistent scheduler walks tiles in bands of ``swizzle``
    clusters across the raster (along N for raster 'm', along M for 'n') and rounds the
    problem up to whole bands. A band wider than the problem's clusters across the raster
    makes it walk ``swizzle`` clusters where there are fewer: the extra tiles are empty but
    still load (TMA zero fill) and multiply their whole K loop, which costs their time in
    full (measured on the H200 at 128x8192x8192, swapped, 1-2 tiles across N: swizzle 8
    ran 4-8x slower than the same kernel with a band that fits, bench/skinny_l2). A band of
    at most the clusters there is the same order without the empty tiles."""
    if not cfg.persistent or cfg.swizzle <= 1:
        return []
    if cfg.raster == "m":
        across, size, clusters = "N", cfg.n, -(-cfg.tiles_n // cfg.cluster_n)
    else:
        across, size, clusters = "M", cfg.m, -(-cfg.tiles_m // cfg.cluster_m)
    if cfg.swizzle <= clusters:
        return []
    # The size is the kernel's: swapped, its N is the problem's M (and its M the problem's N).
    kernel = " of the swapped kernel" if cfg.swap_ab else ""
    return [Finding(
        "tsopt.swizzle_band",
        f"swizzle {cfg.swizzle} is wider than the {clusters} cluster{'s' if clusters != 1 else ''} "
        f"of tiles across {across}={size}{kernel} (raster '{cfg.raster}'): the persistent "
        f"scheduler would walk "
        f"{cfg.swizzle - clusters} empty cluster{'s' if cfg.swizzle - clusters != 1 else ''} "
        f"per band through their whole K loop; take swizzle <= {clusters}",
    )]
