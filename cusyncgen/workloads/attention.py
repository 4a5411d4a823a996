"""The paper's Attention (Figure 2b): five dependent kernels synchronized by the policies
cusyncgen generates from examples/attention_gpt3.dep and attention_llama.dep.

    g1  XQKV = X Wqkv^T                 QKV GeMM (gemm.cuh), written into the KV cache rows
    gP  P = Q_h [CachedK, XK]_h^T        per head and request (gemm.cuh through PStage)
    gR  R = dropout(softmax(P/sqrt(Dh)))  softmax.cuh; counter-based dropout mask
    gT  T = R [CachedV, XV]_h            attention.cuh (WMMA), two producers: gR and g1
    g2  XW12 = T Wo^T                    output GeMM (gemm.cuh through OutStage)

    att = Attention(Shape("gpt3", B=1, S=512))         # prompt processing
    att = Attention(Shape("llama", B=4, S=1, Sp=1024)) # token generation with 1024 cached tokens
    bufs = att.buffers(seed=0); att.poison(bufs); att.run(stream, Config("TileSync", "pdl"), bufs)
    errs = att.check(bufs)                              # every kernel against float32 math

One module per shape (templates/modules/attention.cu.j2; pure text, prebuilt without a GPU); each
kernel is compiled once, with a stage that selects one of the generated CuStage types at launch
(`which`), so adding a policy combination adds no GeMM.
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import cusyncgen
from cusyncgen.cuda import build, timing
from cusyncgen.cuda.abi import AttnGeo, GemmArgs, SoftmaxArgs, StageArgs, TimelineStageArgs
from cusyncgen.cuda.chain import Chain, Link
from cusyncgen.cuda.configs import SM80_ORDERINGS, Config, Ordering, policy_configs
from cusyncgen.cuda.lazy import cupy, driver, torch
from cusyncgen.workloads.kernels import (KERNEL_FAMILY, WAIT_KERNEL, GemmConfig, KernelVariant, StageType, examples_dir,
                                         source)

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

    def gemm_cfg(self, reorder: bool = False, sync_warp: bool = False, split: bool = False) -> GemmConfig:
        """split: the GeMM honours its stage's splits() (gemm.cuh SplitK; token generation only)."""
        return GemmConfig(self.gemm_tile, "cusync_kernels::EpiIdentity", 0, reorder, DH, sync_warp,
                          split and not self.prompt)

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
    return cusyncgen.compile(examples_dir() / f"attention_{shape.model}.dep", params=shape.dep_params(), name=ns), ns


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


def _config_stages(compiled, pols: tuple[str, str, str, str]) -> dict[str, StageType]:
    """Per kernel role, the stage type of one policy combination, every policy's C++ struct as the
    IR names it. gT's second input (the V tiles of the QKV GeMM) waits through depTR1's g1 policy
    where the compiler generated one of that name, else through depQK's (the same map)."""
    struct = {(p.dep, p.producer, p.name): p.struct_name for p in compiled.policies}
    p1, p2, p3, p4 = pols
    qk, pr, tr, t2 = (struct[("depQK", "g1", p1)], struct[("depPR", "gP", p2)], struct[("depTR1", "gR", p3)],
                      struct[("depT2", "gT", p4)])
    g1v = struct.get(("depTR1", "g1", p1), qk)
    return {"qkv": StageType("g1", (qk,)), "pgemm": StageType("gP", (pr, qk)), "softmax": StageType("gR", (tr, pr)),
            "rv": StageType("gT", (t2, tr, g1v)), "out": StageType("g2", (None, t2))}


def role_types(shape: Shape, compiled) -> dict[str, list[StageType]]:
    """Per kernel, the stage types its StageSwitch holds: index 0 the plain stage, then one per
    distinct policy tuple the kernel needs (the order of role_index)."""
    types = {r: [StageType(g)] for r, g in zip(ROLES, ORDER)}
    for pols in configs(compiled).values():
        for r, t in _config_stages(compiled, pols).items():
            if t not in types[r]:
                types[r].append(t)
    return types


def role_index(shape: Shape, compiled) -> dict[str | None, dict[str, int]]:
    """config name (None: plain) -> kernel role -> `which`."""
    types = role_types(shape, compiled)
    out: dict = {None: {r: 0 for r in types}}
    for name, pols in configs(compiled).items():
        out[name] = {r: types[r].index(t) for r, t in _config_stages(compiled, pols).items()}
    return out


def num_sems(compiled, config: str | None) -> dict[str, int]:
    """Semaphores each kernel posts under a policy combination."""
    if config is None:
        return {g: 0 for g in ("g1", "gP", "gR", "gT", "g2")}
    p1, p2, p3, p4 = POLICY_CONFIGS[config]
    by = {(p.dep, p.producer, p.name): p.num_sems for p in compiled.policies}
    return {"g1": by[("depQK", "g1", p1)], "gP": by[("depPR", "gP", p2)], "gR": by[("depTR1", "gR", p3)],
            "gT": by[("depT2", "gT", p4)], "g2": 0}


# ---- kernel names: the module's writer and Attention's loader both ask these ----

GEMM, SOFTMAX, RV = "CUSYNC_ATTN_GEMM", "CUSYNC_ATTN_SOFTMAX", "CUSYNC_ATTN_RV"  # kernels/attention.cuh
ORDER = ("g1", "gP", "gR", "gT", "g2")            # the chain's grids
ROLES = ("qkv", "pgemm", "softmax", "rv", "out")   # their kernels


