#!/usr/bin/env python3
"""A/B of the sm90 epilogue's store modes, on one GPU in one run: "pair" (the register epilogue's
fp16-pair st.global) against "tma" (the rows staged in shared memory, one TMA store per 32-column
chunk). Each MLP GeMM alone (identity epilogue) at each M, on every tile config that fits it, in
the row-major and the grouped order, with and without the split-K tail: the fastest correct time
per store mode, and the stock CUTLASS kernel (TMA-store epilogue) beside; then every MLP
configuration of the tile config and orders the committed bench found fastest for that M, with each
store mode. Timings are CUDA-graph medians; the two store modes of one case are timed alternately
(A B A B ...), and every output is checked against a float32 reference first.

    CUSYNC_SM90_LIB=<libcusync_sm90.so> PYTHONPATH=. python benchmarks/sm90_store_ab.py [--M 256,1024]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

from cusyncgen.cuda import sm90, timing  # noqa: E402
from cusyncgen.workloads import mlp_sm90 as W  # noqa: E402

STORES = ("pair", "tma")
ROUNDS = 3


def rel_err(c, ref) -> float:
    c = c.astype(cupy.float32)
    if not bool(cupy.isfinite(c).all()):
        return float("inf")
    return float(cupy.linalg.norm(c - ref) / cupy.linalg.norm(ref))


def alternate(fns: dict, stream, iters: int) -> dict:
    """CUDA-graph medians of each callable, timed in ROUNDS alternating rounds: {name: us}."""
    graphs = {k: timing.capture(f, stream) for k, f in fns.items()}
    got = {k: [] for k in fns}
    for _ in range(ROUNDS):
        for k, g in graphs.items():
            got[k] += timing.time_graphs([g], stream, iters=iters)
    return {k: timing.median(v) for k, v in got.items()}


def gemm_ab(model: str, M: int, configs, stream, iters: int, out: list) -> None:
    m = sm90.MODELS[model]
    rng = cupy.random.RandomState(M)
    for gi, (N, K) in enumerate(sm90.mlp_sizes(m), start=1):
        A = rng.standard_normal((M, K), dtype=cupy.float32).astype(cupy.float16)
        B = (rng.standard_normal((N, K), dtype=cupy.float32) / K ** 0.5).astype(cupy.float16)
        ref = A.astype(cupy.float32) @ B.astype(cupy.float32).T
        C = cupy.empty((M, N), dtype=cupy.float16)
        best = {}
        for tile in W.tile_candidates(model, M, configs, gi):
            bm, bn, bk = sm90.tile_dims(tile)
            X, Y = sm90.order_grid(tile, M, N)
            orders = {"": sm90.row_major_order(X, Y),
                      " G": sm90.grouped_order(X, Y, sm90.grouped_columns(X, Y, bm * K * 2.0, bn * K * 2.0))}
            for (oname, order), S in ((o, s) for o in orders.items()
                                      for s in {sm90.NO_SPLIT, sm90.auto_splits(X * Y, K // bk)}):
                plans = {st: sm90.Plan(tile, [sm90.gemm_desc(A.data.ptr, B.data.ptr, C.data.ptr, M, N, K, tile,
                                                             order=order, splits=S, store=sm90.STORES[st])])
                         for st in STORES}
                ok = True
                for st, plan in plans.items():
                    with stream:
                        C.fill(cupy.nan)
                        plan.launch(stream.ptr)
                        stream.synchronize()
                        ok &= rel_err(C, ref) < 1e-2
                if not ok:
                    print(f"gemm {model} M={M} gemm{gi} {tile}{oname} {S}: WRONG", flush=True)
                    out.append({"model": model, "M": M, "gemm": gi, "tile": tile + oname, "correct": False})
                    continue
                with stream:
                    t = alternate({st: (lambda s, p=p: p.launch(s.ptr)) for st, p in plans.items()}, stream, iters)
                for st in STORES:
                    if st not in best or t[st] < best[st][0]:
                        best[st] = (t[st], f"{tile}{oname}" + (f" splitK{S}" if S.S > 1 else ""))
        with stream:
            stock = alternate({c: (lambda s, c=c: sm90.stock_gemm(c, 1, A.data.ptr, B.data.ptr, C.data.ptr, M, N, K,
                                                                   stream=s.ptr))
                               for c in sm90.library().stock_configs if N % sm90.tile_dims(c)[1] == 0},
                              stream, iters)
        row = {"model": model, "M": M, "gemm": gi, "N": N, "K": K, "correct": True,
               **{f"{st}_us": round(best[st][0], 2) for st in STORES}, **{f"{st}_tile": best[st][1] for st in STORES},
               "stock_us": round(min(stock.values()), 2)}
        out.append(row)
        print(f"gemm {model} M={M} gemm{gi} N={N} K={K}: pair {best['pair'][0]:.1f} us [{best['pair'][1]}], "
              f"tma {best['tma'][0]:.1f} us [{best['tma'][1]}] ({best['pair'][0] / best['tma'][0]:.3f}x), "
              f"stock CUTLASS {min(stock.values()):.1f} us", flush=True)


def mlp_ab(model: str, M: int, tiles: str, stream, iters: int, out: list) -> None:
    t = tiles.split()
    c1, _, c2 = t[0].partition("+")
    flags = dict(grouped1="G1" in t, banded1="B1" in t, grouped2="G2" in t, banded2="B2" in t)
    m = sm90.MODELS[model]
    rng = cupy.random.RandomState(7 + M)
    X = rng.standard_normal((M, m.H), dtype=cupy.float32).astype(cupy.float16)
    W1 = (rng.standard_normal((m.N1, m.H), dtype=cupy.float32) / m.H ** 0.5).astype(cupy.float16)
    W2 = (rng.standard_normal((m.H, m.F), dtype=cupy.float32) / m.F ** 0.5).astype(cupy.float16)
    Y = cupy.empty((M, m.F), dtype=cupy.float16)
    Z = cupy.empty((M, m.H), dtype=cupy.float16)
    runners = {}
    for o, p in [("stream", None), ("pdl", None), ("pdl+policy", "TileSync"), ("pdl+policy", "RowSync"),
                 ("chain", "TileSync"), ("chain", "RowSync")]:
        if c2 and o == "chain":
            continue
        for sp in ("none", "auto"):
            for st in STORES:
                runners[(o, p, sp, st)] = sm90.MlpRunner(model, M, o, p, c1, X.data.ptr, W1.data.ptr, W2.data.ptr,
                                                         Y.data.ptr, Z.data.ptr, timeout_ns=2_000_000_000, splits=sp,
                                                         store=st, config2=c2 or None, **flags)
    with stream:
        ref = {}
        for k, r in runners.items():
            Z.fill(cupy.nan)
            r.launch(stream.ptr)
            stream.synchronize()
            r.check_debug()
            ref[k] = Z.copy()
        for k in runners:   # every configuration and store mode computes the same Z as StreamSync/pair
            if not bool(cupy.allclose(ref[k].astype(cupy.float32), ref[("stream", None, "none", "pair")]
                                      .astype(cupy.float32), rtol=2e-2, atol=2e-2)):
                print(f"mlp {model} M={M} {runners[k].name}: WRONG", flush=True)
        t = alternate({k: (lambda s, r=r: r.launch(s.ptr)) for k, r in runners.items()}, stream, iters)
    for st in STORES:
        mine = {k: v for k, v in t.items() if k[3] == st}
        sync = min((v, runners[k].name) for k, v in mine.items() if k[1] is not None)
        strm = min((v, runners[k].name) for k, v in mine.items() if k[1] is None)
        out.append({"model": model, "M": M, "tiles": tiles, "store": st, "best_sync_us": round(sync[0], 2),
                    "best_sync": sync[1], "best_stream_us": round(strm[0], 2), "best_stream": strm[1]})
        print(f"mlp {model} M={M} [{tiles}] {st}: best synchronized {sync[0]:.1f} us ({sync[1]}), fastest stream "
              f"order {strm[0]:.1f} us ({strm[1]})", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt3,llama-ep")
    ap.add_argument("--M", default="256,512,1024,2048,4096")
    ap.add_argument("--mlp-M", default="128,512,2048", help="M of the MLP A/B ('' to skip)")
    ap.add_argument("--bench", default="benchmarks/results/mlp-nvidia-h100-80gb-hbm3-sm90.json",
                    help="the bench run whose fastest tiles per M the MLP A/B uses")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("-o", "--out", default="sm90-store-ab.json")
    a = ap.parse_args(argv)
    stream = cupy.cuda.Stream()
    configs = sm90.library().configs
    out = []
    for model in a.models.split(","):
        for M in (int(v) for v in a.M.split(",") if v):
            gemm_ab(model, M, configs, stream, a.iters, out)
            cupy.get_default_memory_pool().free_all_blocks()
    bench = json.loads(Path(a.bench).read_text())
    for model in a.models.split(","):
        for M in (int(v) for v in a.mlp_M.split(",") if v):
            rows = [r for r in bench["rows"] if r["model"] == model and r["M"] == M and r.get("tiles") and r["correct"]]
            tiles = min(rows, key=lambda r: r["time_us"])["tiles"]
            mlp_ab(model, M, tiles, stream, a.iters, out)
            cupy.get_default_memory_pool().free_all_blocks()
    g = [r for r in out if "gemm" in r and r["correct"]]
    if g:
        gm = math.exp(sum(math.log(r["pair_us"] / r["tma_us"]) for r in g) / len(g))
        print(f"GeMMs alone: tma over pair geomean {gm:.3f}x over {len(g)} shapes "
              f"(min {min(r['pair_us'] / r['tma_us'] for r in g):.3f}, max {max(r['pair_us'] / r['tma_us'] for r in g):.3f})")
    Path(a.out).write_text(json.dumps({"rows": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
