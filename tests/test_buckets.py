"""M buckets (tsopt.core.buckets) and the measuring side's per-M pieces
(tsopt.workers.range_measure) that run without a GPU: the views of a call at M, the rows past M
held to their poison, the Ms a kernel is measured at, and how per-M figures combine. The
"kernels" here are torch expressions on CPU tensors standing in for a launch (one correct, one
writing a row past M), named as such; the GPU path is bench/serving/per_m_check.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from tsopt.core.artifact import TensorDesc
from tsopt.core.buckets import (
    FLOOR_MARGIN,
    RangeError,
    bucket_ranges,
    parse_m,
    range_ratio,
    sample_ms,
    summary_of,
)
from tsopt.core.problem import Problem, parse_problem_spec
from tsopt.core.records import Measurement
from tsopt.workers.buffers import make_buffers
from tsopt.workers.loader import KernelLoadError
from tsopt.workers.range_measure import (
    RowsBeyondM,
    artifact_m_range,
    combine,
    measure_at_ms,
    samples_for,
    tensors_at,
    views_at,
)
from tsopt.workers.reference import reference_for


def test_buckets_are_cut_at_powers_of_two_from_16() -> None:
    assert bucket_ranges(1, 256) == ((1, 16), (17, 32), (33, 64), (65, 128), (129, 256))
    assert bucket_ranges(1, 128) == ((1, 16), (17, 32), (33, 64), (65, 128))
    assert bucket_ranges(8, 40) == ((8, 16), (17, 32), (33, 40))
    assert bucket_ranges(300, 300) == ((300, 300),)
    assert bucket_ranges(1, 5000)[-1] == (4097, 5000)


def test_each_bucket_is_sampled_at_its_ends_its_middle_and_an_odd_m() -> None:
    assert [sample_ms(*b) for b in bucket_ranges(1, 256)] == [
        (1, 8, 13, 16), (17, 24, 29, 32), (33, 48, 57, 64), (65, 96, 113, 128),
        (129, 192, 225, 256)]
    assert sample_ms(5, 6) == (5, 6) and sample_ms(7, 7) == (7,)
    for lo, hi in bucket_ranges(1, 4096):
        ms = sample_ms(lo, hi)
        assert ms[0] == lo and ms[-1] == hi and any(m % 8 for m in ms), (lo, hi, ms)


@pytest.mark.parametrize(("text", "message"), [
    ("128-1", "is empty: its end is below its start"), ("0-16", "M starts at 1"),
    ("1-x", "not an integer, a range like 1-256"), ("8,8", "names an M twice"),
    ([1, 2, 3], "a range is [lo, hi]"), (True, "not an integer"), ("0", "M starts at 1"),
])
def test_an_impossible_m_is_named(text: object, message: str) -> None:
    with pytest.raises(RangeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_m(text)


def test_an_m_is_a_range_or_exact_ms() -> None:
    assert parse_m("1-256") == ((1, 256), ()) and parse_m([1, 128]) == ((1, 128), ())
    assert parse_m("32,1,8") == (None, (1, 8, 32)) and parse_m(64) == (None, (64,))


def test_the_range_figure_is_the_median_unless_the_worst_is_far_below_it() -> None:
    assert range_ratio([1.02, 1.00, 1.04]) == pytest.approx(1.02)
    assert range_ratio([1.02, 0.90, 1.04, 1.03]) == pytest.approx(0.90 + FLOOR_MARGIN)
    # >= 1.00 exactly when the median is >= 1.00 and no M is below 0.97 (issue 30's bar)
    assert range_ratio([1.00, 0.97, 1.05]) == pytest.approx(1.00)
    assert range_ratio([1.10, 0.96, 1.10]) < 1.0
    assert summary_of([{"m": 1, "ratio": 1.1}, {"m": 8, "ratio": 0.95}, {"m": 16, "ratio": 1.0}]
                      ) == {"ms": [1, 8, 16], "median": 1.0, "worst": 0.95, "worst_m": 8}


def _artifact(tmp_path: Path, m_range: object) -> Path:
    doc = {"genome_hash": "g", "tensors": []}
    if m_range is not None:
        doc["m_range"] = m_range
    (tmp_path / "artifact.json").write_text(json.dumps(doc))
    return tmp_path


def test_the_ms_a_kernel_is_measured_at(tmp_path: Path) -> None:
    problem = Problem.of("gemm", "bf16", m=16, n=8, k=32)
    assert artifact_m_range(_artifact(tmp_path, [1, 16])) == (1, 16)
    assert artifact_m_range(_artifact(tmp_path, None)) is None
    with pytest.raises(KernelLoadError, match=r"m_range \[16, 1\] is not \[lo, hi\]"):
        artifact_m_range(_artifact(tmp_path, [16, 1]))
    assert samples_for(problem, (1, 16), None) == (1, 8, 13, 16)
    assert samples_for(problem, (1, 16), [16, 3, 3]) == (3, 16)
    assert samples_for(problem, None, None) == ()  # a fixed-M kernel: measured as any
    assert samples_for(problem, None, [16]) == (16,)
    with pytest.raises(KernelLoadError, match="M 17 is outside the kernel's range 1-16"):
        samples_for(problem, (1, 16), [17])
    with pytest.raises(KernelLoadError, match="M 8 is outside the kernel's range 16-16"):
        samples_for(problem, None, [8])


@pytest.fixture
def buffers_at_16() -> tuple[Problem, list[TensorDesc], object]:
    problem = Problem.of("gemm", "bf16", m=16, n=8, k=32)
    tensors = [TensorDesc("a", "input", (16, 32), "bf16"), TensorDesc("b", "input", (8, 32), "bf16"),
               TensorDesc("d", "output", (16, 8), "bf16")]
    return problem, tensors, make_buffers(tensors, torch.bfloat16, 2, torch.device("cpu"))


def test_a_call_at_m_sees_the_first_m_rows_and_rows_past_m_must_keep_the_poison(
        buffers_at_16: tuple[Problem, list[TensorDesc], object]) -> None:
    problem, tensors, buffers = buffers_at_16
    assert [t.shape for t in tensors_at(tensors, problem, 5)] == [(5, 32), (8, 32), (5, 8)]
    views, full = views_at(buffers, 5)  # type: ignore[arg-type]
    bset, whole = views.sets[1], buffers.sets[1]  # type: ignore[attr-defined]
    a, b = bset.inputs
    assert (a.shape, b.shape, bset.outputs[0].shape) == ((5, 32), (8, 32), (5, 8))
    assert a.data_ptr() == whole.inputs[0].data_ptr() and a.is_contiguous()
    assert [t.data_ptr() for t in bset.tensors] == [p for p in bset.ptrs]
    reference = RowsBeyondM(reference_for(Problem.of("gemm", "bf16", m=5, n=8, k=32)), 5, full)
    generator = torch.Generator().manual_seed(1)
    for t in bset.inputs:
        reference.fill_inputs(t, generator)
    reference.poison(bset.outputs[0])  # poisons the whole D: rows 5..15 too
    assert torch.isnan(whole.outputs[0].float()).all()
    # STAND-IN kernels (torch on the CPU): one writes the call's rows, one a row more.
    bset.outputs[0].copy_(a.float() @ b.float().t())
    assert reference.compare(bset.inputs, bset.outputs).ok
    whole.outputs[0][5].fill_(0)
    result = reference.compare(bset.inputs, bset.outputs)
    assert not result.ok and "8 elements of D's rows 5..15 were written by a call at M=5" in result.message


def _measured(ratio: float, lo: float, hi: float, median_us: float) -> Measurement:
    return Measurement("g", "gemm-bf16-1-16x8x32", "ok", median_us=median_us, ratio=ratio,
                       ratio_lo=lo, ratio_hi=hi, rounds=5, rel_err=1e-3,
                       conditions={"sm_mhz": 1980})


def test_per_m_figures_combine_into_one_measurement() -> None:
    combined = combine([(1, _measured(1.05, 1.04, 1.06, 9.0)), (8, _measured(0.95, 0.94, 0.96, 9.5)),
                        (16, _measured(1.01, 1.00, 1.02, 10.0))], 0.0)
    assert combined.ratio == pytest.approx(range_ratio([1.05, 0.95, 1.01]))
    assert combined.ratio_lo == pytest.approx(0.94 + FLOOR_MARGIN)
    assert combined.ratio_hi == pytest.approx(min(1.02, 0.96 + FLOOR_MARGIN))
    assert combined.median_us == 10.0 and combined.rounds == 15  # times at the top M
    assert [e["m"] for e in combined.per_m] == [1, 8, 16] and combined.per_m[1]["ratio"] == 0.95
    assert combined.conditions["per_m_ms"] == [1, 8, 16]
    assert Measurement.from_dict(combined.to_dict()) == combined


def test_the_first_m_that_fails_is_the_measurements_status(
        buffers_at_16: tuple[Problem, list[TensorDesc], object]) -> None:
    problem, tensors, buffers = buffers_at_16
    seen: list[tuple[int, bool]] = []

    def measure_one(reference, tensors_m, views, launch, first):  # type: ignore[no-untyped-def]
        seen.append((tensors_m[0].shape[0], first))
        if tensors_m[0].shape[0] == 8:
            return Measurement("g", problem.key, "wrong", error="relative error 0.5")
        return _measured(1.0, 0.99, 1.01, 9.0)

    result = measure_at_ms((1, 8, 16), problem, tensors, buffers, lambda bset: None,  # type: ignore[arg-type]
                           measure_one, 0.0)
    assert seen == [(1, True), (8, False)]  # stops at the first failure
    assert result.status == "wrong" and result.error == "at M=8 (of 1, 8, 16): relative error 0.5"
    assert [e["m"] for e in result.per_m] == [1]


def _timed(problem: Problem, baseline_us: float, median_us: float) -> Measurement:
    """A paired timing whose figures agree with each other, as a measuring worker writes one."""
    from tsopt.core.bundle import expected_rate

    ratio = baseline_us / median_us
    return Measurement("g", problem.key, "ok", median_us=median_us, p10_us=median_us * 0.99,
                       p90_us=median_us * 1.01, runs=50, rate=expected_rate(problem, median_us)[0],
                       rate_unit="TFLOP/s", rel_err=1e-3, baseline_name="torch.matmul",
                       baseline_median_us=baseline_us,
                       baseline_rate=expected_rate(problem, baseline_us)[0], ratio=ratio,
                       ratio_lo=ratio * 0.99, ratio_hi=ratio * 1.01, rounds=5, device="H200")


def test_a_buckets_ratio_is_checked_against_its_per_m_figures_not_the_top_ms_times() -> None:
    """A bucket's ratio ranks by its worst M while its times are the top M's: ingest took the
    gap for a forged ratio (an H200 bucket at 0.47x at M=65 and 0.80x at M=128 was refused)."""
    from tsopt.core.bundle import measurement_physics

    problem = parse_problem_spec("gemm:bf16:65-128x4096x4096")
    combined = combine([(65, _timed(problem, 13.0, 27.7)), (96, _timed(problem, 13.5, 19.0)),
                        (128, _timed(problem, 13.9, 17.4))], 0.0)
    assert combined.ratio == pytest.approx(13.0 / 27.7 + FLOOR_MARGIN)  # far from 13.9 / 17.4
    assert measurement_physics(combined, problem, "sm_90a") is None
    forged = dataclasses.replace(combined, ratio=combined.ratio * 1.2, ratio_hi=2.0)
    assert "is not the range's figure of its per_m ratios" in (
        measurement_physics(forged, problem, "sm_90a") or "")
    entries = [dict(e) for e in combined.per_m]
    entries[0]["ratio"] = 1.5  # one M's ratio the times do not show
    said = measurement_physics(dataclasses.replace(combined, per_m=entries), problem, "sm_90a")
    assert said is not None and "per_m[0] (M=65) ratio 1.5 disagrees with the times" in said
