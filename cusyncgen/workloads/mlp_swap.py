"""The MLP at token generation (M <= 64) on the swapped GeMM (runtime_cuda/sm90/swap.cu, through
cusyncgen.cuda.sm90.swap_gemm): CUTLASS's stock sm90 GeMM with the weight as its A operand, so a
tile is 64 weight rows x 16-64 tokens (wgmma's N as small as the batch) instead of a 64-row token
tile mostly empty at decode, TMA pipelines as deep as shared memory holds. It reads the weights
packed (sm90.swap_pack: each 64-row group's K x 64 block contiguous), a copy made once per weight.
At 17-64 tokens the wide form is a candidate too (configs "...xa", SwapTile.xa): X as CUTLASS's A
operand (64 token rows) and the packed weight as B in groups of 96 rows, which fit GPT-3's weights
into one wave of 64 or 128 tiles (tile_pairs(M, model=...) keeps the configs that divide a GeMM's
weight).

    mlp = MLPSwap("gpt3", M=16)          # the tile: the smallest of configs.def's SWAP lines that holds M
    x, w1, w2 = mlp.buffers(seed=0); y, z = mlp.outputs()
    mlp.run(stream, "PDL/swap", x, w1, w2, y, z)

Configurations: StreamSync, PDL (the second GeMM PDL-launched: its weight tiles of every pipeline
stage issued before griddepcontrol.wait, X's after the first grid) and RowSync+Chain (one persistent
launch, runtime_cuda/sm90/swap_chain.cuh: every CTA moves from its first-GeMM tile to its
second-GeMM tile, whose weight tiles fill the pipeline at once and whose loads of Y wait for the
first GeMM's tiles of their token rows). GPT-3's GeLU is the first GeMM's epilogue, and so is
LLaMA-ep's SwiGLU (sm90.EPI_SWIGLU_ROWS): its first weight is kept a second time with gate and up
rows interleaved by 8 (swiglu_rows_weight, then packed), so that each thread's accumulator holds both
rows of its outputs. Each GeMM may run on its own tile config (tile_pairs). `cusyncgen bench mlp
--kernel sm90` and `tune mlp` run them at M <= MAX_M beside the CUTLASS kernels and the decode kernel, named
config + "/swap", tiles "swap <config>" or "swap <first>+<second>".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from cusyncgen.errors import CusyncError
from cusyncgen.workloads import mlp as sm80
from cusyncgen.workloads.base import SWAP

MODELS = ("gpt3", "llama-ep")
MAX_M = 64
# RowSync+Chain: both GeMMs in one persistent launch (sm90.swap_mlp), a second-GeMM tile waiting for
# the first GeMM's tiles of its token rows; one tile config for both GeMMs
ORDERINGS = ("StreamSync", "PDL", "RowSync+Chain")
CHAIN = "RowSync+Chain"


def tile_configs(M: int, configs=None) -> list[str]:
    """The swapped GeMM's tile configs a point at M rows runs on (sm90.swap_configs_for), but the K
    splits over a cluster (SwapTile.KS > 1): they are for weights of fewer 64-row tiles than SMs (the
    attention's QKV GeMM), and every MLP GeMM (86-192 tiles) streams slower split (docs/design.md,
    "Attention at token generation"). MLPSwap runs one where it is named."""
    from cusyncgen.cuda import sm90
    return [c for c in sm90.swap_configs_for(M, configs) if sm90.swap_tile(c).KS == 1]


def tile_pairs(M: int, configs=None, model: str | None = None) -> list[tuple[str, str]]:
    """(first GeMM's config, second's) for every pair of tile_configs(M): the two GeMMs differ
    (LLaMA-ep's first streams fastest on 10 stages, two CTAs an SM; its second does not). With
    `model`, only the configs whose packed groups of rows divide that GeMM's weight (SwapTile.fits:
    the wide form's 96-row groups do not divide LLaMA-ep's 5504 or 8192 rows)."""
    cs = tile_configs(M, configs)
    if model is None:
        return [(a, b) for a in cs for b in cs]
    first, second = weight_shapes(model)
    return [(a, b) for a in cs if _fits(a, first) for b in cs if _fits(b, second)]


def weight_shapes(model: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(N, K) of the first GeMM's weight and of the second's."""
    m = sm80.MODELS[model]
    return (m.N1, m.K1), (m.N2, m.K2)


def _fits(config: str, shape: tuple[int, int]) -> bool:
    from cusyncgen.cuda import sm90
    return sm90.swap_tile(config).fits(*shape)


