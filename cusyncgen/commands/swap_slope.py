"""Where the swapped GeMM's time goes at token generation (sm_90, CuPy, torch and the sm90 library needed).

Each weight of the decode MLPs alone on the swapped GeMM at M tokens (default 64): CUDA graphs of 9
launches over three weight sets (so that no weight byte comes from L2 twice at the full K), timed in
rounds that rotate over the graphs, the median of each. Two tables:

- the slope: each GeMM at K, K / 2 and K / 4; the slope over K is its stream (TB/s, and over the
  copy bandwidth of baselines.ceilings, read + write), the intercept its fixed cost (ramp, epilogue,
  tail); LLaMA-ep's first GeMM with its SwiGLU epilogue and with the identity one;
- the stream rate (the weight's bytes over the time) at other K and other weight rows: K off the
  packed groups' power-of-two stride, and 86 to 192 tiles (docs/design.md, "Token generation").

Every graph's output of the first weight set is checked against a float32 product.

With --ncu it times nothing: each shape of NCU_SHAPES launched once per weight set (two sets), for
Nsight Compute to read the DRAM side of each launch from a cold L2 (docs/design.md, "The DRAM side"):

    python -m cusyncgen.commands.swap_slope [--M 64] [--rounds 7]
    ncu --clock-control none --cache-control all --metrics dram__throughput.avg.pct_of_peak_sustained_elapsed,\
        gpu__time_duration.sum,dram__bytes_read.sum python -m cusyncgen.commands.swap_slope --ncu
"""
from __future__ import annotations

import argparse
import sys

from cusyncgen.commands import missing_sm90

# (name, weight rows N, full K, epilogue, config): the decode MLPs' GeMMs on their tuned M = 64 tiles
SLOPE = [("llama-ep first, SwiGLU", 5504, 8192, "swiglu", "64x64x128sw1"),
         ("llama-ep first, identity", 5504, 8192, "identity", "64x64x128sw1"),
         ("llama-ep second", 8192, 2752, "identity", "64x64x64sw1"),
         ("gpt3 first, GeLU", 6144, 12288, "gelu", "64x64x128sw1"),
         ("gpt3 second", 12288, 6144, "identity", "64x64x128sw1")]
# (N, K): the packed groups K x 64 x 2 bytes apart, on and off a power of two, and 86-192 tiles
STRIDE = [(5504, 8192), (5504, 8256), (5504, 8704), (6144, 12288), (6144, 12352), (8192, 4096), (8192, 4160),
          (12288, 6144), (12288, 6208)]
