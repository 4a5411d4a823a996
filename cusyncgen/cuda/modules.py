"""CUDA sources of the synchronized workloads: which kernels each module instantiates, with which
generated policies. Pure text generation (no CuPy), so modules can be prebuilt without a GPU."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cusyncgen
from cusyncgen.cuda import build

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
THREADS = 256  # copy kernels: 8 blocks per SM, one full wave at maximum occupancy


@dataclass(frozen=True)
class Model:
    name: str
    dep: str
    H: int
    N1: int        # columns of the first GeMM's output
    K2: int        # reduction size of the second GeMM
    epilogue1: str
    swiglu: bool               # the second GeMM computes SwiGLU on its A loads (mlp_llama.dep)
    swiglu_epilogue: bool = False  # the first GeMM's tiles store SwiGLU of their halves (mlp_llama_ep.dep)

    @property
    def K1(self) -> int:
        return self.H

    @property
    def Y_cols(self) -> int:
        """Columns of the first GeMM's output (N1 halves when its epilogue combines g and u)."""
        return self.N1 // 2 if self.swiglu_epilogue else self.N1

    @property
    def N2(self) -> int:
        return self.H


MODELS = {
    "gpt3": Model("gpt3", "mlp_gpt3.dep", 12288, 6144, 6144, "cusync_kernels::EpiGeluTanh", False),
    "llama": Model("llama", "mlp_llama.dep", 8192, 2 * 2752, 2752, "cusync_kernels::EpiIdentity", True),
    "llama-ep": Model("llama-ep", "mlp_llama_ep.dep", 8192, 2 * 2752, 2752, "cusync_kernels::EpiSwiGLUHalves",
                      False, swiglu_epilogue=True),
}
# The interleaving of W1 and V rows in llama-ep's first weight: its GeMM tile is twice this wide.
LLAMA_EP_BLOCK = 64


@dataclass(frozen=True)
class Tiles:
    """The thread-block tile of one GeMM (runtime_cuda/kernels/gemm.cuh's GemmConfig)."""

    BM: int = 128
    BN: int = 128
    BK: int = 32
    stages: int = 4
    warps_m: int = 2
    warps_n: int = 2

    def cfg(self, epilogue: str, swiglu: int, reorder: bool, prod_bn: int, sync_warp: bool = False) -> str:
        return (f"cusync_kernels::GemmConfig<{self.BM}, {self.BN}, {self.BK}, {self.stages}, {self.warps_m}, "
                f"{self.warps_n}, {epilogue}, {swiglu}, {str(reorder).lower()}, {prod_bn}, {str(sync_warp).lower()}>")

    @property
    def label(self) -> str:
        return f"{self.BM}x{self.BN}x{self.BK}s{self.stages}w{self.warps_m}x{self.warps_n}"

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * 32


@dataclass(frozen=True)
class MlpTiles:
    """Tiles of the producer and the consumer GeMM (same BM: a row tile holds the same rows in
    both) and how the consumer computes SwiGLU (gemm.cuh: 1 fp32 on fragments, 2 half2 on
    fragments, 3 once per k-tile in shared memory)."""

    g1: Tiles
    g2: Tiles
    swiglu_mode: int = 2

    def __post_init__(self):
        if self.g1.BM != self.g2.BM:
            raise ValueError(f"producer and consumer need the same BM, got {self.g1.BM} and {self.g2.BM}")

    @property
    def BM(self) -> int:
        return self.g1.BM

    @property
    def label(self) -> str:
        return f"{self.g1.label}+{self.g2.label}" + (f"+swiglu{self.swiglu_mode}" if self.swiglu_mode != 2 else "")


