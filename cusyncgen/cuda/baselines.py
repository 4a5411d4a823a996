"""Vendor baselines and the roofline floor, measured in the same process as the CuSync runs."""
from __future__ import annotations

from cusyncgen.cuda.lazy import torch

from cusyncgen.cuda import timing


def _time_torch(fn, iters: int = 30, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1000.0)
    return timing.median(ts)


def ceilings() -> dict:
    """fp16 matmul rate (cuBLAS, 8192^3 on random data) and device copy bandwidth (read+write)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    t = _time_torch(lambda: a @ b, iters=15)
    peak = 2 * 8192 ** 3 / (t * 1e-6)
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = _time_torch(lambda: y.copy_(x), iters=15)
    bw = 2 * (1 << 30) / (t * 1e-6)
    del a, b, x, y
    return {"peak_flops": peak, "bandwidth": bw}


def graph_of(fn):
    """fn captured in a CUDA graph (after three warm-up calls on a side stream): the graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def graph_time(fn, iters: int = 30) -> float:
    return _time_torch(graph_of(fn).replay, iters=iters)


def replay_time(g, iters: int = 30) -> float:
    """Median time (us) of a torch CUDA graph's replays."""
    return _time_torch(g.replay, iters=iters)


def time_eager(fn, iters: int = 30) -> float:
    return _time_torch(fn, iters=iters)
