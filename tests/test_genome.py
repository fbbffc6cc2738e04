"""Genome: frozen, exact JSON round trip, content hash, clear errors."""

import dataclasses
import json

import pytest

from tsopt.core.genome import Genome, GenomeError, OpPlacement, TaskSchedule
from tsopt.core.problem import Problem, ProblemError


def sample() -> Genome:
    return Genome.make(
        "copy",
        {
            "load": [
                ("coords", "head"),
                ("tma_load", "head"),
                ("coords", "loop"),
                ("tma_load", "loop"),
            ],
            "store": [("wait", "loop"), ("read", "loop"), ("release", "tail")],
        },
        {"persistent": True, "raster": "col"},
        {"stages": 4, "box": (32, 128)},
    )


def test_round_trip_is_exact_and_hash_stable() -> None:
    genome = sample()
    again = Genome.from_json(genome.to_json())
    assert again == genome
    assert again.hash == genome.hash
    assert len(genome.hash) == 64
    assert Genome.from_json(genome.to_json(indent=None)).canonical_json() == genome.canonical_json()


def test_hash_ignores_mapping_order_but_not_values() -> None:
    a = Genome.make("copy", numeric={"stages": 4, "chunk": 8})
    b = Genome.make("copy", numeric={"chunk": 8, "stages": 4})
    assert a.hash == b.hash
    assert a.replace(stages=5).hash != a.hash


def test_frozen() -> None:
    genome = sample()
    with pytest.raises(dataclasses.FrozenInstanceError):
        genome.space = "gemm"  # type: ignore[misc]


def test_accessors() -> None:
    genome = sample()
    assert genome["stages"] == 4
    assert genome["box"] == (32, 128)
    assert genome["persistent"] is True
    assert genome.task("load").in_section("head") == ("coords", "tma_load")
    assert genome.task("store").section_of("release") == "tail"
    with pytest.raises(KeyError, match="no gene 'nope'"):
        genome["nope"]
    with pytest.raises(GenomeError, match="no gene 'nope'"):
        genome.replace(nope=1)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"schedule": {}}', "no 'space' field"),
        (
            '{"space": "copy", "schedule": {"load": [["acquire", "middle"]]}}',
            "section must be one of",
        ),
        (
            '{"space": "copy", "schedule": {"load": [["acquire"]]}}',
            r"each op must be \[op, section\]",
        ),
        ('{"space": "copy", "numeric": {"stages": 1.5}}', "unsupported value 1.5"),
        ('{"space": "copy", "colour": 1}', "unknown genome field"),
        ('{"space": "copy", "format": 9}', "unsupported genome format 9"),
        (
            '{"space": "copy", "schedule": {"load": [["a", "tail"], ["b", "head"]]}}',
            "head, then loop",
        ),
    ],
)
def test_malformed_documents_name_the_problem(text: str, match: str) -> None:
    with pytest.raises(GenomeError, match=match):
        Genome.from_json(text)


def test_hash_field_is_checked() -> None:
    doc = sample().to_dict()
    doc["hash"] = "0" * 64
    with pytest.raises(GenomeError, match="hash mismatch"):
        Genome.from_dict(doc)
    doc["hash"] = sample().hash
    assert Genome.from_dict(doc) == sample()


def test_schedule_types() -> None:
    with pytest.raises(GenomeError):
        OpPlacement("", "loop")
    schedule = TaskSchedule("t", (OpPlacement("a", "head"), OpPlacement("b", "loop")))
    assert schedule.in_section("loop") == ("b",)
    assert json.loads(sample().to_json())["schedule"]["store"][-1] == ["release", "tail"]


def test_problem_validation() -> None:
    problem = Problem.of("copy", "fp16", rows=4096, cols=4096)
    assert problem.key == "copy-fp16-4096x4096"
    assert Problem.from_dict(problem.to_dict()) == problem
    assert problem.bytes_moved == 2 * 4096 * 4096 * 2
    assert Problem.of("gemm", "bf16", m=2, n=3, k=4).flops == 48
    with pytest.raises(ProblemError, match="unknown dtype 'fp8'"):
        Problem.of("copy", "fp8", rows=1, cols=1)
    with pytest.raises(ProblemError, match="rows=0 must be positive"):
        Problem.of("copy", "fp16", rows=0, cols=64)
    with pytest.raises(ProblemError, match="missing"):
        Problem.of("gemm", "bf16", m=1, n=1)
