"""On the H200: a Llama-3-8B layer's GEMMs through an exported tsopt package against cuBLAS, at
every M from 1 to 128, and its MLP block under torch.compile with CUDA graphs (issue 30, item 5).

Torch, the standard library and the package only (no tsopt, no DSL)::

    python3 bench/llama_layer/layer.py --package DIR --json OUT.json [--passes 3]

1. **Every M, every projection** (qkv 4096->6144, o 4096->4096, gate_up 4096->28672, down
   14336->4096, bf16): ``torch.ops.tsopt.gemm(x, w)`` (the dispatcher, which routes the M to its
   bucket's kernel) against ``torch.matmul(x, w.t())``, each side one CUDA graph of back-to-back
   calls (serving's launch mode: the GPU's time alone), replayed in alternation (ABBA), on
   random data, the weight rotated over copies whose sum exceeds L2 (a layer's weights are not
   in L2 when its GEMM starts). The output is checked against an fp32 reference first. Per M
   the ratio is median(cuBLAS) / median(tsopt) of one pass; ``--passes`` passes sweep every M
   in turn (each pass in a new order), and the spread between passes is reported beside the
   median.
2. **Per bucket** (the kernel that served each M): the median and the worst ratio across its Ms,
   against issue 30's bar (median >= 1.00, no M below 0.97).
3. **The MLP block** (gate_up, SiLU(gate) * up, down) as a function of x, compiled by
   ``torch.compile(mode="reduce-overhead", fullgraph=True)`` (inductor, CUDA graph trees) once
   with the tsopt op and once with torch.matmul, at each ``--mlp-ms`` M: the latency of one
   call (timed over back-to-back calls, host launch included) of each, in alternation; the
   ratio is matmul's / tsopt's (above 1: tsopt's block is faster). And first the same block
   compiled with ``fullgraph=True`` alone and ``--mlp-calls`` calls of it captured in one CUDA
   graph per side (``mlp_graphed``): its GPU time, which the reduce-overhead figure, host-bound
   at these sizes, hides.

Writes every figure to ``--json`` and prints one line per M and per bucket.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

PROJECTIONS = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
               "down": (4096, 14336)}
REL_TOL = 1e-2
L2_TURNOVER_BYTES = 200 * 2**20
"""Weight copies per projection sum to at least this (the H200's L2 is 60 MiB)."""
LAUNCHES = 20
ROUNDS = 8


def load_torch_ops(package: Path) -> Any:
    spec = importlib.util.spec_from_file_location("torch_ops", package / "torch_ops.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["torch_ops"] = module
    spec.loader.exec_module(module)
    return module


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm((out.float() - ref).double())
                 / torch.linalg.vector_norm(ref.double()))


def capture(fn: Any, launches: int) -> torch.cuda.CUDAGraph:
    """``fn(i)`` for i in range(launches), back to back, in one CUDA graph (warmed outside)."""
    for i in range(min(launches, 3)):
        fn(i)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(launches):
            fn(i)
    graph.replay()
    torch.cuda.synchronize()
    return graph


def time_replay(graph: torch.cuda.CUDAGraph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0


def alternate(timers: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """Each side's times (``timers[name]()``), alternating ABBA so neither always runs first."""
    times: dict[str, list[float]] = {name: [] for name in timers}
    names = list(timers)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            times[name].append(timers[name]())
    return times


def paired(graphs: dict[str, torch.cuda.CUDAGraph], rounds: int) -> dict[str, list[float]]:
    """Each side's replay times, alternating ABBA so neither always runs first."""
    return alternate({name: (lambda g=g: time_replay(g)) for name, g in graphs.items()}, rounds)


class Projection:
    """One projection's weight copies and inputs at every M, on the GPU."""

    def __init__(self, name: str, n: int, k: int, max_m: int, gen: torch.Generator) -> None:
        self.name, self.n, self.k = name, n, k
        copies = max(1, math.ceil(L2_TURNOVER_BYTES / (n * k * 2)))
        self.ws = [(torch.randn(n, k, device="cuda", generator=gen) * k ** -0.25)
                   .to(torch.bfloat16) for _ in range(copies)]
        self.xs = [(torch.randn(max_m, k, device="cuda", generator=gen) * k ** -0.25)
                   .to(torch.bfloat16) for _ in range(copies)]
        self.launches = max(LAUNCHES, copies) // copies * copies

    def ratio_at(self, m: int, torch_ops: Any) -> dict[str, Any]:
        xs = [x[:m] for x in self.xs]
        c = len(self.ws)
        sizes = (("m", m), ("n", self.n), ("k", self.k))
        kernel = torch_ops.kernel_for("gemm", "bf16", sizes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = torch.ops.tsopt.gemm(xs[0], self.ws[0])
            torch.cuda.synchronize()
            err = rel_err(out, xs[0].float() @ self.ws[0].float().t())
            graphs = {
                "tsopt": capture(lambda i: torch.ops.tsopt.gemm(xs[i % c], self.ws[i % c]),
                                 self.launches),
                "cublas": capture(lambda i: torch.matmul(xs[i % c], self.ws[i % c].t()),
                                  self.launches)}
        times = paired(graphs, ROUNDS)
        del graphs
        t_us = statistics.median(times["tsopt"]) / self.launches
        c_us = statistics.median(times["cublas"]) / self.launches
        return {"m": m, "kernel": kernel.name if kernel is not None else None,
                "m_range": list(kernel.m_range) if kernel is not None and kernel.m_range else None,
                "rel_err": err, "ok": err <= REL_TOL, "tsopt_us": t_us, "cublas_us": c_us,
                "ratio": c_us / t_us}


def sweep(projections: list[Projection], ms: list[int], passes: int, torch_ops: Any,
          seed: int) -> dict[str, dict[int, list[dict[str, Any]]]]:
    found: dict[str, dict[int, list[dict[str, Any]]]] = {p.name: {} for p in projections}
    order = [(p, m) for p in projections for m in ms]
    shuffle = random.Random(seed)
    for index in range(passes):
        started = time.perf_counter()
        if index:
            shuffle.shuffle(order)
        for p, m in order:
            found[p.name].setdefault(m, []).append(p.ratio_at(m, torch_ops))
        print(f"pass {index + 1}: {len(order)} (projection, M) pairs in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
    return found


def summarise(found: dict[str, dict[int, list[dict[str, Any]]]]) -> dict[str, Any]:
    per_m, buckets = [], {}
    for name, by_m in found.items():
        for m, rows in sorted(by_m.items()):
            ratios = [r["ratio"] for r in rows]
            row = {"projection": name, "m": m, "kernel": rows[0]["kernel"],
                   "m_range": rows[0]["m_range"], "ok": all(r["ok"] for r in rows),
                   "rel_err": max(r["rel_err"] for r in rows),
                   "ratio": statistics.median(ratios), "pass_ratios": ratios,
                   "pass_spread": max(ratios) - min(ratios),
                   "tsopt_us": statistics.median(r["tsopt_us"] for r in rows),
                   "cublas_us": statistics.median(r["cublas_us"] for r in rows)}
            per_m.append(row)
            key = f"{name} {row['kernel']}"
            buckets.setdefault(key, []).append(row)
    bucket_rows = []
    for key, rows in buckets.items():
        ratios = [r["ratio"] for r in rows]
        median, worst = statistics.median(ratios), min(ratios)
        bucket_rows.append({"bucket": key, "ms": [r["m"] for r in rows], "median": median,
                            "worst": worst, "worst_m": rows[ratios.index(worst)]["m"],
                            "max_pass_spread": max(r["pass_spread"] for r in rows),
                            "meets_bar": median >= 1.00 and worst >= 0.97})
    return {"per_m": per_m, "buckets": bucket_rows}


def mlp_blocks(w_gu: torch.Tensor, w_down: torch.Tensor) -> dict[str, Any]:
    half = w_gu.shape[0] // 2

    def tsopt_block(x: torch.Tensor) -> torch.Tensor:
        gu = torch.ops.tsopt.gemm(x, w_gu)
        h = torch.nn.functional.silu(gu[:, :half]) * gu[:, half:]
        return torch.ops.tsopt.gemm(h, w_down)

    def matmul_block(x: torch.Tensor) -> torch.Tensor:
        gu = torch.matmul(x, w_gu.t())
        h = torch.nn.functional.silu(gu[:, :half]) * gu[:, half:]
        return torch.matmul(h, w_down.t())

    return {"tsopt": tsopt_block, "torch.matmul": matmul_block}


def time_calls(fn: Any, x: torch.Tensor, calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn(x)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


def graph_of(fn: Any, x: torch.Tensor, calls: int) -> torch.cuda.CUDAGraph:
    """``calls`` back-to-back calls of ``fn(x)`` captured in one CUDA graph (warmed up on a
    side stream first, as capture requires)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn(x)
    return graph


def mlp_inputs(gen: torch.Generator) -> tuple[dict[str, Any], int]:
    """The MLP block on each side (``mlp_blocks``) over random gate_up and down weights, and K."""
    n_gu, k = PROJECTIONS["gate_up"]
    n_down, k_down = PROJECTIONS["down"]
    w_gu = (torch.randn(n_gu, k, device="cuda", generator=gen) * k ** -0.25).to(torch.bfloat16)
    w_down = (torch.randn(n_down, k_down, device="cuda", generator=gen)
              * k_down ** -0.25).to(torch.bfloat16)
    return mlp_blocks(w_gu, w_down), k


def add_ratio(row: dict[str, Any], times: dict[str, list[float]], label: str) -> None:
    """Each side's median, the ratio (matmul's / tsopt's) and its range over rounds, printed."""
    row.update({f"{name} us": statistics.median(t) for name, t in times.items()})
    round_ratios = [c / t for c, t in zip(times["torch.matmul"], times["tsopt"], strict=True)]
    row.update(ratio=row["torch.matmul us"] / row["tsopt us"],
               round_ratio_min=min(round_ratios), round_ratio_max=max(round_ratios),
               times=times)
    print(f"{label} M={row['m']}: tsopt {row['tsopt us']:.1f} us, torch.matmul "
          f"{row['torch.matmul us']:.1f} us, ratio {row['ratio']:.3f} (rounds "
          f"{row['round_ratio_min']:.3f}-{row['round_ratio_max']:.3f}), rel err "
          f"{row['tsopt rel_err']:.1e}", flush=True)


def mlp_graphed(ms: list[int], gen: torch.Generator, rounds: int,
                calls: int) -> list[dict[str, Any]]:
    """The MLP block compiled by ``torch.compile(fullgraph=True)`` (inductor, no CUDA graph
    trees) and ``calls`` calls of it captured in one CUDA graph per side, replayed in
    alternation: the block's GPU time alone, as a serving stack that graphs its decode step
    sees it (the reduce-overhead figure of :func:`mlp` includes the host's replay cost, which
    at these sizes is most of it)."""
    eager, k = mlp_inputs(gen)
    rows = []
    for m in ms:
        torch._dynamo.reset()
        x = (torch.randn(m, k, device="cuda", generator=gen) * k ** -0.25).to(torch.bfloat16)
        ref = eager["torch.matmul"](x).float()
        compiled = {name: torch.compile(fn, fullgraph=True, dynamic=False)
                    for name, fn in eager.items()}
        row: dict[str, Any] = {"m": m, "mode": "compiled, captured in one CUDA graph per side"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, fn in compiled.items():
                row[f"{name} rel_err"] = rel_err(fn(x).float(), ref)
            graphs = {name: graph_of(fn, x, calls) for name, fn in compiled.items()}
            times = alternate({name: (lambda g=g: time_replay(g) / calls)
                               for name, g in graphs.items()}, rounds)
        add_ratio(row, times, "MLP block (graphed)")
        rows.append(row)
        del graphs
    return rows


def mlp(ms: list[int], gen: torch.Generator, rounds: int, calls: int) -> list[dict[str, Any]]:
    eager, k = mlp_inputs(gen)
    rows = []
    for m in ms:
        torch._dynamo.reset()
        x = (torch.randn(m, k, device="cuda", generator=gen) * k ** -0.25).to(torch.bfloat16)
        ref = eager["torch.matmul"](x.float().to(torch.bfloat16)).float()
        compiled = {name: torch.compile(fn, mode="reduce-overhead", fullgraph=True,
                                        dynamic=False) for name, fn in eager.items()}
        row: dict[str, Any] = {"m": m}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, fn in compiled.items():
                for _ in range(3):  # compiled, recorded, replayed
                    out = fn(x).clone()
                row[f"{name} rel_err"] = rel_err(out, ref)
            times = alternate({name: (lambda fn=fn, x=x: time_calls(fn, x, calls))
                               for name, fn in compiled.items()}, rounds)
        add_ratio(row, times, "MLP block")
        rows.append(row)
    return rows


def parse_ms(text: str) -> list[int]:
    ms: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        ms.extend(range(int(lo), int(hi or lo) + 1))
    return ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, required=True)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--ms", default="1-128")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--mlp-ms", default="1,8,32,128")
    parser.add_argument("--mlp-rounds", type=int, default=10)
    parser.add_argument("--mlp-calls", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-sweep", action="store_true")
    args = parser.parse_args()
    torch_ops = load_torch_ops(args.package)
    package = torch_ops.load(args.package)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    doc: dict[str, Any] = {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0), "package": str(args.package),
        "command": " ".join(sys.argv), "launches_per_graph": LAUNCHES, "rounds": ROUNDS,
        "kernels": [{"name": k.name, "m_range": k.m_range, "runtime_m": k.runtime_m,
                     "genome_hash": k.genome_hash} for k in package.kernels]}
    ms = parse_ms(args.ms)
    if not args.skip_sweep:
        projections = [Projection(name, n, k, max(ms), gen) for name, (n, k) in PROJECTIONS.items()]
        found = sweep(projections, ms, args.passes, torch_ops, args.seed)
        doc.update(summarise(found))
        for row in doc["per_m"]:
            print(f"{row['projection']:8s} M={row['m']:4d} {row['ratio']:.3f} "
                  f"(passes {min(row['pass_ratios']):.3f}-{max(row['pass_ratios']):.3f}) "
                  f"{'ok' if row['ok'] else 'WRONG'} {row['kernel']}")
        for row in doc["buckets"]:
            print(f"bucket {row['bucket']}: median {row['median']:.3f}, worst {row['worst']:.3f} "
                  f"at M={row['worst_m']} ({'meets' if row['meets_bar'] else 'misses'} the bar)")
        del projections
        torch.cuda.empty_cache()
    args.json.write_text(json.dumps(doc, indent=1, default=str))
    doc["mlp_graphed"] = mlp_graphed(parse_ms(args.mlp_ms), gen, args.mlp_rounds,
                                     args.mlp_calls)
    args.json.write_text(json.dumps(doc, indent=1, default=str))
    doc["mlp"] = mlp(parse_ms(args.mlp_ms), gen, args.mlp_rounds, args.mlp_calls)
    args.json.write_text(json.dumps(doc, indent=1, default=str))
    return 0 if all(r["ok"] for r in doc.get("per_m", [])) else 1


if __name__ == "__main__":
    raise SystemExit(main())
