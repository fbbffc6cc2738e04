"""The checks' holes closed (issue 14, item 5): each a named rule, each tested on the real
verifier with a one-gene edit of a space's seed genome (or of a valid neighbour of it).

- ``tsopt.epilogue_coverage`` (GEMM): a ``tile_n`` that no epilogue subtile width divides
  (64, or since issue 13 the narrower 32 and 16: an odd multiple of 8 such as 136) leaves
  columns of every tile unwritten, with either epilogue; one that 32 or 16 divides (96) is
  drained in narrower subtiles and verifies.
- ``tsopt.wgmma_n`` (GEMM): ``tile_n`` is the N of every wgmma a consumer warpgroup issues.
- ``tsopt.wgmma_k`` (GEMM): ``tile_k // 16`` wgmma per K slice; a remainder is skipped.
- ``tsopt.tma_box`` (GEMM and copy): TMA box dimensions 1..256, a box row a positive
  multiple of 16 bytes.
- ``tsopt.cluster_size`` (GEMM): at most 8 CTAs (portable; no knob opts in to more). The
  schema refuses any cluster outside the knob's choices first.
- the schema (``dataflow`` gate, rule ``SCHEMA_RULE``): knob values outside their choices.
- ``tsopt.unit_extent`` (GEMM, issue 13): a problem with M = 1 (a 1-row TMA descriptor).
- ``tsopt.fault_gene`` (any space): ``planted.*`` genes only under
  ``TSOPT_ALLOW_FAULT_GENES=1``.
- the genome size bounds: ``tests/test_trust_and_bounds.py`` (refused before parsing).

And nothing lost: the 74 GEMM candidates measured correct on the H200
(bench/gemm_h200's ``gemm-epilogue.json``, as ``tests/fixtures/gemm_h200``) keep their hash and
verify valid.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import read_fixture
from tsopt.core.genome import Genome
from tsopt.core.problem import Problem, default_problem
from tsopt.core.records import Verdict
from tsopt.core.registry import get_space
from tsopt.core.space import FAULT_GENES_ENV
from tsopt.verify.verifier import (
    FAULT_GENE_RULE,
    SCHEMA_RULE,
    VerdictCache,
    verify_genome,
)

ROOT = Path(__file__).resolve().parents[1]
EPILOGUE_SUITE = "gemm_h200/gemm-epilogue.json.xz"  # a fixture cut from bench/gemm_h200's


@pytest.fixture(scope="module")
def gemm() -> Any:
    return get_space("gemm")


@pytest.fixture(scope="module")
def copy() -> Any:
    return get_space("copy")


@pytest.fixture(autouse=True)
def no_fault_genes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's process: fault genes not allowed unless a test says so."""
    monkeypatch.delenv(FAULT_GENES_ENV, raising=False)


def rules(verdict: Verdict) -> list[str]:
    """Every rule a verdict names: its own, then the ``(and N more: ...)`` of its message."""
    found = [verdict.rule] if verdict.rule else []
    more = re.search(r"\(and \d+ more: ([^)]*)\)$", verdict.message or "")
    return found + (more.group(1).split(", ") if more else [])


def with_genes(genome: Genome, **genes: Any) -> Genome:
    """``genome`` with genes added (a gene the space does not declare, e.g. ``planted.*``)."""
    doc = genome.to_dict()
    doc["structure"].update(genes)
    return Genome.from_dict(doc)


GEMM_PROBLEM = default_problem("gemm")
COPY_PROBLEM = default_problem("copy")


# -- the seeds and their one-gene edits ----------------------------------------------------------
@pytest.mark.slow
def test_the_seeds_are_valid(gemm: Any, copy: Any) -> None:
    for space, problem in ((gemm, GEMM_PROBLEM), (copy, COPY_PROBLEM)):
        verdict = verify_genome(space.seed_genome(problem), problem, space=space)
        assert verdict.valid, verdict.summary()
    tma_store = gemm.seed_genome(GEMM_PROBLEM).replace(epilogue="tma_store")
    assert verify_genome(tma_store, GEMM_PROBLEM, space=gemm).valid


