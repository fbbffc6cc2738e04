"""Draw the training shapes: GEMM problems the corpus lacks, chosen by a seeded random rule
that reads neither the held-out problems' measurements nor their sizes beyond an exact-match
exclusion.

Why: the cross-shape cost model (``tsopt.search.transfer``) is fitted on the corpus, whose 13
GEMM shapes are mostly powers of two with K of 4096 or 8192, measured in the runner's old
isolated mode. A model fitted there has never seen a ragged size, a short K or an fp16
problem in the graph mode studies now measure in. These shapes, measured as the oracle tables
are (``bench/oracle``: candidates spread over every family, graph mode), are corpus input; the
held-out problems stay test data.

The rule (frozen with the seed below), the sizes a user's GEMMs have: M (tokens, a batch)
log-uniform in [1, 16384]; N and K (a layer's weights) log-uniform in [512, 32768] and rounded
to a multiple of 8 (the TMA's 16-byte rows in bf16 and fp16); M left as drawn, so most sizes
are multiples of no tile; every fourth problem fp16, the rest bf16; a draw is
skipped if it is a held-out problem or a corpus shape exactly, or if 2·M·N·K is above 4e11
(a candidate's timing there takes seconds). The first :data:`COUNT` kept are the set.

    .venv/bin/python bench/training_shapes/draw.py     # writes bench/training_shapes/shapes.json
"""

from __future__ import annotations

import json
import lzma
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

SEED = 20261206
COUNT = 8
M_RANGE, NK_RANGE = (1, 16384), (512, 32768)
MAX_FLOP = 4e11
CANDIDATES = 100  # a table's size, as the held-out tables of 100 (choose.py adds its margin)


def corpus_shapes() -> set[tuple[str, int, int, int]]:
    shapes = set()
    with lzma.open(ROOT / "corpus" / "measurements.v1.jsonl.xz", "rt") as f:
        for line in f:
            record = json.loads(line)
            p = record["problem"]
            if record["space"] == "gemm":
                shapes.add((p["dtype"], p["m"], p["n"], p["k"]))
    return shapes


def heldout_shapes() -> set[tuple[str, int, int, int]]:
    from tsopt.app.heldout import load_heldout

    out = set()
    for item in load_heldout().problems:
        s = item.problem.sizes
        out.add((item.problem.dtype, s["m"], s["n"], s["k"]))
    return out


def draw() -> list[dict]:
    rng = random.Random(SEED)
    skip = corpus_shapes() | heldout_shapes()

    def size(low: int, high: int) -> float:
        return math.exp(rng.uniform(math.log(low), math.log(high)))

    kept: list[dict] = []
    while len(kept) < COUNT:
        m = max(1, round(size(*M_RANGE)))
        n, k = (8 * round(size(*NK_RANGE) / 8) for _ in range(2))
        dtype = "fp16" if len(kept) % 4 == 3 else "bf16"
        if (dtype, m, n, k) in skip or 2 * m * n * k > MAX_FLOP:
            continue
        name = f"train-{len(kept) + 1}"
        kept.append({
            "name": name, "space": "gemm", "problem": f"gemm:{dtype}:{m}x{n}x{k}",
            "regime": "training shape (drawn)", "oracle": CANDIDATES,
            "reason": f"draw {len(kept) + 1} of bench/training_shapes/draw.py (seed {SEED})"})
    return kept


def main() -> int:
    doc = {
        "format": "tsopt-heldout", "version": 1, "frozen": "2026-12-06",
        "doc": ("TRAINING shapes, not held-out ones: corpus input for the cross-shape cost "
                "model, drawn by bench/training_shapes/draw.py. The file uses the held-out "
                "set's format only so that bench/oracle/choose.py plans them as it plans the "
                "held-out tables."),
        "problems": draw()}
    out = HERE / "shapes.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for p in doc["problems"]:
        print(p["name"], p["problem"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
