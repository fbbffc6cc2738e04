"""What the TS verifier does not check in the copy template, checked by tsopt.

TS judges the pipeline protocol (brackets, pairing, deadlock, races), the register and
group rules and the SMEM capacity it allocates. It does not see: warps of two tasks
overlapping or a task straddling a warpgroup, which stage a delayed release or commit
frees, SMEM beyond the boxes it sizes, store-thread registers, how boxes tile the tensor
and a work tile, the persistent grid's consistency, and heads deeper than a work tile.
Each finding has a stable rule name (``tsopt.warp_overlap``, ``tsopt.stage_identity``...).
The TMA box (``tsopt.tma_box``) is the driver's to refuse, at launch: the kernel encodes one
tensor map of ``box_rows x box_cols`` with no swizzle, so both must lie in 1..256 and a box
row (``box_cols`` x element bytes) must be a positive multiple of 16 bytes
(``cuTensorMapEncodeTiled``).
"""

from __future__ import annotations

from tsopt.core.space import Finding
from tsopt.search_spaces.copy.config import SMEM_CAPACITY
from tsopt.search_spaces.copy.kernel import CopyConfig

TMA_BOX_MAX = 256
"""Elements of one TMA box dimension, at most (``cuTensorMapEncodeTiled``)."""
TMA_INNER_BYTES = 16
"""A TMA box's inner dimension, in bytes, is a positive multiple of this (no interleave)."""

LAYOUT_RULES = ("tsopt.warp_overlap", "tsopt.launch_shape")
"""The rules a warp/register layout breaks on its own, whatever the boxes (the layout screen)."""


def copy_checks(cfg: CopyConfig) -> list[Finding]:
    """What TS does not check for this template, each a stable rule name, in a fixed order
    (the first is the verdict's rule)."""
    return [*layout_findings(cfg), *stage_identity_findings(cfg), *capacity_findings(cfg),
            *tiling_findings(cfg), *tma_box_findings(cfg)]


def layout_findings(cfg: CopyConfig) -> list[Finding]:
    """The warps: no task inside another's, no store task across a warpgroup, a block of at
    most 1024 threads."""
    findings: list[Finding] = []
    store = range(cfg.store_warp, cfg.store_warp + cfg.store_warps)
    if cfg.load_warp in store:
        findings.append(
            Finding(
                "tsopt.warp_overlap",
                f"LoadTask warp {cfg.load_warp} lies inside StoreTask warps "
                f"{cfg.store_warp}..{cfg.store_warp + cfg.store_warps - 1}",
            )
        )
    if cfg.store_warps > 1 and cfg.store_warp % 4 + cfg.store_warps > 4 and cfg.store_warp % 4:
        findings.append(
            Finding(
                "tsopt.launch_shape",
                f"StoreTask warps {cfg.store_warp}.. straddle a warpgroup boundary",
            )
        )
    if 32 * cfg.block_warps > 1024:
        findings.append(
            Finding("tsopt.launch_shape", f"block of {32 * cfg.block_warps} threads > 1024")
        )
    return findings


def stage_identity_findings(cfg: CopyConfig) -> list[Finding]:
    """A deferred release/commit frees the *oldest* held stage only when the pipeline keeps a
    separate lagging state for it."""
    findings: list[Finding] = []
    store_tail = [op for op, sec in cfg.store_ops if sec == "tail"]
    if "release" in store_tail and not cfg.advance_on_wait:
        findings.append(
            Finding(
                "tsopt.stage_identity",
                "delayed release without advance_on_wait: release would free the stage just waited on, "
                "not the oldest one still held",
            )
        )
    if "commit" in [op for op, sec in cfg.load_ops if sec == "tail"]:
        findings.append(
            Finding(
                "tsopt.stage_identity",
                "delayed commit needs advance_on_acquire, which TMA->async pipelines do not offer: "
                "commit would signal the wrong stage",
            )
        )
    return findings


def capacity_findings(cfg: CopyConfig) -> list[Finding]:
    """SMEM for the stages, whole vectors per store thread, the store threads' registers."""
    findings: list[Finding] = []
    if cfg.smem_bytes > SMEM_CAPACITY:
        findings.append(
            Finding(
                "tsopt.smem",
                f"{cfg.stages} stages x {cfg.box_rows}x{cfg.box_cols} boxes need {cfg.smem_bytes} B SMEM "
                f"> {SMEM_CAPACITY} B",
            )
        )
    elems = cfg.box_rows * cfg.box_cols
    if elems % (cfg.vec * cfg.store_threads):
        findings.append(
            Finding(
                "tsopt.launch_shape",
                f"a {cfg.box_rows}x{cfg.box_cols} box is not a whole number of 16-byte vectors for "
                f"{cfg.store_threads} store threads",
            )
        )
    # Fragment registers: 2 bytes per element, 4 per register, plus ~32 for addressing.
    need = cfg.vectors_per_thread * cfg.vec * cfg.elem_bytes // 4 + 32
    if need > cfg.store_regs:
        findings.append(
            Finding(
                "tsopt.registers",
                f"each store thread holds {cfg.vectors_per_thread * cfg.vec} elements (~{need} registers) "
                f"> budget {cfg.store_regs}: it would spill",
            )
        )
    return findings


def tiling_findings(cfg: CopyConfig) -> list[Finding]:
    """Boxes tiling the tensor and a work tile, the persistent grid's consistency, heads no
    deeper than a work tile."""
    findings: list[Finding] = []
    if cfg.rows % cfg.box_rows or cfg.cols % cfg.box_cols:
        findings.append(
            Finding(
                "tsopt.tile_divisibility",
                f"{cfg.rows}x{cfg.cols} is not a whole number of {cfg.box_rows}x{cfg.box_cols} boxes",
            )
        )
    elif cfg.tiles % cfg.chunk:
        findings.append(
            Finding(
                "tsopt.tile_divisibility",
                f"{cfg.tiles} boxes do not split into chunks of {cfg.chunk}",
            )
        )
    if cfg.persistent != (cfg.ctas_per_sm > 0):
        findings.append(
            Finding(
                "tsopt.launch_shape",
                f"persistent={cfg.persistent} with ctas_per_sm={cfg.ctas_per_sm}: a persistent grid needs "
                "ctas_per_sm > 0, a non-persistent one 0",
            )
        )
    for head_task in ("load", "store"):
        if cfg.head_depth(head_task) >= cfg.chunk:
            findings.append(
                Finding(
                    "tsopt.domain",
                    f"{head_task} head holds {cfg.head_depth(head_task)} iterations but a work tile has "
                    f"only {cfg.chunk}",
                )
            )
    return findings


def tma_box_findings(cfg: CopyConfig) -> list[Finding]:
    """The load's TMA box against the tensor map's limits (``tsopt.tma_box``)."""
    findings: list[Finding] = []
    for name, extent in (("box_rows", cfg.box_rows), ("box_cols", cfg.box_cols)):
        if not 1 <= extent <= TMA_BOX_MAX:
            findings.append(Finding(
                "tsopt.tma_box",
                f"{name}={extent}: a TMA box dimension must lie in 1..{TMA_BOX_MAX} elements",
            ))
    inner = cfg.box_cols * cfg.elem_bytes
    if inner < TMA_INNER_BYTES or inner % TMA_INNER_BYTES:
        findings.append(Finding(
            "tsopt.tma_box",
            f"box_cols={cfg.box_cols}: a box row of {inner} bytes is not a positive multiple "
            f"of {TMA_INNER_BYTES} bytes, as the TMA's inner box dimension must be",
        ))
    return findings
