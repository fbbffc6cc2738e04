"""Rebuild the genomes of a measured bundle with the current template into a new study + bundle.

Used after a template fix, so the same candidate set is measured again on the new code and the
two runs can be compared genome by genome::

    python bench/copy_h200/copy_replay.py bench/copy_h200/copy-4096-r1/manifest.json \
        --study copy-fp16-4096x4096-sm_90a-fenced --db sqlite:///carry/copy-h200.db \
        --bundle carry/copy-4096-fenced
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rich.progress import track  # noqa: E402

from tsopt.core.bundle import BundleEntry, write_bundle  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.db.store import Store  # noqa: E402
from tsopt.search.pipeline import CandidatePipeline  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--study", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=Path(".tsopt") / "artifacts")
    args = parser.parse_args()
    source = json.loads(args.manifest.read_text())
    problem = Problem.from_dict(source["problem"])
    space = get_space(source["space"])
    store = Store(args.db)
    store.create_or_get_study(args.study, space.name, problem, source["arch"], "replay",
                              {"replay_of": source["study"]})
    pipeline = CandidatePipeline(store, space, problem, source["arch"], args.study, args.cache)
    entries = []
    for doc in track(source["candidates"], description=f"rebuilding {len(source['candidates'])}"):
        genome = Genome.from_dict(doc["genome"])
        candidate = store.add_candidate(args.study, genome, doc.get("origin") or "enumerate")
        verdict = pipeline.verify(candidate, genome)
        if not verdict.valid:
            print(f"{genome.short_hash}: no longer valid: {verdict.summary()}")
            continue
        build = pipeline.build(candidate, genome)
        if not build.ok:
            print(f"{genome.short_hash}: build failed: {build.error}")
            continue
        entries.append(BundleEntry(genome, Path(build.artifact_dir or ""), doc.get("origin")))
    write_bundle(args.bundle, study=args.study, space=space.name, problem=problem, arch=source["arch"],
                 candidates=entries)
    print(f"{len(entries)} candidates in {args.bundle}")
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