CONFIG = "64x64x128sw1"
# (N, K, config): 86, 96, 128 and 192 tiles on CONFIG, and 86 on 64-deep k-blocks
NCU_SHAPES = [(5504, 8192, CONFIG), (6144, 12288, CONFIG), (8192, 4096, CONFIG), (12288, 6144, CONFIG),
              (5504, 8192, "64x64x64sw1")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cusyncgen.commands.swap_slope",
                                 description="The swapped GeMM's stream and fixed cost at token generation; sm_90, "
                                             "CuPy, torch and the sm90 library needed.")
    ap.add_argument("--M", type=int, default=64, help="tokens (1-64, default 64)")
    ap.add_argument("--rounds", type=int, default=7, help="rotating timing rounds (default 7)")
    ap.add_argument("--ncu", action="store_true", help="no timing: each NCU_SHAPES shape launched once per weight "
                                                        "set, to run under Nsight Compute")
    args = ap.parse_args(argv)
    if not 1 <= args.M <= 64:
        ap.error("--M: tokens from 1 to 64 (the swapped GeMM's decode sizes)")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if missing_sm90("swap_slope", "cupy"):
        return 1
    import cupy
    import torch

    from cusyncgen.cuda import baselines, sm90, timing
    from cusyncgen.workloads.base import rel_err
    from cusyncgen.workloads.mlp import TOL, gelu_tanh
    from cusyncgen.cuda.timing import rotations

    M = args.M
    if args.ncu:
        return _launches(M)
    bw = baselines.ceilings()["bandwidth"]
    stream = cupy.cuda.Stream(non_blocking=True)
    epilogues = {"identity": sm90.EPI_IDENTITY, "gelu": sm90.EPI_GELU_TANH, "swiglu": sm90.EPI_SWIGLU_ROWS}

    def reference(x, w, epi: str):
        if epi == "swiglu":
            n = w.shape[0] // 2
            g, u = (x.astype(cupy.float32) @ a.astype(cupy.float32).T for a in (w[:n], w[n:]))
            return g / (1 + cupy.exp(-g)) * u
        r = x.astype(cupy.float32) @ w.astype(cupy.float32).T
        return gelu_tanh(r, cupy) if epi == "gelu" else r

    def graph(N: int, K: int, epi: str, config: str):
        """A graph of 9 launches over three weight sets, and the relative error of the first set's."""
        rs = cupy.random.RandomState(N + K)
        x = rs.standard_normal((M, K), dtype=cupy.float32).astype(cupy.float16)
        ws = [(rs.standard_normal((N, K), dtype=cupy.float32) / K ** 0.5).astype(cupy.float16) for _ in range(3)]
        tile = sm90.swap_tile(config)
        order = [sm90.swiglu_rows(w[: N // 2], w[N // 2:]) if epi == "swiglu" else w for w in ws]
        packed = [sm90.swap_pack(w, tile.group) for w in order]
        y = cupy.full((M, N // 2 if epi == "swiglu" else N), cupy.nan, dtype=cupy.float16)
        cupy.cuda.Device().synchronize()   # the inputs, made on the legacy stream

        def run(s, i0=0, n=9):
            for i in range(i0, i0 + n):
                sm90.swap_gemm(config, epilogues[epi], packed[i % 3].data.ptr, x.data.ptr, y.data.ptr, M, N, K,
                               pdl=True, stream=s.ptr)
        run(stream, 0, 1)
        stream.synchronize()
        err = float(rel_err(y, reference(x, ws[0], epi)))
        return timing.capture(run, stream), err, (x, packed, y)

    def timed(graphs: dict) -> dict:
        res = {k: [] for k in graphs}
        for order in rotations(list(graphs), args.rounds):
            for k in order:
                res[k].append(timing.median(timing.time_graphs([graphs[k][0]], stream, iters=20)) / 9)
        return {k: timing.median(v) for k, v in res.items()}

    print(f"# python -m cusyncgen.commands.swap_slope --M {M} --rounds {args.rounds} on "
          f"{torch.cuda.get_device_name()}, library of source hash {sm90.source_hash()[:12]}; copy bandwidth "
          f"(read + write) {bw / 1e12:.2f} TB/s")
    print("\n| GeMM | config | tiles | K / 4, K / 2, K (us) | stream (TB/s) | over the copy | fixed (us) | "
          "weight over the copy at K (us) | rel err |")
    print("|---|---|---|---|---|---|---|---|---|")
    bad = 0
    for name, N, K0, epi, config in SLOPE:
        ks = (K0 // 4, K0 // 2, K0)
        graphs = {k: graph(N, k, epi, config) for k in ks}
        t = timed(graphs)
        slope = (t[ks[2]] - t[ks[0]]) / (ks[2] - ks[0])   # us per k
        rate = N * 2 / (slope * 1e-6)
        err = max(g[1] for g in graphs.values())
        bad += err >= TOL
        print(f"| {name} | {config} | {N // 64} | {', '.join(f'{t[k]:.1f}' for k in ks)} | {rate / 1e12:.2f} | "
              f"{rate / bw:.2f} | {t[ks[2]] - slope * ks[2]:.1f} | {N * K0 * 2 / bw * 1e6:.1f} | {err:.1e} |")
        del graphs
    print("\n| weight N x K | packed group stride (KB) | tiles | time (us) | stream (TB/s) | over the copy | rel err |")
    print("|---|---|---|---|---|---|---|")
    graphs = {nk: graph(*nk, "identity", CONFIG) for nk in STRIDE}
    t = timed(graphs)
    for (N, K), us in t.items():
        err = graphs[(N, K)][1]
        bad += err >= TOL
        rate = N * K * 2 / (us * 1e-6)
        print(f"| {N} x {K} | {K * 128 // 1024} | {N // 64} | {us:.1f} | {rate / 1e12:.2f} | {rate / bw:.2f} | "
              f"{err:.1e} |")
    if bad:
        print(f"swap_slope: {bad} GeMM(s) off the float32 reference", file=sys.stderr)
        return 1
    return 0


def _launches(M: int) -> int:
    """--ncu: one launch of each NCU_SHAPES shape per weight set (identity epilogue, PDL off)."""
    import cupy

    from cusyncgen.cuda import sm90
    stream = cupy.cuda.Stream(non_blocking=True)
    for N, K, config in NCU_SHAPES:
        rs = cupy.random.RandomState(N + K)
        x = rs.standard_normal((M, K), dtype=cupy.float32).astype(cupy.float16)
        group = sm90.swap_tile(config).group
        ws = [sm90.swap_pack((rs.standard_normal((N, K), dtype=cupy.float32) / K ** 0.5).astype(cupy.float16), group)
              for _ in range(2)]
        y = cupy.empty((M, N), dtype=cupy.float16)
        cupy.cuda.Device().synchronize()   # the inputs, made on the legacy stream
        for w in ws:
            sm90.swap_gemm(config, sm90.EPI_IDENTITY, w.data.ptr, x.data.ptr, y.data.ptr, M, N, K, stream=stream.ptr)
        stream.synchronize()
        print(f"{N} x {K} on {config}: {N // 64} tiles, launched once per weight set", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
