"""The paper's Conv2D workloads on the GPU: chains of 2 (ResNet-38) and 4 (VGG-19) implicit-GeMM
3x3 Conv2Ds with bias + ReLU, each consuming the previous one's output, every link synchronized by
the policies cusyncgen generates from examples/conv_resnet38.dep and examples/conv_vgg19.dep.

    chain = ConvChain("resnet38", "L3", batch=8)
    x, ws, bs = chain.buffers(seed=0)
    ys = chain.outputs()                                    # poisoned with NaN
    chain.run(stream, Config("RowSync", "pdl"), x, ws, bs, ys)

`bench()` is the `cusyncgen bench conv2d` workload (cusyncgen.cuda.bench.WORKLOADS).
"""
from __future__ import annotations

import ctypes
import sys
import time
from dataclasses import dataclass, field

import cupy

from cusyncgen.cuda import build, driver, timing
from cusyncgen.cuda.bench import is_policy, rel_err as rel_err_one
from cusyncgen.cuda.chain import PDL_ALONE, STREAM_SYNC, Config
from cusyncgen.cuda.modules_conv import (BATCHES, LAYERS, MODELS, Tiles, bench_points, default_tiles, grid,
                                         SPLIT_K, module_source, splits as auto_splits)
from cusyncgen.cuda.stages import Stage

WAIT_INPUT, REORDER = 1, 2  # cusync_kernels::ConvFlags


