"""The GEMM sampler's placements: those the verifier accepts task by task.

Random placements almost never pass (about 1 in 10^5 raw pairs), so the
sampler draws each task's placement from the ones that are TS-valid and
tsopt-checked next to the canonical partner for some ``advance_on_wait``
(the funnel's per-task screen, on its cheap canonical layout). Joint
validity (stages, layout, the other task) is still judged per candidate.

Screening every dataflow-legal placement costs ~40,000 verifier calls, so the
result ships as ``data/gemm_screened.json`` (``python -m tsopt.search_spaces.gemm.screen``
regenerates it after a template change; tests/test_hopper_gemm.py re-verifies a
sample of it against the current template). The screen only focuses sampling:
every proposed genome is still judged in full by the verifier.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

SHIPPED = Path(__file__).with_name("data") / "gemm_screened.json"


def _read(path: Path) -> dict[str, list[Any]]:
    doc = json.loads(path.read_text())
    return {"load": [(tuple(b), d, f) for b, d, f in doc["load"]],
            "mma": [(tuple(b), d, f, p, dr) for b, d, f, p, dr in doc["mma"]]}


def compute(space: Any, progress: bool = False) -> dict[str, list[Any]]:
    """Screen every dataflow-legal placement of each task with the real verifier."""
    from tsopt.core.problem import Problem
    from tsopt.search_spaces.gemm.funnel import CANONICAL_LOAD, CANONICAL_MMA, L0
    from tsopt.search_spaces.gemm.layout import legal_load_keys, legal_mma_keys, make_genome
    from tsopt.verify.verifier import VerdictCache, verify_genome

    problem = Problem.of("gemm", "bf16", m=8192, n=8192, k=8192)
    cache = VerdictCache()
    kept: dict[str, list[Any]] = {}
    for task, keys in (("load", legal_load_keys()), ("mma", legal_mma_keys())):
        keep = []
        for i, key in enumerate(keys):
            for aow in (True, False):
                partner = {"mma": CANONICAL_MMA[aow]} if task == "load" else {"load": CANONICAL_LOAD}
                genome = make_genome(**{task: key}, **partner, advance_on_wait=aow, **L0)
                if verify_genome(genome, problem, space=space, cache=cache).valid:
                    keep.append(key)
                    break
            if progress and i % 500 == 0:
                print(f"{task}: {i}/{len(keys)} screened, {len(keep)} kept", file=sys.stderr)
        kept[task] = keep
    return kept


_LOADED: dict[str, list[Any]] = {}


def screened(space: Any) -> dict[str, list[Any]]:
    if not _LOADED:
        _LOADED.update(_read(SHIPPED))
    return _LOADED


def write(path: Path, found: dict[str, list[Any]], digest: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"template": digest, "load": [list(k) for k in found["load"]],
           "mma": [list(k) for k in found["mma"]]}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


if __name__ == "__main__":
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    from tsopt.core.registry import get_space

    gemm = get_space("gemm")
    result = compute(gemm, progress=True)
    write(SHIPPED, result, gemm.source_digest())
    print(f"load {len(result['load'])}, mma {len(result['mma'])} placements kept -> {SHIPPED}")
