"""The command line: smoke tests and bad input (one line naming the bad value, exit code 2)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tsopt.core.problem import Problem
from tsopt.core.registry import get_space

ROOT = Path(__file__).resolve().parents[1]


def tsopt(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "tsopt", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=env,
        timeout=600,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_help_lists_every_command() -> None:
    result = tsopt("--help")
    assert result.returncode == 0
    for command in (
        "tune",
        "verify",
        "measure",
        "ingest",
        "report",
        "export",
        "spaces",
        "dashboard",
    ):
        assert command in result.stdout


def test_spaces_lists_spaces_and_knobs() -> None:
    listing = tsopt("spaces")
    assert listing.returncode == 0, listing.stderr
    assert "copy" in listing.stdout and "gemm" in listing.stdout
    knobs = tsopt("spaces", "copy", "--problem", "copy:fp16:4096x4096")
    assert knobs.returncode == 0, knobs.stderr
    for knob in ("load.placement", "store.placement", "stages", "box_rows", "layout", "persistent"):
        assert knob in knobs.stdout


def test_verify_prints_valid_or_the_rule(tmp_path: Path) -> None:
    space = get_space("copy")
    good = tmp_path / "good.json"
    good.write_text(space.genome().to_json())
    result = tsopt("verify", str(good))
    assert result.returncode == 0 and "valid" in result.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(
        space.genome(
            load=(("coords", "try_acquire", "acquire", "commit", "tma_load"), 0, "none")
        ).to_json()
    )
    result = tsopt("verify", str(bad), "--problem", "copy:fp16:1024x1024")
    assert result.returncode == 1
    assert "ts.missing_commit" in result.stdout and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tune", "copy", "--rows", "64", "--cols", "64", "--dtype", "fp8"], "unknown dtype 'fp8'"),
        (["tune", "copy", "--rows", "0", "--cols", "64"], "rows=0 must be positive"),
        (["tune", "copy", "--rows", "-8", "--cols", "64"], "rows=-8 must be positive"),
        (["tune", "copy", "--rows", "100", "--cols", "64"], "rows=100 is not a multiple of 8"),
        (["tune", "copy", "--rows", "64", "--cols", "96"], "cols=96 is not a multiple of 64"),
        (["tune", "copy", "--rows", "64", "--cols", "64", "--trials", "0"], "--trials 0"),
        (["tune", "copy", "--rows", "64", "--cols", "64", "--time", "soon"], "--time 'soon'"),
        (
            ["tune", "copy", "--rows", "64", "--cols", "64", "--sampler", "magic"],
            "--sampler 'magic'",
        ),
        (["tune", "copy", "--rows", "64", "--cols", "64", "--patience", "0"], "--patience 0"),
        (["tune", "copy", "--rows", "64", "--cols", "64", "--knob", "stages=5"],
         "'5' is not a choice of stages"),
        (["tune", "copy", "--rows", "64", "--cols", "64", "--sampler", "grid"],
         "--sampler grid:"),
        (["spaces", "nope"], "unknown search space 'nope'"),
        (["verify", "/no/such/genome.json"], "cannot read genome file '/no/such/genome.json'"),
        (["verify", "GENOME", "--problem", "copy:fp16:4096"], "needs 2 sizes"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    args: list[str], message: str, tmp_path: Path
) -> None:
    genome = tmp_path / "g.json"
    genome.write_text(get_space("copy").genome().to_json())
    args = [str(genome) if a == "GENOME" else a for a in args]
    result = tsopt(*args, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in one_line_error(result)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{oops", "not valid JSON"),
        ('{"space": "warp-drive"}', "unknown search space 'warp-drive'"),
        ('{"space": "copy", "numeric": {"stages": [1.5]}}', "unsupported value"),
    ],
)
def test_malformed_genome_files(text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text(text)
    result = tsopt("verify", str(path))
    assert result.returncode == 2
    assert message in one_line_error(result)


@pytest.mark.slow
def test_tune_copy_without_a_gpu_builds_records_and_bundles(tmp_path: Path) -> None:
    result = tsopt(
        "tune",
        "copy",
        "--rows",
        "512",
        "--cols",
        "1024",
        "--dtype",
        "fp16",
        "--trials",
        "6",
        "--sampler",
        "random",
        "--seed",
        "4",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Nothing was timed: no GPU is present" in " ".join(result.stdout.split())
    bundle = tmp_path / ".tsopt" / "bundles" / "copy-fp16-512x1024-sm_90a"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["problem"]["rows"] == 512
    # The tutorial's schedule (the seed) is always among the built candidates.
    seed = get_space("copy").seed_genome(Problem.of("copy", "fp16", rows=512, cols=1024))
    assert seed.hash in {c["genome_hash"] for c in manifest["candidates"]}
    assert (tmp_path / "tsopt.db").exists()
    again = tsopt("tune", "copy", "--rows", "512", "--cols", "1024", "--trials", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
