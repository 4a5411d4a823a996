"""CUDA sources of the synchronized Attention (paper Figure 2b): the QKV GeMM (g1), P = Q K^T per
head (gP), fused Softmax-Dropout (gR), T = R V per head (gT) and the output GeMM (g2), with the
policies cusyncgen generates from examples/attention_gpt3.dep and attention_llama.dep.

Pure text generation (no CuPy): `prebuild_sources()` lists every module the GPU tests and the
benchmark load.  One module per shape; each kernel is compiled once, with a stage that selects one
of the generated CuStage types at launch (`which`), so adding a policy combination adds no GeMM.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cusyncgen
from cusyncgen.cuda import build

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DH = 128          # head dimension (GPT-3 and LLaMA-65B)
SOFTMAX_THREADS = 1024  # softmax.cuh: one warp per row at a time, 32 rows in flight per block
TILE_K = 128      # key tile of the P GeMM (its BN): P and R rows are padded to a multiple of it
RV_SPLIT_KEYS = 256  # token generation: keys per block of T = R V (Shape.splits)
MODELS = {"gpt3": 12288, "llama": 8192}

# Policy combinations: per dependency of the chain, the generated policy it uses.
#   (g1 -> gP and gT: the semaphores of the QKV GeMM, depQK's policy; gP -> gR: depPR;
#    gR -> gT: depTR1; gT -> g2: depT2).  The QKV GeMM posts one semaphore array that both of its
#   consumers read, so gT waits on the V tiles through the same policy as gP on Q and K.
POLICY_CONFIGS = {
    "TileSync": ("TileSync", "TileSync", "TileSync", "TileSync"),
    "RowSync": ("RowSync", "RowSync", "TileSync", "GroupSync_xtile_ytile_zall"),
    "TileSync+RowSync+TileSync": ("TileSync", "RowSync", "TileSync", "TileSync"),
    "StridedSync+RowSync+TileSync": ("StridedSync", "RowSync", "TileSync", "TileSync"),
}
DEPS = ("depQK", "depPR", "depTR1", "depT2")

PROMPT_S = (512, 1024, 2048)
GEN_B = (1, 4)
GEN_SP = (512, 1024, 2048)
TEST_SHAPES = (("gpt3", 1, 320, 0), ("llama", 1, 512, 0), ("gpt3", 3, 1, 700), ("llama", 2, 1, 512),
               ("gpt3", 1, 320, 0, True), ("llama", 1, 300, 0, True))


@dataclass(frozen=True)
class Shape:
    model: str
    B: int
    S: int
    Sp: int = 0
    # prompts: a causal mask (query row r reads keys <= r; the .dep's Causal = 1: the softmax and R.V
    # of a row tile wait only for the rows up to it, and P's tiles past the diagonal are skipped)
    causal: bool = False
    # prompts: the GeMMs on 128x128x64 tiles of 8 warps (one block per SM) instead of 128x128x32 of
    # 4 (the tuner's other tile shape: `cusyncgen bench attention --tiles wide`)
    wide: bool = False

    def __post_init__(self):
        if not (self.B == 1 or self.S == 1):
            raise ValueError("the .dep files cover prompt processing (B = 1) and generation (S = 1)")
        if self.wide and not self.prompt:
            raise ValueError("wide tiles are a prompt-processing option")
        if self.causal and not (self.prompt and self.Sp == 0):
            raise ValueError("the causal mask is for prompt processing without cached tokens (Sp = 0)")

    @property
    def H(self) -> int:
        return MODELS[self.model]

    @property
    def D(self) -> int:
        return self.H // 8

    @property
    def NH(self) -> int:
        return self.D // DH

    @property
    def prompt(self) -> bool:
        return self.S > 1

    @property
    def L(self) -> int:
        return self.Sp + self.S

    @property
    def Npad(self) -> int:
        return -(-self.L // TILE_K) * TILE_K

    @property
    def tile_m(self) -> int:
        return 128 if self.prompt else 64

    @property
    def M(self) -> int:
        """Rows of the QKV and output GeMMs (tokens)."""
        return self.B * self.S

    @property
    def label(self) -> str:
        if self.prompt:
            return f"{self.model}-prompt" + ("-causal" if self.causal else "")
        return f"{self.model}-gen-S'{self.Sp}"

    @property
    def size(self) -> int:
        """The swept size of the benchmark: B*S in prompt processing, B in generation."""
        return self.M

    @property
    def name(self) -> str:
        return (f"attn_{self.model}_B{self.B}_S{self.S}_Sp{self.Sp}" + ("_causal" if self.causal else "")
                + ("_wide" if self.wide else ""))

    @property
    def tiles_label(self) -> str:
        return "wide" if self.wide else "default"

    @property
    def gemm_tile(self) -> tuple[int, int, int, int, int, int]:
        """(BM, BN, BK, stages, warps_m, warps_n) of the chain's GeMMs (gemm.cuh's GemmConfig)."""
        if self.wide:
            return 128, 128, 64, 3, 2, 4
        return (128, 128, 32, 4, 2, 2) if self.prompt else (64, 128, 64, 4, 2, 2)

    def gemm_cfg(self, reorder: bool = False, sync_warp: bool = False, split: bool = False) -> str:
        """split: the GeMM honours its stage's splits() (gemm.cuh SplitK; token generation only)."""
        low = lambda b: str(b).lower()
        tail = f"cusync_kernels::EpiIdentity, 0, {low(reorder)}, {DH}, {low(sync_warp)}, {low(split and not self.prompt)}>"
        return f"cusync_kernels::GemmConfig<{', '.join(map(str, self.gemm_tile))}, {tail}"

    @property
    def gemm_threads(self) -> int:
        _, _, _, _, wm, wn = self.gemm_tile
        return wm * wn * 32

    @property
    def gemm_smem(self) -> int:
        bm, bn, bk, stages, _, _ = self.gemm_tile
        return stages * (bm * bk + bn * bk) * 2

    def splits(self, sms: int) -> dict[str, int]:
        """Blocks per tile (split-K, kernels/splitk.cuh) of the QKV GeMM (g1), T = R V (gT) and
        the output GeMM (g2). 1 in prompt processing. In token generation their grids have one
        block per head (x3 for QKV), per head and request (R V) or per 128 output columns, and
        long K loops (H = 12288 for QKV, S' keys for R V, D for the output GeMM): each tile's K
        range is shared by enough blocks to fill `sms` SMs twice (the GeMMs, 98 KB of shared
        memory: 2 per SM) or four times (R V), keeping at least 8 k-tiles (QKV, BK = 64), 4
        k-tiles (two heads, output GeMM) or 256 keys (R V) per block."""
        if self.prompt:
            return {"g1": 1, "gT": 1, "g2": 1}
        _, _, bk, _, _, _ = self.gemm_tile
        qkv_tiles, rv_tiles, out_tiles = 3 * self.NH, self.B * self.NH, self.H // 128
        qkv = max(1, min(2 * sms // qkv_tiles, self.H // bk // 8))
        rv = max(1, min(-(-self.Npad // RV_SPLIT_KEYS), 4 * sms // rv_tiles))
        out = max(1, min(2 * sms // out_tiles, self.D // bk // 4))
        return {"g1": qkv, "gT": rv, "g2": out}

    def grids(self, splits: dict[str, int] | None = None) -> dict[str, tuple[int, int, int]]:
        """Launch grids; a split kernel's z extent is its tiles' z times its splits (stage.h)."""
        sp = splits or {}
        tm = self.tile_m
        rows_p = -(-self.S // tm)
        return {"g1": (3 * self.NH, -(-self.M // tm), sp.get("g1", 1)),
                "gP": (self.Npad // TILE_K, rows_p, self.B * self.NH),
                "gR": (1, rows_p, self.B * self.NH),
                "gT": (1, rows_p, self.B * self.NH * sp.get("gT", 1)),
                "g2": (self.H // 128, -(-self.M // tm), sp.get("g2", 1))}

    def dep_params(self) -> dict[str, int]:
        return {"H": self.H, "Dh": DH, "B": self.B, "S": self.S, "Sp": self.Sp,
                "TileM": self.tile_m, "TileK": TILE_K, "TileN": 128, "Causal": int(self.causal)}


def bench_shapes(models=None, wide: bool = False) -> list[Shape]:
    """The benchmark's shapes; wide: the prompts alone, on the wide tiles."""
    out = []
    for m in models or MODELS:
        out += [Shape(m, 1, s, 0, causal=c, wide=wide) for c in (False, True) for s in PROMPT_S]
        if not wide:
            out += [Shape(m, b, 1, sp) for sp in GEN_SP for b in GEN_B]
    return out


def compile_dep(shape: Shape):
    ns = f"attention_{shape.model}"
    return cusyncgen.compile(EXAMPLES / f"attention_{shape.model}.dep", params=shape.dep_params(), name=ns), ns


def _policy_names(compiled) -> dict[tuple[str, str], list[str]]:
    out: dict = {}
    for p in compiled.policies:
        out.setdefault((p.dep, p.producer), []).append(p.name)
    return out


def configs(compiled) -> dict[str, tuple[str, str, str, str]]:
    """The policy combinations whose every policy cusyncgen generated for this shape."""
    have = _policy_names(compiled)
    need = (("depQK", "g1"), ("depPR", "gP"), ("depTR1", "gR"), ("depT2", "gT"))
    return {name: pols for name, pols in POLICY_CONFIGS.items()
            if all(p in have.get(k, ()) for p, k in zip(pols, need))}


def role_types(shape: Shape, compiled, ns: str) -> dict[str, list[str]]:
    """Per kernel, the stage types its StageSwitch holds: index 0 the plain stage, then one per
    distinct policy tuple the kernel needs (the order of role_index)."""
    have = _policy_names(compiled)
    types = {r: [f"cusync::PlainStage<{ns}::{g}_order>"] for r, g in
             (("qkv", "g1"), ("pgemm", "gP"), ("softmax", "gR"), ("rv", "gT"), ("out", "g2"))}
    for p1, p2, p3, p4 in configs(compiled).values():
        g1v = f"{ns}::depTR1_g1_{p1}" if p1 in have.get(("depTR1", "g1"), ()) else f"{ns}::depQK_g1_{p1}"
        cand = {
            "qkv": f"cusync::CuStage<{ns}::g1_order, {ns}::depQK_g1_{p1}>",
            "pgemm": f"cusync::CuStage<{ns}::gP_order, {ns}::depPR_gP_{p2}, {ns}::depQK_g1_{p1}>",
            "softmax": f"cusync::CuStage<{ns}::gR_order, {ns}::depTR1_gR_{p3}, {ns}::depPR_gP_{p2}>",
            "rv": f"cusync::CuStage<{ns}::gT_order, {ns}::depT2_gT_{p4}, {ns}::depTR1_gR_{p3}, {g1v}>",
            "out": f"cusync::CuStage<{ns}::g2_order, cusync::NoSync, {ns}::depT2_gT_{p4}>",
        }
        for r, t in cand.items():
            if t not in types[r]:
                types[r].append(t)
    return types


def role_index(shape: Shape, compiled, ns: str) -> dict[str | None, dict[str, int]]:
    """config name (None: plain) -> kernel role -> `which`."""
    types = role_types(shape, compiled, ns)
    have = _policy_names(compiled)
    out: dict = {None: {r: 0 for r in types}}
    for name, (p1, p2, p3, p4) in configs(compiled).items():
        g1v = f"{ns}::depTR1_g1_{p1}" if p1 in have.get(("depTR1", "g1"), ()) else f"{ns}::depQK_g1_{p1}"
        cand = {
            "qkv": f"cusync::CuStage<{ns}::g1_order, {ns}::depQK_g1_{p1}>",
            "pgemm": f"cusync::CuStage<{ns}::gP_order, {ns}::depPR_gP_{p2}, {ns}::depQK_g1_{p1}>",
            "softmax": f"cusync::CuStage<{ns}::gR_order, {ns}::depTR1_gR_{p3}, {ns}::depPR_gP_{p2}>",
            "rv": f"cusync::CuStage<{ns}::gT_order, {ns}::depT2_gT_{p4}, {ns}::depTR1_gR_{p3}, {g1v}>",
            "out": f"cusync::CuStage<{ns}::g2_order, cusync::NoSync, {ns}::depT2_gT_{p4}>",
        }
        out[name] = {r: types[r].index(t) for r, t in cand.items()}
    return out


def num_sems(compiled, config: str | None) -> dict[str, int]:
    """Semaphores each kernel posts under a policy combination."""
    if config is None:
        return {g: 0 for g in ("g1", "gP", "gR", "gT", "g2")}
    p1, p2, p3, p4 = POLICY_CONFIGS[config]
    by = {(p.dep, p.producer, p.name): p.num_sems for p in compiled.policies}
    return {"g1": by[("depQK", "g1", p1)], "gP": by[("depPR", "gP", p2)], "gR": by[("depTR1", "gR", p3)],
            "gT": by[("depT2", "gT", p4)], "g2": 0}


def module_source(shape: Shape, debug: bool = False, timeline: bool = False) -> build.Source:
    compiled, ns = compile_dep(shape)
    types = role_types(shape, compiled, ns)
    lines = [f'#include "{ns}.h"', "#include <kernels/attention.cuh>", "CUSYNC_DEFINE_WAIT_KERNEL(cusync_wait_kernel)"]
    for r, ts in types.items():
        lines.append(f"using Sw_{r} = cusync_kernels::StageSwitch<{', '.join(ts)}>;")
    lines.append(f"using CfgG = {shape.gemm_cfg(False)};")
    # the QKV and output GeMMs split over K in token generation (Shape.splits; the P GeMM never)
    lines.append(f"using CfgGK = {shape.gemm_cfg(False, split=True)};")
    lines.append(f"using CfgGRK = {shape.gemm_cfg(True, split=True)};")
    lines.append("using QkvAd = cusync_kernels::QkvStage<Sw_qkv>;")
    lines.append(f"using PAd = cusync_kernels::PStage<Sw_pgemm, {ns}::depQK_g1_waits>;")
    lines.append(f"using OutAd = cusync_kernels::OutStage<Sw_out, {ns}::depT2_gT_waits>;")
    lines.append("CUSYNC_ATTN_GEMM(attn_qkv, CfgGK, Sw_qkv, QkvAd)")
    lines.append("CUSYNC_ATTN_GEMM(attn_pgemm, CfgG, Sw_pgemm, PAd)")
    lines.append("CUSYNC_ATTN_GEMM(attn_out, CfgGK, Sw_out, OutAd)")
    lines.append("CUSYNC_ATTN_GEMM(attn_out_R, CfgGRK, Sw_out, OutAd)")
    # the waiting GeMMs again with a sync warp (gemm.cuh SyncWarp; the adapters' serve_k)
    lines.append(f"using CfgGS = {shape.gemm_cfg(False, True)};")
    lines.append(f"using CfgGRS = {shape.gemm_cfg(True, True)};")
    lines.append("CUSYNC_ATTN_GEMM(attn_pgemm_S, CfgGS, Sw_pgemm, PAd)")
    lines.append("CUSYNC_ATTN_GEMM(attn_out_S, CfgGS, Sw_out, OutAd)")
    lines.append("CUSYNC_ATTN_GEMM(attn_out_RS, CfgGRS, Sw_out, OutAd)")
    lines.append(f"CUSYNC_ATTN_SOFTMAX(attn_softmax, {shape.tile_m}, {SOFTMAX_THREADS}, Sw_softmax, {ns}::depPR_gP_waits)")
    lines.append(f"CUSYNC_ATTN_RV(attn_rv, {shape.tile_m}, Sw_rv, {ns}::depTR1_gR_waits, {ns}::depTR1_g1_waits)")
    return build.Source(shape.name + ("_debug" if debug else "") + ("_timeline" if timeline else ""),
                        "\n".join(lines) + "\n", headers=((f"{ns}.h", compiled.header),),
                        defines=(("CUSYNC_DEBUG",) if debug else ()) + (("CUSYNC_TIMELINE",) if timeline else ()))


def test_shapes() -> list[Shape]:
    return [Shape(*s) for s in TEST_SHAPES]


def prebuild_sources(tune: bool = False) -> list[build.Source]:
    shapes = bench_shapes() + (bench_shapes(wide=True) if tune else [])
    return [module_source(s) for s in shapes] + [module_source(s, debug=True) for s in test_shapes()]
