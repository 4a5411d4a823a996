"""The MLP at token generation (M <= 64) on the decode kernel (cusyncgen.cuda.decode,
runtime_cuda/kernels/decode_mlp.cuh): the same models, weights and reference as the sm90 MLP,
with the kernel built for bandwidth (docs/sm90.md, "Token generation").

    mlp = MLPDecode("gpt3", M=16)
    x, w1, w2 = mlp.buffers(seed=0); y, z = mlp.outputs()
    mlp.run(stream, "TileSync+Chain", x, w1, w2, y, z)

Configurations (cusyncgen.cuda.decode.ORDERINGS): StreamSync and PDL (two launches), TileSync+Chain
and RowSync+Chain (one launch, the policies compiled from the model's .dep for the kernel's
64-column producer tiles). `cusyncgen bench mlp --kernel sm90` and `tune mlp` run them at M <=
MAX_M beside the CUTLASS kernels, named config + "/decode" (a chain of their own in the results),
tiles "decode". The kernel reads its own packed copy of the weights (decode.pack_weights, made
once by `buffers` or the first `run`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from cusyncgen.cuda import decode
from cusyncgen.errors import CusyncError
from cusyncgen.workloads import mlp as sm80
from cusyncgen.workloads.base import DECODE
from cusyncgen.workloads.kernels import examples_dir

MODELS = ("gpt3", "llama-ep")
MAX_M = decode.MAX_M
TILES = "decode"          # the rows' "tiles" label
TILE_CFG = {"kernel": "decode"}
TIMEOUT_NS = 2_000_000_000


def dep_params(m: "sm80.Model") -> dict:
    """The .dep program's Params for the decode kernel's producer tiles: 64 output columns, one
    row tile of 64."""
    rows = decode.MAX_M
    if m.swiglu_epilogue:
        return {"H": m.H, "F": m.K2, "B": rows, "S": 1, "TileM": rows, "TileN1": decode.TILE_COLS, "TileN2": 128}
    return {"H": m.H, "B": rows, "S": 1, "TileM": rows, "TileN": decode.TILE_COLS}


def compiled_policies(m: "sm80.Model") -> dict:
    """{policy name: PolicyIR} of the model's .dep at the decode tiles."""
    import cusyncgen
    prog = cusyncgen.compile(examples_dir() / m.dep, params=dep_params(m))
    return {p.name: p for p in prog.policies}


def shapes(m: "sm80.Model") -> tuple:
    return (decode.GemmShape(m.N1, m.K1, "swiglu" if m.swiglu_epilogue else "gelu"),
            decode.GemmShape(m.N2, m.K2, "identity"))


def fits(model: str, M: int) -> bool:
    """Does the decode kernel run this (model, M)?"""
    return model in MODELS and 1 <= M <= MAX_M


def digest() -> str:
    """What a tune cache entry of the decode kernel was measured with: its cubin's name (the hash of
    its source, options and headers)."""
    from cusyncgen.cuda import build
    return build.build(decode.source()).stem


@dataclass(frozen=True)
class DecodeConfig:
    """A configuration of the decode kernel as the bench rows name it: `ordering` + "/decode"."""

    ordering: str

    @property
    def name(self) -> str:
        return self.ordering + DECODE


@dataclass
class MLPDecode(sm80.MLPOperands):
    """Both GeMMs of one model at M <= MAX_M rows on the decode kernel."""

    model_name: str
    M: int
    timeout_ns: int = TIMEOUT_NS
    shape: "decode.Shape | None" = None   # the kernel variant (None: decode.variant(M))
    split: str = "auto"   # decode.SPLITS: warp-K where it splits the rows evenly, else stream-K
    kernel = "sm90"
    _mlp: object = field(default=None, repr=False)

    def __post_init__(self):
        if self.model_name not in MODELS:
            raise CusyncError(f"the decode MLP has no model {self.model_name!r} (its models: {', '.join(MODELS)})", None)
        if not 1 <= self.M <= MAX_M:
            raise CusyncError(f"the decode MLP takes M = 1 to {MAX_M}, not {self.M}", None)
        self.model = sm80.MODELS[self.model_name]

    tiles = SimpleNamespace(label=TILES)   # the rows' tiles label (as the sm90 instances' Sm90Tiles)

    @property
    def runner(self) -> decode.DecodeMlp:
        if self._mlp is None:
            self._mlp = decode.DecodeMlp(self.M, shapes(self.model), compiled_policies(self.model), self.timeout_ns,
                                         self.shape, split=self.split)
        return self._mlp

    def configs(self) -> list["DecodeConfig"]:
        return [DecodeConfig(c) for c in decode.ORDERINGS]

    def buffers(self, seed: int | None = None):
        """The sm90 MLP's operands (row-major weights), packed here for a packed variant (so that no
        packing happens inside a captured graph)."""
        x, w1, w2 = super().buffers(seed)
        self.runner.prepare(w1, w2)
        return x, w1, w2

    def run(self, stream, cfg, x, w1, w2, y, z) -> None:
        """One MLP under `cfg` (a DecodeConfig, or an ORDERINGS name with or without "/decode")."""
        name = cfg if isinstance(cfg, str) else cfg.name
        self.runner.launch(stream, name.removesuffix(DECODE), x, w1, w2, y, z)

    def check_stages(self) -> None:
        msg = self.timed_out()
        if msg:
            raise CusyncError(f"decode MLP {self.model_name} M={self.M}: {next(iter(msg.values()))}", None)

    def timed_out(self) -> dict[str, str]:
        """{"*": the debug record} if a wait of any configuration timed out (after synchronizing)."""
        if self._mlp is None:
            return {}
        msg = self._mlp.timed_out()
        return {"*": msg} if msg else {}


def measure_point(model: str, M: int, iters: int, stream, seed: int = 0):
    """Every configuration of the decode MLP at (model, M): rows as the sm90 MLP's measure_point
    (checked against the float32 reference on poisoned outputs), tiles "decode"."""
    mlp = MLPDecode(model, M)
    with stream:
        rows, mlp, sets, outs, ref = sm80._measure(mlp, iters, stream, seed, None)
    stream.synchronize()
    return label_rows(rows, mlp.timed_out()), mlp, sets, outs, ref


def label_rows(rows: list[dict], timed_out: dict) -> list[dict]:
    """The decode kernel's bench rows with their split and tile fields; where a wait timed out
    (MLPDecode.timed_out), every chain row wrong, with the debug record (the record does not say
    which chain's launch gave up, and none of them can be trusted)."""
    for r in rows:
        r.update(splits="1/1", tile_cfg=dict(TILE_CFG))
        if timed_out and "+Chain" in r["config"]:
            r.update(correct=False, error=timed_out["*"])
    return rows
