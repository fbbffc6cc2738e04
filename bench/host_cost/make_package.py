"""CPU side of the host-cost study: the seed library's best kernels at decode shapes, built here
and exported as one package (torch_ops.py + a kernel per shape) for ``host_cost.py`` to time on
the GPU machine.

For each shape, the best entry of ``tsopt/data/seed_library.json`` (highest paired ratio) is
verified and built for real with today's template, and recorded as a study
``host-gemm-bf16-MxNxK`` with the measurement its source study recorded on the H200 (read from
the committed archive the entry names); then ``tsopt.export`` writes the studies as one package.
The recorded figures only let the study be exported; ``host_cost.py`` times the kernels afresh.
Run from the repository root (about 2 minutes per shape)::

    CUTE_DSL_ARCH=sm_90a python bench/host_cost/make_package.py --out carry/host_cost/package
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tsopt  # noqa: E402
from tsopt.core.dsl_env import ensure_arch  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.records import Measurement  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.db.store import Store  # noqa: E402

ARCH = "sm_90a"
ROOT = Path(__file__).resolve().parents[2]
SOURCE = re.compile(r"^(?P<archive>\S+\.db\.tar\.xz): study (?P<study>\S+) \((?P<db>[^)]+)\)$")


def best_entry(library: dict, problem: Problem) -> dict:
    entries = [e for e in library["entries"] if e["arch"] == ARCH and e["problem"] == problem.to_dict()]
    if not entries:
        raise SystemExit(f"the seed library has no {ARCH} entry for {problem}")
    return max(entries, key=lambda e: e["ratio"])


def recorded_measurement(entry: dict, scratch: Path) -> Measurement:
    """The H200 measurement of the entry's genome in the study archive it came from."""
    found = SOURCE.match(entry["source"])
    if found is None:
        raise SystemExit(f"{entry['genome_hash'][:12]}: source {entry['source']!r} is not a study archive")
    with tarfile.open(ROOT / found["archive"]) as archive:
        archive.extract(found["db"], scratch, filter="data")
    with Store(f"sqlite:///{scratch / found['db']}") as store:
        for ranked in store.ranked(found["study"]):
            if ranked.genome.hash == entry["genome_hash"]:
                return ranked.measurement
    raise SystemExit(f"{entry['genome_hash'][:12]} is not ranked in study {found['study']}")


def record_study(store: Store, entry: dict, problem: Problem, cache: Path, scratch: Path) -> str:
    from tsopt.build.builder import build_candidate
    from tsopt.verify.verifier import VerdictCache, verify_genome

    name = f"host-{problem.key}"
    store.create_or_get_study(name, "gemm", problem, ARCH, "hand", {"source": "bench/host_cost"})
    if store.ranked(name, limit=1):
        print(f"{name}: already recorded")
        return name
    space = get_space("gemm")
    genome = Genome.from_dict(entry["genome"])
    if genome.hash != entry["genome_hash"]:
        raise SystemExit(f"{entry['genome_hash'][:12]}: the genome no longer reads as its hash")
    verdict = verify_genome(genome, problem, space=space, cache=VerdictCache())
    if not verdict.valid:
        raise SystemExit(f"{genome.short_hash}: {verdict.summary()[:200]}")
    built = build_candidate(space, genome, problem, ARCH, cache)
    if not built.ok:
        raise SystemExit(f"{genome.short_hash}: build failed: {(built.error or '?')[:400]}")
    measurement = recorded_measurement(entry, scratch)
    candidate = store.add_candidate(name, genome, "seed")
    store.record_verdict(candidate, "gemm", space.verdict_key(genome, problem), verdict)
    store.record_build(candidate, built)
    store.record_measurement(candidate, measurement, f"seed-library:{entry['source']}")
    print(f"{name}: {genome.short_hash}, recorded {measurement.median_us:.2f} us, "
          f"{measurement.ratio:.3f}x {measurement.baseline_name} on {measurement.device}")
    return name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="16x4096x4096,64x4096x4096",
                        help="MxNxK of each kernel (bf16), comma-separated")
    parser.add_argument("--db", default="sqlite:///carry/host_cost/tsopt.db")
    parser.add_argument("--cache", type=Path, default=Path(".tsopt/artifacts"))
    parser.add_argument("--out", type=Path, default=Path("carry/host_cost/package"))
    args = parser.parse_args()
    ensure_arch(ARCH)
    library = json.loads((ROOT / "tsopt/data/seed_library.json").read_text())
    Path(args.db.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    studies = []
    with Store(args.db) as store, tempfile.TemporaryDirectory() as scratch:
        for shape in args.shapes.split(","):
            m, n, k = (int(v) for v in shape.split("x"))
            problem = Problem.of("gemm", "bf16", m=m, n=n, k=k)
            studies.append(record_study(store, best_entry(library, problem), problem, args.cache,
                                        Path(scratch)))
    result = tsopt.export(studies if len(studies) > 1 else studies[0], args.out, db=args.db, force=True)
    print(f"exported to {args.out}: " + ", ".join(f"torch.ops.tsopt.{k.name} ({k.genome_hash[:12]})"
                                                   for k in result.kernels))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
