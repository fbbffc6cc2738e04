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
written). Everything else here is resource feasibility TS does not judge.
"""

from __future__ import annotations

from tsopt.core.space import Finding
from tsopt.search_spaces.gemm.config import SMEM_CAPACITY, GemmConfig


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


def gemm_checks(cfg: GemmConfig, k_tiles: int | None = None) -> list[Finding]:
    """All of tsopt's own checks for one configuration; empty when it may be built."""
    k = k_tiles if k_tiles is not None else cfg.k_tiles
    findings = async_consumer_findings(cfg, k) + producer_findings(cfg, k)
    if any(op == "commit" for op, sec in cfg.load_ops if sec == "tail"):
        findings.append(Finding(
            "tsopt.stage_identity",
            "delayed commit needs advance_on_acquire, which TMA->async pipelines do not offer: "
            "commit would signal the wrong stage",
        ))
    for task in ("load", "mma"):
        if cfg.head_depth(task) >= cfg.k_tiles:
            findings.append(Finding(
                "tsopt.domain",
                f"{task} head holds {cfg.head_depth(task)} K slices but the problem has only "
                f"{cfg.k_tiles}",
            ))
    if cfg.separate and cfg.consumers == 1:
        findings.append(Finding(
            "tsopt.arrangement",
            "arrangement 'separate' needs 2 consumer warpgroups: with one, it is the "
            "cooperative kernel",
        ))
    if cfg.tile_m % (64 * cfg.mma_warpgroups):
        findings.append(Finding(
            "tsopt.tile_shape",
            f"tile_m={cfg.tile_m} does not split into m64 wgmma rows for {cfg.mma_warpgroups} "
            "consumer warpgroups",
        ))
    elif cfg.m_repeats * cfg.tile_n > 256:
        findings.append(Finding(
            "tsopt.registers",
            f"{cfg.acc_registers} fp32 accumulator registers per thread "
            f"({cfg.wg_tile_m}x{cfg.tile_n} per warpgroup): more than a warpgroup can hold",
        ))
    elif cfg.acc_registers + 40 > cfg.consumer_regs:
        findings.append(Finding(
            "tsopt.registers",
            f"{cfg.acc_registers} accumulator registers + ~40 for addressing exceed the "
            f"consumer budget of {cfg.consumer_regs}: it would spill",
        ))
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
    if cfg.k % 8 or cfg.n % 8:
        findings.append(Finding(
            "tsopt.alignment", f"K={cfg.k} and N={cfg.n} must be multiples of 8 (16-byte rows)"
        ))
    if not cfg.persistent and (cfg.raster != "m" or cfg.swizzle != 1):
        findings.append(Finding(
            "tsopt.launch_shape",
            "raster order and swizzle belong to the persistent scheduler; a one-tile-per-CTA "
            "grid takes raster 'm', swizzle 1",
        ))
    return findings