@pytest.mark.slow
@pytest.mark.parametrize("epilogue", ["direct", "tma_store"])
@pytest.mark.parametrize("tile_n, unwritten", [(136, "128..135"), (200, "192..199")])
def test_epilogue_coverage_of_the_whole_tile(gemm: Any, epilogue: str, tile_n: int,
                                             unwritten: str) -> None:
    base = gemm.seed_genome(GEMM_PROBLEM).replace(epilogue=epilogue)
    verdict = verify_genome(base.replace(tile_n=tile_n), GEMM_PROBLEM, space=gemm)
    assert (verdict.valid, verdict.stage, verdict.rule) == (False, "tsopt",
                                                            "tsopt.epilogue_coverage")
    message = verdict.message or ""
    assert f"tile_n={tile_n}" in message and f"the {epilogue} epilogue" in message
    assert f"columns {unwritten}" in message and "(and" not in message  # the only rule


@pytest.mark.parametrize("epilogue", ["direct", "tma_store"])
def test_a_tile_n_off_the_64_grid_is_drained_in_narrower_subtiles(gemm: Any,
                                                                   epilogue: str) -> None:
    """96 columns are three 32-column subtiles (issue 13): every column written, valid."""
    genome = gemm.seed_genome(GEMM_PROBLEM).replace(epilogue=epilogue, tile_n=96)
    verdict = verify_genome(genome, GEMM_PROBLEM, space=gemm)
    assert verdict.valid, verdict.summary()
    cfg = gemm.config(genome, GEMM_PROBLEM)
    assert (cfg.epi_cols, cfg.epi_subtiles) == (32, 3)


@pytest.mark.slow
@pytest.mark.parametrize("tile_n", [100, 264, 320])
def test_wgmma_n_legality(gemm: Any, tile_n: int) -> None:
    verdict = verify_genome(gemm.seed_genome(GEMM_PROBLEM).replace(tile_n=tile_n), GEMM_PROBLEM,
                            space=gemm)
    assert (verdict.valid, verdict.rule) == (False, "tsopt.wgmma_n"), verdict.summary()
    assert f"tile_n={tile_n}" in (verdict.message or "")
    assert "multiple of 8 from 8 to 256" in (verdict.message or "")


def test_wgmma_n_is_per_warpgroup_in_both_arrangements(gemm: Any) -> None:
    """Cooperating warpgroups split the tile along M and a separate warpgroup owns its own
    tile: either way each issues m64 x tile_n wgmma, so N = tile_n in both."""
    from tsopt.search_spaces.gemm.checks import shape_findings
    from tsopt.search_spaces.gemm.config import config_of

    for arrangement in ("cooperative", "separate"):
        genome = gemm.seed_genome(GEMM_PROBLEM).replace(arrangement=arrangement, tile_n=100)
        cfg = config_of(genome, GEMM_PROBLEM.sizes, GEMM_PROBLEM.dtype)
        assert "tsopt.wgmma_n" in {f.rule for f in shape_findings(cfg)}
        for legal in (64, 128, 192, 256):
            cfg = dataclasses.replace(cfg, tile_n=legal)
            assert not shape_findings(cfg), legal


def test_wgmma_k_and_the_tma_box_along_k(gemm: Any) -> None:
    seed = gemm.seed_genome(GEMM_PROBLEM)
    skipped = verify_genome(seed.replace(tile_k=40), GEMM_PROBLEM, space=gemm)
    assert (skipped.valid, skipped.rule) == (False, "tsopt.wgmma_k")
    assert "multiply 32 of its 40 columns" in (skipped.message or "")
    narrow = verify_genome(seed.replace(tile_k=36), GEMM_PROBLEM, space=gemm)
    assert (narrow.valid, narrow.rule) == (False, "tsopt.tma_box")
    assert "72 bytes" in (narrow.message or "")
    assert verify_genome(seed.replace(tile_k=48), GEMM_PROBLEM, space=gemm).valid


