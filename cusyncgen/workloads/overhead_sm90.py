"""The maximum-overhead microbenchmark (the paper's section VI-E) on the Hopper (sm90) hooks: two
dependent GeMMs with little work per tile, so that the time is launches, prologues, epilogues and
the synchronization itself. GPT-3's .dep program with H = 512 (WAVE, no MLP workload's model) at M =
128 x SMs / 2 on 128x128 tiles: the producer is exactly one wave of tiles (one per SM, two per row,
K = 512: 8 k-tiles), the consumer two (four per row, K = 256: 4 k-tiles). StreamSync and PDL alone against TileSync and
RowSync under PDL and in the one-launch chain, on the same kernels; every configuration checked
against the float32 reference (poisoned outputs, every launch's debug record read).

    cusyncgen bench overhead              # on an sm_90 GPU (--kernel sm80: the copy kernels)
"""
from __future__ import annotations

from cusyncgen.cuda.configs import SM90_ORDERINGS
from cusyncgen.workloads import mlp_sm90
from cusyncgen.workloads.mlp import Model

# GPT-3's .dep program with H = 512: at M = 128 x SMs / 2 its producer is one wave of 128x128 tiles
# of 8 k-tiles, two per row. Compiled on use (no descriptors beside the library: needs lark).
WAVE = Model("wave", "mlp_gpt3.dep", 512, 256, 256, "cusync_kernels::EpiGeluTanh", False)
MODEL = WAVE.name
TILE = "128x128x64"
TOL = 1e-2


class OverheadSm90:
    """The registry entry (cusyncgen.workloads.base.Workload) of the sm90 overhead benchmark."""

    name = "overhead"
    vendor = ""
    kernel = "sm90"
    orderings = SM90_ORDERINGS
    models = ()
    sizes = ()
    bench_options = ()
    tune_mode = ""   # nothing to tune

    @classmethod
    def sources(cls, sizes=None, tune: bool = False) -> list:
        """No per-shape modules: the sm90 library (`python -m cusyncgen.commands.sm90 build`)."""
        return []

    @classmethod
    def bench(cls, models=None, sizes=None, iters: int = 50) -> dict:
        return measure(max(iters, 50))


def measure(iters: int = 50) -> dict:
    """Each configuration's time and its overhead over StreamSync, one producer wave."""
    import torch

    from cusyncgen.cuda import driver, sm90, timing
    from cusyncgen.cuda.lazy import cupy

    sms = driver.sm_count()
    bm, bn, _ = sm90.tile_dims(TILE)
    m = WAVE
    M = bm * (sms // (m.N1 // bn))   # one producer tile per SM
    X, W1, W2, _, Zref = mlp_sm90.mlp_case(m, M, seed=0)
    Y = torch.empty(M, m.K2, device="cuda", dtype=torch.half)
    Z = torch.empty(M, m.H, device="cuda", dtype=torch.half)
    stream = cupy.cuda.Stream()
    rows, base = [], None
    ptrs = (X.data_ptr(), W1.data_ptr(), W2.data_ptr(), Y.data_ptr(), Z.data_ptr())
    for cfg in mlp_sm90.configs_for():
        r = mlp_sm90.mlp_chain(m, M, cfg, mlp_sm90.Sm90Tiles(TILE), ptrs, timeout_ns=mlp_sm90.TIMEOUT_NS)
        Y.fill_(float("nan"))
        Z.fill_(float("nan"))
        torch.cuda.synchronize()   # the poison and the runner's zeroed semaphores, on torch's stream
        r.launch(stream.ptr)
        stream.synchronize()
        r.check_debug()
        err = mlp_sm90.torch_rel_err(Z, Zref)
        g = timing.capture(lambda s, r=r: r.launch(s.ptr), stream)
        t = timing.median(timing.time_graphs([g], stream, iters=iters))
        stream.synchronize()
        r.check_debug()
        base = base or t
        rows.append({"config": cfg.name, "kernel": "sm90", "time_us": t, "overhead_vs_streamsync": t / base - 1.0,
                     "correct": err < TOL, "rel_err": err})
    return {"device": driver.device_name(), "workload": "overhead", "kernel": "sm90", "blocks": sms,
            "tiles": f"{M // bm} x {m.N1 // bn} then {M // bm} x {m.H // bn}", "tile": TILE, "M": M, "rows": rows}
