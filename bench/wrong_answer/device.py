"""On the H200 (torch only): (1) how the accepted-but-wrong skinny-n genome and its one-gene
neighbours go wrong: each kernel run on fresh random inputs ``--trials`` times and on the same
inputs twice, checked against torch in fp32 (relative error, how many elements are off, which
rows and columns of D); (2) where the space loses: cuBLAS's kernels at each problem whose oracle
is below cuBLAS (name, grid, block, time, from torch.profiler) beside the oracle best's.

    python3 bench/wrong_answer/device.py --bundles carry/wrong_answer --out $OUT/wrong_answer.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "launch_modes"))
from graph_check import export_loader  # noqa: E402  (the export's loader.py, imported by path)

TOL = 0.01  # the runner's relative-error limit (workers/reference.py)


def runs(ranges: list[int]) -> list[list[int]]:
    """Sorted indices as [first, last] runs."""
    out: list[list[int]] = []
    for i in ranges:
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def check(kernel, m: int, n: int, k: int, dtype, gen) -> dict:  # type: ignore[no-untyped-def]
    std = k ** -0.25
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen) * std
    b = torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) * std
    ref = a.float() @ b.float().t()
    outs = []
    for _ in range(2):  # the same inputs twice: is it deterministic?
        d = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        kernel(a, b, out=d)
        torch.cuda.synchronize()
        outs.append(d.float())
    d = outs[0]
    err = (d - ref).abs()
    bad = (err > 0.0156 * (ref.abs() + ref.pow(2).mean().sqrt())) | torch.isnan(d)
    rows = torch.nonzero(bad.any(dim=1)).flatten().tolist()
    cols = torch.nonzero(bad.any(dim=0)).flatten().tolist()
    rel = float((torch.nan_to_num(d, nan=0.0) - ref).norm() / ref.norm())
    return {"rel_err": rel, "ok": rel <= TOL and not bool(torch.isnan(d).any()),
            "bad": int(bad.sum()), "nan": int(torch.isnan(d).sum()),
            "same_twice": bool(torch.equal(torch.nan_to_num(outs[0], nan=7.0),
                                           torch.nan_to_num(outs[1], nan=7.0))),
            "bad_rows": runs(rows)[:12], "bad_cols": runs(cols)[:12],
            "n_bad_rows": len(rows), "n_bad_cols": len(cols)}


def profile(call, what: str) -> list[dict]:  # type: ignore[no-untyped-def]
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for _ in range(5):
        call()
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            call()
        torch.cuda.synchronize()
    path = Path(f"/tmp/trace-{what}.json")
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    kernels: dict[str, dict] = {}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        args = e.get("args", {})
        row = kernels.setdefault(e["name"], {"name": e["name"], "grid": args.get("grid"),
                                             "block": args.get("block"),
                                             "registers": args.get("registers per thread"),
                                             "smem": args.get("shared memory"), "us": []})
        row["us"].append(e.get("dur"))
    for row in kernels.values():
        row["calls"] = len(row["us"])
        row["median_us"] = statistics.median(row.pop("us"))
    return list(kernels.values())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundles", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trials", type=int, default=30)
    args = parser.parse_args()
    loader = export_loader()
    labels = {v["genome_hash"]: v["label"]
              for v in json.loads((args.bundles / "variants.json").read_text())}
    doc: dict = {"started": time.time(), "device": torch.cuda.get_device_name(0),
                 "torch": torch.__version__, "kernels": [], "profiles": []}
    gen = torch.Generator(device="cuda").manual_seed(20261204)
    for bundle in sorted(args.bundles.glob("wrong-*")):
        manifest = json.loads((bundle / "manifest.json").read_text())
        for c in manifest["candidates"]:
            label = labels.get(c["genome_hash"], "?")
            row: dict = {"label": label, "genome_hash": c["genome_hash"], "bundle": bundle.name}
            try:
                kernel = loader.load_kernel(bundle / c["artifact"])
                kernel.load_module()
                p = kernel.manifest.problem
                m, n, k = p["m"], p["n"], p["k"]
                dtype = loader.TORCH_DTYPES[p["dtype"]]
                trials = [check(kernel, m, n, k, dtype, gen)
                          for _ in range(args.trials if not label.startswith("oracle") else 3)]
                row.update({"problem": p, "trials": len(trials),
                            "wrong": sum(not t["ok"] for t in trials),
                            "nondeterministic": sum(not t["same_twice"] for t in trials),
                            "max_rel_err": max(t["rel_err"] for t in trials),
                            "first_wrong": next((t for t in trials if not t["ok"]), None)})
                if label.startswith("oracle"):
                    a = torch.randn(m, k, device="cuda", dtype=dtype)
                    b = torch.randn(n, k, device="cuda", dtype=dtype)
                    d = torch.empty(m, n, device="cuda", dtype=dtype)
                    doc["profiles"].append({
                        "label": label, "problem": p,
                        "cublas": profile(lambda a=a, b=b, d=d: torch.matmul(a, b.t(), out=d), f"cublas-{m}"),
                        "tsopt": profile(lambda k=kernel, a=a, b=b, d=d: k(a, b, out=d), f"tsopt-{m}")})
            except Exception as exc:  # noqa: BLE001 - one kernel's failure is its row
                row["error"] = f"{type(exc).__name__}: {exc}"
            print(json.dumps({k: v for k, v in row.items() if k != "first_wrong"}), flush=True)
            doc["kernels"].append(row)
            args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
