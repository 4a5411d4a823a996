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
    swiglu: bool

    @property
    def K1(self) -> int:
        return self.H

    @property
    def N2(self) -> int:
        return self.H


MODELS = {
    "gpt3": Model("gpt3", "mlp_gpt3.dep", 12288, 6144, 6144, "cusync_kernels::EpiGeluTanh", False),
    "llama": Model("llama", "mlp_llama.dep", 8192, 2 * 2752, 2752, "cusync_kernels::EpiIdentity", True),
}


@dataclass(frozen=True)
class Tiles:
    """Thread-block tile of both GeMMs (one TileM/TileN pair, as the .dep files declare)."""

    BM: int = 128
    BN: int = 128
    BK: int = 32
    stages: int = 4
    warps_m: int = 2
    warps_n: int = 2

    def cfg(self, epilogue: str, swiglu: bool, reorder: bool, prod_bn: int) -> str:
        return (f"cusync_kernels::GemmConfig<{self.BM}, {self.BN}, {self.BK}, {self.stages}, {self.warps_m}, "
                f"{self.warps_n}, {epilogue}, {str(swiglu).lower()}, {str(reorder).lower()}, {prod_bn}>")

    @property
    def label(self) -> str:
        return f"{self.BM}x{self.BN}x{self.BK}/s{self.stages}/w{self.warps_m}x{self.warps_n}"

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * 32

    def smem(self, swiglu: bool) -> int:
        return self.stages * (self.BM * self.BK * (2 if swiglu else 1) + self.BN * self.BK) * 2


def default_tiles(model: str, M: int) -> Tiles:
    """The tile shape per model and M (from the kernel's tuning on the H100/H200)."""
    bn = 64 if model == "llama" else 128
    if M <= 64:
        return Tiles(BM=64, BN=bn, BK=64, stages=4, warps_m=2, warps_n=2)
    return Tiles(BM=128, BN=bn if model == "llama" else 128, BK=32, stages=4, warps_m=2, warps_n=2)


def dep_params(model: Model, M: int, tiles: Tiles) -> dict[str, int]:
    # The .dep files count row tiles as B*S/TileM (exact division): the grid has cdiv(M, BM) row
    # tiles, so M is rounded up to whole tiles here; the kernels predicate the rows past M.
    rows = -(-M // tiles.BM) * tiles.BM
    params = {"H": model.H, "B": rows, "S": 1, "TileM": tiles.BM, "TileN": tiles.BN}
    if model.swiglu:
        params["F"] = model.K2
    return params


def compile_dep(model: Model, M: int, tiles: Tiles):
    ns = f"mlp_{model.name}"
    return cusyncgen.compile(EXAMPLES / model.dep, params=dep_params(model, M, tiles), name=ns), ns


KERNEL_MACRO = r"""
#define CUSYNC_MLP_GEMM(NAME, CFG, STAGE)                                                   \
  extern "C" __global__ void __launch_bounds__(CFG::kThreads)                               \
      NAME(cusync_kernels::GemmArgs args, cusync::StageArgs stage_args) {                   \
    extern __shared__ __align__(128) char smem[];                                           \
    STAGE stage(stage_args);                                                                \
    cusync_kernels::gemm_device<CFG>(args, stage, smem);                                    \
  }
"""


def module_source(model: Model, M: int, tiles: Tiles, debug: bool = False):
    compiled, ns = compile_dep(model, M, tiles)
    policies = [p for p in compiled.policies if p.producer == "g1" and p.consumer == "g2"]
    lines = [f'#include "{ns}.h"', "#include <kernels/gemm.cuh>", KERNEL_MACRO,
             "CUSYNC_DEFINE_WAIT_KERNEL(cusync_wait_kernel)"]
    cfg1 = tiles.cfg(model.epilogue1, False, False, tiles.BN)
    lines.append(f"using Cfg1 = {cfg1};")
    lines.append(f"using Cfg2 = {tiles.cfg('cusync_kernels::EpiIdentity', model.swiglu, False, tiles.BN)};")
    lines.append(f"using Cfg2R = {tiles.cfg('cusync_kernels::EpiIdentity', model.swiglu, True, tiles.BN)};")
    lines.append(f"CUSYNC_MLP_GEMM(gemm1_plain, Cfg1, cusync::PlainStage<{ns}::g1_order>)")
    lines.append(f"CUSYNC_MLP_GEMM(gemm2_plain, Cfg2, cusync::PlainStage<{ns}::g2_order>)")
    names = []
    for p in policies:
        ptype = f"{ns}::{p.dep}_{p.producer}_{p.name}"
        lines.append(f"using Prod_{p.name} = cusync::CuStage<{ns}::g1_order, {ptype}>;")
        lines.append(f"using Cons_{p.name} = cusync::CuStage<{ns}::g2_order, cusync::NoSync, {ptype}>;")
        lines.append(f"CUSYNC_MLP_GEMM(gemm1_{p.name}, Cfg1, Prod_{p.name})")
        lines.append(f"CUSYNC_MLP_GEMM(gemm2_{p.name}, Cfg2, Cons_{p.name})")
        lines.append(f"CUSYNC_MLP_GEMM(gemm2_{p.name}_R, Cfg2R, Cons_{p.name})")
        names.append((p.name, p.num_sems))
    src = build.Source(f"mlp_{model.name}_M{M}_{tiles.BM}x{tiles.BN}x{tiles.BK}{'_debug' if debug else ''}",
                       "\n".join(lines) + "\n", headers=((f"{ns}.h", compiled.header),),
                       defines=("CUSYNC_DEBUG",) if debug else ())
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
