"""The MLP at token generation (M <= 64) on the swapped GeMM (runtime_cuda/sm90/swap.cu, through
cusyncgen.cuda.sm90.swap_gemm): CUTLASS's stock sm90 GeMM with the weight as its A operand, so a
tile is 64 weight rows x 16-64 tokens (wgmma's N as small as the batch) instead of a 64-row token
tile mostly empty at decode, TMA pipelines as deep as shared memory holds.

    mlp = MLPSwap("gpt3", M=16)          # the tile: the smallest of configs.def's SWAP lines that holds M
    x, w1, w2 = mlp.buffers(seed=0); y, z = mlp.outputs()
    mlp.run(stream, "PDL/swap", x, w1, w2, y, z)

Configurations: StreamSync and PDL (the second GeMM PDL-launched; CUTLASS's grid dependency
control: its loads wait for the first grid). Stream orders only -- the swapped kernels do not wait
per tile. GPT-3's GeLU is the first GeMM's epilogue; LLaMA-ep's SwiGLU pairs rows 64 apart, which a
64-row weight tile never holds together, so its first GeMM stores the raw [M, N1] output and a
small PDL-launched kernel applies SwiGLU (sm90.swiglu_pair). `cusyncgen bench mlp --kernel sm90`
and `tune mlp` run them at M <= MAX_M beside the CUTLASS kernels and the decode kernel, named
config + "/swap", tiles "swap <config>".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from cusyncgen.errors import CusyncError
from cusyncgen.workloads import mlp as sm80
from cusyncgen.workloads.base import SWAP

MODELS = ("gpt3", "llama-ep")
MAX_M = 64
ORDERINGS = ("StreamSync", "PDL")


def tile_configs(M: int, configs=None) -> list[str]:
    """The swapped GeMM's tile configs a point at M rows runs on (sm90.swap_configs_for)."""
    from cusyncgen.cuda import sm90
    return sm90.swap_configs_for(M, configs)


def fits(model: str, M: int) -> bool:
    """Does the swapped GeMM run this (model, M)?"""
    return model in MODELS and 1 <= M <= MAX_M


def tiles_label(config: str) -> str:
    return f"swap {config}"


@dataclass(frozen=True)
class SwapConfig:
    """A configuration of the swapped GeMMs as the bench rows name it: `ordering` + "/swap"."""

    ordering: str

    @property
    def name(self) -> str:
        return self.ordering + SWAP


@dataclass
class MLPSwap(sm80.MLPOperands):
    """Both GeMMs of one model at M <= MAX_M rows on the swapped GeMM of tile `config`."""

    model_name: str
    M: int
    config: str | None = None
    kernel = "sm90"
    _raw: object = field(default=None, repr=False)   # LLaMA-ep: the first GeMM's [M, N1] output before SwiGLU

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
        self.tiles = SimpleNamespace(label=tiles_label(self.config))

    @property
    def tile_cfg(self) -> dict:
        """The rows' tile_cfg: the config, and both GeMMs' tiles as (tokens, weight rows)."""
        from cusyncgen.cuda import sm90
        t = sm90.swap_tile(self.config)
        return {"kernel": "swap", "config": self.config, "g1": {"BM": t.BT, "BN": t.BW}, "g2": {"BM": t.BT, "BN": t.BW}}

    def configs(self) -> list[SwapConfig]:
        return [SwapConfig(o) for o in ORDERINGS]

    def run(self, stream, cfg, x, w1, w2, y, z) -> None:
        """One MLP under `cfg` (a SwapConfig, or an ORDERINGS name with or without "/swap") on `stream`
        (a CuPy stream); operands as the decode MLP's."""
        from cusyncgen.cuda import sm90
        from cusyncgen.cuda.lazy import cupy

        name = (cfg if isinstance(cfg, str) else cfg.name).removesuffix(SWAP)
        if name not in ORDERINGS:
            raise CusyncError(f"the swapped GeMM MLP has no configuration {name!r} (it has {', '.join(ORDERINGS)})",
                              None)
        pdl, m, s = name == "PDL", self.model, stream.ptr
        if m.swiglu_epilogue:
            if self._raw is None:   # allocated once, at the first call (a graph captures a later one)
                self._raw = cupy.empty((self.M, m.N1), dtype=cupy.float16)
            sm90.swap_gemm(self.config, sm90.EPI_IDENTITY, w1.data.ptr, x.data.ptr, self._raw.data.ptr, self.M, m.N1,
                           m.K1, stream=s)
            sm90.swiglu_pair(self._raw.data.ptr, y.data.ptr, self.M, m.N1, pdl=pdl, stream=s)
        else:
            sm90.swap_gemm(self.config, sm90.EPI_GELU_TANH, w1.data.ptr, x.data.ptr, y.data.ptr, self.M, m.N1, m.K1,
                           stream=s)
        sm90.swap_gemm(self.config, sm90.EPI_IDENTITY, w2.data.ptr, y.data.ptr, z.data.ptr, self.M, m.N2, m.K2,
                       pdl=pdl, stream=s)

    def check_stages(self) -> None:
        """Nothing waits per tile here (the common interface of the sm90 instances)."""

    def timed_out(self) -> dict[str, str]:
        return {}


def measure_point(model: str, M: int, iters: int, stream, seed: int = 0, configs=None):
    """Every configuration of the swapped-GeMM MLP at (model, M) on each tile of tile_configs(M):
    rows as the sm90 MLP's measure_point (checked against the float32 reference on poisoned outputs),
    tiles "swap <config>"."""
    rows = []
    for cfg in tile_configs(M, configs):
        mlp = MLPSwap(model, M, cfg)
        with stream:
            point, mlp, sets, outs, ref = sm80._measure(mlp, iters, stream, seed, None)
        stream.synchronize()
        for r in point:
            r.update(splits="1/1", tile_cfg=mlp.tile_cfg)
        rows += point
        del mlp, sets, outs
    return rows