class ConvArgs(ctypes.Structure):
    """cusync_kernels::ConvArgs (runtime_cuda/kernels/conv2d.cuh)."""

    _fields_ = [("X", ctypes.c_void_p), ("W", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("Y", ctypes.c_void_p)] + [
        (n, ctypes.c_int) for n in ("B", "P", "Q", "C", "K", "flags")] + [
        ("ws", ctypes.c_void_p), ("counters", ctypes.c_void_p)]


@dataclass
class ConvChain:
    """The Conv2Ds of one layer at one batch size, every generated policy in one module."""

    model_name: str
    layer_name: str
    batch: int
    tiles: Tiles | None = None
    debug: bool = False
    # The waiting Conv2Ds wait in a sync warp of their own (kernels/conv2d.cuh) -- None: when it
    # costs no occupancy or the grid still fits one wave with it; True: always; False: never.
    sync_warp: bool | None = None
    # Consumers of at most one wave's blocks launched before their producer ends (PDL, the
    # wait-kernel, PDL alone) get their shared memory padded to one block per SM, as stream order
    # would place them (driver.spread_smem). Not with W, whose admission counts blocks per SM.
    # None: in chains of more than 2 (VGG-19: three early-launched Conv2Ds; on the H200 it turned
    # 0.86-0.93x points of VGG-19 into 1.00-1.07x and changed ResNet-38 by -2% to +2.5%).
    spread: bool | None = None
    # Blocks per output tile (split-K, kernels/splitk.cuh), the same in every Conv2D of the chain.
    # None: modules_conv.splits for this GPU (the deep layers' few tiles fill every SM twice), or 1
    # with sync_warp=True; 1: off.
    splits: int | None = None
    arch: str | None = None
    _stages: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.model = MODELS[self.model_name]
        self.layer = LAYERS[self.layer_name]
        self.tiles = self.tiles or default_tiles(self.layer)
        self.n = self.model.convs
        src, policies = module_source(self.model, self.layer, self.batch, self.tiles, self.debug)
        self.module = driver.Module(build.build(src, self.arch or driver.arch()))
        t = self.tiles
        k = lambda name, extra=0: _opt_in_smem(self.module.kernel(name, t.threads + extra, t.smem))
        self.plain_kernel = k("conv_plain")
        self.wait_kernel = self.module.kernel("cusync_wait_kernel", 1)
        if self.splits is None:  # a sync warp asked for serves a whole K loop: no split-K then
            self.splits = 1 if self.sync_warp else auto_splits(self.layer, self.batch, t, driver.sm_count())
        self.grid = grid(self.layer, self.batch, t, self.splits)
        self.num_tiles = self.grid[0] * self.grid[1]
        self.blocks = self.num_tiles * self.splits  # tickets per launch
        # fp32 partials and per-tile arrival counters of each Conv2D (they may run at once)
        ws_len = self.blocks * t.BM * t.BN if self.splits > 1 else 1
        self.workspaces = [cupy.empty(ws_len, dtype=cupy.float32) for _ in range(self.n)]
        self.counters = [cupy.zeros(self.num_tiles, dtype=cupy.uint32) for _ in range(self.n)]
        self.sync_warp_used = False
        # Auto: where it costs no occupancy or the grid still fits one wave with it (ResNet-38 and
        # VGG-19 alike). (A 4-Conv2D chain with sync warps once hung in the W ordering under graph
        # replay: fixed by driver.max_shared_carveout below, benchmarks/hang_probe.py.)
        if self.splits > 1 and self.sync_warp:
            raise ValueError("a split-K Conv2D waits in its compute threads: no sync warp (splits=1 for one)")
        if self.splits == 1 and (self.sync_warp or (self.sync_warp is None and policies)):
            self.sync_warp_used = bool(self.sync_warp) or driver.sync_warp_pays(
                self.num_tiles, k(f"conv2_{policies[0][1]}_S", 32), self.plain_kernel)
        sw = lambda i, name: k(f"conv{i + 1}_{name}_S", 32) if i > 0 and self.sync_warp_used else k(f"conv{i + 1}_{name}")
        self.kernels = {label: [sw(i, name) for i in range(self.n)] for label, name, _ in policies}
        if self.kernels and self.occupancy_ok_without_ordering():
            # W may run: all its blocks must be resident at once (driver.max_shared_carveout)
            driver.max_shared_carveout(k for ks in self.kernels.values() for k in ks)
        self.spread_smem: dict[str, int] = {}
        if (self.spread if self.spread is not None else self.n > 2) and self.blocks <= driver.sm_count():
            self.spread_smem = driver.apply_spread(
                [self.plain_kernel] + [ks[i] for ks in self.kernels.values() for i in range(1, self.n)],
                driver.block_smem(self.plain_kernel))
            # room for a padded block beside a producer block (implicit GeMM: cp.async, no use for L1)
            driver.max_shared_carveout([self.plain_kernel] + [k for ks in self.kernels.values() for k in ks])
        self.plain_stages = [Stage(f"conv{i + 1}", i, 0, splits=self.splits) for i in range(self.n)]
        for label, _, sems in policies:
            stages = [Stage(f"conv{i + 1}", i, sems[i], splits=self.splits) for i in range(self.n)]
            for i in range(1, self.n):
                stages[i].depends_on(stages[i - 1], 0, f"conv{i}")
            self._stages[label] = stages
        lo, hi = driver.stream_priority_range()
        # Earlier Conv2Ds get higher priority (numerically lower), so their blocks dispatch first.
        self.streams = [cupy.cuda.Stream(non_blocking=True, priority=min(lo, hi + i)) for i in range(self.n)]
        self._events = [cupy.cuda.Event(disable_timing=True) for _ in range(self.n + 1)]

    @property
    def policy_names(self) -> list[str]:
        return list(self.kernels)

    @property
    def label(self) -> str:
        return f"{self.model_name}-{self.layer_name}"

    def buffers(self, seed: int | None = None):
        """Fresh random input, weights (He-scaled, so activations stay O(1)) and biases."""
        rs = cupy.random.RandomState(seed)
        L, B = self.layer, self.batch
        x = rs.standard_normal((B, L.P, L.Q, L.C), dtype=cupy.float32).astype(cupy.float16)
        scale = (2.0 / (9 * L.C)) ** 0.5
        ws = [(rs.standard_normal((L.C, 3, 3, L.C), dtype=cupy.float32) * scale).astype(cupy.float16) for _ in range(self.n)]
        bs = [(rs.standard_normal((L.C,), dtype=cupy.float32) * 0.1).astype(cupy.float16) for _ in range(self.n)]
        cupy.cuda.Device().synchronize()  # made on the default stream; the chain runs on others
        return x, ws, bs

    def outputs(self):
        L = self.layer
        ys = [cupy.full((self.batch, L.P, L.Q, L.C), cupy.nan, dtype=cupy.float16) for _ in range(self.n)]
        cupy.cuda.Device().synchronize()
        return ys

    def poison(self, ys) -> None:
        for y in ys:
            y.fill(cupy.nan)
        cupy.cuda.Device().synchronize()  # filled on the default stream; the chain runs on others

    def occupancy_ok_without_ordering(self) -> bool:
        """W (no wait-kernel, no PDL) is safe only when every grid of the chain fits at once, and
        only for a pair of Conv2Ds: chains of 4 deadlocked under W although the occupancy sum said
        every block fits (VGG-19 L3 batch 8 on 128x64x32 tiles, H100: RowSync+WT and
        Conv2DTileSync+WT, debug and release builds, within 5 back-to-back launches; earlier
        Conv2DTileSync+WT at batch 4 on the H200). Not understood yet, so W is not offered there."""
        if self.n > 2:
            return False
        ks = next(iter(self.kernels.values()), [self.plain_kernel] * self.n)
        return driver.resident_at_once([(self.blocks, driver.max_active_blocks(k)) for k in ks])

    def configs(self) -> list[Config]:
        out = [STREAM_SYNC, PDL_ALONE]
        # W with sync warps in a chain of more than 2 hung under CUDA-graph replay on the H200
        # (vgg19-L3 batch 4, Conv2DTileSync+WT) until every kernel asked for the largest shared
        # memory carveout (__post_init__).
        w_ok = self.occupancy_ok_without_ordering()
        for p in self.policy_names:
            for reorder in (False, True):
                out.append(Config(p, "waitkernel", True, reorder))
                out.append(Config(p, "waitkernel", False, reorder))
                out.append(Config(p, "pdl", True, reorder))
                out.append(Config(p, "pdl", False, reorder))
                if w_ok:
                    out.append(Config(p, "none", False, reorder))
        return out

    def _args(self, i, x, ws, bs, ys, flags):
        L = self.layer
        src = x if i == 0 else ys[i - 1]
        return ConvArgs(X=src.data.ptr, W=ws[i].data.ptr, bias=bs[i].data.ptr, Y=ys[i].data.ptr,
                        B=self.batch, P=L.P, Q=L.Q, C=L.C, K=L.C, flags=flags,
                        ws=self.workspaces[i].data.ptr, counters=self.counters[i].data.ptr)

    def run(self, main: cupy.cuda.Stream, cfg: Config, x, ws, bs, ys, wait_input: bool = True) -> None:
        """One chain under `cfg`. wait_input=False drops the waits (tests: a race must be caught)."""
        n, g = self.n, self.grid
        if cfg.policy is None:
            k = self.plain_kernel
            for i in range(n):
                a = self._args(i, x, ws, bs, ys, 0)
                if cfg.ordering == "stream":
                    k.launch(g, [a, self.plain_stages[i].args()], main)
                else:  # PDL alone: each Conv2D waits for the whole previous grid (griddepcontrol.wait)
                    sa = self.plain_stages[i].args(pdl_trigger=i < n - 1, pdl_wait=i > 0)
                    k.launch(g, [a, sa], main, pdl=i > 0, smem=self.spread_smem.get(k.name) if i > 0 else None)
            return
        flag = (WAIT_INPUT if wait_input else 0) | (REORDER if cfg.reorder else 0)
        if cfg.ordering == "pdl":
            self.run_on_one_stream(main, cfg.policy, x, ws, bs, ys, flag, cfg.custom_order, pdl=True)
            return
        ks, stages = self.kernels[cfg.policy], self._stages[cfg.policy]
        args = [self._args(i, x, ws, bs, ys, flag if i > 0 else 0) for i in range(n)]
        pad = [self.spread_smem.get(ks[i].name) if i > 0 and cfg.ordering != "none" else None for i in range(n)]
        fork, joins = self._events[0], self._events[1:]
        fork.record(main)
        for s in self.streams:
            s.wait_event(fork)
        tiles = ctypes.c_ulonglong(self.blocks)
        for i in range(n):
            s = self.streams[i]
            if i > 0 and cfg.ordering == "waitkernel":
                self.wait_kernel.launch((1, 1, 1), [stages[i - 1].ticket, stages[i].ticket, tiles, tiles], s)
            ks[i].launch(g, [args[i], stages[i].args(cfg.custom_order)], s, smem=pad[i])
        for s, e in zip(self.streams, joins):
            e.record(s)
            main.wait_event(e)

    def run_on_one_stream(self, main: cupy.cuda.Stream, policy: str, x, ws, bs, ys, flags: int, custom_order: bool,
                          pdl: bool) -> None:
        """The policy's kernels on `main`: PDL-launched (the 'pdl' ordering) or, pdl=False, in plain
        stream order (cuda.conv_costs: what posting and waiting cost with nothing to overlap). flags
        (WAIT_INPUT, REORDER) go to every Conv2D after the first."""
        ks, stages, n = self.kernels[policy], self._stages[policy], self.n
        for i in range(n):
            a = self._args(i, x, ws, bs, ys, flags if i > 0 else 0)
            pad = self.spread_smem.get(ks[i].name) if pdl and i > 0 else None
            ks[i].launch(self.grid, [a, stages[i].args(custom_order, pdl_trigger=pdl and i < n - 1)], main, pdl=pdl and i > 0,
                         smem=pad)

    def check_stages(self) -> None:
        for stages in list(self._stages.values()) + [self.plain_stages]:
            for s in stages:
                s.raise_if_timed_out()

    def reference(self, x, ws, bs):
        """float32 outputs of every Conv2D (torch.nn.functional.conv2d on the GPU), each input
        rounded to fp16 as the kernels store it; NHWC CuPy arrays."""
        import torch
        import torch.nn.functional as F
        h = torch.from_dlpack(x).permute(0, 3, 1, 2).float()
        outs = []
        for w, b in zip(ws, bs):
            tw = torch.from_dlpack(w).permute(0, 3, 1, 2).float()
            h = torch.relu(F.conv2d(h, tw, torch.from_dlpack(b).float(), padding=1))
            outs.append(cupy.from_dlpack(h.permute(0, 2, 3, 1).contiguous()))
            h = h.half().float()
        return outs


def _opt_in_smem(kernel):
    """48 KB of dynamic shared memory plus the stage's static ticket slot is over the default
    limit: raise the kernel's limit whatever the size (driver.Module does so only above 48 KB)."""
    kernel.function.max_dynamic_shared_size_bytes = kernel.smem
    return kernel


def rel_err(ys, refs) -> float:
    """The largest relative error (Frobenius) over the chain's outputs; inf on a NaN/inf."""
    return max((rel_err_one(y, ref) for y, ref in zip(ys, refs)), default=0.0)


TOL = 1e-2


def torch_chain(chain: ConvChain, x, ws, bs):
    """cuDNN through PyTorch: channels_last fp16 conv2d + bias + ReLU, chained."""
    import torch
    import torch.nn.functional as F
    tx = torch.from_dlpack(x).permute(0, 3, 1, 2)          # NCHW view of NHWC memory: channels_last
    tws = [torch.from_dlpack(w).permute(0, 3, 1, 2) for w in ws]
    tbs = [torch.from_dlpack(b) for b in bs]

    def fn():
        h = tx
        for w, b in zip(tws, tbs):
            h = torch.relu(F.conv2d(h, w, b, padding=1))
        return h
    return fn


def _time_chain(chain: ConvChain, cfgs, suffix: str, sets, outs, refs, stream, iters: int) -> list[dict]:
    """Rows of every configuration of `chain` (names + suffix). StreamSync (the first one) is timed
    first and again last: its row keeps the faster of the two, and every row records their
    difference (the run's noise), as in bench mlp."""
    x, ws, bs = sets[0]
    rows = []
    for i, cfg in enumerate(cfgs + cfgs[:1]):
        chain.poison(outs[0])
        chain.run(stream, cfg, x, ws, bs, outs[0])
        stream.synchronize()
        err = rel_err(outs[0], refs)
        graphs = [timing.capture(lambda s, a=a, o=o: chain.run(s, cfg, *a, o), stream) for a, o in zip(sets, outs)]
        t = timing.median(timing.time_graphs(graphs, stream, iters=iters))
        del graphs
        chain.check_stages()
        if i == len(cfgs):
            timing.settle_baseline(rows, t, err < TOL)
            return rows
        rows.append({"model": chain.label, "M": chain.batch, "config": cfg.name + suffix, "time_us": round(t, 2),
                     "correct": err < TOL, "rel_err": err, "tiles": chain.tiles.label, "grid": list(chain.grid[:2]),
                     "splits": chain.splits, "sync_warp": chain.sync_warp_used, "spread": bool(chain.spread_smem)})
    return rows


def measure_point(model: str, layer: str, batch: int, iters: int, stream, seed: int = 0, configs=None,
                  sync_warp: bool | None = None, spread: bool | None = None, tiles: Tiles | None = None) -> list[dict]:
    """Rows of one (model, layer, batch): every configuration on the chain without split-K (the
    paper's comparison: StreamSync and the policies on the same kernels), then, where the layer
    gets split-K (modules_conv.splits, not with a sync warp), every configuration again on the
    split chain (names + SPLIT_K), then cuDNN. speedup_vs_streamsync is over StreamSync without split-K."""
    from cusyncgen.cuda import baselines
    import torch
    opts = {} if spread is None else {"spread": spread}
    chain = ConvChain(model, layer, batch, tiles=tiles, sync_warp=sync_warp, splits=1, **opts)
    sets = [chain.buffers(seed=seed + s) for s in range(3)]
    outs = [chain.outputs() for _ in sets]
    x, ws, bs = sets[0]
    refs = chain.reference(x, ws, bs)
    rows = _time_chain(chain, list(configs or chain.configs()), "", sets, outs, refs, stream, iters)
    n = 1 if sync_warp else auto_splits(chain.layer, batch, chain.tiles, driver.sm_count())
    if n > 1:
        split = ConvChain(model, layer, batch, tiles=tiles, sync_warp=sync_warp, splits=n, **opts)
        rows += _time_chain(split, list(configs or split.configs()), SPLIT_K, sets, outs, refs, stream, iters)
    base = rows[0]["time_us"]
    for r in rows:
        r["speedup_vs_streamsync"] = round(base / r["time_us"], 4)
    torch.backends.cudnn.benchmark = True
    fn = torch_chain(chain, x, ws, bs)
    terr = rel_err([cupy.from_dlpack(fn().permute(0, 2, 3, 1).contiguous())], refs[-1:])
    for cname, t in (("cuDNN", baselines.time_eager(fn, iters)), ("cuDNN+graph", baselines.graph_time(fn, iters))):
        rows.append({"model": chain.label, "M": batch, "config": cname, "time_us": round(t, 2),
                     "speedup_vs_streamsync": round(base / t, 4), "correct": terr < TOL, "rel_err": terr})
    return rows


def bench(models=None, sweep=None, iters: int = 30, progress: bool = True, sync_warp: bool | None = None,
          spread: bool | None = None, tiles: str | None = None) -> dict:
    """Every (model, layer, batch): StreamSync, PDL, each policy x ordering x R, cuDNN (eager, graph).
    tiles: a Tiles label for every chain instead of each layer's default (the tuner's other shape)."""
    tiles_obj = Tiles.parse(tiles) if tiles else None
    if isinstance(models, str):
        models = models.split(",")
    stream = cupy.cuda.Stream(non_blocking=True)
    rows = []
    work = bench_points(models, sweep or BATCHES)
    for i, (m, layer, b) in enumerate(work):
        t0 = time.time()
        point = measure_point(m, layer, b, iters, stream, seed=1000 * i, sync_warp=sync_warp, spread=spread,
                              tiles=tiles_obj)
        rows += point
        timing.save_partial("conv2d", rows)
        if progress:
            cus = [r for r in point if r["correct"] and is_policy(r["config"], "cuDNN")]
            best = max(cus, key=lambda r: r["speedup_vs_streamsync"]) if cus else None
            cud = next(r for r in point if r["config"] == "cuDNN+graph")
            split = [r for r in point if r["config"].endswith(SPLIT_K) and r["correct"]]
            sk = ""
            if split:
                fastest = min(split, key=lambda r: r["time_us"])
                sk = (f", split-K x{split[0]['splits']}: StreamSync {split[0]['time_us']:.1f} us, "
                      f"fastest {fastest['config']} {fastest['time_us']:.1f} us")
            print(f"[{i + 1}/{len(work)}] {m}-{layer} B={b}: StreamSync {point[0]['time_us']:.1f} us, "
                  + (f"best {best['config']} {best['time_us']:.1f} us ({best['speedup_vs_streamsync']:.3f}x)" if best else "no correct policy")
                  + sk + f", cuDNN+graph {cud['time_us']:.1f} us, all correct: {all(r['correct'] for r in point)} "
                  f"[{time.time() - t0:.0f} s]", file=sys.stderr, flush=True)
        cupy.get_default_memory_pool().free_all_blocks()
    return {"device": driver.device_name(), "workload": "conv2d", "vendor": "cuDNN", "rows": rows}