def kernel_symbol(role: str, reorder: bool = False, sync_warp: bool = False) -> str:
    """The entry of a role's kernel; the output GeMM also with reordered loads, the waiting GeMMs
    (pgemm, out) also with a sync warp."""
    opts = ("R" if reorder else "") + ("S" if sync_warp else "")
    return f"attn_{role}" + (f"_{opts}" if opts else "")


def module_source(shape: Shape, debug: bool = False, timeline: bool = False) -> build.Source:
    compiled, ns = compile_dep(shape)
    types = role_types(shape, compiled)
    sw = {r: f"Sw_{r}" for r in types}
    gemm = lambda role, cfg, adapter, r=False, s=False: KernelVariant(kernel_symbol(role, r, s), GEMM, (cfg, sw[role], adapter))
    # the QKV and output GeMMs split over K in token generation (Shape.splits; the P GeMM never)
    configs = {"CfgG": shape.gemm_cfg(False), "CfgGK": shape.gemm_cfg(False, split=True),
               "CfgGRK": shape.gemm_cfg(True, split=True), "CfgGS": shape.gemm_cfg(False, True),
               "CfgGRS": shape.gemm_cfg(True, True)}
    gemms = [gemm("qkv", "CfgGK", "QkvAd"), gemm("pgemm", "CfgG", "PAd"), gemm("out", "CfgGK", "OutAd"),
             gemm("out", "CfgGRK", "OutAd", True)]
    sync_warp_gemms = [gemm("pgemm", "CfgGS", "PAd", False, True), gemm("out", "CfgGS", "OutAd", False, True),
                       gemm("out", "CfgGRS", "OutAd", True, True)]
    others = [KernelVariant(kernel_symbol("softmax"), SOFTMAX,
                            (str(shape.tile_m), str(SOFTMAX_THREADS), sw["softmax"], f"{ns}::depPR_gP_waits")),
              KernelVariant(kernel_symbol("rv"), RV,
                            (str(shape.tile_m), sw["rv"], f"{ns}::depTR1_gR_waits", f"{ns}::depTR1_g1_waits"))]
    return source("attention.cu.j2", shape.name + ("_debug" if debug else "") + ("_timeline" if timeline else ""),
                  ns, compiled.header, debug, timeline, switches=[(sw[r], ts) for r, ts in types.items()], sw=sw,
                  configs=configs, gemms=gemms, sync_warp_gemms=sync_warp_gemms, others=others)


def test_shapes() -> list[Shape]:
    return [Shape(*s) for s in TEST_SHAPES]



# ---- on the GPU ----

DROPOUT = 0.1
TOL_STAGE = 1e-2   # one kernel against float32 math on its own (fp16) inputs
TOL_E2E = 2e-2     # the chain against float32 math from X
DEVICE = "cuda"    # where the buffers and the references live


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _synced(name, launch):
    def run(s, sa, step):
        launch(s, sa, step)
        try:
            s.synchronize()
        except Exception as exc:
            raise RuntimeError(f"kernel attn_{name} failed: {exc}") from exc
    return run


def _ptr(t: torch.Tensor, offset_elems: int = 0) -> int:
    return t.data_ptr() + offset_elems * t.element_size()


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    m = 0xFFFFFFFF
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & m


def keep_mask(Z: int, S: int, Npad: int, seed: int, p: float, device=None) -> torch.Tensor:
    """The kernel's dropout mask (softmax.cuh), bit for bit: [Z, S, Npad] bool."""
    idx = torch.arange(Z * S * Npad, device=device or DEVICE, dtype=torch.int64) & 0xFFFFFFFF
    x = (_mul32(idx, 0x9E3779B9) + seed) & 0xFFFFFFFF
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7feb352d)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846ca68b)
    x = x ^ (x >> 16)
    return (x >= int(p * 2 ** 32)).view(Z, S, Npad)


def rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    a = a.float()
    if not bool(torch.isfinite(a).all()):
        return math.inf
    n = float(torch.linalg.vector_norm(ref))
    return float(torch.linalg.vector_norm(a - ref)) / (n if n > 0 else 1.0)