def test_cluster_size(gemm: Any) -> None:
    """A 16-CTA cluster: the schema refuses it first (the knob's choices, named); the check
    behind it names the portable limit of 8 for any cluster the schema ever lets through."""
    from tsopt.search_spaces.gemm.checks import PORTABLE_CLUSTER, gemm_checks
    from tsopt.search_spaces.gemm.config import config_of

    genome = gemm.seed_genome(GEMM_PROBLEM).replace(cluster="4x4")
    verdict = verify_genome(genome, GEMM_PROBLEM, space=gemm)
    assert (verdict.valid, verdict.stage, verdict.rule) == (False, "dataflow", SCHEMA_RULE)
    assert ("gene 'cluster' is '4x4'; it must be one of "
            "'1x1', '2x1', '1x2', '2x2', '4x1', '1x4'") in (verdict.message or "")
    cfg = config_of(genome, GEMM_PROBLEM.sizes, GEMM_PROBLEM.dtype)
    found = [f for f in gemm_checks(cfg) if f.rule == "tsopt.cluster_size"]
    assert len(found) == 1 and "16 CTAs" in found[0].message and "portable 8" in found[0].message
    assert PORTABLE_CLUSTER == 8
    for shape in ("2x4", "8x1", "1x1", "2x1"):
        cfg = dataclasses.replace(cfg, cluster_m=int(shape[0]), cluster_n=int(shape[2]))
        assert not [f for f in gemm_checks(cfg) if f.rule == "tsopt.cluster_size"], shape


@pytest.mark.parametrize("genes, box_rule_first, words", [
    ({"box_cols": 512}, True, "box_cols=512: a TMA box dimension must lie in 1..256"),
    ({"box_rows": 512}, False, "box_rows=512: a TMA box dimension must lie in 1..256"),
])
def test_copy_tma_box_limits(copy: Any, genes: dict[str, int], box_rule_first: bool,
                             words: str) -> None:
    verdict = verify_genome(copy.seed_genome(COPY_PROBLEM).replace(**genes), COPY_PROBLEM,
                            space=copy)
    assert not verdict.valid and verdict.stage == "tsopt"
    assert "tsopt.tma_box" in rules(verdict)
    assert (verdict.rule == "tsopt.tma_box") == box_rule_first
    findings = copy.tsopt_checks(copy.seed_genome(COPY_PROBLEM).replace(**genes), COPY_PROBLEM)
    assert any(f.rule == "tsopt.tma_box" and words in f.message for f in findings)


def test_copy_tma_box_row_bytes(copy: Any) -> None:
    """A box row must be a positive multiple of 16 bytes: 68 fp16 columns are 136 bytes."""
    from tsopt.search_spaces.copy.checks import tma_box_findings
    from tsopt.search_spaces.copy.config import config_of

    problem = Problem.of("copy", "fp16", rows=4096, cols=68 * 64)
    genome = copy.seed_genome(problem).replace(box_cols=68)
    verdict = verify_genome(genome, problem, space=copy)
    assert not verdict.valid and "tsopt.tma_box" in rules(verdict)
    cfg = config_of(copy.seed_genome(COPY_PROBLEM), COPY_PROBLEM)
    assert not tma_box_findings(cfg)
    for cols, message in ((68, "136 bytes"), (4, "8 bytes"), (0, "0 bytes")):
        found = tma_box_findings(dataclasses.replace(cfg, box_cols=cols))
        assert any(message in f.message for f in found), (cols, found)
    for cols in (8, 64, 128, 256):  # 16..512 bytes
        assert not tma_box_findings(dataclasses.replace(cfg, box_cols=cols)), cols


@pytest.mark.parametrize("gene, value, choices", [
    ("raster", "diagonal", "'m', 'n'"),
    ("epilogue", "bogus", "'direct', 'tma_store'"),
    ("arrangement", "zigzag", "'cooperative', 'separate'"),
    ("producer_wg", "middle", "'first', 'last'"),
])
def test_knob_values_outside_their_choices(gemm: Any, gene: str, value: str,
                                           choices: str) -> None:
    """Covered by the genome schema (``gene_domains``, checked first): never mapped to a
    default by the kernel."""
    verdict = verify_genome(gemm.seed_genome(GEMM_PROBLEM).replace(**{gene: value}),
                            GEMM_PROBLEM, space=gemm)
    assert (verdict.valid, verdict.stage, verdict.rule) == (False, "dataflow", SCHEMA_RULE)
    assert f"gene {gene!r} is {value!r}; it must be one of {choices}" in (verdict.message or "")


