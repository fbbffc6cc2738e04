"""Remake the tests' fixtures (``tests/fixtures/``) from the evidence archives.

Each fixture is the part of one committed experiment file that a test checks, in that file's
own format (the same keys; lists cut to the rows the test reads). The tests read only the
fixtures, never ``bench/`` or ``evidence/``; this script is how a fixture was made and how
it is remade when its source changes::

    python3 -m scripts.test_fixtures   # unpacks evidence/ in a scratch folder, writes tests/fixtures/

``tests/fixtures/README.md`` lists each fixture, its source and the tests that read it.
"""

from __future__ import annotations

import json
import lzma
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tsopt.core.evidence import unpack  # noqa: E402

OUT = ROOT / "tests" / "fixtures"
MEASURED = ("genome_hash", "problem_key", "status", "ratio", "ratio_lo", "ratio_hi", "rounds",
            "median_us", "baseline_median_us", "baseline_name", "device")
"""What a trimmed measurement keeps: enough for ``Measurement.from_dict`` and a ranking."""
SQUARE = {"op": "gemm", "dtype": "bf16", "m": 8192, "n": 8192, "k": 8192}


def read(path: Path) -> Any:
    return json.loads(lzma.open(path).read() if path.suffix == ".xz" else path.read_text())


def write(name: str, doc: Any) -> None:
    path = OUT / name
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=1) + "\n"
    if path.suffix == ".xz":
        path.write_bytes(lzma.compress(text.encode(), preset=9 | lzma.PRESET_EXTREME))
    else:
        path.write_text(text)


def trimmed(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m[k] for k in MEASURED if k in m}


def copy_bundle(src: Path, folder: str, prefixes: tuple[str, ...], first: bool) -> None:
    """A copy bundle's manifest and results, cut to the candidates the tests take (by hash
    prefix, and the manifest's first candidate where ``first``)."""
    manifest, results = read(src / "manifest.json"), read(src / "results.json")
    keep = [c for i, c in enumerate(manifest["candidates"])
            if (first and i == 0) or c["genome_hash"].startswith(prefixes)]
    hashes = {c["genome_hash"] for c in keep}
    write(f"{folder}/manifest.json", {**manifest, "candidates": keep})
    write(f"{folder}/results.json", {**results, "measurements": [
        m for m in results["measurements"] if m["genome_hash"] in hashes]})


def result_rows(src: Path, name: str, keep: Callable[[dict[str, Any]], bool],
                drop: tuple[str, ...] = ()) -> None:
    doc = read(src)
    rows = [{k: v for k, v in r.items() if k not in drop} for r in doc["results"] if keep(r)]
    write(name, {**doc, "results": rows})


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tsopt-fixtures-") as scratch:
        raw = Path(scratch)
        for experiment in ("copy_h200", "gemm_h200", "search_efficiency_h200", "gemm_small_h200",
                           "stream_k", "tune_gpu", "oracle"):
            unpack(experiment, raw)
        bench = raw / "bench"
        copy_bundle(bench / "copy_h200" / "copy-4096-fenced", "copy_h200/copy-4096-fenced",
                    ("d4032827a38d",), first=True)
        copy_bundle(bench / "copy_h200" / "copy-16384-fenced", "copy_h200/copy-16384-fenced",
                    ("6b3dc6745318",), first=False)

        gemm = bench / "gemm_h200"
        result_rows(gemm / "gemm-epilogue.json", "gemm_h200/gemm-epilogue.json.xz",
                    lambda r: True, drop=("build", "artifact", "knobs"))
        result_rows(gemm / "gemm-first.json", "gemm_h200/gemm-first.json",
                    lambda r: r["label"] in ("persistent swizzle8", "1 consumer 128x128")
                    and r["problem"] == SQUARE,
                    drop=("build", "artifact", "knobs"))
        result_rows(gemm / "gemm-final.json", "gemm_h200/gemm-final.json",
                    lambda r: r["label"] == "HEADLINE best", drop=("build", "artifact", "knobs"))

        (study,) = read(bench / "search_efficiency_h200" / "studies-random.json.xz")
        candidates = []
        for c in study["candidates"]:
            ok = [trimmed(m) for m in c.get("measurements", [])
                  if m["status"] == "ok" and m.get("ratio")]
            if ok:
                candidates.append({"genome_hash": c["genome_hash"], "genome": c["genome"],
                                   "measurements": ok})
        write("search_efficiency_h200/studies-random.json.xz", [{
            **{k: study[k] for k in ("name", "space", "problem", "arch", "sampler", "status")
               if k in study},
            "candidates": candidates}])

        small = "gemm-small-gemm-bf16-16x8192x8192.results.json"
        results = read(bench / "gemm_small_h200" / small)
        summary = read(ROOT / "bench" / "gemm_small_h200" / "gemm-small-summary.json")
        measured = {m["genome_hash"] for m in results["measurements"]}
        write(f"gemm_small_h200/{small}", {**results, "measurements": [
            trimmed(m) for m in results["measurements"]]})
        write("gemm_small_h200/gemm-small-summary.json", {"genomes": {
            h: g for h, g in summary["genomes"].items() if h in measured}})

        for results_path in sorted((bench / "stream_k" / "round3").glob("sk-*.results.json")):
            shape = results_path.name.removeprefix("sk-").removesuffix(".results.json")
            manifest = read(results_path.with_name(f"sk-{shape}.manifest.json"))
            doc = read(results_path)
            write(f"stream_k/round3/sk-{shape}.results.json", {"measurements": [
                trimmed(m) for m in doc["measurements"]]})
            write(f"stream_k/round3/sk-{shape}.manifest.json", {"candidates": [
                {"genome_hash": c["genome_hash"], "genome": c["genome"]}
                for c in manifest["candidates"]]})

        known = read(bench / "tune_gpu" / "known-round4.json")
        write("tune_gpu/known-round4.json", {"gemm:bf16:8192x8192x8192": [
            e for e in known["gemm:bf16:8192x8192x8192"]
            if e["genome_hash"].startswith("8bb0108a3dbb")]})

        write("oracle/plans/mid.json.xz", read(bench / "oracle" / "plans" / "mid.json"))
    print(f"fixtures written under {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
