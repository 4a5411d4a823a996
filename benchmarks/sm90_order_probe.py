"""Where the MLP's first GeMM spends its time, by tile order: GPT-3's first GeMM alone on a few tile
configs in the row-major order ("rm"), the compiler's order ("dep") and the grouped order ("G"),
with the identity epilogue (epi0) and the model's GeLU (epi1), then the two plans of the MLP's
StreamSync runner each alone and both (CUDA-graph medians, microseconds). The measurement behind the
grouped first GeMM at small M (docs/design.md, "Hopper kernels").

    CUSYNC_SM90_LIB=<libcusync_sm90.so> PYTHONPATH=. python benchmarks/sm90_order_probe.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy  # noqa: E402

from cusyncgen.cuda import sm90, timing  # noqa: E402
from cusyncgen.workloads import mlp_sm90 as W  # noqa: E402

CASES = [("gpt3", 128, ("64x128x64", "128x128x64", "128x192x64", "64x128x64pp")),
         ("gpt3", 16, ("64x128x64", "128x128x64", "128x192x64", "64x128x64pp")),
         ("gpt3", 512, ("128x128x64", "128x192x64"))]


def main() -> None:
    stream = cupy.cuda.Stream()

    def t_of(fn, iters=60):
        with stream:
            fn(stream)
            stream.synchronize()
            g = timing.capture(lambda s: fn(s), stream)
            return timing.median(timing.time_graphs([g], stream, iters=iters))

    for model, M, tiles in CASES:
        m = W.model_of(model)
        x, w1, w2 = W.MLPSm90(model, M).buffers(seed=1)
        y = cupy.empty((M, m.K2), dtype=cupy.float16)
        z = cupy.empty((M, m.H), dtype=cupy.float16)
        (N1, K1), _ = W.gemm_shapes(m)
        for tile in tiles:
            X, Y = sm90.order_grid(tile, M, N1)
            bm, bn, _ = sm90.tile_dims(tile)
            _, o1, _ = W.compiled_mlp(model, M, tile)
            orders = {"rm": sm90.row_major_order(X, Y), "dep": sm90.order_desc(o1),
                      "G": sm90.grouped_order(X, Y, sm90.grouped_columns(X, Y, bm * K1 * 2.0, bn * K1 * 2.0))}
            out = []
            for epi in (sm90.EPI_IDENTITY, W.epilogue1(m)):
                for name, order in orders.items():
                    plan = sm90.Plan(tile, [sm90.gemm_desc(x.data.ptr, w1.data.ptr, y.data.ptr, M, N1, K1, tile, epi,
                                                           order)])
                    out.append(f"epi{epi}/{name} {t_of(lambda s, p=plan: p.launch(s.ptr)):.1f}")
            r = W.mlp_chain(model, M, W.STREAM_SYNC, W.Sm90Tiles(tile),
                            tuple(a.data.ptr for a in (x, w1, w2, y, z)))
            t1 = t_of(lambda s: r.plans[0].launch(s.ptr))
            t2 = t_of(lambda s: r.plans[1].launch(s.ptr))
            tb = t_of(lambda s: r.launch(s.ptr))
            print(f"{model} M={M} {tile} g1: {' '.join(out)} | runner g1 {t1:.1f} g2 {t2:.1f} both {tb:.1f}", flush=True)


if __name__ == "__main__":
    main()