class Attention:
    """All five kernels of one shape, every generated policy combination in one module."""

    # the registry entry (cusyncgen.workloads.base.Workload)
    name = "attention"
    vendor = "cuBLAS"
    kernel = KERNEL_FAMILY
    orderings = SM80_ORDERINGS - {Ordering.NONE}   # W is not offered: five grids rarely fit at once
    models = tuple(MODELS)
    sizes = None   # per shape: B*S of the prompts, B in token generation (bench_shapes)
    bench_options = ("sync_warp", "spread", "tiles")
    tune_mode = "bench"

    @classmethod
    def sources(cls, sizes=None, tune: bool = False) -> list[build.Source]:
        """Every module the benchmark (with tune also the prompts on wide tiles) and the GPU tests
        (CUSYNC_DEBUG builds of TEST_SHAPES) load."""
        shapes = bench_shapes() + (bench_shapes(wide=True) if tune else [])
        shapes = [s for s in shapes if sizes is None or s.size in sizes]
        return [module_source(s) for s in shapes] + [module_source(s, debug=True) for s in test_shapes()]

    @classmethod
    def bench(cls, models=None, sizes=None, iters: int = 30, **options) -> dict:
        return bench(models, sizes, iters, **options)

    @classmethod
    def timelines(cls, model: str, sizes: str | None, configs: list[str], sync_warp: bool = True,
                  spread: bool = False, no_spread: bool = False):
        """(file stem, per-block timeline) of each B,S,Sp shape of `sizes` ("1,1024,0;4,1,512")."""
        for spec in (sizes or "1,1024,0").split(";"):
            B, S, Sp = (int(v) for v in spec.split(","))
            yield (f"timeline-attn-{model}-B{B}-S{S}-Sp{Sp}" + ("" if sync_warp else "-nosyncwarp")
                   + ("-nospread" if no_spread else ""),
                   trace(model, B, S, Sp, configs, sync_warp=None if sync_warp else False, spread=not no_spread))

    sync_each = False  # diagnosis: StreamSync synchronizes after every kernel and names the one that faults

    def __init__(self, shape: Shape, debug: bool = False, arch: str | None = None, dropout: float = DROPOUT,
                 sync_warp: bool | None = None, timeline: bool = False, spread: bool = True,
                 splits: dict[str, int] | None = None):
        """sync_warp: the waiting GeMMs (P and output) wait in a sync warp of their own (gemm.cuh)
        -- None: each where it costs no occupancy or its grid still fits one wave with it
        (driver.sync_warp_pays); True: both; False: neither (thread 0 waits).
        spread: a kernel of at most two waves' blocks that is launched before its producer ends
        (every ordering but StreamSync) is launched with its shared memory padded to at most
        ceil(blocks / SMs) blocks per SM (driver.spread_smem), as stream order would place it.
        splits: blocks per tile of the QKV GeMM, R V and the output GeMM ({"g1": n, "gT": n,
        "g2": n}; default Shape.splits for this GPU's SM count: split-K in token generation; a
        split output GeMM waits in thread 0, without a sync warp)."""
        self.shape = sh = shape
        self.dropout = dropout
        self.compiled, self.ns = compile_dep(sh)
        self.timeline = timeline  # CUSYNC_TIMELINE build: every block's SM and times (cusyncgen.cuda.timeline)
        self.module = driver.Module(build.build(module_source(sh, debug, timeline), arch or driver.arch()))
        self.module.check_abi(GemmArgs, AttnGeo, SoftmaxArgs, TimelineStageArgs if timeline else StageArgs)
        k = self.module.kernel
        gemm = lambda role, r=False: k(kernel_symbol(role, r), sh.gemm_threads, sh.gemm_smem)
        softmax = kernel_symbol("softmax")
        self.k = {"qkv": gemm("qkv"), "pgemm": gemm("pgemm"),
                  "softmax": k(softmax, self.module.constant_int(f"{softmax}_threads")), "rv": k(kernel_symbol("rv"), 256),
                  "out": gemm("out"), "out_R": gemm("out", True)}
        self.chain = Chain(len(ORDER), k(WAIT_KERNEL, 1))
        self.index = role_index(sh, self.compiled)
        self.policy_names = list(configs(self.compiled))
        # token generation: the QKV GeMM, R V and the output GeMM split over K (kernels/splitk.cuh);
        # their fp32 partials (tile_m x 128 per tile and split) and arrival counters (zeroed once:
        # the last block of a tile resets its counter)
        self.splits = {**sh.splits(driver.sm_count()), **(splits or {})}
        self.grids = sh.grids(self.splits)
        self.tiles = [math.prod(self.grids[g]) for g in ORDER]  # blocks per launch (the tickets)
        self.workspace = {}
        for g, rows, cols in (("g1", sh.tile_m, 128), ("gT", sh.tile_m, DH), ("g2", sh.tile_m, 128)):
            tiles = math.prod(sh.grids()[g])
            n = tiles * self.splits[g] * rows * cols if self.splits[g] > 1 else 1
            self.workspace[g] = (torch.empty(n, device=DEVICE, dtype=torch.float32),
                                 torch.zeros(tiles, device=DEVICE, dtype=torch.int32))
        _sync()  # made on torch's stream; the chain runs on others
        # The synchronized P and output GeMMs: with or without a sync warp (StreamSync and PDL
        # alone always run the plain kernels).
        self.sync_warp_used = {}
        self.k_sync = {}
        for role, grid in (("pgemm", "gP"), ("out", "g2")):
            ks = k(kernel_symbol(role, False, True), sh.gemm_threads + 32, sh.gemm_smem)
            use = sync_warp if sync_warp is not None else driver.sync_warp_pays(
                math.prod(self.grids[grid]), ks, self.k[role])
            use = use and self.splits.get(grid, 1) == 1  # gemm.cuh's split-K has no sync warp
            self.sync_warp_used[role] = bool(use)
            self.k_sync[role] = ks if use else self.k[role]
            if role == "out":
                self.k_sync["out_R"] = k(kernel_symbol("out", True, True), sh.gemm_threads + 32, sh.gemm_smem) if use else self.k["out_R"]
        # Early-launched kernels of at most two waves' blocks: padded to as many blocks per SM as
        # stream order would give each SM (1 or 2; kernel name -> bytes).
        self.spread_smem: dict[str, int] = {}
        if spread:
            producer = {"pgemm": "qkv", "softmax": "pgemm", "rv": "pgemm", "out": "rv", "out_R": "rv"}
            grid_of = {"pgemm": "gP", "softmax": "gR", "rv": "gT", "out": "g2", "out_R": "g2"}
            for role, prod in producer.items():
                per_sm = -(-math.prod(self.grids[grid_of[role]]) // driver.sm_count())
                if per_sm > 2:
                    continue
                self.spread_smem.update(driver.apply_spread((self.k[role], self.k_sync.get(role, self.k[role])),
                                                            driver.block_smem(self.k[prod]), per_sm))
            # Only the padded launches ask for the largest shared-memory carveout (Kernel.launch):
            # setting it on the GeMM functions too slowed StreamSync down (H200: LLaMA prompt
            # S=1024 370 -> 395-413 us).
        self._stages = {None: self._make_stages(None)}
        for name in self.policy_names:
            self._stages[name] = self._make_stages(name)

    def _make_stages(self, config):
        from cusyncgen.cuda.stages import Stage
        sems = num_sems(self.compiled, config)
        st = [Stage(g, i, sems[g], timeline_blocks=self.tiles[i] if self.timeline else 0, splits=self.splits.get(g, 1))
              for i, g in enumerate(ORDER)]
        st[1].depends_on(st[0], 0, "g1 (QKV GeMM)")
        st[2].depends_on(st[1], 0, "gP (P GeMM)")
        st[3].depends_on(st[2], 0, "gR (softmax)")
        st[3].depends_on(st[0], 1, "g1 (QKV GeMM)")
        st[4].depends_on(st[3], 0, "gT (R V)")
        return st

    def policies_of(self, config: str) -> dict:
        return dict(zip(DEPS, POLICY_CONFIGS[config]))

    # ---- buffers
    def buffers(self, seed: int = 0, weights=None) -> dict:
        sh = self.shape
        g = torch.Generator(device=DEVICE).manual_seed(seed)
        dev, f16 = DEVICE, torch.float16
        rnd = lambda *s: torch.randn(*s, generator=g, device=dev, dtype=torch.float32)
        if weights is None:
            wqkv = (rnd(3 * sh.D, sh.H) / sh.H ** 0.5).to(f16)
            wo = (rnd(sh.H, sh.D) / sh.D ** 0.5).to(f16)
        else:
            wqkv, wo = weights
        x = rnd(sh.M, sh.H).to(f16)
        cache = torch.zeros(sh.Npad * sh.B, 3 * sh.D, device=dev, dtype=f16)
        if sh.Sp:
            cache[: sh.Sp * sh.B] = rnd(sh.Sp * sh.B, 3 * sh.D).to(f16)
        Z = sh.B * sh.NH
        b = {"x": x, "wqkv": wqkv, "wo": wo, "cache": cache, "cached": cache[: sh.Sp * sh.B].clone(),
             "P": torch.empty(Z, sh.S, sh.Npad, device=dev, dtype=f16),
             "R": torch.empty(Z, sh.S, sh.Npad, device=dev, dtype=f16),
             "T": torch.empty(sh.M, sh.D, device=dev, dtype=f16),
             "out": torch.empty(sh.M, sh.H, device=dev, dtype=f16),
             "seed": 12345 + seed}
        _sync()  # made on torch's stream; the chain runs on others, which must not race the init
        return b

    def poison(self, b: dict) -> None:
        sh = self.shape
        b["cache"][sh.Sp * sh.B: sh.L * sh.B].fill_(float("nan"))
        for n in ("P", "R", "T", "out"):
            b[n].fill_(float("nan"))
        _sync()

    # ---- launch
    def geometry(self, b: dict) -> AttnGeo:
        """The kernels' view of the buffers (attention.cuh's AttnGeo)."""
        sh = self.shape
        ws, cnt = self.workspace["gT"]
        return AttnGeo(_ptr(b["cache"]), _ptr(b["P"]), _ptr(b["R"]), _ptr(b["T"]),
                       sh.B, sh.S, sh.Sp, sh.NH, DH, 3 * sh.D, sh.Npad, sh.D, int(sh.causal), _ptr(ws), _ptr(cnt))

    def run(self, stream, cfg: Config, b: dict) -> None:
        sh = self.shape
        which = self.index[cfg.policy]
        stages = self._stages[cfg.policy]
        ld3 = 3 * sh.D
        geo = self.geometry(b)
        ws, cnt = self.workspace["g1"]
        a_qkv = GemmArgs(A=_ptr(b["x"]), B=_ptr(b["wqkv"]), C=_ptr(b["cache"], sh.Sp * sh.B * ld3),
                                M=sh.M, N=ld3, K=sh.H, lda=sh.H, ldb=sh.H, ldc=ld3, swiglu_offset=0,
                                ws=_ptr(ws), counters=_ptr(cnt))
        a_p = GemmArgs(A=0, B=0, C=0, M=sh.S, N=sh.Npad, K=DH, lda=sh.B * ld3, ldb=sh.B * ld3,
                              ldc=sh.Npad, swiglu_offset=0)
        ws2, cnt2 = self.workspace["g2"]
        a_out = GemmArgs(A=_ptr(b["T"]), B=_ptr(b["wo"]), C=_ptr(b["out"]), M=sh.M, N=sh.H, K=sh.D,
                                lda=sh.D, ldb=sh.D, ldc=sh.H, swiglu_offset=0, ws=_ptr(ws2), counters=_ptr(cnt2))
        sm = SoftmaxArgs(_ptr(b["P"]), _ptr(b["R"]), sh.S, sh.Npad, sh.L, 1.0 / math.sqrt(DH),
                         int(self.dropout * 2 ** 32), 1.0 / (1.0 - self.dropout), b["seed"], int(sh.causal))
        G = self.grids
        ks = self.k if cfg.policy is None else {**self.k, **self.k_sync}
        kout = ks["out_R" if cfg.reorder else "out"]
        kp = ks["pgemm"]
        pad = lambda kern, step: self.spread_smem.get(kern.name) if step.early else None
        ksm, krv, kq = self.k["softmax"], self.k["rv"], self.k["qkv"]
        launches = [
            lambda s, sa, step: kq.launch(G["g1"], [a_qkv, sa, which["qkv"], geo], s, step.pdl),
            lambda s, sa, step: kp.launch(G["gP"], [a_p, sa, which["pgemm"], geo], s, step.pdl, pad(kp, step)),
            lambda s, sa, step: ksm.launch(G["gR"], [sm, sa, which["softmax"]], s, step.pdl, pad(ksm, step)),
            lambda s, sa, step: krv.launch(G["gT"], [geo, sa, which["rv"]], s, step.pdl, pad(krv, step)),
            lambda s, sa, step: kout.launch(G["g2"], [a_out, sa, which["out"], geo], s, step.pdl, pad(kout, step)),
        ]
        if self.sync_each and cfg.ordering == Ordering.STREAM:
            launches = [_synced(n, ln) for n, ln in zip(ROLES, launches)]
        self.chain.run(stream, cfg, [Link(st, ln, t) for st, ln, t in zip(stages, launches, self.tiles)])

    def check_stages(self) -> None:
        for sts in self._stages.values():
            for st in sts:
                st.raise_if_timed_out()

    def configs(self, reorder: bool = True) -> list[Config]:
        """StreamSync, PDL alone, every policy combination x {wait-kernel, PDL} x {R} x {T}."""
        return policy_configs(self.policy_names, self.orderings, reorder=(False, True) if reorder else (False,))

    # ---- float32 references
    def _qkv_views(self, cache: torch.Tensor):
        sh = self.shape
        c = cache.float().view(sh.Npad, sh.B, 3, sh.NH, DH)
        q = c[sh.Sp: sh.L, :, 0].permute(1, 2, 0, 3)   # [B, NH, S, Dh]
        k = c[:, :, 1].permute(1, 2, 0, 3)             # [B, NH, Npad, Dh]
        v = c[:, :, 2].permute(1, 2, 0, 3)
        return q, k, v

    def causal_mask(self) -> torch.Tensor:
        """[S, Npad] bool: the keys a query row may not read (True), for a causal prompt."""
        sh = self.shape
        r = torch.arange(sh.S, device=DEVICE).view(-1, 1)
        c = torch.arange(sh.Npad, device=DEVICE).view(1, -1)
        return c > sh.Sp + r

    def _softmax_ref(self, P: torch.Tensor, seed: int) -> torch.Tensor:
        sh = self.shape
        s = P.float() / math.sqrt(DH)
        s[..., sh.L:] = -math.inf
        if sh.causal:
            s = s.masked_fill(self.causal_mask(), -math.inf)
        r = torch.softmax(s, dim=-1)
        if self.dropout:
            r = r * keep_mask(sh.B * sh.NH, sh.S, sh.Npad, seed, self.dropout) / (1.0 - self.dropout)
        return r

    def check(self, b: dict) -> dict[str, float]:
        """Relative errors: each kernel against float32 math on the fp16 inputs it read, and the
        whole chain against float32 math from X (the kernels' fp16 intermediates excepted)."""
        _sync()
        sh = self.shape
        Z = sh.B * sh.NH
        errs = {}
        new = b["cache"][sh.Sp * sh.B: sh.L * sh.B]
        qkv_ref = b["x"].float() @ b["wqkv"].float().T
        errs["g1"] = rel(new, qkv_ref)
        q, k, v = self._qkv_views(b["cache"])
        p_ref = (q @ k.transpose(-1, -2)).reshape(Z, sh.S, sh.Npad)
        if sh.causal:  # the P tiles past the diagonal are not computed (never read)
            r = torch.arange(sh.S, device=DEVICE).view(-1, 1) // sh.tile_m
            c = torch.arange(sh.Npad, device=DEVICE).view(1, -1) // TILE_K
            keep = c <= r
            errs["gP"] = rel(torch.where(keep, b["P"].float(), 0.0), torch.where(keep, p_ref, 0.0))
        else:
            errs["gP"] = rel(b["P"], p_ref)
        errs["gR"] = rel(b["R"], self._softmax_ref(b["P"], b["seed"]))
        t_ref = (b["R"].float().view(sh.B, sh.NH, sh.S, sh.Npad) @ v).permute(0, 2, 1, 3).reshape(sh.M, sh.D)
        errs["gT"] = rel(b["T"], t_ref)
        errs["g2"] = rel(b["out"], b["T"].float() @ b["wo"].float().T)
        errs["chain"] = rel(b["out"], self.reference(b))
        return errs

    def reference(self, b: dict) -> torch.Tensor:
        sh = self.shape
        qkv = b["x"].float() @ b["wqkv"].float().T                      # [B*S, 3D] in (b, s) order
        full = torch.zeros(sh.Npad * sh.B, 3 * sh.D, device=DEVICE)
        full[: sh.Sp * sh.B] = b["cached"].float()
        full[sh.Sp * sh.B: sh.L * sh.B] = qkv
        q, k, v = self._qkv_views(full)
        P = (q @ k.transpose(-1, -2)).reshape(sh.B * sh.NH, sh.S, sh.Npad)
        R = self._softmax_ref(P, b["seed"]).view(sh.B, sh.NH, sh.S, sh.Npad)
        T = (R @ v).permute(0, 2, 1, 3).reshape(sh.M, sh.D)
        return T @ b["wo"].float().T

    @staticmethod
    def ok(errs: dict) -> bool:
        return all(e < TOL_STAGE for n, e in errs.items() if n != "chain") and errs["chain"] < TOL_E2E

    # ---- the same math in PyTorch (cuBLAS, SDPA)
    def torch_fn(self, b: dict, mask=None, sdpa: bool = False, dropout: float | None = None,
                 backend: str | None = None, contiguous: bool = False):
        """The same math in PyTorch: dropout with torch's RNG (timing), with `mask` (the kernel's,
        for checking), or none (dropout=0). sdpa: attention by scaled_dot_product_attention, on
        [B, NH, S, Dh] views of the QKV GeMM's output (4-D: the fused backends take no other),
        under sdpa_kernel(SDPBackend.<backend>) where `backend` is named (an AttributeError where
        this PyTorch lacks it), and with q, k and v copied contiguous first where `contiguous`."""
        sh = self.shape
        x, wqkv, wo = b["x"], b["wqkv"], b["wo"]
        cache = b["cache"].clone()
        c3 = cache.view(sh.Npad, sh.B, 3 * sh.D)
        p_drop = self.dropout if dropout is None else dropout
        causal = self.causal_mask()[:, : sh.L] if sh.causal else None
        only = sdpa_backend(backend) if backend else None

        def attend(q, k, v):
            if contiguous:
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=p_drop, is_causal=sh.causal)

        def fn():
            qkv = x @ wqkv.T                                              # [B*S, 3D] in (b, s) order
            if sh.prompt:
                kv = qkv.view(sh.B, sh.S, 3, sh.NH, DH).permute(2, 0, 3, 1, 4)   # [3, B, NH, S, Dh]
                q, k, v = kv[0], kv[1], kv[2]
            else:
                c3[sh.Sp] = qkv
                kv = c3[: sh.L].view(sh.L, sh.B, 3, sh.NH, DH)
                k = kv[:, :, 1].permute(1, 2, 0, 3)
                v = kv[:, :, 2].permute(1, 2, 0, 3)
                q = qkv.view(sh.B, 3, sh.NH, DH)[:, 0].unsqueeze(2)
            if sdpa and only is not None:
                with only():
                    t = attend(q, k, v)
            elif sdpa:
                t = attend(q, k, v)
            else:
                s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(DH))
                if sh.causal:
                    s = s.masked_fill(causal, -math.inf)
                r = torch.softmax(s, dim=-1)
                if mask is not None:
                    r = r * mask / (1.0 - p_drop)
                elif p_drop:
                    r = torch.nn.functional.dropout(r, p_drop, training=True)
                t = r @ v
            t = t.transpose(-3, -2).reshape(sh.M, sh.D) if sh.prompt else t.reshape(sh.M, sh.D)
            return t @ wo.T
        return fn

    def flops_bytes(self) -> tuple[float, float]:
        sh = self.shape
        Z = sh.B * sh.NH
        pairs = sh.S * sh.Sp + sh.S * (sh.S + 1) // 2 if sh.causal else sh.S * sh.L  # (query, key) pairs
        flops = 2 * sh.M * sh.H * 3 * sh.D + 4 * Z * pairs * DH + 2 * sh.M * sh.D * sh.H
        byts = 2 * (4 * sh.D * sh.H + sh.M * sh.H * 2 + 2 * sh.B * sh.L * sh.D + 4 * Z * pairs + 2 * sh.M * sh.D)
        return flops, byts