def test_a_stale_screen_leaves_the_fixed_choices_in_the_schema(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A shipped screen that no longer matches the code, and no verifier to recompute it: the
    placements cannot be listed, but the genes whose choices the space's code fixes are
    still refused outside them (this once let ``epilogue='bogus'`` through)."""
    from tsopt.search_spaces.common.screen_cache import StaleScreenError

    stale = get_space("gemm")

    def unreadable(task: str) -> Any:
        raise StaleScreenError(f"the {task} screen is stale: run `tsopt spaces gemm`")

    monkeypatch.setattr(stale, "screened_placements", unreadable)
    with pytest.raises(StaleScreenError):
        stale.knobs(GEMM_PROBLEM)
    domains = stale.gene_domains(GEMM_PROBLEM)
    assert domains["epilogue"].choices == ("direct", "tma_store")
    message = stale.schema_error(stale.seed_genome(GEMM_PROBLEM).replace(epilogue="stale-bogus"),
                                 GEMM_PROBLEM)
    assert message is not None and "gene 'epilogue' is 'stale-bogus'" in message
    assert stale.schema_error(stale.seed_genome(GEMM_PROBLEM), GEMM_PROBLEM) is None


def test_copy_raster_outside_its_choices(copy: Any) -> None:
    verdict = verify_genome(copy.seed_genome(COPY_PROBLEM).replace(raster="diagonal"),
                            COPY_PROBLEM, space=copy)
    assert (verdict.valid, verdict.rule) == (False, SCHEMA_RULE)
    assert "gene 'raster' is 'diagonal'; it must be one of 'row', 'col'" in (
        verdict.message or "")


# -- fault genes ---------------------------------------------------------------------------------
def test_fault_genes_only_under_the_test_switch(copy: Any, gemm: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    genome = with_genes(copy.seed_genome(COPY_PROBLEM), **{"planted.skip_vectors": 1})
    verdict = verify_genome(genome, COPY_PROBLEM, space=copy)
    assert (verdict.valid, verdict.stage, verdict.rule) == (False, "dataflow", FAULT_GENE_RULE)
    assert "planted.skip_vectors=1" in (verdict.message or "")
    assert FAULT_GENES_ENV in (verdict.message or "")
    # The build refuses it too (a build that skipped the verifier).
    with pytest.raises(ValueError, match="planted.skip_vectors"):
        copy.kernel_spec(genome, COPY_PROBLEM, "sm_90a")
    # Any space: the GEMM has no fault genes, and the rule names the gene before dataflow does.
    planted = with_genes(gemm.seed_genome(GEMM_PROBLEM), **{"planted.skip_validation": True})
    verdict = verify_genome(planted, GEMM_PROBLEM, space=gemm)
    assert (verdict.rule, "planted.skip_validation=True" in (verdict.message or "")) == (
        FAULT_GENE_RULE, True)
    # Where tests plant faults on purpose, the genome is judged as before.
    monkeypatch.setenv(FAULT_GENES_ENV, "1")
    assert verify_genome(genome, COPY_PROBLEM, space=copy).valid  # skip_vectors: GPU's to see
    two = with_genes(copy.seed_genome(COPY_PROBLEM), **{"planted.consumer_threads": 96})
    assert verify_genome(two, COPY_PROBLEM, space=copy).rule == "ts.group_size"
    monkeypatch.setenv(FAULT_GENES_ENV, "yes")  # only "1" opens it
    assert verify_genome(genome, COPY_PROBLEM, space=copy).rule == FAULT_GENE_RULE


# -- planted invalid genomes beyond the tester's list --------------------------------------------
Plant = tuple[str, Callable[[Any, Any], Genome], str, str, str]
"""(name, (gemm, copy) -> genome, space, problem spec, the rule that must be named)."""

PLANTS: tuple[Plant, ...] = (
    ("gemm tile_n=136 (legal wgmma N, ragged epilogue)",
     lambda g, c: g.seed_genome(GEMM_PROBLEM).replace(tile_n=136), "gemm", "default",
     "tsopt.epilogue_coverage"),
    ("gemm tile_n=8 (no epilogue subtile at all)",
     lambda g, c: g.seed_genome(GEMM_PROBLEM).replace(tile_n=8), "gemm", "default",
     "dataflow"),  # below the schema's range (16..256): refused first
    ("gemm tile_n=200, tma_store, separate m64 tiles, 2 stages",
     lambda g, c: g.seed_genome(GEMM_PROBLEM).replace(tile_n=200, epilogue="tma_store",
                                                      arrangement="separate", tile_m=64,
                                                      stages=2),
     "gemm", "default", "tsopt.epilogue_coverage"),
    ("gemm tile_n=248 (multiple of 8, not of 64)",
     lambda g, c: g.seed_genome(GEMM_PROBLEM).replace(tile_n=248), "gemm", "default",
     "tsopt.epilogue_coverage"),
    ("gemm tile_n=1000 (beyond any wgmma), one m64 consumer, 2 stages of k32",
     lambda g, c: g.seed_genome(GEMM_PROBLEM).replace(tile_n=1000, tile_m=64, consumers=1,
                                                      tile_k=32, stages=2),
     "gemm", "default",
     "tsopt.wgmma_n"),
    ("gemm tile_k=40 (builds; skips 8 of every 40 K columns)",
     lambda g, c: g.seed_genome(GEMM_PROBLEM).replace(tile_k=40), "gemm", "default",
     "tsopt.wgmma_k"),
    ("gemm tile_k=100 (200-byte box row)",
     lambda g, c: g.seed_genome(GEMM_PROBLEM).replace(tile_k=100, stages=2), "gemm", "default",
     "tsopt.tma_box"),
    ("gemm cluster 8x2",
     lambda g, c: g.seed_genome(GEMM_PROBLEM).replace(cluster="8x2"), "gemm", "default",
     "dataflow"),
    ("gemm epilogue 'TMA_STORE' (case)",
     lambda g, c: g.seed_genome(GEMM_PROBLEM).replace(epilogue="TMA_STORE"), "gemm", "default",
     "dataflow"),
    ("gemm arrangement 'zigzag' (a gene added later: outside the schema)",
     lambda g, c: g.seed_genome(GEMM_PROBLEM).replace(arrangement="zigzag"), "gemm", "default",
     "dataflow"),
    ("gemm M=1 (a 1-row A: one-dimensional TMA descriptor)",
     lambda g, c: g.seed_genome(GEMM_PROBLEM), "gemm", "gemm:bf16:1x4096x4096",
     "tsopt.unit_extent"),
    ("gemm planted.skip_validation",
     lambda g, c: with_genes(g.seed_genome(GEMM_PROBLEM), **{"planted.skip_validation": True}),
     "gemm", "default", "tsopt.fault_gene"),
    ("copy box_cols=264 (ragged too)",
     lambda g, c: c.seed_genome(COPY_PROBLEM).replace(box_cols=264), "copy", "default",
     "tsopt.tma_box"),
    ("copy box_rows=300",
     lambda g, c: c.seed_genome(COPY_PROBLEM).replace(box_rows=300), "copy", "default",
     "tsopt.tma_box"),
    ("copy box_cols=1024 on a 1024-column problem",
     lambda g, c: c.seed_genome(Problem.of("copy", "fp16", rows=4096, cols=1024)).replace(
         box_cols=1024), "copy", "copy:fp16:4096x1024", "tsopt.tma_box"),
    ("copy planted.no_proxy_fence",
     lambda g, c: with_genes(c.seed_genome(COPY_PROBLEM), **{"planted.no_proxy_fence": True}),
     "copy", "default", "tsopt.fault_gene"),
    ("copy planted.skip_validation on a deadlock",
     lambda g, c: with_genes(c.genome(store=(("try_wait", "wait", "read", "release", "store"),
                                             2, "release"), advance_on_wait=True, stages=1),
                             **{"planted.skip_validation": True}),
     "copy", "default", "tsopt.fault_gene"),
)


@pytest.mark.slow
def test_planted_invalid_genomes_are_caught(gemm: Any, copy: Any) -> None:
    from tsopt.core.problem import parse_problem_spec

    caught: list[str] = []
    missed: list[str] = []
    for name, make, space_name, spec, rule in PLANTS:
        space = gemm if space_name == "gemm" else copy
        problem = default_problem(space.op) if spec == "default" else parse_problem_spec(spec)
        verdict = verify_genome(make(gemm, copy), problem, space=space)
        ok = not verdict.valid and rule in rules(verdict)
        (caught if ok else missed).append(f"{name}: {verdict.summary()[:160]}")
    print(f"planted {len(PLANTS)}, caught {len(caught)}")
    assert not missed, missed
    assert len(caught) == len(PLANTS) == 17


# -- nothing lost --------------------------------------------------------------------------------
@pytest.mark.slow  # about a minute: ~30 distinct TS verdicts, each a full BFS
def test_the_h200_epilogue_suite_still_verifies_valid(gemm: Any) -> None:
    """The 74 candidates of ``bench/gemm_h200/gemm-epilogue.json`` (all built and measured
    correct on the H200) keep their genome hash and verify valid, each for its problem; the
    only ones rejected are persistent kernels whose swizzle band is wider than the problem
    (``tsopt.swizzle_band``), and every one of those ran at most 0.6x cuBLAS there: the empty
    tiles the rule names cost their full time."""
    suite = read_fixture(EPILOGUE_SUITE)["results"]
    assert len(suite) == 74
    cache = VerdictCache()
    invalid, wasteful = [], []
    for entry in suite:
        genome = Genome.from_dict(entry["genome"])
        assert genome.hash == entry["genome_hash"], entry["label"]
        assert entry["verdict"]["valid"] and entry["measurement"]["status"] == "ok"
        problem = Problem.from_dict(entry["problem"])
        verdict = verify_genome(genome, problem, space=gemm, cache=cache)
        if verdict.rule == "tsopt.swizzle_band":
            wasteful.append((entry["label"], entry["measurement"]["ratio"]))
        elif not verdict.valid:
            invalid.append((entry["label"], verdict.summary()))
    assert not invalid, invalid
    assert wasteful and all(ratio < 0.6 for _, ratio in wasteful), wasteful


def test_a_swizzle_band_wider_than_the_problem_is_rejected_with_its_geometry(gemm: Any) -> None:
    # 128x8192x8192 swapped: 64 N-side tiles along the kernel's M, one 128-column tile across
    # N. Raster 'm' bands along N: a band of 8 would walk 7 empty tiles per real one.
    problem = Problem.of("gemm", "bf16", m=128, n=8192, k=8192)
    wide = gemm.genome(swap_ab=True, tile_m=64, tile_n=128, consumers=1, persistent=True,
                       raster="m", swizzle=8)
    findings = [f for f in gemm.tsopt_checks(wide, problem) if f.rule == "tsopt.swizzle_band"]
    assert findings and "swizzle 8" in findings[0].message and "1 cluster" in findings[0].message
    # the kernel's size, so that a reader (and the property harness) sees the geometry named
    assert "across N=128 of the swapped kernel" in findings[0].message, findings[0].message
    for fits in (gemm.genome(swap_ab=True, tile_m=64, tile_n=128, consumers=1, persistent=True,
                             raster="n", swizzle=8),  # bands along M: 128 tiles there
                 gemm.genome(swap_ab=True, tile_m=64, tile_n=128, consumers=1, persistent=True,
                             raster="m", swizzle=1)):
        assert not [f for f in gemm.tsopt_checks(fits, problem) if f.rule == "tsopt.swizzle_band"]
