"""The compiled kernel's wgmma accumulators, checked in its SASS: no instruction may read or write
an accumulator register while the wgmma group that writes it is still in flight.

PTX orders a kernel's epilogue after ``wgmma.wait_group``, but ptxas schedules SASS, and the
hardware does not interlock HGMMA destinations: only ``WARPGROUP.DEPBAR`` orders them. The
ptxas of nvidia-cutlass-dsl 4.8.1 (CUDA 13.4) moved a persistent kernel's epilogue reads
(``F2FP`` of the accumulator) above the ``WARPGROUP.DEPBAR.LE gsb0, 0x0`` that retires the K
loop's last group, though the PTX had the wait first; the kernel wrote the columns of the last
HGMMA that had not landed yet, differently run after run (bench/wrong_answer/README.md). No
check before the compiler can see that, so the builder scans what ptxas produced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_REGISTER = re.compile(r"\bR(\d+)\b")
_HGMMA = re.compile(r"\bHGMMA\.(\d+)x(\d+)x\d+\.F32\S*\s+R(\d+)")
_DEAD_HGMMA = re.compile(r"\bHGMMA\.\d+x\d+x\d+\.\S+\s+RZ\s*,")
_DEPBAR = re.compile(r"\bWARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x([0-9a-f]+)")
_JUMP = re.compile(r"^(BRA|EXIT|RET)\b")  # unpredicated: the next instruction is a jump target


@dataclass(frozen=True)
class SassHazard:
    """One instruction that touches accumulator registers of an HGMMA group still in flight."""

    address: str
    instruction: str
    registers: tuple[int, ...]

    def describe(self) -> str:
        regs = ", ".join(f"R{r}" for r in self.registers[:4])
        more = f" (+{len(self.registers) - 4})" if len(self.registers) > 4 else ""
        return f"{self.address}: {self.instruction} touches {regs}{more}"


def hgmma_accumulators(instruction: str) -> range:
    """The registers one thread's fp32 HGMMA m64nN writes: N/2 of them from its destination.

    None where ptxas wrote the destination as ``RZ``: it does so for an HGMMA whose results
    are dead (rows or columns of a tile that the compile-time problem never stores, such as
    a split_n warpgroup's half of a tile wider than N), and such an HGMMA writes no register
    the epilogue could read early."""
    if _DEAD_HGMMA.search(instruction):
        return range(0)
    m = _HGMMA.search(instruction)
    if m is None:
        raise ValueError(f"not an fp32-accumulator HGMMA: {instruction!r}")
    first = int(m.group(3))
    return range(first, first + int(m.group(2)) // 2)


def accumulator_hazards(sass: str) -> list[SassHazard]:
    """Every non-HGMMA instruction, in listing order, that names a register of an HGMMA group
    not yet retired by a ``WARPGROUP.DEPBAR``.

    A scan of the fall-through path: an HGMMA carrying ``gsb0`` closes a group,
    ``WARPGROUP.DEPBAR.LE gsb0, N`` leaves the newest N groups in flight, and after an
    unpredicated ``BRA``/``EXIT``/``RET`` the next instruction is reached by a jump, whose state
    the scan does not follow, so it starts again with none in flight (a loop's back edge is
    not followed either: the straight code from a K loop's exit into its epilogue, where the
    hazard was found, is what it sees). HGMMAs chaining on one accumulator need no wait
    between them (the hardware orders them), so only other instructions count."""
    groups: list[frozenset[int]] = []
    open_group: set[int] = set()
    hazards: list[SassHazard] = []
    for line in sass.splitlines():
        m = _INSTRUCTION.search(line)
        if m is None:
            continue
        address, text = m.group(1), m.group(2)
        if "HGMMA" in text:
            open_group.update(hgmma_accumulators(text))
            if "gsb0" in text:
                groups.append(frozenset(open_group))
                open_group = set()
            continue
        wait = _DEPBAR.search(text)
        if wait is not None:
            keep = int(wait.group(1), 16)
            groups = groups[len(groups) - keep:] if keep else []
            continue
        if groups:
            touched = sorted(set().union(*groups) & {int(r) for r in _REGISTER.findall(text)})
            if touched:
                hazards.append(SassHazard(address, text, tuple(touched)))
        if _JUMP.match(text):
            groups, open_group = [], set()
    return hazards