def default_tiles(model: str, M: int) -> MlpTiles:
    """Tile shapes per model and M, from the GeMM's measurements on an H200
    (tests/cuda_src/README.md). LLaMA's producer needs BN = 64: F = 2752 = 43 * 64, and the
    strided dependency x + F/TileN1 must be a whole tile."""
    small = Tiles(64, 64, 64, 5, 2, 2)
    if model == "llama-ep":
        # The first GeMM's BN is pinned to 2 * LLAMA_EP_BLOCK (the weight's interleaving). Past
        # M = 64, the tiles `cusyncgen tune mlp` chose on the H200 (fastest correct configuration
        # of three tile pairs; benchmarks/results/tune-mlp-nvidia-h200.md).
        wide, four = Tiles(128, 128, 64, 3, 2, 4), Tiles(128, 128, 32, 4, 2, 2)
        if M <= 64:
            return MlpTiles(Tiles(64, 128, 64, 4, 2, 2), small)
        if M <= 512:
            return MlpTiles(wide, wide)
        if M <= 1024:
            return MlpTiles(wide, four)
        return MlpTiles(four, four)
    if model == "gpt3":
        if M <= 64:
            return MlpTiles(small, small)
        if M <= 1024:
            return MlpTiles(Tiles(128, 128, 64, 3, 2, 4), Tiles(128, 128, 32, 4, 2, 2))
        return MlpTiles(Tiles(128, 128, 32, 4, 2, 2), Tiles(128, 128, 32, 4, 2, 2))
    if M <= 64:
        return MlpTiles(small, small, 2)
    if M <= 512:
        return MlpTiles(small, Tiles(64, 256, 32, 4, 2, 4), 2)
    return MlpTiles(Tiles(128, 64, 64, 4, 2, 2), Tiles(128, 256, 64, 3, 2, 4), 3)


