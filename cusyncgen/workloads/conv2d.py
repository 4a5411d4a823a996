"""The paper's Conv2D workloads: chains of 2 (ResNet-38) and 4 (VGG-19) implicit-GeMM 3x3
Conv2Ds with bias + ReLU (Table II), each consuming the previous one's output, every link
synchronized by the policies cusyncgen generates from examples/conv_resnet38.dep and
examples/conv_vgg19.dep.

    chain = ConvChain("resnet38", "L3", batch=8)
    x, ws, bs = chain.buffers(seed=0)
    ys = chain.outputs()                                    # poisoned with NaN
    chain.run(stream, Config("RowSync", "pdl"), x, ws, bs, ys)

One module per (model, layer, batch) (templates/modules/conv2d.cu.j2; pure text, prebuilt without
a GPU): the generated policies are concrete for the grid, which grows with the batch. It holds the
plain kernel (StreamSync, PDL alone) and, per generated policy, one kernel per position in the
chain: the first Conv2D posts, a middle one waits and posts, the last one waits. Waiting and the
reorder optimization are runtime flags (ConvArgs.flags).
"""
from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field

import cusyncgen
from cusyncgen.cuda import build, timing
from cusyncgen.cuda.abi import ConvArgs, StageArgs
from cusyncgen.cuda.chain import Chain, Link
from cusyncgen.cuda.configs import SM80_ORDERINGS, Config, policy_configs
from cusyncgen.cuda.lazy import cupy, driver, torch
from cusyncgen.workloads.base import SPLIT_K, is_policy, rel_err as rel_err_one
from cusyncgen.workloads.kernels import (KERNEL_FAMILY, WAIT_KERNEL, ConvConfig, KernelVariant, StageType, examples_dir,
                                         source)

@dataclass(frozen=True)
class Layer:
    """One Conv2D shape of Table II: P x Q x C input, 3x3 kernel, K = C output channels."""

    name: str
    P: int
    C: int

    @property
    def Q(self) -> int:
        return self.P


LAYERS = {"L1": Layer("L1", 56, 64), "L2": Layer("L2", 28, 128), "L3": Layer("L3", 14, 256), "L4": Layer("L4", 7, 512)}


@dataclass(frozen=True)
class Model:
    name: str
    dep: str
    convs: int          # Conv2Ds chained per layer
    layers: tuple       # the layers of Table II benchmarked with this chain length


# Table II: VGG-19's 64- and 128-channel layers have 2 Conv2Ds, the same chain as ResNet-38's, so
# only its 4-Conv2D layers are separate workloads here.
MODELS = {
    "resnet38": Model("resnet38", "conv_resnet38.dep", 2, ("L1", "L2", "L3", "L4")),
    "vgg19": Model("vgg19", "conv_vgg19.dep", 4, ("L3", "L4")),
}
# The paper's Figure 8 sweeps the batch 1..32 in steps of 4: with 64-pixel tiles a 56x56 image is
# 49 tiles, so batches 8, 16, 32 fill whole waves of an H100/H200 (132 SMs x 3 blocks) and
# 12, 20, 24, 28 leave partial last waves, where overlapping the Conv2Ds can pay.
BATCHES = (1, 4, 8, 12, 16, 20, 24, 28, 32)
TEST_POINTS = (("resnet38", "L1", 1), ("resnet38", "L2", 3), ("resnet38", "L3", 8), ("resnet38", "L4", 5),
               ("vgg19", "L3", 2), ("vgg19", "L4", 8))


@dataclass(frozen=True)
class Tiles:
    """Thread-block tile: BM output pixels x BN output channels, BK input channels per k-block."""

    BM: int = 64
    BN: int = 64
    BK: int = 64
    stages: int = 3
    warps_m: int = 2
    warps_n: int = 2

    def config(self, sync_warp: bool = False) -> ConvConfig:
        """Kernels without a sync warp honour their stage's splits (split-K, kernels/splitk.cuh)."""
        return ConvConfig((self.BM, self.BN, self.BK, self.stages, self.warps_m, self.warps_n), sync_warp)

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * 32

    @property
    def smem(self) -> int:
        return self.stages * (self.BM + self.BN) * self.BK * 2

    @property
    def label(self) -> str:
        return f"{self.BM}x{self.BN}x{self.BK}/s{self.stages}/w{self.warps_m}x{self.warps_n}"

    @classmethod
    def parse(cls, label: str) -> "Tiles":
        """The inverse of .label: "128x64x32/s4/w2x2"."""
        m = re.fullmatch(r"(\d+)x(\d+)x(\d+)/s(\d+)/w(\d+)x(\d+)", label)
        if not m:
            raise ValueError(f"not a Conv2D tile label: {label!r} (e.g. 128x64x32/s4/w2x2)")
        return cls(*(int(v) for v in m.groups()))


