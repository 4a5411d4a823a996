"""The paper's MLP workloads on the GPU: two dependent tensor-core GeMMs synchronized by the
policies that cusyncgen generates from examples/mlp_gpt3.dep and examples/mlp_llama.dep.

    mlp = MLP("gpt3", M=256)                     # builds (or loads from cache) one module per M
    y = mlp(x, Config("RowSync", "pdl"))          # x: [M, H] fp16 (CuPy array or DLPack tensor)

GPT-3 (H=12288, 8-way model parallel): Y = GeLU(X W1^T), W1 [H/2, H]; Z = Y W2^T, W2 [H, H/2].
LLaMA (H=8192, FFN 22016/8 = 2752): [W1|V] fused: Y = X [W1|V]^T, [2F, H]; Z = SwiGLU(Y) W2^T with
SwiGLU(Y)[:, k] = silu(Y[:, k]) * Y[:, k + F] computed inside the second GeMM's A load.
LLaMA-ep: the same MLP with SwiGLU in the first GeMM's epilogue: the rows of [W1|V] interleaved by
64 (modules.LLAMA_EP_BLOCK), Y = silu(X W1^T) * X V^T [M, F] stored by the first GeMM, Z = Y W2^T.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import cupy

from cusyncgen.cuda import build, driver
from cusyncgen.cuda.chain import Chain, Config
from cusyncgen.cuda.modules import MODELS, MlpTiles, Tiles, default_tiles, module_source  # noqa: F401  (re-exported)
from cusyncgen.cuda.stages import Stage


@dataclass
class MLP:
    """Both GeMMs of one model at one M, every generated policy compiled into one module."""

    model_name: str
    M: int
    tiles: MlpTiles | None = None
    debug: bool = False
    timeline: bool = False   # CUSYNC_TIMELINE build: per-block times (cusyncgen.cuda.timeline)
    # Consumers wait in a sync warp of their own (gemm.cuh) -- None: when the module has one (<= 4
    # compute warps) and it costs no occupancy; True: whenever the module has one; False: never.
    sync_warp: bool | None = None
    spread: bool = False  # early-launched consumer: at most one block per SM (see __post_init__)
    arch: str | None = None
    _stages: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.model = MODELS[self.model_name]
        self.tiles = self.tiles or default_tiles(self.model_name, self.M)
        src, self.policies = module_source(self.model, self.M, self.tiles, self.debug, self.timeline,
                                                self.sync_warp is not False)
        self.module = driver.Module(build.build(src, self.arch or driver.arch()))
        self.kernels = {None: (self._kernel("gemm1_plain"), self._kernel("gemm2_plain"), None)}
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
                self.grid2[0] * self.grid2[1], self._kernel(f"gemm2_{first}_S"), self._kernel(f"gemm2_{first}"))
        sw = "S" if self.sync_warp_used else ""
        for name, _ in self.policies:
            self.kernels[name] = (self._kernel(f"gemm1_{name}"), self._kernel(f"gemm2_{name}" + (f"_{sw}" if sw else "")),
                                  self._kernel(f"gemm2_{name}_R{sw}"))
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
        self.chain = Chain(self.module.kernel("cusync_wait_kernel", 1))
        n1, n2 = (self.grid1[0] * self.grid1[1], self.grid2[0] * self.grid2[1]) if self.timeline else (0, 0)
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

    def run(self, stream, cfg: Config, x, w1, w2, y, z) -> None:
        k1, k2, k2r = self.kernels[cfg.policy]
        if cfg.reorder:
            k2 = k2r
        p, c = self._stages[cfg.policy] if cfg.policy else self.plain
        m = self.model
        a1 = _gemm_args(x, w1, y, self.M, m.N1, m.K1, 0)
        a2 = _gemm_args(y, w2, z, self.M, m.N2, m.K2, m.K2 if m.swiglu else 0)
        g1, g2 = self.grid1, self.grid2
        smem2 = self.spread_smem if self.spread_smem and cfg.ordering != "stream" else None
        self.chain.run(stream, cfg, p, c,
                       lambda s, sa, pdl: k1.launch(g1, [a1, sa], s, pdl),
                       lambda s, sa, pdl: k2.launch(g2, [a2, sa], s, pdl, smem=smem2),
                       g1[0] * g1[1], g2[0] * g2[1])

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
            h = 0.5 * y * (1 + cupy.tanh(0.7978845608028654 * (y + 0.044715 * y ** 3)))
        h = h.astype(cupy.float16).astype(cupy.float32)
        return h @ w2.astype(cupy.float32).T

    def occupancy_ok_without_ordering(self) -> bool:
        """W (no wait-kernel, no PDL) is safe only when both grids fit on the GPU at once."""
        k1, k2, _ = self.kernels[self.policies[0][0]] if self.policies else self.kernels[None]
        return driver.resident_at_once([(self.grid1[0] * self.grid1[1], driver.max_active_blocks(k1)),
                                        (self.grid2[0] * self.grid2[1],
                                         1 if self.spread_smem else driver.max_active_blocks(k2))])


def split_interleaved(y, F: int):
    """(X W1^T, X V^T) from the [M, 2F] output of llama-ep's interleaved first weight."""
    from cusyncgen.cuda.modules import LLAMA_EP_BLOCK as blk
    y4 = y.reshape(y.shape[0], F // blk, 2, blk)
    return y4[:, :, 0, :].reshape(y.shape[0], F), y4[:, :, 1, :].reshape(y.shape[0], F)


def _gemm_args(a, b, c, M, N, K, F):
    return driver.GemmArgs(A=a.data.ptr, B=b.data.ptr, C=c.data.ptr, M=M, N=N, K=K,
                           lda=a.shape[1], ldb=b.shape[1], ldc=c.shape[1], swiglu_offset=F)