# The SDPA backends a user can pick (torch.nn.attention.sdpa_kernel), by the form name its rows carry:
# each is timed, and the fastest correct one is the SDPA row. One that refuses the views of the QKV
# GeMM's output is timed again on contiguous copies of q, k and v ("<form>+contiguous": the copies a
# user would add).
SDPA_BACKENDS = {"sdpa-cudnn": "CUDNN_ATTENTION", "sdpa-flash": "FLASH_ATTENTION",
                 "sdpa-efficient": "EFFICIENT_ATTENTION", "sdpa-math": "MATH"}
CONTIGUOUS = "+contiguous"


def sdpa_backend(name: str):
    """A context manager factory running SDPA on backend `name` (an SDPBackend member) alone; an
    ImportError or AttributeError where this PyTorch has no torch.nn.attention or no such backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    member = getattr(SDPBackend, name)
    return lambda: sdpa_kernel(member)


def vendor_forms(att: "Attention", b: dict, mask, ref, ref_no_dropout):
    """The vendor's forms of one shape, checked (baselines.VendorForms): the cuBLAS forms (the same
    math in PyTorch: "torch-unfused", checked with the kernels' dropout mask) and the SDPA forms (each
    backend of SDPA_BACKENDS, timed with dropout, checked without: SDPA draws its own mask; on
    contiguous copies where the views are refused)."""
    from cusyncgen.cuda import baselines
    cublas = baselines.VendorForms.check({"torch-unfused": lambda: att.torch_fn(b)},
                                         lambda name, fn: rel(att.torch_fn(b, mask=mask)(), ref))

    def sdpa_makers(names, contiguous):
        return {n + (CONTIGUOUS if contiguous else ""):
                (lambda n=n: att.torch_fn(b, sdpa=True, backend=SDPA_BACKENDS[n], contiguous=contiguous))
                for n in names}

    def check(name, fn):
        n = name.removesuffix(CONTIGUOUS)
        return rel(att.torch_fn(b, sdpa=True, dropout=0.0, backend=SDPA_BACKENDS[n],
                                contiguous=name.endswith(CONTIGUOUS))(), ref_no_dropout)
    sdpa = baselines.VendorForms.check(sdpa_makers(SDPA_BACKENDS, False), check)
    refused = [n for n, why in sdpa.skipped.items() if not why.startswith(("ImportError", "AttributeError"))]
    if refused:
        again = baselines.VendorForms.check(sdpa_makers(refused, True), check)
        sdpa.fns.update(again.fns)
        sdpa.errors.update(again.errors)
        sdpa.skipped.update(again.skipped)
    return cublas, sdpa


def measure_point(shape: Shape, iters: int, stream, seed: int = 0, ceil=None, extra=None, sync_warp=None,
                  spread=None):
    """Rows of the result table for one shape; PyTorch SDPA rows go to `extra`."""
    from cusyncgen.cuda import baselines
    extra = [] if extra is None else extra
    att = Attention(shape, sync_warp=sync_warp, **({} if spread is None else {"spread": spread}))
    sets = [att.buffers(seed=seed + s) for s in range(3)]
    rows = []
    cfgs = att.configs()
    # StreamSync timed first and again last: the faster is the baseline, the difference recorded.
    for i, cfg in enumerate(cfgs + cfgs[:1]):
        b = sets[0]
        att.poison(b)
        att.run(stream, cfg, b)
        stream.synchronize()
        errs = att.check(b)
        graphs = [timing.capture(lambda s, bb=bb: att.run(s, cfg, bb), stream) for bb in sets]
        t = timing.median(timing.time_graphs(graphs, stream, iters=iters))
        del graphs
        if i == len(cfgs):
            base = timing.settle_baseline(rows, t, att.ok(errs))
            break
        row = {"model": shape.label, "M": shape.size, "config": cfg.name, "kernel": att.kernel, "time_us": round(t, 2),
               "correct": att.ok(errs), "rel_err": errs["chain"],
               "kernel_errs": {k: float(f"{v:.3g}") for k, v in errs.items()}, "B": shape.B, "S": shape.S, "Sp": shape.Sp,
               "tiles": shape.tiles_label}
        if cfg.policy:
            row["policies"] = att.policies_of(cfg.policy)
            row["sync_warp"] = [r for r, used in att.sync_warp_used.items() if used]
            row["spread"] = sorted(att.spread_smem)
        rows.append(row)
    att.check_stages()
    b = sets[0]
    ref = att.reference(b)
    mask = keep_mask(shape.B * shape.NH, shape.S, shape.Npad, b["seed"], att.dropout)[..., : shape.L]
    mask = mask.reshape(shape.B, shape.NH, shape.S, shape.L).half()   # torch_fn's [B, NH, S, L] scores
    drop, att.dropout = att.dropout, 0.0          # SDPA has its own dropout RNG: checked without
    ref_no_dropout = att.reference(b)
    att.dropout = drop
    for name, forms in zip(("cuBLAS", "SDPA"), vendor_forms(att, b, mask, ref, ref_no_dropout)):
        baselines.time_forms(forms, iters)
        for suffix in ("", "+graph"):
            r = forms.row(suffix, TOL_E2E)
            if r is None:
                print(f"{name}{suffix}: no form ran ({forms.skipped})", file=sys.stderr)
                continue
            # SDPA (PyTorch's fused attention, not the same kernels' math) goes beside the table
            (rows if name == "cuBLAS" else extra).append(
                {"model": shape.label, "M": shape.size, "config": name + suffix, **r,
                 "speedup_vs_streamsync": round(base / r["time_us"], 4), "B": shape.B, "S": shape.S, "Sp": shape.Sp})
    if ceil:
        flops, byts = att.flops_bytes()
        floor = max(flops / ceil["peak_flops"], byts / ceil["bandwidth"]) * 1e6
        rows.append({"model": shape.label, "M": shape.size, "config": "floor", "time_us": round(floor, 2),
                     "speedup_vs_streamsync": round(base / floor, 4), "correct": True, "rel_err": 0.0})
    return rows


def bench(models=None, sizes=None, iters: int = 30, sync_warp: bool | None = None, spread: bool | None = None,
          tiles: str | None = None) -> dict:
    """Every shape of the sweep (B*S for prompt processing, B for generation), every configuration.
    tiles="wide": the prompts alone, their GeMMs on 8-warp 128x128x64 tiles (the tuner's other shape)."""
    from cusyncgen.cuda import baselines
    if tiles not in (None, "default", "wide"):
        raise ValueError(f"attention tiles are 'default' or 'wide', not {tiles!r}")
    models = models.split(",") if isinstance(models, str) else models
    shapes = [s for s in bench_shapes(models, wide=tiles == "wide") if sizes is None or s.size in sizes]
    ceil = baselines.ceilings()
    stream = cupy.cuda.Stream(non_blocking=True)
    rows, sdpa = [], []
    for i, sh in enumerate(shapes):
        t0 = time.time()
        try:
            point = measure_point(sh, iters, stream, seed=100 * i, ceil=ceil, extra=sdpa, sync_warp=sync_warp,
                                  spread=spread)
        except Exception as exc:
            print(f"[{i + 1}/{len(shapes)}] {sh.label} M={sh.size}: FAILED {exc.__class__.__name__}: {exc}",
                  file=sys.stderr, flush=True)
            raise
        rows += point
        cus = [r for r in point if "policies" in r and r["correct"]]
        best = max(cus, key=lambda r: r["speedup_vs_streamsync"]) if cus else None
        tb = {r["config"]: r["time_us"] for r in point + sdpa[-2:]}
        print(f"[{i + 1}/{len(shapes)}] {sh.label} M={sh.size}: StreamSync {point[0]['time_us']:.1f} us, "
              f"PDL {tb.get('PDL', 0):.1f}, best {best['config'] if best else None} "
              f"{best['time_us'] if best else 0:.1f} us ({best['speedup_vs_streamsync'] if best else 0:.3f}x), "
              f"cuBLAS+graph {tb.get('cuBLAS+graph', 0):.1f}, SDPA+graph {tb.get('SDPA+graph', 0):.1f} "
              f"({next((r['vendor_form'] for r in sdpa[-2:] if r['config'] == 'SDPA+graph'), '-')}), "
              f"all correct {all(r['correct'] for r in point)} [{time.time() - t0:.0f} s]", file=sys.stderr, flush=True)
        timing.save_partial("attention", rows, sdpa=sdpa)
        cupy.get_default_memory_pool().free_all_blocks()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return {"device": driver.device_name(), "workload": "attention", "ceilings": ceil, "rows": rows,
            "sdpa": sdpa, "dropout": DROPOUT,
            "notes": "config names: the policy of each dependency (depQK g1->gP and gT, depPR gP->gR, "
                     "depTR1 gR->gT, depT2 gT->g2) is in each row's 'policies'; +PDL: PDL ordering instead "
                     "of the wait-kernel; +R: the output GeMM loads Wo before waiting. Prompt rows: M = B*S "
                     "with B = 1; generation rows: M = B, S = 1, S' in the model name."}


def trace(model: str, B: int, S: int, Sp: int, configs: list[str], runs: int = 5,
          sync_warp: bool | None = None, spread: bool = True) -> dict:
    """Per-block timelines of the five kernels of one shape (a CUSYNC_TIMELINE build,
    cusyncgen.cuda.timeline), each configuration recorded from one CUDA-graph replay."""
    from cusyncgen.cuda.timeline import block_records, summarize

    att = Attention(Shape(model, B, S, Sp), timeline=True, sync_warp=sync_warp, spread=spread)
    stream = cupy.cuda.Stream(non_blocking=True)
    out = {"model": att.shape.label, "M": att.shape.size, "tiles": "default",
           "sync_warp": [r for r, used in att.sync_warp_used.items() if used], "configs": {}}
    bufs = att.buffers(seed=0)
    for name in configs:
        cfg = Config.parse(name)
        if cfg.policy not in (None, *att.policy_names):
            continue
        for _ in range(runs):
            att.run(stream, cfg, bufs)
        stream.synchronize()
        errs = att.check(bufs)
        # the recorded launch: one CUDA-graph replay (no host launch gaps between the kernels), the
        # records cleared first (a split-K block that does not post its tile writes none)
        graph = timing.capture(lambda s: att.run(s, cfg, bufs), stream)
        for _ in range(runs):
            graph.launch(stream)
        with stream:
            for st in att._stages[cfg.policy]:
                st.timeline.fill(0)
        stream.synchronize()
        graph.launch(stream)
        stream.synchronize()
        stages = {st.name: block_records(st) for st in att._stages[cfg.policy]}
        out["configs"][name] = {"summary": summarize(stages), "rel_err": errs["chain"], "blocks": stages}
    return out


def _diagnose_one(model: str, B: int, S: int, Sp: int, debug: bool) -> None:
    """One shape in this process: StreamSync kernel by kernel, then every configuration."""
    att = Attention(Shape(model, B, S, Sp), debug=debug)
    att.sync_each = True
    stream = cupy.cuda.Stream(non_blocking=True)
    for cfg in att.configs():
        b = att.buffers(seed=1)
        att.poison(b)
        att.run(stream, cfg, b)
        stream.synchronize()
        att.check_stages()
        errs = att.check(b)
        print(f"  {cfg.name:40s} {'ok ' if att.ok(errs) else 'BAD'} " +
              " ".join(f"{k}={v:.1e}" for k, v in errs.items()), flush=True)


def diagnose(shapes=None) -> int:
    """Each test shape, release and CUSYNC_DEBUG builds, in its own process (a fault that kills
    the CUDA context shows which shape, build, configuration and kernel it came from)."""
    import subprocess
    bad = 0
    for shape in shapes or TEST_SHAPES:
        for debug in (False, True):
            print(f"{shape} debug={debug}", flush=True)
            code = f"from cusyncgen.workloads.attention import _diagnose_one; _diagnose_one(*{tuple(shape)!r}, {debug})"
            rc = subprocess.run([sys.executable, "-c", code], timeout=120).returncode
            bad += rc != 0
            if rc:
                print(f"  -> exit status {rc}", flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(1 if diagnose() else 0)
