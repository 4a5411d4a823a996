"""The paper's MLP workloads: two dependent tensor-core GeMMs synchronized by the policies that
cusyncgen generates from examples/mlp_gpt3.dep, mlp_llama.dep and mlp_llama_ep.dep.

    mlp = MLP("gpt3", M=256)                     # builds (or loads from cache) one module per M
    y = mlp(x, Config("RowSync", "pdl"))          # x: [M, H] fp16 (CuPy array or DLPack tensor)

GPT-3 (H=12288, 8-way model parallel): Y = GeLU(X W1^T), W1 [H/2, H]; Z = Y W2^T, W2 [H, H/2].
LLaMA (H=8192, FFN 22016/8 = 2752): [W1|V] fused: Y = X [W1|V]^T, [2F, H]; Z = SwiGLU(Y) W2^T with
SwiGLU(Y)[:, k] = silu(Y[:, k]) * Y[:, k + F] computed inside the second GeMM's A load.
LLaMA-ep: the same MLP with SwiGLU in the first GeMM's epilogue: the rows of [W1|V] interleaved by
64 (LLAMA_EP_BLOCK), Y = silu(X W1^T) * X V^T [M, F] stored by the first GeMM, Z = Y W2^T.

The module sources are pure text (templates/modules/mlp.cu.j2, no CuPy): prebuilt without a GPU.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import cusyncgen
from cusyncgen.cuda import build
from cusyncgen.cuda.abi import GemmArgs, StageArgs, TimelineStageArgs
from cusyncgen.cuda.chain import Chain, Link
from cusyncgen.cuda.configs import SM80_ORDERINGS, Config, policy_configs
from cusyncgen.cuda.lazy import cupy, driver, torch
from cusyncgen.workloads.base import rel_err
from cusyncgen.workloads.kernels import (KERNEL_FAMILY, WAIT_KERNEL, GemmConfig, KernelVariant, StageType, examples_dir,
                                         source)

THREADS = 256  # copy kernels: 8 blocks per SM, one full wave at maximum occupancy
SIZES = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096)
TEST_SIZES = (1, 128, 300)  # tests/test_gpu_mlp.py (128: the spread consumer)
TOL = 2e-2


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

    def cfg(self, epilogue: str, swiglu: int, reorder: bool, prod_bn: int, sync_warp: bool = False) -> GemmConfig:
        return GemmConfig((self.BM, self.BN, self.BK, self.stages, self.warps_m, self.warps_n), epilogue, swiglu,
                          reorder, prod_bn, sync_warp)

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
        # of three tile pairs).
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


def tile_candidates(model: str, M: int) -> list[MlpTiles]:
    """The tile shapes `cusyncgen tune mlp` measures: the default tiles for M and alternatives
    whose waves differ: for GPT-3 past M = 64, 128x128 tiles with 2x4 warps in both GeMMs; for
    LLaMA-ep, 4- or 8-warp 128x128 tiles; for LLaMA (producer BN pinned to 64 by its .dep), a
    4-warp 64x128 or 128x128 consumer (which can have a sync warp: more, shorter consumer blocks
    that fill the producer's last wave) and, past M = 128, the other row-tile height."""
    base = default_tiles(model, M)
    out = [base]
    if model == "gpt3":
        wide = MlpTiles(Tiles(128, 128, 64, 3, 2, 4), Tiles(128, 128, 64, 3, 2, 4))
        if M > 64:
            out.append(wide)
    elif model == "llama-ep":
        # first GeMM 128 wide (its weight's interleaving): 8 or 4 warps (1 or 2 blocks per SM)
        if M > 64:
            wide, four = Tiles(128, 128, 64, 3, 2, 4), Tiles(128, 128, 32, 4, 2, 2)
            out += [MlpTiles(four, four), MlpTiles(wide, wide), MlpTiles(wide, four)]
    else:
        small_g1, tall_g1 = Tiles(64, 64, 64, 5, 2, 2), Tiles(128, 64, 64, 4, 2, 2)
        out.append(MlpTiles(base.g1, Tiles(base.BM, 128, 32, 4, 2, 2), 2))
        if M > 128:
            g1 = tall_g1 if base.BM == 64 else small_g1
            out.append(MlpTiles(g1, Tiles(g1.BM, 128, 32, 4, 2, 2), 2))
    return list(dict.fromkeys(out))


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
    return cusyncgen.compile(examples_dir() / model.dep, params=dep_params(model, M, tiles), name=ns), ns


# ---- kernel names: the module's writer and the MLP's loader both ask these ----

MACRO = "CUSYNC_MLP_GEMM"  # templates/modules/mlp.cu.j2


def kernel_symbol(gemm: int, policy: str | None, reorder: bool = False, sync_warp: bool = False) -> str:
    """The entry of GeMM 1 or 2: plain (policy None), or under a generated policy, the consumer
    also with reordered loads and/or a sync warp."""
    if policy is None:
        return f"gemm{gemm}_plain"
    opts = ("R" if reorder else "") + ("S" if sync_warp else "")
    return f"gemm{gemm}_{policy}" + (f"_{opts}" if opts else "")


def config_alias(gemm: int, reorder: bool = False, sync_warp: bool = False) -> str:
    return f"Cfg{gemm}" + ("R" if reorder else "") + ("S" if sync_warp else "")


# Consumers get a sync warp (gemm.cuh's GemmConfig::SyncWarp) only with at most 4 compute warps:
# a 9th warp caps an 8-warp block's registers at 168 (3 warps share a 16K-register SM quarter),
# which spilled the 8-warp LLaMA consumers (6 KB of spills at 255 registers). With 4 compute warps
# the sync warp may still cost occupancy; the host then uses the variant without it (MLP).
SYNC_WARP_MAX_THREADS = 128


def module_source(model: Model, M: int, tiles: MlpTiles, debug: bool = False, timeline: bool = False,
                  sync_warp: bool = True):
    """One module per (model, M, tiles): the plain kernels (StreamSync, PDL) and, for every policy
    the compiler generates for g2 <- g1, the posting producer and the waiting consumer (with and
    without reordered loads; with sync_warp and a consumer of <= 4 warps, also both with a sync
    warp that does the waits). Returns (build.Source, [(policy name, semaphores it posts)])."""
    compiled, ns = compile_dep(model, M, tiles)
    policies = [p for p in compiled.policies if p.producer == "g1" and p.consumer == "g2"]
    mode = tiles.swiglu_mode if model.swiglu else 0
    with_sw = sync_warp and tiles.g2.threads <= SYNC_WARP_MAX_THREADS
    epi2 = "cusync_kernels::EpiIdentity"
    prod_bn = tiles.g1.BN // 2 if model.swiglu_epilogue else tiles.g1.BN  # width of g1's output tiles
    cfg2 = lambda r, s: tiles.g2.cfg(epi2, mode, r, prod_bn, s)
    configs = [(config_alias(1), tiles.g1.cfg(model.epilogue1, 0, False, tiles.g1.BN)),
               (config_alias(2), cfg2(False, False)), (config_alias(2, True), cfg2(True, False))]
    sw_configs = [(config_alias(2, r, True), cfg2(r, True)) for r in (False, True)] if with_sw else []
    k = lambda gemm, policy, stage, r=False, s=False: KernelVariant(
        kernel_symbol(gemm, policy, r, s), MACRO, (config_alias(gemm, r, s), stage))
    plain = [k(1, None, StageType("g1")), k(2, None, StageType("g2"))]
    entries = []
    for p in policies:
        prod, cons = f"Prod_{p.name}", f"Cons_{p.name}"
        kernels = [k(1, p.name, prod), k(2, p.name, cons), k(2, p.name, cons, True)]
        if with_sw:
            kernels += [k(2, p.name, cons, False, True), k(2, p.name, cons, True, True)]
        entries.append({"stages": [(prod, StageType("g1", (p.struct_name,))),
                                   (cons, StageType("g2", (None, p.struct_name)))],
                        "kernels": kernels})
    suffix = ("_debug" if debug else "") + ("_timeline" if timeline else "") + ("" if sync_warp else "_nosyncwarp")
    src = source("mlp.cu.j2", f"mlp_{model.name.replace('-', '_')}_M{M}_{tiles.label.replace('+', '_')}{suffix}",
                 ns, compiled.header, debug, timeline, configs=configs, plain=plain, sync_warp_configs=sw_configs,
                 policies=entries, has_sync_warp=int(with_sw))
    return src, [(p.name, p.num_sems) for p in policies]


# ---- on the GPU ----

@dataclass
class MLP:
    """Both GeMMs of one model at one M, every generated policy compiled into one module."""

    # the registry entry (cusyncgen.workloads.base.Workload)
    name = "mlp"
    vendor = "cuBLAS"
    kernel = KERNEL_FAMILY
    orderings = SM80_ORDERINGS
    models = tuple(MODELS)
    sizes = SIZES
    bench_options = ()
    tune_mode = "measure"

    model_name: str
    M: int
    tiles: MlpTiles | None = None
    debug: bool = False
    timeline: bool = False   # CUSYNC_TIMELINE build: per-block times (cusyncgen.commands.timeline)
    # Consumers wait in a sync warp of their own (gemm.cuh) -- None: when the module has one (<= 4
    # compute warps) and it costs no occupancy; True: whenever the module has one; False: never.
    sync_warp: bool | None = None
    spread: bool = False  # early-launched consumer: at most one block per SM (see __post_init__)
    arch: str | None = None
    _stages: dict = field(default_factory=dict, repr=False)

    @classmethod
    def sources(cls, sizes=None, tune: bool = False) -> list[build.Source]:
        """Every module the benchmark (each size's default tiles; with tune, every candidate of
        `cusyncgen tune mlp`) and the GPU tests (CUSYNC_DEBUG builds) load."""
        out = []
        for model in MODELS:
            for M in sizes or SIZES:
                for tiles in tile_candidates(model, M) if tune else [default_tiles(model, M)]:
                    out.append(module_source(MODELS[model], M, tiles)[0])
            for M in TEST_SIZES:
                out.append(module_source(MODELS[model], M, default_tiles(model, M), debug=True)[0])
        return out

    @classmethod
    def bench(cls, models=None, sizes=None, iters: int = 30, progress: bool = True) -> dict:
        return bench(models, sizes, iters, progress)

    @classmethod
    def tune(cls, models, sizes, iters: int, cache_path, progress: bool = True, device: str | None = None) -> dict:
        """`cusyncgen tune mlp`: every tile candidate measured (or, with device, read from the cache)."""
        from cusyncgen.workloads.mlp_tune import tune_mlp
        return tune_mlp(list(models or MODELS), list(sizes or SIZES), iters, cache_path, progress, device)

    @classmethod
    def timelines(cls, model: str, sizes: str | None, configs: list[str], sync_warp: bool = True,
                  spread: bool = False, no_spread: bool = False):
        """(file stem, per-block timeline) of each M of `sizes` ("1,256"; cusyncgen.commands.timeline)."""
        for M in (int(m) for m in (sizes or "1").split(",")):
            yield (f"timeline-{model}-M{M}{'' if sync_warp else '-nosyncwarp'}",
                   trace(model, M, configs, spread=spread, sync_warp=sync_warp))

    def __post_init__(self):
        self.model = MODELS[self.model_name]
        self.tiles = self.tiles or default_tiles(self.model_name, self.M)
        src, self.policies = module_source(self.model, self.M, self.tiles, self.debug, self.timeline,
                                           self.sync_warp is not False)
        self.module = driver.Module(build.build(src, self.arch or driver.arch()))
        self.module.check_abi(GemmArgs, TimelineStageArgs if self.timeline else StageArgs)
        self.kernels = {None: (self._kernel(kernel_symbol(1, None)), self._kernel(kernel_symbol(2, None)), None)}
        rows = -(-self.M // self.tiles.BM)
        self.grid1 = (self.model.N1 // self.tiles.g1.BN, rows, 1)
        self.grid2 = (self.model.N2 // self.tiles.g2.BN, rows, 1)
        # The consumers wait in a sync warp when the module has one (<= 4 compute warps) and it
        # costs no occupancy, or its grid still fits one wave with it (or when forced); else thread 0
        # of the compute warps waits (gemm.cuh). Measured on the H200, LLaMA M=1 (128 consumer
        # blocks): TileSync+PDL 71.9 us with the sync warp at 1 block/SM, 77 us without at 2.
        self.sync_warp_used = False
        if self.policies and self.sync_warp is not False and self.module.constant_int("has_sync_warp"):
            first = self.policies[0][0]
            self.sync_warp_used = bool(self.sync_warp) or driver.sync_warp_pays(
                self.grid2[0] * self.grid2[1], self._kernel(kernel_symbol(2, first, sync_warp=True)),
                self._kernel(kernel_symbol(2, first)))
        sw = self.sync_warp_used
        for name, _ in self.policies:
            self.kernels[name] = (self._kernel(kernel_symbol(1, name)), self._kernel(kernel_symbol(2, name, False, sw)),
                                  self._kernel(kernel_symbol(2, name, True, sw)))
        # spread (off by default): a consumer launched before its producer ends (every ordering but
        # StreamSync) takes the SMs left free at that moment, so when its grid fits one wave at one
        # block per SM two of its blocks may share an SM (seen on the H200 with the thread-0 waits:
        # GPT-3 M=128, 96 blocks on 84 SMs, 13% slower). spread=True launches it with its shared
        # memory padded so that no two of its blocks fit on an SM. The sync warp's occupancy rule
        # covers that case now, and LLaMA M=1 ran ~5 us slower in a run with it on (its consumer's
        # registers had changed too: not separated), so it is an option.
        self.spread_smem = 0
        if self.spread and self.grid2[0] * self.grid2[1] <= driver.sm_count():
            k1, k2, _ = self.kernels[self.policies[0][0]] if self.policies else self.kernels[None]
            if driver.max_active_blocks(k2) > 1:
                self.spread_smem = driver.spread_smem(k2, driver.block_smem(k1))
        if self.spread_smem:
            for k in (k for ks in self.kernels.values() for k in ks[1:] if k is not None):
                k.function.max_dynamic_shared_size_bytes = self.spread_smem
        if self.policies and self.occupancy_ok_without_ordering():
            # W may run: both grids must be resident at once (driver.max_shared_carveout)
            driver.max_shared_carveout(k for ks in list(self.kernels.values())[1:] for k in ks if k is not None)
        self.chain = Chain(2, self.module.kernel(WAIT_KERNEL, 1))
        n1, n2 = (self.grid1[0] * self.grid1[1], self.grid2[0] * self.grid2[1]) if self.timeline else (0, 0)
        from cusyncgen.cuda.stages import Stage
        self.plain = (Stage("gemm1", 0, 0, timeline_blocks=n1), Stage("gemm2", 1, 0, timeline_blocks=n2))
        for name, num_sems in self.policies:
            p, c = Stage("gemm1", 0, num_sems, timeline_blocks=n1), Stage("gemm2", 1, 0, timeline_blocks=n2)
            c.depends_on(p, 0, "gemm1")
            self._stages[name] = (p, c)

    def _kernel(self, name: str):
        """A kernel with its block size and dynamic shared memory, as the module itself states them
        (the NAME_threads / NAME_smem constants next to each kernel)."""
        threads = self.module.constant_int(f"{name}_threads")
        smem = self.module.constant_int(f"{name}_smem")
        return self.module.kernel(name, threads, smem)

    @property
    def policy_names(self) -> list[str]:
        return [n for n, _ in self.policies]

    def configs(self) -> list[Config]:
        """StreamSync, PDL alone, every policy x {wait-kernel, PDL} x {R} x {T}, W where both grids fit."""
        return policy_configs(self.policy_names, self.orderings, self.occupancy_ok_without_ordering())

    def buffers(self, seed: int | None = None):
        """Fresh random weights and activations, scaled so outputs stay O(1) in fp16."""
        rs = cupy.random.RandomState(seed)
        m = self.model
        x = (rs.standard_normal((self.M, m.K1), dtype=cupy.float32)).astype(cupy.float16)
        w1 = (rs.standard_normal((m.N1, m.K1), dtype=cupy.float32) / m.K1 ** 0.5).astype(cupy.float16)
        w2 = (rs.standard_normal((m.N2, m.K2), dtype=cupy.float32) / m.K2 ** 0.5).astype(cupy.float16)
        return x, w1, w2

    def outputs(self):
        y = cupy.full((self.M, self.model.Y_cols), cupy.nan, dtype=cupy.float16)
        z = cupy.full((self.M, self.model.N2), cupy.nan, dtype=cupy.float16)
        return y, z

    def stages_of(self, cfg: Config):
        return self._stages[cfg.policy] if cfg.policy else self.plain

    def run(self, stream, cfg: Config, x, w1, w2, y, z) -> None:
        k1, k2, k2r = self.kernels[cfg.policy]
        if cfg.reorder:
            k2 = k2r
        p, c = self.stages_of(cfg)
        m = self.model
        a1 = gemm_args(x, w1, y, self.M, m.N1, m.K1, 0)
        a2 = gemm_args(y, w2, z, self.M, m.N2, m.K2, m.K2 if m.swiglu else 0)
        g1, g2 = self.grid1, self.grid2
        smem2 = self.spread_smem or None
        self.chain.run(stream, cfg, [
            Link(p, lambda s, sa, step: k1.launch(g1, [a1, sa], s, step.pdl), g1[0] * g1[1]),
            Link(c, lambda s, sa, step: k2.launch(g2, [a2, sa], s, step.pdl, smem=smem2 if step.early else None),
                 g2[0] * g2[1])])

    def __call__(self, x, cfg: Config = Config("RowSync"), weights=None):
        x = cupy.asarray(x)
        w1, w2 = (cupy.asarray(w) for w in weights)
        y, z = self.outputs()
        stream = cupy.cuda.get_current_stream()
        self.run(stream, cfg, x, w1, w2, y, z)
        return z

    def check_stages(self) -> None:
        for p, c in list(self._stages.values()) + [self.plain]:
            p.raise_if_timed_out()
            c.raise_if_timed_out()

    def reference(self, x, w1, w2):
        """float32 reference of the whole MLP."""
        y = x.astype(cupy.float32) @ w1.astype(cupy.float32).T
        if self.model.swiglu_epilogue:
            # rows of w1 interleaved by LLAMA_EP_BLOCK: [W1 block j | V block j] for every j
            g, u = split_interleaved(y, self.model.K2)
            h = g / (1 + cupy.exp(-g)) * u
        elif self.model.swiglu:
            F = self.model.K2
            y16 = y.astype(cupy.float16).astype(cupy.float32)  # the kernel stores Y in fp16
            a, b = y16[:, :F], y16[:, F:]
            h = a / (1 + cupy.exp(-a)) * b
        else:
            h = gelu_tanh(y, cupy)
        h = h.astype(cupy.float16).astype(cupy.float32)
        return h @ w2.astype(cupy.float32).T

    def occupancy_ok_without_ordering(self) -> bool:
        """W (no wait-kernel, no PDL) is safe only when both grids fit on the GPU at once."""
        k1, k2, _ = self.kernels[self.policies[0][0]] if self.policies else self.kernels[None]
        return driver.resident_at_once([(self.grid1[0] * self.grid1[1], driver.max_active_blocks(k1)),
                                        (self.grid2[0] * self.grid2[1],
                                         1 if self.spread_smem else driver.max_active_blocks(k2))])


class MLPOperands:
    """The operands, poisoned outputs and float32 reference of MLP (above), for an MLP on other
    kernels with the same `model` and `M` (mlp_sm90.MLPSm90, mlp_decode.MLPDecode, mlp_swap.MLPSwap)."""

    def buffers(self, seed: int | None = None):
        return MLP.buffers(self, seed)

    def outputs(self):
        return MLP.outputs(self)

    def reference(self, x, w1, w2):
        return MLP.reference(self, x, w1, w2)


# The GeLU of GPT-3's MLP: the tanh approximation, in the kernels (EpiGeluTanh), the reference
# (gelu_tanh) and every vendor form (torch's approximate="tanh"; cuBLASLt's GELU epilogue, which
# torch._addmm_activation uses, is the tanh approximation too, as is its unfused fallback). The erf
# GeLU differs from it by less than the tolerance (TOL), which could not tell them apart: the forms
# are checked against the reference's GeLU in tests/test_vendor_forms.py.
GELU_APPROXIMATE = "tanh"


def gelu_tanh(y, xp):
    """GeLU, tanh approximation, with the array module xp (cupy, numpy)."""
    return 0.5 * y * (1 + xp.tanh(0.7978845608028654 * (y + 0.044715 * y ** 3)))


def split_interleaved(y, F: int):
    """(X W1^T, X V^T) from the [M, 2F] output of llama-ep's interleaved first weight."""
    blk = LLAMA_EP_BLOCK
    y4 = y.reshape(y.shape[0], F // blk, 2, blk)
    return y4[:, :, 0, :].reshape(y.shape[0], F), y4[:, :, 1, :].reshape(y.shape[0], F)


def gemm_args(a, b, c, M, N, K, F) -> GemmArgs:
    return GemmArgs(A=a.data.ptr, B=b.data.ptr, C=c.data.ptr, M=M, N=N, K=K,
                    lda=a.shape[1], ldb=b.shape[1], ldc=c.shape[1], swiglu_offset=F)


def trace(model: str, M: int, configs: list[str], runs: int = 5, tiles=None, spread: bool = False,
          sync_warp: bool = True) -> dict:
    """Per-block timelines of one MLP (a CUSYNC_TIMELINE build, cusyncgen.commands.timeline): run each
    configuration `runs` times (the last one is recorded).
    spread: also run each synchronized configuration with the consumer's shared memory padded
    (spread_smem) so that no two consumer blocks are placed on one SM ("<config>/spread")."""
    import dataclasses

    from cusyncgen.cuda.timeline import block_records, summarize

    mlp = MLP(model, M, tiles=tiles, timeline=True, sync_warp=sync_warp)
    stream = cupy.cuda.Stream(non_blocking=False)
    out = {"model": model, "M": M, "tiles": mlp.tiles.label, "sync_warp": sync_warp, "configs": {}}
    pad = driver.spread_smem(mlp.kernels[None][1], driver.block_smem(mlp.kernels[None][0])) if spread else 0
    configs = [n for n in configs if Config.parse(n).policy in (None, *mlp.policy_names)]
    runs_of = [(name, False) for name in configs]
    if pad:
        runs_of += [(name, True) for name in configs if name != "StreamSync"]
    with stream:
        bufs = mlp.buffers(seed=0)
        outs = mlp.outputs()
        stream.synchronize()
        ref = mlp.reference(*bufs)
        for name, padded in runs_of:
            cfg = Config.parse(name)
            saved = mlp.kernels[cfg.policy]
            if padded:
                k1, k2, k2r = saved
                for k in (k2, k2r):
                    if k is not None:
                        k.function.max_dynamic_shared_size_bytes = pad
                mlp.kernels[cfg.policy] = (k1, dataclasses.replace(k2, smem=pad),
                                           k2r and dataclasses.replace(k2r, smem=pad))
            try:
                for _ in range(runs):
                    mlp.run(stream, cfg, *bufs, *outs)
                stream.synchronize()
            finally:
                mlp.kernels[cfg.policy] = saved
            err = rel_err(outs[1], ref)
            p, c = mlp.stages_of(cfg)
            stages = {"gemm1": block_records(p), "gemm2": block_records(c)}
            key = name + ("/spread" if padded else "")
            out["configs"][key] = {"summary": summarize(stages), "rel_err": err, "blocks": stages}
    return out


# ---- the benchmark ----

def measure_point(model: str, M: int, iters: int, stream, seed: int = 0, tiles=None, configs=None):
    """Every configuration of one (model, M, tiles): rows of the result table, and the MLP."""
    mlp = MLP(model, M, tiles=tiles)
    with stream:  # every CuPy operation on the timed stream: fills and inputs are ordered before the runs
        return _measure(mlp, iters, stream, seed, configs)


# The rounds a point's configurations are timed in (_measure): iters replays of each in all, a few
# in every round.
MEASURE_ROUNDS = 5


def _measure(mlp, iters, stream, seed, configs):
    """Every configuration of one point, each checked first on a poisoned output against the float32
    reference, then all timed in the same interleaved rounds (timing.time_in_rounds: one replay of
    each in turn, a CUDA graph per input set, the order rotated from round to round; about `iters`
    replays each): under the power cap a configuration timed in a block of its own replays reads
    the clock of its neighbours' phase (docs/design.md, "Timing under the power cap"). Returns
    (rows, mlp, input sets, outputs, reference)."""
    from cusyncgen.cuda import timing

    model, M = mlp.model_name, mlp.M
    sets = [mlp.buffers(seed=seed + s) for s in range(3)]
    outs = [mlp.outputs() for _ in sets]
    x, w1, w2 = sets[0]
    ref = mlp.reference(x, w1, w2)
    cfgs = list(configs or mlp.configs())
    # Warm up first: the first replays after a module load are slow (up to 35% on an H200).
    warm = timing.capture(lambda s: mlp.run(s, cfgs[0], *sets[0], *outs[0]), stream)
    timing.keep_busy(warm, stream, seconds=0.2)
    del warm
    errs, graphs = {}, {}
    for cfg in cfgs:
        y, z = outs[0]
        y.fill(cupy.nan)
        z.fill(cupy.nan)
        mlp.run(stream, cfg, x, w1, w2, y, z)
        stream.synchronize()
        errs[cfg.name] = rel_err(z, ref)
        graphs[cfg.name] = [timing.capture(lambda s, a=a, o=o, cfg=cfg: mlp.run(s, cfg, *a, *o), stream)
                            for a, o in zip(sets, outs)]
    replays = {k: timing.Replay(tuple(g.launch for g in gs)) for k, gs in graphs.items()}
    times, _ = timing.time_in_rounds(replays, stream, iters=max(1, -(-iters // MEASURE_ROUNDS)),
                                     rounds=MEASURE_ROUNDS)
    del graphs, replays
    us = {k: round(t, 2) for k, t in times.items()}
    base = us[cfgs[0].name]   # StreamSync, configs()'s first
    rows = [{"model": model, "M": M, "config": cfg.name, "kernel": mlp.kernel, "time_us": us[cfg.name],
             "correct": errs[cfg.name] < TOL, "rel_err": errs[cfg.name], "tiles": mlp.tiles.label,
             "timing": timing.INTERLEAVED, "speedup_vs_streamsync": round(base / us[cfg.name], 4)}
            for cfg in cfgs]
    return rows, mlp, sets, outs, ref


def bench(models=None, sizes=None, iters: int = 30, progress: bool = True) -> dict:
    """Every model and M: StreamSync, PDL, each policy x ordering x R x T, cuBLAS (eager, graph: each
    the fastest correct vendor form, vendor_forms), the roofline floor, and the first GeMM alone against cuBLAS at the largest M."""
    from cusyncgen.cuda import baselines

    models = models.split(",") if isinstance(models, str) else list(models or MODELS)
    sizes = list(sizes or SIZES)
    dev = driver.device_name()
    ceil = baselines.ceilings()
    rows, gemm_rows = [], []
    stream = cupy.cuda.Stream()
    work = [(m, M) for m in models for M in sizes]
    for i, (model, M) in enumerate(work):
        t0 = time.time()
        point, mlp, sets, outs, ref = measure_point(model, M, iters, stream, seed=1000 * i)
        rows += point
        base = point[0]["time_us"]
        rows += vendor_rows(mlp.model, M, sets[0], ref, base, iters, ceil)
        if M == max(sizes):
            gemm_rows.append(gemm_throughput(mlp, sets[0], outs[0], stream, iters))
        if progress:
            best = max((r for r in point if r["correct"]), key=lambda r: r["speedup_vs_streamsync"])
            print(f"[{i + 1}/{len(work)}] {model} M={M}: StreamSync {base:.1f} us, best {best['config']} "
                  f"{best['time_us']:.1f} us ({best['speedup_vs_streamsync']:.3f}x) [{time.time() - t0:.0f} s]",
                  file=sys.stderr, flush=True)
        del mlp, sets, outs
        cupy.get_default_memory_pool().free_all_blocks()
    return {"device": dev, "workload": "mlp", "vendor": "cuBLAS", "ceilings": ceil, "rows": rows, "gemm": gemm_rows}


def interleaved_rows(w1, F: int):
    """(W1, V), the gate and up rows [F, H] each, of llama-ep's interleaved first weight (rows
    interleaved by LLAMA_EP_BLOCK); any array with reshape (CuPy, NumPy, torch)."""
    blk = LLAMA_EP_BLOCK
    w4 = w1.reshape(F // blk, 2, blk, w1.shape[1])
    return w4[:, 0].reshape(F, w1.shape[1]), w4[:, 1].reshape(F, w1.shape[1])


def swiglu_weights(m: Model, w1):
    """The gate and up weights of a SwiGLU model as a user keeps them: one contiguous [2F, H]
    tensor, the gate's F rows then the up's (a torch tensor made once, outside any timing), from the
    kernels' first weight (llama-ep's interleaved by LLAMA_EP_BLOCK rows; llama's already [W1|V])."""
    F = m.K2
    if not m.swiglu_epilogue:
        return w1.contiguous()
    return torch.cat(interleaved_rows(w1, F)).contiguous()


def vendor_forms(m: Model, bufs) -> dict:
    """The forms of the MLP a user writes in PyTorch (cuBLAS GeMMs and the activation), on the given
    CuPy operands (x, w1, w2): {form: a maker returning a callable that returns the output}
    (baselines.VendorForms). A maker raises where this PyTorch lacks the form's API: that form is
    skipped.

    GPT-3: "torch-unfused" (the GeMM, F.gelu, the GeMM) and "cublaslt-gelu" (the first GeMM with
    cuBLASLt's fused GeLU epilogue through torch._addmm_activation, which wants a bias: a zero one;
    at M = 1 torch takes its unfused fallback, a GeMM then gelu_, the same math). SwiGLU models
    (llama, llama-ep): the gate and up weights kept apart ("separate": two GeMMs) or concatenated
    contiguously ("concat-chunk": one GeMM, its output chunked), never strided views of an
    interleaved weight."""
    tx, tw1, tw2 = (torch.from_dlpack(a) for a in bufs)
    F = m.K2
    gelu = lambda y: torch.nn.functional.gelu(y, approximate=GELU_APPROXIMATE)
    silu = lambda y: torch.nn.functional.silu(y)
    if not (m.swiglu or m.swiglu_epilogue):
        def unfused():
            return lambda: gelu(tx @ tw1.T) @ tw2.T

        def cublaslt():
            addmm_act = torch._addmm_activation   # an AttributeError where this PyTorch lacks it: skipped
            zero = torch.zeros(tw1.shape[0], dtype=tw1.dtype, device=tw1.device)
            return lambda: addmm_act(zero, tx, tw1.T, use_gelu=True) @ tw2.T
        return {"torch-unfused": unfused, "cublaslt-gelu": cublaslt}

    def separate():
        wgu = swiglu_weights(m, tw1)
        wg, wu = wgu[:F], wgu[F:]   # contiguous halves, as two weights of their own
        return lambda: (silu(tx @ wg.T) * (tx @ wu.T)) @ tw2.T

    def concat_chunk():
        wgu = swiglu_weights(m, tw1)

        def fn():
            g, u = (tx @ wgu.T).chunk(2, dim=-1)
            return (silu(g) * u) @ tw2.T
        return fn
    return {"separate": separate, "concat-chunk": concat_chunk}


def check_vendor_forms(m: Model, bufs, ref):
    """Every vendor form of the MLP made and checked against the float32 reference (baselines.VendorForms)."""
    from cusyncgen.cuda import baselines
    return baselines.VendorForms.check(vendor_forms(m, bufs), lambda name, fn: rel_err(cupy.from_dlpack(fn()), ref))


def floor_us(m: Model, M: int, ceil: dict) -> float:
    """The roofline floor of one MLP at M rows (us): max(FLOPs / peak, bytes / bandwidth), the bytes
    the weights, X, Y written and read, and Z; `ceil` as baselines.ceilings() measured in the run."""
    flops = 2 * M * m.K1 * m.N1 + 2 * M * m.K2 * m.N2
    byts = 2 * (m.K1 * m.N1 + m.K2 * m.N2 + M * m.K1 + 2 * M * m.Y_cols + M * m.N2)
    return max(flops / ceil["peak_flops"], byts / ceil["bandwidth"]) * 1e6


def vendor_rows(m: Model, M: int, bufs, ref, base: float, iters: int, ceil: dict) -> list[dict]:
    """The cuBLAS rows (eager and in a CUDA graph, through PyTorch, on the same operands: each the
    fastest correct of the vendor forms, named in "vendor_form") and the floor row of one (model,
    M): the floor is max(FLOPs/peak, bytes/bandwidth) with the ceilings measured in this run.
    `base`: the point's StreamSync time (us), for speedup_vs_streamsync."""
    from cusyncgen.cuda import baselines

    forms = baselines.time_forms(check_vendor_forms(m, bufs, ref), iters)
    rows = forms.rows(("cuBLAS", "cuBLAS+graph"), {"model": m.name, "M": M}, base, TOL)
    floor = floor_us(m, M, ceil)
    rows.append({"model": m.name, "M": M, "config": "floor", "time_us": round(floor, 2),
                 "speedup_vs_streamsync": round(base / floor, 4), "correct": True, "rel_err": 0.0})
    return rows


def gemm_throughput(mlp, bufs, outs, stream, iters) -> dict:
    """The first GeMM alone (plain kernel) against cuBLAS on the same operands."""
    from cusyncgen.cuda import baselines, timing

    x, w1, _ = bufs
    y, _ = outs
    k1 = mlp.kernels[None][0]
    a1 = gemm_args(x, w1, y, mlp.M, mlp.model.N1, mlp.model.K1, 0)
    args = mlp.plain[0].args()
    g = timing.capture(lambda s: k1.launch(mlp.grid1, [a1, args], s), stream)
    ours = timing.median(timing.time_graphs([g], stream, iters=iters))
    tx, tw1 = torch.from_dlpack(x), torch.from_dlpack(w1)
    cub = baselines.graph_time(lambda: tx @ tw1.T, iters)
    flops = 2 * mlp.M * mlp.model.K1 * mlp.model.N1
    return {"model": mlp.model_name, "M": mlp.M, "gemm": "first (plain, no epilogue difference)",
            "ours_us": round(ours, 2), "cublas_us": round(cub, 2),
            "ours_tflops": round(flops / ours / 1e6, 1), "cublas_tflops": round(flops / cub / 1e6, 1),
            "tile": repr(mlp.tiles)}