def fits(model: str, M: int) -> bool:
    """Does the swapped GeMM run this (model, M)?"""
    return model in MODELS and 1 <= M <= MAX_M


def swiglu_rows_weight(w1, F: int):
    """LLaMA-ep's first weight (rows [W1|V] interleaved by LLAMA_EP_BLOCK, as every sm90 kernel reads
    it) in the swapped GeMM's SwiGLU row order (sm90.swiglu_rows: interleaved by 8)."""
    from cusyncgen.cuda import sm90
    return sm90.swiglu_rows(*sm80.interleaved_rows(w1, F))


def tiles_label(config: str, config2: str | None = None) -> str:
    """"swap <config>", or "swap <first GeMM's>+<second's>" where they differ."""
    return f"swap {config}" if config2 in (None, config) else f"swap {config}+{config2}"


@dataclass(frozen=True)
class SwapConfig:
    """A configuration of the swapped GeMMs as the bench rows name it: `ordering` + "/swap"."""

    ordering: str

    @property
    def name(self) -> str:
        return self.ordering + SWAP


@dataclass
class MLPSwap(sm80.MLPOperands):
    """Both GeMMs of one model at M <= MAX_M rows on the swapped GeMM: the first on tile `config`,
    the second on `config2` (None: the same)."""

    model_name: str
    M: int
    config: str | None = None
    config2: str | None = None
    timeout_ns: int = 0   # RowSync+Chain: > 0, its waits give up after this long (check_stages reports it)
    kernel = "sm90"
    # the packed weights the launches read (sm90.packed_weight)
    _packed: dict = field(default_factory=dict, repr=False)
    _sync: object = field(default=None, repr=False)   # RowSync+Chain: its counters (sm90.CHAIN_SYNC_WORDS)

    def __post_init__(self):
        if self.model_name not in MODELS:
            raise CusyncError(f"the swapped GeMM MLP has no model {self.model_name!r} (its models: "
                              f"{', '.join(MODELS)})", None)
        if not 1 <= self.M <= MAX_M:
            raise CusyncError(f"the swapped GeMM MLP takes M = 1 to {MAX_M}, not {self.M}", None)
        self.model = sm80.MODELS[self.model_name]
        if self.config is None:
            fit = tile_configs(self.M)
            if not fit:
                raise CusyncError(f"no swapped GeMM tile holds M = {self.M}", None)
            self.config = fit[0]
        self.config2 = self.config2 or self.config
        from cusyncgen.cuda import sm90
        for which, cfg, (N, K) in zip(("first", "second"), (self.config, self.config2), weight_shapes(self.model_name)):
            if not _fits(cfg, (N, K)):
                raise CusyncError(f"MLP {self.model_name}: the {which} GeMM's weight ({N} x {K}) does not split into "
                                  f"{cfg}'s packed groups of {sm90.swap_tile(cfg).group} rows", None)
        self.tiles = SimpleNamespace(label=tiles_label(self.config, self.config2))

    @property
    def tile_cfg(self) -> dict:
        """The rows' tile_cfg: the config ("config2": the second GeMM's, where it differs), and both
        GeMMs' tiles as (tokens, weight rows)."""
        from cusyncgen.cuda import sm90
        t1, t2 = sm90.swap_tile(self.config), sm90.swap_tile(self.config2)
        return {"kernel": "swap", "config": self.config, **({"config2": self.config2} if t2 != t1 else {}),
                "g1": {"BM": t1.BT, "BN": t1.BW}, "g2": {"BM": t2.BT, "BN": t2.BW}}

    def configs(self) -> list[SwapConfig]:
        """StreamSync and PDL; RowSync+Chain where both GeMMs run on one swapped config (of clusters
        of one: the chain reads the weights packed by its tile's rows; not the wide form or a K split)."""
        return [SwapConfig(o) for o in ORDERINGS if o != CHAIN or self._chains()]

    def _chains(self) -> bool:
        from cusyncgen.cuda import sm90
        return self.config2 == self.config and sm90.swap_tile(self.config).chains

    def buffers(self, seed: int | None = None):
        """The sm90 MLP's operands, and the packed copies of its weights the launches read (made now,
        so that no packing happens inside a captured graph)."""
        x, w1, w2 = super().buffers(seed)
        self._weights(None, w1, w2)
        return x, w1, w2

    def _weights(self, stream, w1, w2) -> tuple:
        """The packed copies (sm90.packed_weight) of w1, LLaMA-ep's in the SwiGLU epilogue's row order
        first, and w2 the launches read."""
        from cusyncgen.cuda import sm90
        t1, t2 = sm90.swap_tile(self.config), sm90.swap_tile(self.config2)
        rows = self.model.swiglu_epilogue
        return (sm90.packed_weight(self._packed, w1, t1.group, stream,
                                   (lambda w: swiglu_rows_weight(w, self.model.K2)) if rows else None,
                                   "swiglu" if rows else ""),
                sm90.packed_weight(self._packed, w2, t2.group, stream))

    def run(self, stream, cfg, x, w1, w2, y, z) -> None:
        """One MLP under `cfg` (a SwapConfig, or an ORDERINGS name with or without "/swap") on `stream`
        (a CuPy stream); operands as the decode MLP's."""
        from cusyncgen.cuda import sm90

        name = (cfg if isinstance(cfg, str) else cfg.name).removesuffix(SWAP)
        if name not in ORDERINGS:
            raise CusyncError(f"the swapped GeMM MLP has no configuration {name!r} (it has {', '.join(ORDERINGS)})",
                              None)
        if name == CHAIN and not self._chains():
            raise CusyncError(f"{CHAIN}/swap runs both GeMMs on one tile config, not {self.config} and "
                              f"{self.config2}", None)
        pdl, m, s = name == "PDL", self.model, stream.ptr
        w1p, w2p = self._weights(stream, w1, w2)
        epi1 = sm90.EPI_SWIGLU_ROWS if m.swiglu_epilogue else sm90.EPI_GELU_TANH
        if name == CHAIN:
            sm90.swap_mlp(self.config, epi1, w1p.data.ptr, x.data.ptr, y.data.ptr, w2p.data.ptr, z.data.ptr, self.M,
                          m.N1, m.K1, m.N2, self._chain_sync(stream).data.ptr, timeout_ns=self.timeout_ns, stream=s)
            return
        sm90.swap_gemm(self.config, epi1, w1p.data.ptr, x.data.ptr, y.data.ptr, self.M, m.N1, m.K1, stream=s)
        sm90.swap_gemm(self.config2, sm90.EPI_IDENTITY, w2p.data.ptr, y.data.ptr, z.data.ptr, self.M, m.N2, m.K2,
                       pdl=pdl, stream=s)

    def _chain_sync(self, stream):
        """RowSync+Chain's counters: zeroed once, at the first launch (not inside a graph capture)."""
        if self._sync is None:
            from cusyncgen.cuda import sm90
            from cusyncgen.cuda.lazy import cupy
            if stream.is_capturing():
                raise CusyncError(f"MLP {self.model_name}: {CHAIN}/swap's counters are made at its first launch, not "
                                  "inside a graph capture (run once first)", None)
            with stream:
                self._sync = cupy.zeros(sm90.CHAIN_SYNC_WORDS, dtype=cupy.uint32)
            stream.synchronize()
        return self._sync

    def check_stages(self) -> None:
        """Raise if a RowSync+Chain wait timed out (timeout_ns > 0), naming the tile and the posts it
        saw; the record is cleared."""
        msg = self.timed_out()
        if msg:
            from cusyncgen.cuda import sm90
            self._sync[sm90.desc.CHAIN_TIMED_OUT:sm90.desc.CHAIN_SEEN + 1] = 0
            raise CusyncError(f"MLP {self.model_name} M={self.M}: {msg['*']}", None)

    def timed_out(self) -> dict[str, str]:
        """{"*": the message} if a RowSync+Chain wait timed out (after synchronizing), else {}."""
        if self._sync is None:
            return {}
        from cusyncgen.cuda import sm90
        msg = sm90.chain_timed_out(self._sync.get().tolist(), self.config)
        return {"*": msg} if msg else {}


def measure_point(model: str, M: int, iters: int, stream, seed: int = 0, configs=None, pairs=None):
    """Every configuration of the swapped-GeMM MLP at (model, M) on each pair of tiles (`pairs`, or
    tile_pairs(M, configs, model)): rows as the sm90 MLP's measure_point (checked against the float32
    reference on poisoned outputs), tiles as tiles_label names them."""
    rows = []
    for cfg, cfg2 in pairs or tile_pairs(M, configs, model):
        mlp = MLPSwap(model, M, cfg, cfg2)
        with stream:
            point, mlp, sets, outs, ref = sm80._measure(mlp, iters, stream, seed, None)
        stream.synchronize()
        for r in point:
            r.update(splits="1/1", tile_cfg=mlp.tile_cfg)
        rows += point
        del mlp, sets, outs
    return rows