# The other tile shape `cusyncgen tune conv2d` measures (bench conv2d --tiles): twice the output
# pixels per block, half the blocks -- the waves of every layer and batch change.
ALT_TILES = (Tiles(128, 64, 32, 4, 2, 2),)


def default_tiles(layer: Layer) -> Tiles:
    tiles = Tiles()
    if layer.Q + 1 > tiles.BM:
        raise ValueError(f"the halo of a {layer.Q}-wide image needs BM >= {layer.Q + 1}")
    return tiles


def grid(layer: Layer, batch: int, tiles: Tiles, splits: int = 1) -> tuple[int, int, int]:
    """(channel tiles, pixel tiles, splits): a split Conv2D's z extent is its splits (stage.h)."""
    return (layer.C // tiles.BN, -(-batch * layer.P * layer.Q // tiles.BM), splits)


# Split-K (kernels/splitk.cuh): at least this many k-blocks per block, and about this many blocks
# per SM (the split count is rounded to the nearest).
SPLIT_MIN_KBLOCKS = 4
SPLIT_BLOCKS_PER_SM = 2


def splits(layer: Layer, batch: int, tiles: Tiles, sms: int) -> int:
    """Blocks per output tile. The deep layers have few pixel tiles and long reductions (L4 at
    batch 4: 32 tiles of 72 k-blocks on 132 SMs): each tile's 9*C/BK k-blocks are shared by enough
    blocks to give every SM two (rounded to the nearest split count), keeping SPLIT_MIN_KBLOCKS per
    block; 1 where the tiles alone fill the SMs."""
    gx, gy, _ = grid(layer, batch, tiles)
    k_blocks = 9 * layer.C // tiles.BK
    return max(1, min(int(SPLIT_BLOCKS_PER_SM * sms / (gx * gy) + 0.5), k_blocks // SPLIT_MIN_KBLOCKS))


def compile_dep(model: Model, layer: Layer, batch: int, tiles: Tiles):
    if layer.Q + 1 > tiles.BM:  # the .dep's Dep covers row tiles y-1..y+1 only
        raise ValueError(f"the .dep's halo (row tiles y-1..y+1) needs TileM >= Q + 1 = {layer.Q + 1}")
    params = {"B": batch, "P": layer.P, "Q": layer.Q, "C": layer.C, "TileM": tiles.BM, "TileN": tiles.BN}
    ns = f"conv_{model.name}"
    return cusyncgen.compile(examples_dir() / model.dep, params=params, name=ns), ns


def policy_label(name: str) -> str:
    """The one-semaphore-per-tile policy is Conv2DTileSync; with one row tile the halo clamps fold
    to constants and the compiler names it TileSync: same map, reported under one name."""
    return "Conv2DTileSync" if name == "TileSync" else name




# ---- kernel names: the module's writer and ConvChain's loader both ask these ----

MACRO = "CUSYNC_CONV2D_KERNEL"  # runtime_cuda/kernels/conv2d.cuh


def kernel_symbol(conv: int, policy: str | None, sync_warp: bool = False) -> str:
    """The entry of Conv2D `conv` (1-based) of the chain under a generated policy (its compiled
    name), with a sync warp that does its waits; the plain kernel (policy None) serves every position."""
    if policy is None:
        return "conv_plain"
    return f"conv{conv}_{policy}" + ("_S" if sync_warp else "")


def module_source(model: Model, layer: Layer, batch: int, tiles: Tiles, debug: bool = False):
    """(build.Source, [(policy label, generated name, [num_sems of each Conv2D's out policy])]).
    Every Conv2D that waits also comes with a sync warp that does its waits (kernels/conv2d.cuh's
    SyncWarp); the host picks one of the two (ConvChain)."""
    compiled, ns = compile_dep(model, layer, batch, tiles)
    n = model.convs
    grids = [f"g{i + 1}" for i in range(n)]
    deps = {}  # consumer index -> {policy name: (C++ type, semaphores)}
    for p in compiled.policies:
        deps.setdefault(grids.index(p.consumer), {})[p.name] = (p.struct_name, p.num_sems)
    plain = [KernelVariant(kernel_symbol(1, None), MACRO, ("Cfg", StageType("g1")))]
    entries, policies = [], []
    for name in deps[1]:
        sems, convs = [], []
        for i in range(n):
            out_p, out_n = deps[i + 1][name] if i + 1 < n else (None, 0)   # None: cusync::NoSync
            in_p = deps[i][name][0] if i > 0 else None
            alias = f"Stage{i + 1}_{name}"
            kernels = [KernelVariant(kernel_symbol(i + 1, name), MACRO, ("Cfg", alias))]
            if i > 0:
                kernels.append(KernelVariant(kernel_symbol(i + 1, name, True), MACRO, ("CfgS", alias)))
            convs.append({"stage": (alias, StageType(grids[i], (out_p, in_p))),
                          "kernels": kernels})
            sems.append(out_n)
        entries.append({"convs": convs})
        policies.append((policy_label(name), name, sems))
    src = source("conv2d.cu.j2",
                 f"conv_{model.name}_{layer.name}_B{batch}_{tiles.BM}x{tiles.BN}x{tiles.BK}{'_debug' if debug else ''}",
                 ns, compiled.header, debug, configs=[("Cfg", tiles.config()), ("CfgS", tiles.config(True))],
                 plain=plain, policies=entries)
    return src, policies


def bench_points(models=None, sweep=None):
    out = []
    for m in models or MODELS:
        for layer in MODELS[m].layers:
            for b in sweep or BATCHES:
                out.append((m, layer, b))
    return out



# ---- on the GPU ----

WAIT_INPUT, REORDER = 1, 2  # cusync_kernels::ConvFlags


@dataclass
class ConvChain:
    """The Conv2Ds of one layer at one batch size, every generated policy in one module."""

    # the registry entry (cusyncgen.workloads.base.Workload)
    name = "conv2d"
    vendor = "cuDNN"
    kernel = KERNEL_FAMILY
    orderings = SM80_ORDERINGS
    models = tuple(MODELS)
    sizes = BATCHES
    bench_options = ("sync_warp", "spread", "tiles")
    tune_mode = "bench"

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
    # None: splits() for this GPU (the deep layers' few tiles fill every SM twice), or 1
    # with sync_warp=True; 1: off.
    splits: int | None = None
    arch: str | None = None
    _stages: dict = field(default_factory=dict, repr=False)

    @classmethod
    def sources(cls, sizes=None, tune: bool = False) -> list[build.Source]:
        """Every module the benchmark (each layer's default tiles; with tune also ALT_TILES) and
        the GPU tests (CUSYNC_DEBUG builds at TEST_POINTS) load."""
        srcs = []
        for m, layer, b in bench_points(sweep=sizes):
            for tiles in (default_tiles(LAYERS[layer]),) + (ALT_TILES if tune else ()):
                srcs.append(module_source(MODELS[m], LAYERS[layer], b, tiles)[0])
        for m, layer, b in TEST_POINTS:
            srcs.append(module_source(MODELS[m], LAYERS[layer], b, default_tiles(LAYERS[layer]), debug=True)[0])
        return srcs

    @classmethod
    def bench(cls, models=None, sizes=None, iters: int = 30, **options) -> dict:
        return bench(models, sizes, iters, **options)

    def __post_init__(self):
        self.model = MODELS[self.model_name]
        self.layer = LAYERS[self.layer_name]
        self.tiles = self.tiles or default_tiles(self.layer)
        self.n = self.model.convs
        src, policies = module_source(self.model, self.layer, self.batch, self.tiles, self.debug)
        self.module = driver.Module(build.build(src, self.arch or driver.arch()))
        self.module.check_abi(ConvArgs, StageArgs)
        t = self.tiles
        k = lambda name, extra=0: _opt_in_smem(self.module.kernel(name, t.threads + extra, t.smem))
        self.plain_kernel = k(kernel_symbol(1, None))
        if self.splits is None:  # a sync warp asked for serves a whole K loop: no split-K then
            self.splits = 1 if self.sync_warp else splits(self.layer, self.batch, t, driver.sm_count())
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
        # replay: fixed by driver.max_shared_carveout below; docs/design.md, 'No ordering (W)'.)
        if self.splits > 1 and self.sync_warp:
            raise ValueError("a split-K Conv2D waits in its compute threads: no sync warp (splits=1 for one)")
        if self.splits == 1 and (self.sync_warp or (self.sync_warp is None and policies)):
            self.sync_warp_used = bool(self.sync_warp) or driver.sync_warp_pays(
                self.num_tiles, k(kernel_symbol(2, policies[0][1], True), 32), self.plain_kernel)
        sw = lambda i, name: (k(kernel_symbol(i + 1, name, True), 32) if i > 0 and self.sync_warp_used
                              else k(kernel_symbol(i + 1, name)))
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
        from cusyncgen.cuda.stages import Stage
        self.plain_stages = [Stage(f"conv{i + 1}", i, 0, splits=self.splits) for i in range(self.n)]
        for label, _, sems in policies:
            stages = [Stage(f"conv{i + 1}", i, sems[i], splits=self.splits) for i in range(self.n)]
            for i in range(1, self.n):
                stages[i].depends_on(stages[i - 1], 0, f"conv{i}")
            self._stages[label] = stages
        self.chain = Chain(self.n, self.module.kernel(WAIT_KERNEL, 1))

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
        """StreamSync, PDL alone, every policy x {wait-kernel, PDL} x {R} x {T}, W where it may run.
        (W with sync warps in a chain of more than 2 hung under CUDA-graph replay on the H200
        (vgg19-L3 batch 4, Conv2DTileSync+WT) until every kernel asked for the largest shared
        memory carveout: __post_init__.)"""
        return policy_configs(self.policy_names, self.orderings, self.occupancy_ok_without_ordering())

    def _args(self, i, x, ws, bs, ys, flags):
        L = self.layer
        src = x if i == 0 else ys[i - 1]
        return ConvArgs(X=src.data.ptr, W=ws[i].data.ptr, bias=bs[i].data.ptr, Y=ys[i].data.ptr,
                        B=self.batch, P=L.P, Q=L.Q, C=L.C, K=L.C, flags=flags,
                        ws=self.workspaces[i].data.ptr, counters=self.counters[i].data.ptr)

    def run(self, main, cfg: Config, x, ws, bs, ys, wait_input: bool = True, conv_flags: int | None = None) -> None:
        """One chain under `cfg`. wait_input=False drops the waits (tests: a race must be caught).
        conv_flags: ConvArgs.flags of every Conv2D after the first instead of those of `cfg`
        (WAIT_INPUT, and REORDER with R; commands.conv_costs runs the policy's kernels with others)."""
        n, g = self.n, self.grid
        if cfg.policy is None:
            ks, stages, flags = [self.plain_kernel] * n, self.plain_stages, 0
        else:
            ks, stages = self.kernels[cfg.policy], self._stages[cfg.policy]
            flags = ((WAIT_INPUT if wait_input else 0) | (REORDER if cfg.reorder else 0)) if conv_flags is None else conv_flags

        def link(i):
            a, k = self._args(i, x, ws, bs, ys, flags if i > 0 else 0), ks[i]
            return Link(stages[i], lambda s, sa, step: k.launch(
                g, [a, sa], s, pdl=step.pdl, smem=self.spread_smem.get(k.name) if step.early else None), self.blocks)
        self.chain.run(main, cfg, [link(i) for i in range(n)])

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


def vendor_forms(x, ws, bs) -> dict:
    """cuDNN through PyTorch: fp16 conv2d + bias + ReLU, chained, in the forms a user would write:
    {form: a maker returning a callable that returns the last output} (baselines.VendorForms). The
    chain's NHWC memory as channels_last tensors ("cudnn-channels-last": the kernels' own layout, no
    copy) or converted once, outside any timing, to contiguous NCHW ("cudnn-contiguous"); each also
    with cuDNN's fused convolution + bias + ReLU (torch.cudnn_convolution_relu,
    "cudnn-conv-relu-channels-last"/"-contiguous"; skipped where this PyTorch lacks it)."""
    tx = torch.from_dlpack(x).permute(0, 3, 1, 2)          # NCHW view of NHWC memory: channels_last
    tws = [torch.from_dlpack(w).permute(0, 3, 1, 2) for w in ws]
    tbs = [torch.from_dlpack(b) for b in bs]

    def form(contiguous: bool, fused: bool):
        def make():
            conv_relu = torch.cudnn_convolution_relu if fused else None   # an AttributeError: skipped
            h0 = tx.contiguous() if contiguous else tx
            weights = [w.contiguous() for w in tws] if contiguous else tws

            def fn():
                h = h0
                for w, b in zip(weights, tbs):
                    h = (conv_relu(h, w, b, (1, 1), (1, 1), (1, 1), 1) if fused
                         else torch.relu(torch.nn.functional.conv2d(h, w, b, padding=1)))
                return h
            return fn
        return make
    return {f"cudnn-{'conv-relu-' if fused else ''}{'contiguous' if contiguous else 'channels-last'}": form(contiguous, fused)
            for fused in (False, True) for contiguous in (False, True)}


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
        rows.append({"model": chain.label, "M": chain.batch, "config": cfg.name + suffix, "kernel": chain.kernel,
                     "time_us": round(t, 2),
                     "correct": err < TOL, "rel_err": err, "tiles": chain.tiles.label, "grid": list(chain.grid[:2]),
                     "splits": chain.splits, "sync_warp": chain.sync_warp_used, "spread": bool(chain.spread_smem)})
    return rows


def measure_point(model: str, layer: str, batch: int, iters: int, stream, seed: int = 0, configs=None,
                  sync_warp: bool | None = None, spread: bool | None = None, tiles: Tiles | None = None) -> list[dict]:
    """Rows of one (model, layer, batch): every configuration on the chain without split-K (the
    paper's comparison: StreamSync and the policies on the same kernels), then, where the layer
    gets split-K (splits(), not with a sync warp), every configuration again on the
    split chain (names + SPLIT_K), then cuDNN. speedup_vs_streamsync is over StreamSync without split-K."""
    from cusyncgen.cuda import baselines
    opts = {} if spread is None else {"spread": spread}
    chain = ConvChain(model, layer, batch, tiles=tiles, sync_warp=sync_warp, splits=1, **opts)
    sets = [chain.buffers(seed=seed + s) for s in range(3)]
    outs = [chain.outputs() for _ in sets]
    x, ws, bs = sets[0]
    refs = chain.reference(x, ws, bs)
    rows = _time_chain(chain, list(configs or chain.configs()), "", sets, outs, refs, stream, iters)
    n = 1 if sync_warp else splits(chain.layer, batch, chain.tiles, driver.sm_count())
    if n > 1:
        split = ConvChain(model, layer, batch, tiles=tiles, sync_warp=sync_warp, splits=n, **opts)
        rows += _time_chain(split, list(configs or split.configs()), SPLIT_K, sets, outs, refs, stream, iters)
    base = rows[0]["time_us"]
    for r in rows:
        r["speedup_vs_streamsync"] = round(base / r["time_us"], 4)
    torch.backends.cudnn.benchmark = True
    forms = baselines.VendorForms.check(vendor_forms(x, ws, bs), lambda name, fn: rel_err(
        [cupy.from_dlpack(fn().permute(0, 2, 3, 1).contiguous())], refs[-1:]))
    baselines.time_forms(forms, iters)
    return rows + forms.rows(("cuDNN", "cuDNN+graph"), {"model": chain.label, "M": batch}, base, TOL)


def bench(models=None, sizes=None, iters: int = 30, progress: bool = True, sync_warp: bool | None = None,
          spread: bool | None = None, tiles: str | None = None) -> dict:
    """Every (model, layer, batch): StreamSync, PDL, each policy x ordering x R, cuDNN (eager, graph:
    each the fastest correct of the forms of vendor_forms).
    tiles: a Tiles label for every chain instead of each layer's default (the tuner's other shape)."""
    tiles_obj = Tiles.parse(tiles) if tiles else None
    if isinstance(models, str):
        models = models.split(",")
    stream = cupy.cuda.Stream(non_blocking=True)
    rows = []
    work = bench_points(models, sizes or BATCHES)
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
                  + sk + f", cuDNN+graph {cud['time_us']:.1f} us ({cud['vendor_form']}), all correct: "
                  f"{all(r['correct'] for r in point)} "
                  f"[{time.time() - t0:.0f} s]", file=sys.stderr, flush=True)
        cupy.get_default_memory_pool().free_all_blocks()
    return {"device": driver.device_name(), "workload": "conv2d", "vendor": "cuDNN", "rows": rows}
