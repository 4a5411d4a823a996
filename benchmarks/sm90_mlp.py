#!/usr/bin/env python3
"""The synchronized sm90 GeMMs and MLP chains on one Hopper GPU, in one run: correctness of every
ordering, policy and tile config against a float32 reference (fresh random inputs, outputs poisoned
with NaN before each run), a stress mode (back-to-back launches with alternating inputs checked each
time, 1000 back-to-back launches, 100 CUDA-graph replays; never a reset), then timings with CUDA
graphs: each sm90 GeMM alone against torch.matmul (cuBLAS), and each MLP ordering against cuBLAS
(two matmuls + the activation) in a CUDA graph, with the floor max(FLOPs/peak, bytes/bandwidth).

    CUSYNC_SM90_LIB=<prebuilt libcusync_sm90.so> PYTHONPATH=. python benchmarks/sm90_mlp.py \\
        [--models gpt3,llama-ep] [--M 1,64,...] [--configs 128x128x64,...] [--out DIR]

Writes DIR/sm90-mlp-<device>.json (rows carry "kernel": "sm90" or "cublas", "config", "us") and
prints a compact table last. Exit status 1 if any correctness check failed. docs/sm90.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as Fn  # noqa: E402

from cusyncgen.cuda import sm90  # noqa: E402
from cusyncgen.cuda.configs import Ordering  # noqa: E402
from cusyncgen.workloads import mlp_sm90 as W  # noqa: E402
from cusyncgen.workloads.mlp import Model  # noqa: E402

# the probe's names of the orderings (its command line and variant lists)
ORDERINGS = {"stream": Ordering.STREAM, "pdl": Ordering.PDL_ALONE, "pdl+policy": Ordering.PDL, "chain": Ordering.PERSISTENT}

M_ALL = (1, 64, 128, 256, 512, 1024, 2048, 4096)
PEAK_TFLOPS = 750.0


def log(*a):
    print(*a, flush=True)


def device_info():
    name = torch.cuda.get_device_name()
    bw = 4.8e12 if "H200" in name else 3.35e12
    return name, bw


def stream_handle() -> int:
    return torch.cuda.current_stream().cuda_stream


class Buffers:
    """Inputs, weights and outputs of one model at the largest M (views per M)."""

    def __init__(self, model: Model, Mmax: int, seed: int):
        g = torch.Generator(device="cuda").manual_seed(seed)
        dev = torch.device("cuda")
        m = model
        self.model = m
        self.X = torch.randn(Mmax, m.H, device=dev, generator=g).half()
        self.X2 = torch.randn(Mmax, m.H, device=dev, generator=g).half()  # the stress mode's other input
        self.Xs = torch.empty_like(self.X)  # the buffer runners read (inputs copied in)
        self.W1 = (torch.randn(m.N1, m.H, device=dev, generator=g) / math.sqrt(m.H)).half()
        self.W2 = (torch.randn(m.H, m.K2, device=dev, generator=g) / math.sqrt(m.K2)).half()
        self.Y = torch.empty(Mmax, m.K2, device=dev, dtype=torch.half)
        self.Z = torch.empty(Mmax, m.H, device=dev, dtype=torch.half)
        self.G = torch.empty(Mmax, max(m.N1, m.H), device=dev, dtype=torch.half)  # GeMM-alone output

    def act(self, A: torch.Tensor) -> torch.Tensor:
        """The first GeMM's epilogue on its fp32 (or fp16) result."""
        m = self.model
        if m.swiglu_epilogue:
            Mr = A.shape[0]
            A4 = A.view(Mr, m.N1 // 128, 2, 64)
            return (Fn.silu(A4[:, :, 0, :]) * A4[:, :, 1, :]).reshape(Mr, m.K2)
        return Fn.gelu(A, approximate="tanh")

    def reference(self, X: torch.Tensor):
        """float32 reference (the intermediate rounded to fp16, as the kernels store it)."""
        Y = self.act(X.float() @ self.W1.float().t()).half()
        Z = Y.float() @ self.W2.float().t()
        return Y, Z

    def cublas(self, M: int):
        Y = self.act(torch.matmul(self.Xs[:M], self.W1.t()))
        return torch.matmul(Y, self.W2.t())


def graph_time(fn, per_graph: int = 10, replays: int = 7) -> float:
    """Median µs of one fn() call: per_graph calls captured in a CUDA graph, replayed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(per_graph):
            fn()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / per_graph)
    del g
    return statistics.median(times)


def floor_us(model: Model, M: int, bw: float) -> float:
    (N1, K1), (N2, K2) = W.gemm_shapes(model)
    flops = 2.0 * M * (N1 * K1 + N2 * K2)
    byts = 2.0 * (N1 * K1 + N2 * K2 + M * (K1 + 2 * model.K2 + N2))
    return max(flops / (PEAK_TFLOPS * 1e12), byts / bw) * 1e6


BANDED_MIN_M = 512  # below, a wave covers the first GeMM's rows: the banded order changes little


def variants(configs, orderings, policies, model, M, grouped2=("off", "on"), banded1=("off", "on"), pairs=()):
    """(config, ordering, policy, splits, grouped2, banded1) of every MLP variant at this M: each
    config and ordering (with each policy where it synchronizes), with the second GeMM in the
    compiler's order and in the grouped order, the first GeMM in the compiler's order, (M >=
    BANDED_MIN_M) in the banded order (banded1 "on") and in the grouped order (banded1 "g1": then
    banded1 is "g1"), and, where auto_splits splits a GeMM at this M, the same with split-K. `pairs`:
    "<first GeMM's config>+<second's>" run as a config too (each GeMM on its own tile), in every
    ordering but the chain."""
    out = []
    b1s = [{"off": False, "on": True}.get(b, b) for b in banded1 if b != "on" or M >= BANDED_MIN_M]
    for c in list(configs) + list(pairs):
        c1, _, c2 = c.partition("+")
        if model.swiglu_epilogue and sm90.tile_dims(c1)[1] != 128:
            continue
        if c2 and model.H % sm90.tile_dims(c2)[1]:
            continue
        splits = ["none"]
        if sm90.has_split(W.mlp_splits(model.name, M, c1, "auto", c2 or None)):
            splits.append("auto")
        for sp in splits:
            for b1 in b1s:
                for g2 in grouped2:
                    for o in orderings:
                        if c2 and o == "chain":
                            continue
                        for p in ((None,) if o in ("stream", "pdl") else policies):
                            out.append((c, o, p, sp, g2 == "on", b1))
    return out


def order_label(g2, b1) -> str:
    return (" G1" if b1 == "g1" else " B1" if b1 else "") + (" G2" if g2 else "")


def gemm_order(config, M, N, K, order):
    """The row-major order or the grouped order of a GeMM alone (sm90.grouped_columns' choice)."""
    bm, bn, _ = sm90.tile_dims(config)
    cm = sm90.cluster_m(config)
    X, Y = sm90.order_grid(config, M, N)
    if order == "grouped":
        return sm90.grouped_order(X, Y, sm90.grouped_columns(X, Y, cm * bm * K * 2.0, bn * K * 2.0, 132 // cm))
    return sm90.row_major_order(X, Y)


def gemm_variants(configs, stock_configs, M, N, K, stores=("quad", "pair")):
    """(label, kind, config, order, splits / cluster, store) of the GeMM-alone rows: every sm90
    config in the row-major order and the grouped order, with auto_splits' choice (a split-K tail
    where whole waves fill the SMs) and, where the tiles do not fill them, split-K 2 and 4; each with
    the quad-transposed 16-byte stores (unlabeled here) and,
    without split-K, also with the fp16-pair stores (label "pair-store", the A/B of the epilogue);
    and the stock CUTLASS references (cluster 1x1 and 2x1)."""
    out = []
    for c in configs:
        bm, bn, bk = sm90.tile_dims(c)
        if N % bn:
            continue
        X, Y = sm90.order_grid(c, M, N)
        tiles = X * Y * sm90.cluster_m(c)  # with clusters: CTA tiles, phantom row blocks included
        for order in ("row", "grouped"):
            splits = {sm90.NO_SPLIT, sm90.auto_splits(tiles, K // bk)}
            if tiles < 132:
                splits |= {sm90.Split(2), sm90.Split(4)}
            for S in sorted(splits):
                label = f"sm90 {c}" + (" G" if order == "grouped" else "") + (f" splitK{S}" if S.S > 1 else "")
                for st in stores:
                    if st != "quad" and S.S > 1:
                        continue
                    out.append((label + ("" if st == "quad" else f" {st}-store"), "sm90", c, order, S, st))
    for c in stock_configs:
        if N % sm90.tile_dims(c)[1]:
            continue
        for cm in (1, 2):
            out.append((f"stock {c} c{cm}x1", "stock", c, "heuristic", cm, None))
    return out


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt3,llama-ep")
    ap.add_argument("--M", default=",".join(map(str, M_ALL)))
    ap.add_argument("--configs", default=None, help="default: every config of the library")
    ap.add_argument("--orderings", default=",".join(ORDERINGS))
    ap.add_argument("--policies", default=",".join(sm90.POLICIES))
    ap.add_argument("--stress-M", default="256", help="M list for the stress mode ('' to skip)")
    ap.add_argument("--grouped2", default="off,on",
                    help="the second GeMM's order: off (the compiler's), on (grouped_order), or both")
    ap.add_argument("--banded1", default="off,on",
                    help="the first GeMM's order: off (the compiler's), on (banded_order, at M >= 512), g1 "
                         "(grouped_order); a list")
    ap.add_argument("--pairs", default="",
                    help="per-GeMM tile configs to run as well, '<config1>+<config2>,...' (not in the chain)")
    ap.add_argument("--gemm-stores", default="quad,pair",
                    help="epilogue stores of the GeMM-alone rows: quad (16-byte), pair (fp16 pairs), or both")
    ap.add_argument("--stock", default=None, help="stock CUTLASS reference tiles (default: every one of the library)")
    ap.add_argument("--stress-launches", type=int, default=1000)
    ap.add_argument("--stress-replays", type=int, default=100)
    ap.add_argument("--timeout-ms", type=float, default=2000.0, help="a wait longer than this gives up (0: never)")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "sm90-results"))
    a = ap.parse_args(argv)

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    name, bw = device_info()
    lib = sm90.library()
    configs = a.configs.split(",") if a.configs else list(lib.configs)
    stock_configs = [c for c in (a.stock.split(",") if a.stock is not None else lib.stock_configs) if c]
    Ms = [int(v) for v in a.M.split(",") if v]
    stress_Ms = [int(v) for v in a.stress_M.split(",") if v]
    orderings = a.orderings.split(",")
    policies = a.policies.split(",")
    timeout_ns = int(a.timeout_ms * 1e6)
    log(f"device: {name}; library configs: {', '.join(lib.configs)}; torch {torch.__version__}")
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, gemm_rows, failures = [], [], []
    t_start = time.time()

    # timeout(1) sends SIGTERM: write what was measured so far
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        for model_name in a.models.split(","):
            model = W.model_of(model_name)
            Mmax = max(Ms + stress_Ms)
            buf = Buffers(model, Mmax, seed=1234)
            g2s = a.grouped2.split(",")
            b1s = a.banded1.split(",")
            pairs = [v for v in a.pairs.split(",") if v]
            runners = {}
            broken = set()  # variants that failed a check: neither stressed nor timed

            def runner(M, c, o, p, sp, g2, b1):
                key = (M, c, o, p, sp, g2, b1)
                if key not in runners:
                    c1, _, c2 = c.partition("+")
                    tiles = W.Sm90Tiles(c1, grouped2=g2, banded1=b1 is True, grouped1=b1 == "g1", config2=c2 or None)
                    ptrs = tuple(t.data_ptr() for t in (buf.Xs, buf.W1, buf.W2, buf.Y, buf.Z))
                    runners[key] = W.mlp_chain(model_name, M, W.config_of(ORDERINGS[o], p), tiles, ptrs, splits=sp,
                                               timeout_ns=timeout_ns)
                return runners[key]

            def failed(label, M, v, check, e, shown=None) -> bool:
                """Record a variant that raised; True when the device state is lost (stop the run)."""
                c, o, p = v[:3]
                failures.append(label)
                broken.add((M, v))
                log(f"{shown or label}: ERROR {e}")
                rows.append({"model": model_name, "M": M, "kernel": "sm90", "config": f"{c} {o} {p}",
                             "check": check, "ok": False, "error": str(e)})
                fatal = "illegal" in str(e) or "launch failure" in str(e)
                if fatal:
                    log(traceback.format_exc())
                return fatal

            # ---- (a) correctness
            for M in Ms:
                buf.Xs[:M].copy_(buf.X[:M])
                Yref, Zref = buf.reference(buf.Xs[:M])
                for v in variants(configs, orderings, policies, model, M, g2s, b1s, pairs):
                    c, o, p, sp, g2, b1 = v
                    label = f"{model_name} M={M} {c} {o} {p or ''} {sp}{order_label(g2, b1)}"
                    try:
                        r = runner(M, *v)
                        buf.Y.fill_(float("nan"))
                        buf.Z.fill_(float("nan"))
                        r.launch(stream_handle())
                        torch.cuda.synchronize()
                        r.check_debug()
                        ey, ez = W.torch_rel_err(buf.Y[:M], Yref), W.torch_rel_err(buf.Z[:M], Zref)
                        ok = ey < 1e-2 and ez < 1e-2
                        rows.append({"model": model_name, "M": M, "kernel": "sm90", "config": r.name, "check": "once",
                                     "rel_err_y": ey, "rel_err": ez, "ok": ok})
                        log(f"check {label}: rel err Y {ey:.2e} Z {ez:.2e} {'ok' if ok else 'FAIL'}")
                        if not ok:
                            failures.append(label)
                            broken.add((M, v))
                    except Exception as e:  # noqa: BLE001 - every failure is reported, the run goes on
                        if failed(label, M, v, "once", e, f"check {label}"):
                            return finish(a, out_dir, name, rows, gemm_rows, failures, t_start)

            # ---- stress: alternating inputs checked every time, back-to-back launches, graph replays
            for M in stress_Ms:
                buf.Xs[:M].copy_(buf.X[:M])
                _, Za = buf.reference(buf.X[:M])
                _, Zb = buf.reference(buf.X2[:M])
                scale = float(Za.pow(2).mean().sqrt())
                for v in variants(configs, orderings, policies, model, M, g2s, b1s, pairs):
                    c, o, p, sp, g2, b1 = v
                    # the synchronized orderings (the second GeMM's order changes nothing they synchronize;
                    # the first GeMM's banded order changes when the waits are satisfied: stressed too)
                    if o not in ("pdl+policy", "chain") or g2 or (M, v) in broken:
                        continue
                    label = f"stress {model_name} M={M} {c} {o} {p} {sp}{order_label(g2, b1)}"
                    try:
                        r = runner(M, *v)
                        bad = torch.zeros((), dtype=torch.int64, device="cuda")

                        def step(Xsrc, Zr):
                            buf.Xs[:M].copy_(Xsrc)
                            buf.Y.fill_(float("nan"))
                            r.launch(stream_handle())
                            d = (buf.Z[:M].float() - Zr).abs()
                            bad.add_((~(d <= 0.03 * Zr.abs() + 0.03 * scale)).sum())

                        t0 = time.time()
                        for i in range(200):
                            step(buf.X[:M], Za) if i % 2 == 0 else step(buf.X2[:M], Zb)
                        torch.cuda.synchronize()
                        r.check_debug()
                        n_alt = int(bad.item())
                        buf.Xs[:M].copy_(buf.X[:M])
                        buf.Z.fill_(float("nan"))
                        for _ in range(a.stress_launches):
                            r.launch(stream_handle())
                        torch.cuda.synchronize()
                        r.check_debug()
                        e_b2b = W.torch_rel_err(buf.Z[:M], Za)
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g):
                            step(buf.X[:M], Za)
                            step(buf.X2[:M], Zb)
                        bad.zero_()
                        for _ in range(a.stress_replays):
                            g.replay()
                        torch.cuda.synchronize()
                        r.check_debug()
                        n_graph = int(bad.item())
                        e_graph = W.torch_rel_err(buf.Z[:M], Zb)
                        del g
                        ok = n_alt == 0 and n_graph == 0 and e_b2b < 1e-2 and e_graph < 1e-2
                        rows.append({"model": model_name, "M": M, "kernel": "sm90", "config": r.name, "check": "stress",
                                     "bad_elements_alternating": n_alt, "bad_elements_graph": n_graph,
                                     "rel_err_back_to_back": e_b2b, "rel_err_graph": e_graph, "ok": ok,
                                     "launches": 200 + a.stress_launches + 2 * a.stress_replays})
                        log(f"{label}: alternating bad {n_alt}, {a.stress_launches} back-to-back rel err {e_b2b:.2e}, "
                            f"{a.stress_replays} graph replays bad {n_graph} rel err {e_graph:.2e} "
                            f"{'ok' if ok else 'FAIL'} ({time.time() - t0:.1f} s)")
                        if not ok:
                            failures.append(label)
                            broken.add((M, v))
                    except Exception as e:  # noqa: BLE001
                        if failed(label, M, v, "stress", e):
                            return finish(a, out_dir, name, rows, gemm_rows, failures, t_start)

            if a.no_timing:
                continue
            # ---- (b) timing: GeMMs alone, then the MLPs
            (N1, K1), (N2, K2) = W.gemm_shapes(model)
            buf.Y.normal_()  # the second GeMM's input when timed alone (not the poison)
            for M in Ms:
                buf.Xs[:M].copy_(buf.X[:M])
                for gi, (N, K, A, B) in enumerate([(N1, K1, buf.Xs, buf.W1), (N2, K2, buf.Y, buf.W2)], start=1):
                    Gv = buf.G.view(-1)[: M * N].view(M, N)  # contiguous [M, N]
                    try:
                        tc = graph_time(lambda: torch.matmul(A[:M], B.t(), out=Gv))
                    except Exception as e:  # noqa: BLE001
                        log(f"gemm {model_name} M={M} gemm{gi} cuBLAS: ERROR {e}")
                        continue
                    ref = torch.matmul(A[:M].float(), B.float().t())
                    for label, kind, c, order, S, st in gemm_variants(configs, stock_configs, M, N, K,
                                                                      a.gemm_stores.split(",")):
                        try:
                            if kind == "stock":
                                def fn(c=c, cm=S):
                                    sm90.stock_gemm(c, cm, A.data_ptr(), B.data_ptr(), buf.G.data_ptr(), M, N, K,
                                                    stream=stream_handle())
                                grid = 0
                            else:
                                od = gemm_order(c, M, N, K, order)
                                plan = sm90.Plan(c, [sm90.gemm_desc(A.data_ptr(), B.data_ptr(), buf.G.data_ptr(), M, N, K,
                                                                    c, order=od, splits=S, store=sm90.STORES[st])])
                                fn = (lambda plan=plan: plan.launch(stream_handle()))
                                grid = plan.grid
                            Gv.fill_(float("nan"))
                            fn()
                            torch.cuda.synchronize()
                            e = W.torch_rel_err(Gv, ref)
                            t = graph_time(fn)
                            ok = e < 1e-2
                            if not ok:
                                failures.append(f"gemm {model_name} M={M} gemm{gi} {label}")
                            gemm_rows.append({"model": model_name, "M": M, "gemm": gi, "N": N, "K": K,
                                              "kernel": "sm90" if kind == "sm90" else "stock-cutlass",
                                              "config": label, "store": st, "ours_us": t, "cublas_us": tc,
                                              "ratio": tc / t, "rel_err": e, "grid": grid, "ok": ok})
                            log(f"gemm {model_name} M={M} gemm{gi} {label}: {t:.1f} us, cuBLAS {tc:.1f} us, "
                                f"{tc / t:.2f} of cuBLAS (rel err {e:.1e}, grid {grid}){'' if ok else ' FAIL'}")
                        except Exception as e:  # noqa: BLE001
                            log(f"gemm {model_name} M={M} gemm{gi} {label}: ERROR {e}")
                            failures.append(f"gemm {model_name} M={M} gemm{gi} {label}")
            for M in Ms:
                buf.Xs[:M].copy_(buf.X[:M])
                try:
                    tcb = graph_time(lambda: buf.cublas(M))
                except Exception as e:  # noqa: BLE001
                    log(f"mlp {model_name} M={M} cuBLAS: ERROR {e}")
                    tcb = float("nan")
                fl = floor_us(model, M, bw)
                rows.append({"model": model_name, "M": M, "kernel": "cublas", "config": "cuBLAS+graph", "us": tcb})
                rows.append({"model": model_name, "M": M, "kernel": "floor", "config": "floor", "us": fl})
                log(f"mlp {model_name} M={M}: cuBLAS+graph {tcb:.1f} us, floor {fl:.1f} us")
                for v in variants(configs, orderings, policies, model, M, g2s, b1s, pairs):
                    c, o, p, sp, g2, b1 = v
                    if (M, v) in broken:
                        continue
                    try:
                        r = runner(M, *v)
                        t = graph_time(lambda: r.launch(stream_handle()))
                        torch.cuda.synchronize()
                        r.check_debug()
                        rows.append({"model": model_name, "M": M, "kernel": "sm90", "config": r.name, "us": t,
                                     "vs_cublas": tcb / t, "vs_floor": fl / t,
                                     "band1": getattr(r, "band1", None)})
                        log(f"mlp {model_name} M={M} {r.name}: {t:.1f} us ({tcb / t:.2f}x cuBLAS+graph, "
                            f"{fl / t:.2f} of floor)")
                    except Exception as e:  # noqa: BLE001
                        log(f"mlp {model_name} M={M} {c} {o} {p} {sp} G2={g2} B1={b1}: ERROR {e}")
                        failures.append(f"timing {model_name} M={M} {c} {o} {p} {sp} G2={g2} B1={b1}")
            runners.clear()
            del buf
            torch.cuda.empty_cache()
    except KeyboardInterrupt:
        log("interrupted: writing what was measured so far")
        failures.append("interrupted")
    return finish(a, out_dir, name, rows, gemm_rows, failures, t_start)


def finish(a, out_dir, name, rows, gemm_rows, failures, t_start) -> int:
    dev = name.replace(" ", "-").lower()
    path = out_dir / f"sm90-mlp-{dev}.json"
    legend = {
        "config": "sm90 <BMxBNxBK>[pp] [splitK<S1>/<S2>] [B1] [G2] [pair-store] <ordering>; stock/cuBLAS rows name "
                  "themselves",
        "pp": "ping-pong: two consumer warp groups on alternate 64-row tiles",
        "splitK": "split-K counts of the first/second GeMM (GeMM alone: splitK<S>)",
        "B1": "the first GeMM (producer) in the banded order (band1 = rows per band)",
        "G2 / G": "the second GeMM (GeMM alone: the GeMM) in the grouped order",
        "pair-store": "the epilogue's fp16-pair 4-byte stores; without it, the quad-transposed 16-byte stores",
        "orderings": "StreamSync (stream order), PDL (PDL alone), <Policy>+PDL (PDL-launched consumer waiting on "
                     "the policy's semaphores), <Policy> Chain (both GeMMs in one persistent launch)",
        "ratio / vs_cublas": "cuBLAS time / ours (> 1: ours faster); vs_floor: floor time / ours",
    }
    path.write_text(json.dumps({"device": name, "legend": legend, "rows": rows, "gemm": gemm_rows,
                                "failures": failures, "seconds": time.time() - t_start}, indent=1))
    # compact tables: the GeMMs alone, the best per shape, the GeMM target; the MLPs
    log("\n== sm90 GeMM alone (us; ratio = cuBLAS / ours) ==")
    for g in gemm_rows:
        log(f"{g['model']:9s} M={g['M']:5d} gemm{g['gemm']} {g['config']:28s} {g['ours_us']:9.1f} "
            f"cuBLAS {g['cublas_us']:9.1f} ratio {g['ratio']:.2f}")
    log("\n== best sm90 GeMM per shape (ratio = cuBLAS / ours) ==")
    best_ratios = []
    for k in sorted({(g["model"], g["gemm"], g["M"]) for g in gemm_rows}):
        rs = [g for g in gemm_rows if (g["model"], g["gemm"], g["M"]) == k and g["kernel"] == "sm90" and g["ok"]]
        st = [g for g in gemm_rows if (g["model"], g["gemm"], g["M"]) == k and g["kernel"] != "sm90" and g["ok"]]
        if not rs:
            continue
        b = max(rs, key=lambda g: g["ratio"])
        bs = max(st, key=lambda g: g["ratio"]) if st else None
        if k[2] >= 256:
            best_ratios.append(b["ratio"])
        log(f"{k[0]:9s} gemm{k[1]} M={k[2]:5d} best {b['config']:28s} {b['ratio']:.2f}"
            + (f"   best stock {bs['config']:22s} {bs['ratio']:.2f}" if bs else ""))
    targets = []
    if best_ratios:
        gm = math.exp(sum(math.log(r) for r in best_ratios) / len(best_ratios))
        targets.append(f"GeMM target (M >= 256): geomean {gm:.3f} of cuBLAS (>= 0.90 wanted), "
                       f"min {min(best_ratios):.2f} (>= 0.80 wanted)")
    # the epilogue's A/B: the same config, order and shape with the quad-transposed 16-byte stores
    # (default) and the fp16-pair stores
    pair = {(g["model"], g["gemm"], g["M"], g["config"].removesuffix(" pair-store")): g
            for g in gemm_rows if g.get("store") == "pair" and g["ok"]}
    ab = []
    for g in gemm_rows:
        k = (g["model"], g["gemm"], g["M"], g["config"])
        if g.get("store") == "quad" and g["ok"] and k in pair:
            ab.append((k, pair[k]["ours_us"] / g["ours_us"]))
    if ab:
        log("\n== epilogue A/B: pair-store time / quad-store time (> 1: the 16-byte stores are faster) ==")
        for model in sorted({k[0] for k, _ in ab}):
            for gi in (1, 2):
                sel = [(k, r) for k, r in ab if k[0] == model and k[1] == gi]
                if not sel:
                    continue
                gmq = math.exp(sum(math.log(r) for _, r in sel) / len(sel))
                big = [r for k, r in sel if k[2] >= 1024]
                gmb = math.exp(sum(math.log(r) for r in big) / len(big)) if big else float("nan")
                log(f"{model:9s} gemm{gi}: geomean {gmq:.3f} over {len(sel)} shapes x configs, {gmb:.3f} at M >= 1024, "
                    f"min {min(r for _, r in sel):.3f}, max {max(r for _, r in sel):.3f}")
        gma = math.exp(sum(math.log(r) for _, r in ab) / len(ab))
        targets.append(f"epilogue A/B: pair-store / quad-store time geomean {gma:.3f} over {len(ab)} GeMM rows")
    log_band_header = [False]
    log("\n== MLP (us; speed-up = cuBLAS+graph / ours) ==")
    keys = sorted({(r["model"], r["M"]) for r in rows if "us" in r})
    per_model = {}
    for k in keys:
        rs = [r for r in rows if (r["model"], r["M"]) == k and "us" in r]
        cb = next((r["us"] for r in rs if r["kernel"] == "cublas"), float("nan"))
        fl = next((r["us"] for r in rs if r["kernel"] == "floor"), float("nan"))
        ours = sorted((r for r in rs if r["kernel"] == "sm90"), key=lambda r: r["us"])
        syn = [r for r in ours if "Sync+PDL" in r["config"] or "Chain" in r["config"]]
        stream = min((r["us"] for r in ours if "StreamSync" in r["config"]), default=float("nan"))
        line = f"{k[0]:9s} M={k[1]:5d} cuBLAS+graph {cb:8.1f} floor {fl:8.1f} sm90 stream {stream:8.1f}"
        if ours:
            b = ours[0]
            line += f" best {b['us']:8.1f} ({b['config']})"
        if syn:
            bs = syn[0]
            line += f" best sync {bs['us']:8.1f} ({bs['config']}, {cb / bs['us']:.2f}x cuBLAS, {stream / bs['us']:.2f}x stream)"
            per_model.setdefault(k[0], []).append((k[1], cb / bs["us"], stream / bs["us"]))
        log(line)
    # the producer order's A/B: the best synchronized time with the first GeMM banded (B1) and without
    band_ab = []
    for k in keys:
        rs = [r for r in rows if (r["model"], r["M"]) == k and r.get("kernel") == "sm90" and "us" in r
              and ("Sync+PDL" in r["config"] or "Chain" in r["config"])]
        with_b = [r for r in rs if " B1" in r["config"]]
        without = [r for r in rs if " B1" not in r["config"]]
        if with_b and without:
            bb, bn = min(with_b, key=lambda r: r["us"]), min(without, key=lambda r: r["us"])
            band_ab.append((k, bn["us"] / bb["us"]))
            if not log_band_header[0]:
                log("\n== producer order A/B: best sync without B1 / best sync with B1 (> 1: the banded order helps) ==")
                log_band_header[0] = True
            log(f"{k[0]:9s} M={k[1]:5d} without {bn['us']:8.1f} ({bn['config']})  with {bb['us']:8.1f} "
                f"({bb['config']}, band {bb.get('band1')} rows)  ratio {bn['us'] / bb['us']:.3f}")
    if band_ab:
        targets.append("banded producer A/B: " + ", ".join(f"{k[0]} M={k[1]} {r:.3f}" for k, r in band_ab))
    for model, vals in per_model.items():
        ge = [v for v in vals if v[0] >= 128]
        gm = math.exp(sum(math.log(v[1]) for v in ge) / len(ge)) if ge else float("nan")
        targets.append(f"MLP targets {model}: best sync vs cuBLAS+graph max {max(v[1] for v in vals):.2f} (>= 1.03 "
                       f"wanted), geomean M>=128 {gm:.3f} (>= 0.95 wanted); vs fastest sm90 stream max "
                       f"{max(v[2] for v in vals):.2f} (>= 1.10 wanted), min {min(v[2] for v in vals):.2f}")
    log(f"\nwrote {path}; {len(failures)} failure(s){': ' + '; '.join(failures[:20]) if failures else ''}")
    log(f"total {time.time() - t_start:.0f} s")
    log(f"\n== targets ({name}) ==")
    for t in targets:
        log(t)
    (out_dir / f"sm90-targets-{dev}.txt").write_text(f"device: {name}\n" + "\n".join(targets)
                                                     + f"\n{len(failures)} failure(s)\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