def dep_params(model: Model, M: int, tiles: MlpTiles) -> dict[str, int]:
    # The .dep files count row tiles as B*S/TileM (exact division): the grid has cdiv(M, BM) row
    # tiles, so M is rounded up to whole tiles here; the kernels predicate the rows past M.
    rows = -(-M // tiles.BM) * tiles.BM
    params = {"H": model.H, "B": rows, "S": 1, "TileM": tiles.BM}
    if model.swiglu_epilogue:
        if tiles.g1.BN != 2 * LLAMA_EP_BLOCK:
            raise ValueError(f"{model.name}'s first GeMM tile must be {2 * LLAMA_EP_BLOCK} wide (its weight's interleaving)")
        params.update(F=model.K2, TileN1=tiles.g1.BN // 2, TileN2=tiles.g2.BN)
    elif model.swiglu:
        params.update(F=model.K2, TileN1=tiles.g1.BN, TileN2=tiles.g2.BN)
    else:
        if tiles.g1.BN != tiles.g2.BN:
            raise ValueError(f"{model.dep} has one TileN for both GeMMs: got {tiles.g1.BN} and {tiles.g2.BN}")
        params["TileN"] = tiles.g1.BN
    return params


def compile_dep(model: Model, M: int, tiles: MlpTiles):
    ns = f"mlp_{model.name.replace('-', '_')}"
    return cusyncgen.compile(EXAMPLES / model.dep, params=dep_params(model, M, tiles), name=ns), ns


KERNEL_MACRO = r"""
#define CUSYNC_MLP_GEMM(NAME, CFG, STAGE)                                                   \
  extern "C" __device__ const int NAME##_threads = CFG::kBlockThreads;                      \
  extern "C" __device__ const int NAME##_smem = CFG::kSmemBytes;                            \
  extern "C" __global__ void __launch_bounds__(CFG::kBlockThreads)                          \
      NAME(cusync_kernels::GemmArgs args, cusync::StageArgs stage_args) {                   \
    extern __shared__ __align__(128) char smem[];                                           \
    STAGE stage(stage_args);                                                                \
    cusync_kernels::gemm_device<CFG>(args, stage, smem);                                    \
  }
"""


# Consumers get a sync warp (gemm.cuh's GemmConfig::SyncWarp) only with at most 4 compute warps:
# a 9th warp caps an 8-warp block's registers at 168 (3 warps share a 16K-register SM quarter),
# which spilled the 8-warp LLaMA consumers (6 KB of spills at 255 registers). With 4 compute warps
# the sync warp may still cost occupancy; the host then uses the variant without it (MLP.__init__).
SYNC_WARP_MAX_THREADS = 128


def module_source(model: Model, M: int, tiles: MlpTiles, debug: bool = False, timeline: bool = False,
                  sync_warp: bool = True):
    """One module per (model, M, tiles): the plain kernels (StreamSync, PDL) and, for every policy
    the compiler generates for g2 <- g1, the posting producer and the waiting consumer (with and
    without reordered loads; with sync_warp and a consumer of <= 4 warps, also both with a sync
    warp that does the waits: gemm2_<policy>_S, gemm2_<policy>_RS)."""
    compiled, ns = compile_dep(model, M, tiles)
    policies = [p for p in compiled.policies if p.producer == "g1" and p.consumer == "g2"]
    mode = tiles.swiglu_mode if model.swiglu else 0
    with_sw = sync_warp and tiles.g2.threads <= SYNC_WARP_MAX_THREADS
    epi2 = "cusync_kernels::EpiIdentity"
    prod_bn = tiles.g1.BN // 2 if model.swiglu_epilogue else tiles.g1.BN  # width of g1's output tiles
    lines = [f'#include "{ns}.h"', "#include <kernels/gemm.cuh>", KERNEL_MACRO,
             "CUSYNC_DEFINE_WAIT_KERNEL(cusync_wait_kernel)",
             f"using Cfg1 = {tiles.g1.cfg(model.epilogue1, 0, False, tiles.g1.BN)};",
             f"using Cfg2 = {tiles.g2.cfg(epi2, mode, False, prod_bn)};",
             f"using Cfg2R = {tiles.g2.cfg(epi2, mode, True, prod_bn)};",
             f"CUSYNC_MLP_GEMM(gemm1_plain, Cfg1, cusync::PlainStage<{ns}::g1_order>)",
             f"CUSYNC_MLP_GEMM(gemm2_plain, Cfg2, cusync::PlainStage<{ns}::g2_order>)"]
    if with_sw:
        lines += [f"using Cfg2S = {tiles.g2.cfg(epi2, mode, False, prod_bn, True)};",
                  f"using Cfg2RS = {tiles.g2.cfg(epi2, mode, True, prod_bn, True)};"]
    names = []
    for p in policies:
        ptype = f"{ns}::{p.dep}_{p.producer}_{p.name}"
        lines += [f"using Prod_{p.name} = cusync::CuStage<{ns}::g1_order, {ptype}>;",
                  f"using Cons_{p.name} = cusync::CuStage<{ns}::g2_order, cusync::NoSync, {ptype}>;",
                  f"CUSYNC_MLP_GEMM(gemm1_{p.name}, Cfg1, Prod_{p.name})",
                  f"CUSYNC_MLP_GEMM(gemm2_{p.name}, Cfg2, Cons_{p.name})",
                  f"CUSYNC_MLP_GEMM(gemm2_{p.name}_R, Cfg2R, Cons_{p.name})"]
        if with_sw:
            lines += [f"CUSYNC_MLP_GEMM(gemm2_{p.name}_S, Cfg2S, Cons_{p.name})",
                      f"CUSYNC_MLP_GEMM(gemm2_{p.name}_RS, Cfg2RS, Cons_{p.name})"]
        names.append((p.name, p.num_sems))
    lines.append(f'extern "C" __device__ const int has_sync_warp = {int(with_sw)};')
    suffix = ("_debug" if debug else "") + ("_timeline" if timeline else "") + ("" if sync_warp else "_nosyncwarp")
    src = build.Source(f"mlp_{model.name.replace('-', '_')}_M{M}_{tiles.label.replace('+', '_')}{suffix}",
                       "\n".join(lines) + "\n", headers=((f"{ns}.h", compiled.header),),
                       defines=(("CUSYNC_DEBUG",) if debug else ()) + (("CUSYNC_TIMELINE",) if timeline else ()))
    return src, names


def copy_module_source(tiles: int, debug: bool) -> build.Source:
    compiled = cusyncgen.compile(EXAMPLES / "copy_chain.dep", params={"Tiles": tiles}, name="copy_chain")
    policy = next(p for p in compiled.policies if p.name == "TileSync")
    ptype = f"copy_chain::{policy.dep}_{policy.producer}_TileSync"
    text = "\n".join([
        '#include "copy_chain.h"',
        "#include <kernels/copy.cuh>",
        "CUSYNC_DEFINE_WAIT_KERNEL(cusync_wait_kernel)",
        "CUSYNC_COPY_KERNEL(copy1_plain, cusync::PlainStage<copy_chain::g1_order>, false)",
        "CUSYNC_COPY_KERNEL(copy2_plain, cusync::PlainStage<copy_chain::g2_order>, true)",
        f"using ProdTileSync = cusync::CuStage<copy_chain::g1_order, {ptype}>;",
        f"using ConsTileSync = cusync::CuStage<copy_chain::g2_order, cusync::NoSync, {ptype}>;",
        "CUSYNC_COPY_KERNEL(copy1_TileSync, ProdTileSync, false)",
        "CUSYNC_COPY_KERNEL(copy2_TileSync, ConsTileSync, true)",
        "",
    ])
    return build.Source(f"copy_chain_{tiles}{'_debug' if debug else ''}", text,
                        headers=(("copy_chain.h", compiled.header),),
                        defines=("CUSYNC_DEBUG",) if debug else ())
