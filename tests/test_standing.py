"""Ranking by paired ratio with intervals (tsopt.core.standing), on recorded-shape data."""

from __future__ import annotations

from tsopt.core.records import Measurement
from tsopt.core.standing import contenders, rank, standing, unseparated


def timed(ratio: float | None, lo: float | None, hi: float | None, us: float = 10.0,
          status: str = "ok", abnormal: tuple[str, ...] = ()) -> Measurement:
    return Measurement("g", "copy-fp16-8x8", status, median_us=us, ratio=ratio,  # type: ignore[arg-type]
                       ratio_lo=lo, ratio_hi=hi, conditions={"abnormal": list(abnormal)})


def test_a_candidate_combines_its_measurements_median_and_envelope() -> None:
    s = standing("a", [timed(1.00, 0.99, 1.01), timed(1.04, 1.03, 1.05), timed(1.02, 1.01, 1.03)])
    assert s is not None
    assert (s.ratio, s.ratio_lo, s.ratio_hi, s.measurements) == (1.02, 0.99, 1.05, 3)


def test_failed_and_abnormal_measurements_do_not_rank_when_a_normal_one_exists() -> None:
    s = standing("a", [timed(1.5, 1.4, 1.6, abnormal=("hw_thermal",)), timed(1.0, 0.99, 1.01),
                       timed(None, None, None, status="wrong")])
    assert s is not None and s.ratio == 1.0 and s.abnormal == ()
    only = standing("b", [timed(1.5, 1.4, 1.6, abnormal=("hw_thermal",))])
    assert only is not None and only.abnormal == ("hw_thermal",)
    assert standing("c", [timed(None, None, None, status="wrong")]) is None


def test_ranking_prefers_ratio_flags_what_noise_cannot_separate_and_finds_contenders() -> None:
    a = standing("a", [timed(1.03, 1.02, 1.04)])
    b = standing("b", [timed(1.02, 1.01, 1.03)])  # overlaps a
    c = standing("c", [timed(0.95, 0.94, 0.96)])  # separable, 8 % behind
    d = standing("d", [timed(None, None, None, us=1.0)])  # fast but unpaired: ranked last
    ordered = rank([s for s in (d, c, b, a) if s is not None])
    assert [s.genome_hash for s in ordered] == ["a", "b", "c", "d"]
    assert [s.genome_hash for s in unseparated(ordered)] == ["b", "d"]
    assert [s.genome_hash for s in contenders(ordered, within=0.03)] == ["b"]
