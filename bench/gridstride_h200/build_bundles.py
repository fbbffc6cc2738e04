import shutil
import sys
from pathlib import Path

from tsopt.build.builder import build_candidate
from tsopt.core.bundle import BundleEntry, write_bundle
from tsopt.core.registry import get_space, problem_for
from tsopt.verify.verifier import verify_genome

space = get_space("gridstride")
for spec in sys.argv[1:]:
    problem = problem_for(spec, "gridstride")
    entries = []
    for genome in space.diverse_genomes(problem, 48):
        assert verify_genome(genome, problem, space=space).valid
        built = build_candidate(space, genome, problem, "sm_90a", cache_dir=".tsopt/artifacts")
        assert built.ok, built.error
        entries.append(BundleEntry(genome, Path(built.artifact_dir), origin="diverse"))
    out = Path(f".tsopt/bundles/gridstride-{problem.key}")
    shutil.rmtree(out, ignore_errors=True)
    write_bundle(out, study=f"gridstride-{problem.key}-sm_90a", space="gridstride", problem=problem,
                 arch="sm_90a", candidates=entries)
    print("wrote", out, len(entries))
