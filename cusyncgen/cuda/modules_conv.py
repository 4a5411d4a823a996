"""CUDA sources of the synchronized Conv2D chains (ResNet-38: 2 Conv2Ds per layer, VGG-19: 4 for
its 256- and 512-channel layers, paper Table II), from examples/conv_resnet38.dep and
examples/conv_vgg19.dep. Pure text generation (no CuPy), so the modules can be prebuilt without a GPU.

One module per (model, layer, batch): the generated policies are concrete for the grid, which
grows with the batch. It holds the plain kernel (StreamSync, PDL alone) and, per generated policy,
one kernel per position in the chain: the first Conv2D posts, a middle one waits and posts, the
last one waits. Waiting and the reorder optimization are runtime flags (ConvArgs.flags).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import cusyncgen
from cusyncgen.cuda import build

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


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

    @property
    def cfg(self) -> str:
        return self.config()

    def config(self, sync_warp: bool = False) -> str:
        """Kernels without a sync warp honour their stage's splits (split-K, kernels/splitk.cuh)."""
        low = lambda b: str(b).lower()
        return (f"cusync_kernels::ConvConfig<{self.BM}, {self.BN}, {self.BK}, {self.stages}, "
                f"{self.warps_m}, {self.warps_n}, {self.BN}, {low(sync_warp)}, {low(not sync_warp)}>")

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
SPLIT_K = "/split-K"  # bench rows of the split chain: configuration name + SPLIT_K


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
    return cusyncgen.compile(EXAMPLES / model.dep, params=params, name=ns), ns


def policy_label(name: str) -> str:
    """The one-semaphore-per-tile policy is Conv2DTileSync; with one row tile the halo clamps fold
    to constants and the compiler names it TileSync: same map, reported under one name."""
    return "Conv2DTileSync" if name == "TileSync" else name


def module_source(model: Model, layer: Layer, batch: int, tiles: Tiles, debug: bool = False):
    """(build.Source, [(policy label, generated name, [num_sems of each Conv2D's out policy])]).
    Every Conv2D that waits also comes with a sync warp that does its waits (conv<i>_<policy>_S,
    kernels/conv2d.cuh's SyncWarp); the host picks one of the two (ConvChain)."""
    compiled, ns = compile_dep(model, layer, batch, tiles)
    n = model.convs
    grids = [f"g{i + 1}" for i in range(n)]
    deps = {}  # consumer index -> {policy name: struct}
    for p in compiled.policies:
        deps.setdefault(grids.index(p.consumer), {})[p.name] = (f"{ns}::{p.dep}_{p.producer}_{p.name}", p.num_sems)
    lines = [f'#include "{ns}.h"', "#include <kernels/conv2d.cuh>", "CUSYNC_DEFINE_WAIT_KERNEL(cusync_wait_kernel)",
             f"using Cfg = {tiles.cfg};", f"using CfgS = {tiles.config(True)};",
             f"CUSYNC_CONV2D_KERNEL(conv_plain, Cfg, cusync::PlainStage<{ns}::g1_order>)"]
    policies = []
    for name in deps[1]:
        sems = []
        for i in range(n):
            order = f"{ns}::{grids[i]}_order"
            out_p, out_n = deps[i + 1][name] if i + 1 < n else ("cusync::NoSync", 0)
            in_p = deps[i][name][0] if i > 0 else "cusync::NoSync"
            lines.append(f"using Stage{i + 1}_{name} = cusync::CuStage<{order}, {out_p}, {in_p}>;")
            lines.append(f"CUSYNC_CONV2D_KERNEL(conv{i + 1}_{name}, Cfg, Stage{i + 1}_{name})")
            if i > 0:
                lines.append(f"CUSYNC_CONV2D_KERNEL(conv{i + 1}_{name}_S, CfgS, Stage{i + 1}_{name})")
            sems.append(out_n)
        policies.append((policy_label(name), name, sems))
    src = build.Source(f"conv_{model.name}_{layer.name}_B{batch}_{tiles.BM}x{tiles.BN}x{tiles.BK}{'_debug' if debug else ''}",
                       "\n".join(lines) + "\n", headers=((f"{ns}.h", compiled.header),),
                       defines=("CUSYNC_DEBUG",) if debug else ())
    return src, policies


def bench_points(models=None, sweep=None):
    out = []
    for m in models or MODELS:
        for layer in MODELS[m].layers:
            for b in sweep or BATCHES:
                out.append((m, layer, b))
    return out


def prebuild_sources(sweep=None, tune: bool = False) -> list:
    srcs = []
    for m, layer, b in bench_points(sweep=sweep):
        for tiles in (default_tiles(LAYERS[layer]),) + (ALT_TILES if tune else ()):
            srcs.append(module_source(MODELS[m], LAYERS[layer], b, tiles)[0])
    for m, layer, b in TEST_POINTS:
        srcs.append(module_source(MODELS[m], LAYERS[layer], b, default_tiles(LAYERS[layer]), debug=True)[0])
    return srcs
