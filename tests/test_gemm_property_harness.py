"""The GEMM property harness (bench/gemm_property) on the CPU: ``build`` for a handful of
pairs with the real verifier and the real sm_90a compile, then its index checked against the
verifier and the bundle format; ``run`` refusing a machine without a GPU by name.

The harness is an experiment, so it runs as a command (nothing here imports it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from tsopt.core.bundle import read_manifest  # noqa: E402
from tsopt.core.genome import Genome  # noqa: E402
from tsopt.core.problem import Problem  # noqa: E402
from tsopt.core.registry import get_space  # noqa: E402
from tsopt.verify.verifier import VerdictCache, verify_genome  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gemm_property" / "gemm_property.py"
CACHE = ROOT / ".tsopt" / "artifacts"


def harness(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


def expected_flags(shape: dict[str, int], tiles: dict[str, int]) -> dict[str, bool]:
    m, n, k = shape["m"], shape["n"], shape["k"]
    tm, tn, tk = tiles["m_tile"], tiles["n_tile"], tiles["tile_k"]
    return {"m_below_tile": m < tm, "n_below_tile": n < tn, "k_below_tile": k < tk,
            "m_ragged": m % tm != 0, "n_ragged": n % tn != 0, "k_ragged": k % tk != 0,
            "has_one": 1 in (m, n, k), "has_max": 8192 in (m, n, k),
            "n_k_aligned8": n % 8 == 0 and k % 8 == 0}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("gemm-property")
    done = harness("build", "--count", "3", "--seed", "7", "--out", str(out),
                   "--cache-dir", str(CACHE))
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads((out / "index.json").read_text())


@pytest.mark.slow
def test_build_writes_three_accepted_pairs_each_a_checked_bundle(built) -> None:
    out, index = built
    cases = index["cases"]
    assert [c["id"] for c in cases] == [0, 1, 2]
    assert len({c["genome_hash"] for c in cases}) == 3
    space = get_space("gemm")
    for case in cases:
        genome, problem = Genome.from_dict(case["genome"]), Problem.from_dict(case["problem"])
        assert genome.hash == case["genome_hash"]
        assert problem.sizes == case["shape"] and problem.dtype == case["dtype"]
        # Accepted by the real verifier on its shape, and built for sm_90a.
        assert verify_genome(genome, problem, space=space, cache=VerdictCache()).valid
        assert case["build"]["status"] == "ok", case["build"]
        manifest = read_manifest(out / case["bundle"])  # every file's sha256 re-checked
        assert manifest.problem == problem and manifest.arch == "sm_90a"
        assert [c.genome_hash for c in manifest.candidates] == [genome.hash]
    # Small: a bundle holds the library and three JSON files, not the object and cubin.
    size = sum(f.stat().st_size for f in (out / "bundles").rglob("*") if f.is_file())
    assert size < 3 * 300_000, size


@pytest.mark.slow
def test_index_records_the_draw_and_every_rejection_by_its_rule(built) -> None:
    _out, index = built
    space = get_space("gemm")
    assert index["format"] == "tsopt-gemm-property-index" and index["seed"] == 7
    # The knobs drawn from are the space's own, as it declares them now.
    assert set(index["knobs"]) == {k.name for k in space.knobs()}
    assert index["genome_draws"] >= 3 + len(index["rejections"])
    for row in index["cases"] + index["rejections"]:
        assert row["flags"] == expected_flags(row["shape"], row["tiles"])
        genome = Genome.from_dict(row["genome"])
        cfg = space.config(genome, Problem.of("gemm", row["dtype"], m=8192, n=8192, k=8192))
        # The tiles of the problem's M and N: swapped when the kernel computes D^T.
        swap = bool(getattr(cfg, "swap_ab", False))
        assert row["tiles"] == {"tile_m": cfg.tile_m, "tile_n": cfg.tile_n,
                                "tile_k": cfg.tile_k, "cta_tile_m": cfg.cta_tile_m,
                                "swap_ab": swap,
                                "m_tile": cfg.tile_n if swap else cfg.cta_tile_m,
                                "n_tile": cfg.cta_tile_m if swap else cfg.tile_n}
    for row in index["rejections"]:
        assert row["verdict"] == "rejected" and row["rule"] and row["message"]
        if row["rule"] != "space.check_problem":
            verdict = verify_genome(Genome.from_dict(row["genome"]),
                                    Problem.of("gemm", row["dtype"], **row["shape"]),
                                    space=space, cache=VerdictCache())
            assert not verdict.valid and verdict.rule == row["rule"]


@pytest.mark.slow
def test_the_first_genomes_get_the_edge_cases(built) -> None:
    # Genome i (of those valid on 8192^3) is first tried on a shape of kind
    # SHAPE_KINDS[i % 8]: k_ragged, below_tile, non_multiple, ...; a shape the verifier
    # rejects is a row, and the kinds after it are tried until one is accepted.
    _out, index = built
    rows = sorted(index["cases"] + index["rejections"], key=lambda r: r["draw"])
    assert [r["draw"] for r in rows] == list(range(len(rows)))
    firsts = [r for r in rows if not r["fallback"]]
    kinds = index["shape_kinds"]
    assert kinds[:3] == ["k_ragged", "below_tile", "non_multiple"]
    assert [r["kind"] for r in firsts] == [kinds[i % len(kinds)] for i in range(len(firsts))]
    k_ragged, below, non_multiple = firsts[:3]
    assert k_ragged["flags"]["k_ragged"]
    assert any(below["flags"][f] for f in ("m_below_tile", "n_below_tile", "k_below_tile"))
    assert non_multiple["flags"]["m_ragged"] and non_multiple["flags"]["k_ragged"]
    accepted_turns = 0
    for turn in range(len(firsts)):  # each genome: rejected shapes, then at most one accepted
        mine = [r for r in rows if r["turn"] == turn]
        assert [r["verdict"] for r in mine[:-1]] == ["rejected"] * (len(mine) - 1)
        if mine[-1]["verdict"] == "accepted":
            accepted_turns += 1
        else:  # a genome no shape of any kind accepts (e.g. a swizzle band wider than each)
            assert len(mine) == len(set(kinds))
        assert len({r["genome_hash"] for r in mine}) == 1
    assert accepted_turns == index["count"] == 3


def test_run_without_a_gpu_says_so(built, tmp_path: Path) -> None:
    out, _index = built
    done = harness("run", "--index", str(out / "index.json"), "--out",
                   str(tmp_path / "r.json"), timeout=600)
    assert done.returncode != 0
    assert "the checking process did not start" in done.stderr
    assert not (tmp_path / "r.json").exists()
