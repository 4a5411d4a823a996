#!/usr/bin/env python3
"""One MLP GeMM shape with one sm90 configuration, for a profiler: launches the synchronized kernel
(sync_gemm_kernel) once and then, with --stock, the stock CUTLASS reference kernel (device_kernel)
once on the same operands, checks both against a float32 reference, and with --time prints their
CUDA-graph times next to cuBLAS. Meant for

    ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \\
        -k regex:'sync_gemm|device_kernel' -c 2 python benchmarks/sm90_profile.py --model gpt3 --gemm 1 \\
        --M 512 --config 128x128x64 --stock 128x128x64

(the first two kernels are ours and the stock one; launch order fixed). --store both launches ours
twice, with the quad-transposed 16-byte stores and then with the fp16-pair stores (then -c 3: quad,
pair, stock). docs/sm90.md.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from cusyncgen.cuda import sm90  # noqa: E402
from cusyncgen.workloads import mlp_sm90 as W  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt3", choices=sorted(W.MODELS))
    ap.add_argument("--gemm", type=int, default=1, choices=(1, 2))
    ap.add_argument("--M", type=int, default=512)
    ap.add_argument("--config", default="128x128x64")
    ap.add_argument("--order", default="row", choices=("row", "grouped"))
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--stock", default="", help="also launch the stock CUTLASS kernel with this tile")
    ap.add_argument("--cluster", type=int, default=1, help="the stock kernel's cluster M (1 or 2)")
    ap.add_argument("--raster", default="heuristic", choices=sorted(sm90.RASTERS))
    ap.add_argument("--store", default="quad", choices=("quad", "pair", "both"),
                    help="the epilogue's stores (both: two launches of ours, quad then pair)")
    ap.add_argument("--time", action="store_true", help="also time both (not under a profiler)")
    a = ap.parse_args(argv)

    torch.backends.cuda.matmul.allow_tf32 = False
    m = W.model_of(a.model)
    (N, K) = W.gemm_shapes(m)[a.gemm - 1]
    M = a.M
    g = torch.Generator(device="cuda").manual_seed(0)
    A = torch.randn(M, K, device="cuda", generator=g).half()
    B = (torch.randn(N, K, device="cuda", generator=g) / math.sqrt(K)).half()
    C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.half)
    C2 = torch.full((M, N), float("nan"), device="cuda", dtype=torch.half)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sm90_mlp import gemm_order, graph_time, stream_handle

    od = gemm_order(a.config, M, N, K, a.order)
    stores = ["quad", "pair"] if a.store == "both" else [a.store]
    Cs = [C] + [torch.full((M, N), float("nan"), device="cuda", dtype=torch.half) for _ in stores[1:]]
    plans = [sm90.Plan(a.config, [sm90.gemm_desc(A.data_ptr(), B.data_ptr(), Cx.data_ptr(), M, N, K, a.config,
                                                 order=od, splits=a.splits, store=sm90.STORES[st])])
             for st, Cx in zip(stores, Cs)]
    plan = plans[0]
    # the stream is looked up at each call: under graph capture it is the capture stream
    stock = (lambda: sm90.stock_gemm(a.stock, a.cluster, A.data_ptr(), B.data_ptr(), C2.data_ptr(), M, N, K,  # noqa: E731
                                     a.raster, 1, stream_handle())) if a.stock else None
    for p in plans:
        p.launch(stream_handle())
    if stock:
        stock()
    torch.cuda.synchronize()
    ref = A.float() @ B.float().t()
    err = lambda c: float((c.float() - ref).norm() / ref.norm())  # noqa: E731
    line = (f"{a.model} gemm{a.gemm} M={M} N={N} K={K}: sm90 {a.config} order {a.order} splits {a.splits} "
            f"grid {plan.grid} " + ", ".join(f"{st}-store rel err {err(Cx):.1e}" for st, Cx in zip(stores, Cs)))
    if stock:
        line += f"; stock {a.stock} c{a.cluster}x1 raster {a.raster} rel err {err(C2):.1e}"
    print(line, flush=True)
    if a.time:
        Cv = torch.empty(M, N, device="cuda", dtype=torch.half)
        tc = graph_time(lambda: torch.matmul(A, B.t(), out=Cv))
        out = f"time: cuBLAS {tc:.1f} us"
        for st, p in zip(stores, plans):
            t = graph_time(lambda p=p: p.launch(stream_handle()))
            out += f", sm90 {st}-store {t:.1f} us ({tc / t:.2f})"
        if stock:
            ts = graph_time(stock)
            out += f", stock {ts:.1f} us ({tc / ts:.2f})"
        print(out, flush=True)
    return 0 if all(err(Cx) < 1e-2 for Cx in Cs) and (not stock or err(C2) < 1e-2) else 1


if __name__ == "__main__":
    sys.exit(main())
