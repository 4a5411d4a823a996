#!/usr/bin/env python3
"""The two sm90 epilogues on the MLP GeMMs alone: each tile config with the register epilogue (fp16
pairs stored from registers by the MMA warps) beside its "tma" twin (the TMA-store epilogue: staged
in shared memory by stmatrix, stored by the store warp while the MMA warps go on), plus the 128x128
ping-pong config and cuBLAS (torch.matmul in a CUDA graph, no epilogue), in the grouped order; GPT-3's first GeMM
with its GeLU epilogue. Every output is poisoned (NaN) before its first launch and checked against a
float32 reference (W.torch_rel_err); a config and its twin must agree bit for bit (same mainloop, same rounding).
Timed in three alternating rounds of CUDA-graph replays (medians, us), ratios over the register
epilogue from the same run.

    PYTHONPATH=. python benchmarks/sm90_epilogue_ab.py [--M 256,1024,2048,4096] [-o log]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402
import torch  # noqa: E402

from cusyncgen.cuda import baselines, driver, sm90, timing  # noqa: E402
from cusyncgen.workloads import mlp_sm90 as W  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sm90_mlp import gemm_order  # noqa: E402

GEMMS = [("gpt3", 1), ("gpt3", 2), ("llama-ep", 2)]
TILES = ("128x128x64", "128x192x64", "128x256x64", "256x128x64")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--M", default="256,1024,2048,4096")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-o", "--out", default="")
    a = ap.parse_args(argv)
    lines = [f"# benchmarks/sm90_epilogue_ab.py on {driver.device_name()}: GeMMs alone, grouped order, CUDA-graph "
             f"medians of {a.rounds} alternating rounds (us); tma/reg: the TMA-store epilogue over the register one"]
    print(lines[0], flush=True)
    stream = cupy.cuda.Stream(non_blocking=True)
    failures = 0
    for model, gi in GEMMS:
        m = W.model_of(model)
        N, K = W.gemm_shapes(m)[gi - 1]
        epi = W.epilogue1(m) if gi == 1 else sm90.EPI_IDENTITY
        for M in (int(v) for v in a.M.split(",")):
            g = torch.Generator(device="cuda").manual_seed(M + 7 * gi)
            A = torch.randn(M, K, device="cuda", generator=g).half()
            B = (torch.randn(N, K, device="cuda", generator=g) / K ** 0.5).half()
            ref = A.float() @ B.float().t()
            if epi == sm90.EPI_GELU_TANH:
                ref = torch.nn.functional.gelu(ref, approximate="tanh")
            fns, outs = {}, {}
            for base in TILES + ("128x128x64pp",):
                for tile in ((base,) if base.endswith("pp") else (base, base + "tma")):
                    bm, bn, _ = sm90.tile_dims(tile)
                    if N % bn or (bm > 128 and M <= 128):
                        continue
                    C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.half)
                    p = sm90.Plan(tile, [sm90.gemm_desc(A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, tile,
                                                        epilogue=epi, order=gemm_order(tile, M, N, K, "grouped"))])
                    fns[tile] = (lambda s, p=p: p.launch(s.ptr))
                    outs[tile] = C
            Ct = torch.empty((M, N), device="cuda", dtype=torch.float16)
            torch.cuda.synchronize()
            vendor = baselines.graph_of(lambda: torch.matmul(A, B.t(), out=Ct))
            with stream:
                for f in fns.values():
                    f(stream)
                stream.synchronize()
                for tile, C in outs.items():
                    err = W.torch_rel_err(C, ref)  # inf where a NaN survived
                    ok = err < 1e-2
                    twin = tile.removesuffix("tma")
                    if tile.endswith("tma") and twin in outs and not torch.equal(C, outs[twin]):
                        ok = False
                        print(f"MISMATCH {model} gemm{gi} M={M} {tile} differs from {twin}", flush=True)
                    if not ok:
                        failures += 1
                        print(f"FAIL {model} gemm{gi} M={M} {tile}: rel err {err:.3g}", flush=True)
                graphs = {k: timing.capture(f, stream) for k, f in fns.items()}
                t = {k: [] for k in graphs}
                t["cuBLAS"] = []
                for _ in range(a.rounds):
                    for k, g in graphs.items():
                        t[k] += timing.time_graphs([g], stream, iters=20)
                    stream.synchronize()
                    t["cuBLAS"].append(baselines.replay_time(vendor, iters=20))
                    torch.cuda.synchronize()
            med = {k: timing.median(v) for k, v in t.items()}
            parts = []
            for k, v in med.items():
                s = f"{k} {v:.1f}"
                if k.endswith("tma") and k.removesuffix("tma") in med:
                    s += f" ({med[k.removesuffix('tma')] / v:.3f}x)"
                parts.append(s)
            best_ours = min(v for k, v in med.items() if k != "cuBLAS")
            line = (f"{model} gemm{gi} M={M} N={N} K={K}: " + ", ".join(parts) +
                    f"; best ours / cuBLAS {med['cuBLAS'] / best_ours:.3f}")
            print(line, flush=True)
            lines.append(line)
    lines.append(f"failures: {failures}")
    print(lines[-1], flush=True)
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
