"""What the sm90 epilogue's stores cost: MLP GeMMs alone on a library built with
-DCUSYNC_SM90_STORE_PROBE (store mode 3 skips the stores, nothing else changes), each tile config in
the grouped order with the pair stores, the quad stores and no stores, beside stock CUTLASS; all
timed in three alternating rounds (CUDA-graph medians, us).

    python -c "from cusyncgen.cuda import sm90; print(sm90.build(defines=('CUSYNC_SM90_STORE_PROBE',)))"
    CUSYNC_SM90_LIB=<that library> PYTHONPATH=. python benchmarks/sm90_store_probe.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

from cusyncgen.cuda import sm90, timing  # noqa: E402

stream = cupy.cuda.Stream()
CASES = [("llama-ep", 2, 1024), ("llama-ep", 2, 2048), ("gpt3", 2, 2048), ("gpt3", 1, 2048), ("llama-ep", 1, 1024)]
for model, gi, M in CASES:
    m = sm90.MODELS[model]
    N, K = sm90.mlp_sizes(m)[gi - 1]
    rng = cupy.random.RandomState(M)
    A = rng.standard_normal((M, K), dtype=cupy.float32).astype(cupy.float16)
    B = (rng.standard_normal((N, K), dtype=cupy.float32) / K ** 0.5).astype(cupy.float16)
    C = cupy.empty((M, N), dtype=cupy.float16)
    fns = {}
    for tile in ("128x128x64", "256x128x64", "128x256x64", "128x128x64pp"):
        bm, bn, bk = sm90.tile_dims(tile)
        if N % bn:
            continue
        X, Y = sm90.order_grid(tile, M, N)
        order = sm90.grouped_order(X, Y, sm90.grouped_columns(X, Y, bm * K * 2.0, bn * K * 2.0))
        for st, code in (("pair", 1), ("quad", 0), ("none", 3)):
            g = sm90.gemm_desc(A.data.ptr, B.data.ptr, C.data.ptr, M, N, K, tile, order=order)
            g.store = code
            p = sm90.Plan(tile, [g])
            fns[f"{tile} {st}"] = (lambda s, p=p: p.launch(s.ptr))
    for c in sm90.library().stock_configs:
        if N % sm90.tile_dims(c)[1] == 0:
            fns[f"stock {c}"] = (lambda s, c=c: sm90.stock_gemm(c, 1, A.data.ptr, B.data.ptr, C.data.ptr, M, N, K, stream=s.ptr))
    with stream:
        graphs = {k: timing.capture(f, stream) for k, f in fns.items()}
        t = {k: [] for k in graphs}
        for _ in range(3):
            for k, g in graphs.items():
                t[k] += timing.time_graphs([g], stream, iters=20)
    print(f"{model} gemm{gi} M={M} N={N} K={K}: " + ", ".join(f"{k} {timing.median(v):.1f}" for k, v in t.items()), flush=True)
