"""The MLP on the Hopper (sm90) kernel family: the same models and .dep programs as
cusyncgen.workloads.mlp, run by the CUTLASS 3 based synchronized GeMM of runtime_cuda/sm90/
(a ctypes-loaded library, cusyncgen.cuda.sm90; docs/sm90.md).

    mlp = MLPSm90("gpt3", M=512, tile="128x192x64")
    x, w1, w2 = mlp.buffers(seed=0); y, z = mlp.outputs()
    mlp.run(stream, Config("RowSync", "persistent"), x, w1, w2, y, z)   # "RowSync+Chain"

Models: gpt3 and llama-ep (SwiGLU in the first GeMM's epilogue). LLaMA with SwiGLU computed in the
second GeMM's A load (mlp_llama.dep) has no sm90 kernel: its TMA loads A straight into shared
memory, with no register pass to apply it; use llama-ep, or `--kernel sm80`.

Configurations (Config names, as the sm80 family's): StreamSync and PDL alone (the same sm90
kernels in stream order), <Policy>+PDL (the consumer PDL-launched, waiting on tile semaphores) and
<Policy>+Chain (Ordering.PERSISTENT: one persistent launch holding both GeMMs, every producer tile
handed out before any consumer tile), for TileSync and RowSync; each also with split-K
("<name>/split-K", sm90.auto_splits' counts) where a GeMM's tiles leave SMs idle. The tile config
is the instance's (`tile`: one of sm90.CONFIGS); `cusyncgen bench` and `tune` measure every tile
config a model can use. Every configuration becomes launches the way every kernel family's does
(cusyncgen.cuda.chain.steps), here through sm90.Sm90Chain (mlp_chain: one library plan per
launch); the weights never wait in the DMA warp, so every policy configuration has R by
construction, and the consumer always walks the compiler's tile order (no T).

The models are the sm80 MLP's (cusyncgen.workloads.mlp.MODELS: one table); this module compiles
their .dep programs for the sm90 tiles (compiled_mlp, with the descriptors `python -m
cusyncgen.commands.sm90 build` writes beside the library for a machine without lark), picks their
tile orders and split-K, and makes the torch data of the GPU tests and probes (mlp_case).
"""
from __future__ import annotations

import itertools
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from cusyncgen.cuda import sm90
from cusyncgen.cuda.configs import PDL_ALONE, SM90_ORDERINGS, STREAM_SYNC, Config, Ordering
from cusyncgen import files
from cusyncgen.errors import CusyncError
from cusyncgen.workloads import mlp as sm80
from cusyncgen.workloads.base import DECODE, SPLIT_K, SWAP, family, rel_err
from cusyncgen.workloads import mlp_decode, mlp_swap
from cusyncgen.workloads.kernels import examples_dir

SIZES = sm80.SIZES
TEST_SIZES = (1, 200)   # tests/test_gpu_workloads_sm90.py: M = 1 and a multiple of no tile
TOL = sm80.TOL
POLICIES = sm90.POLICIES   # the policies its descriptors evaluate
# the models of cusyncgen.workloads.mlp.MODELS these kernels run
MODELS = ("gpt3", "llama-ep")
# the library's tile configs (runtime_cuda/sm90/configs.def; "pp": ping-pong, "tma": the TMA-store epilogue)
CONFIGS = sm90.CONFIGS
# a wait longer than this gives up and Sm90Chain.check_debug raises (a deadlock is an error, not a hang)
TIMEOUT_NS = 2_000_000_000
SPLITS = ("none", "auto")


def check_model(model: str) -> None:
    if model == "llama":
        raise CusyncError("llama (SwiGLU in the second GeMM's A load, mlp_llama.dep) has no sm90 kernel: the "
                          "sm90 GeMM loads A by TMA straight into shared memory; use llama-ep (SwiGLU in the "
                          "first GeMM's epilogue) or --kernel sm80", None)
    if model not in MODELS:
        raise CusyncError(f"the sm90 MLP has no model {model!r} (its models: {', '.join(MODELS)})", None)


_dims = sm90.tile_dims


def fits_gemm(model: str, tile: str, gemm: int) -> bool:
    """Does a tile config fit one of the model's GeMMs (1 or 2): its N a multiple of BN, and for
    llama-ep's first BN = 128 (its weight's [W1|V] interleaving by 64)?"""
    m = sm80.MODELS[model]
    try:
        bm, bn, _ = _dims(tile)
    except ValueError:
        return False
    if gemm == 1:
        return not (m.N1 % bn or (m.swiglu_epilogue and bn != 2 * sm80.LLAMA_EP_BLOCK))
    return not m.N2 % bn


def fits(model: str, tile: str) -> bool:
    """Does a tile config fit both of the model's GeMMs (fits_gemm)?"""
    return fits_gemm(model, tile, 1) and fits_gemm(model, tile, 2)


# 64-row tiles only up to this M: past it they ran at 0.3-0.67 of cuBLAS on the H100 (GPT-3 at
# M = 512: 0.38 in the row-major order, 0.65 grouped), never the fastest (docs/design.md, 'Hopper:
# the tile order').
SMALL_TILE_MAX_M = 256
# Below this M the GeMMs stream their weights (memory-bound) and store few tiles: the register
# epilogue's stores are not on the critical path there (docs/sm90.md).
TMA_STORE_MIN_M = 256


def tile_candidates(model: str, M: int, configs=CONFIGS, gemm: int | None = None) -> list[str]:
    """The tile configs of `configs` that fit the model (fits; fits_gemm for one GeMM), a 256-row
    tile only where M fills more than one 128-row tile, a 64-row tile only up to SMALL_TILE_MAX_M,
    the TMA-store epilogue only from TMA_STORE_MIN_M on."""
    check_model(model)
    ok = (lambda c: fits(model, c)) if gemm is None else (lambda c: fits_gemm(model, c, gemm))
    return [c for c in configs if ok(c) and not (_dims(c)[0] > 128 and M <= 128)
            and not (_dims(c)[0] < 128 and M > SMALL_TILE_MAX_M)
            and not (c.endswith("tma") and M < TMA_STORE_MIN_M)]


def default_tile(model: str, M: int) -> str:
    """The tile config of an instance made without one (the Python API before a tune): 64-row
    tiles up to M = 64, then 128x192 for GPT-3 (its widths fill the 132 SMs: docs/sm90.md) and
    128x128 for llama-ep, with the TMA-store epilogue from TMA_STORE_MIN_M on (1.095x the register
    epilogue's speed on the GeMMs alone there, geomean: docs/design.md, 'Hopper: the TMA-store
    epilogue')."""
    check_model(model)
    if M <= 64:
        return "64x128x64"
    base = "128x192x64" if model == "gpt3" else "128x128x64"
    return base + "tma" if M >= TMA_STORE_MIN_M else base


@dataclass(frozen=True)
class Sm90Config:
    """A configuration of the sm90 MLP: the launch ordering and policy (a Config) and the split-K
    counts ("none", or "auto": sm90.auto_splits per GeMM)."""

    base: Config
    splits: str = "none"

    def __post_init__(self):
        if self.splits not in SPLITS:
            raise CusyncError(f"splits: one of {', '.join(SPLITS)}, not {self.splits!r}", None)
        if self.base.ordering not in SM90_ORDERINGS:
            raise CusyncError(f"{self.base.name}: the sm90 kernels have no {self.base.ordering.value} ordering (they "
                              "have StreamSync, PDL, <Policy>+PDL and <Policy>+Chain)", None)
        if self.base.policy is not None and self.base.policy not in POLICIES:
            raise CusyncError(f"{self.base.name}: the sm90 kernels have no policy {self.base.policy} (they have "
                              f"{', '.join(POLICIES)})", None)

    @property
    def name(self) -> str:
        return self.base.name + (SPLIT_K if self.splits != "none" else "")

    @property
    def policy(self):
        return self.base.policy

    @property
    def ordering(self) -> Ordering:
        return self.base.ordering

    @classmethod
    def parse(cls, name: str) -> "Sm90Config":
        return cls(Config.parse(name.removesuffix(SPLIT_K)), "auto" if name.endswith(SPLIT_K) else "none")


def config_of(ordering: Ordering, policy: str | None = None) -> Config:
    """The Config of an sm90 ordering: StreamSync or PDL alone (no policy; `policy` ignored), or
    <policy>+PDL or <policy>+Chain."""
    ordering = Ordering(ordering)
    if ordering in (Ordering.PDL, Ordering.PERSISTENT):
        return Config(policy, ordering, True)
    return Config(None, ordering, False)


def configs_for(splits=("none",)) -> list[Sm90Config]:
    """StreamSync, PDL alone, then per policy <Policy>+PDL and <Policy>+Chain; per split choice."""
    out = []
    for sp in splits:
        out += [Sm90Config(STREAM_SYNC, sp), Sm90Config(PDL_ALONE, sp)]
        for p in POLICIES:
            out += [Sm90Config(Config(p, Ordering.PDL, True), sp), Sm90Config(Config(p, Ordering.PERSISTENT, True), sp)]
    return out


@dataclass(frozen=True)
class Sm90Tiles:
    """The tile config of an instance and its tile orders: the first GeMM in the banded order
    (sm90.banded_order: "B1") or the grouped order ("G1"), the second in the grouped order ("G2") or in the banded order with the
    first's band height ("B2"), with the `label` rows carry (as the sm80 MlpTiles). `config2`: the
    second GeMM's own tile config (None: `config`; label "<config>+<config2>"): two launches, so no
    Chain ordering."""

    config: str
    grouped2: bool = False
    banded1: bool = False
    banded2: bool = False
    grouped1: bool = False
    config2: str | None = None

    def __post_init__(self):
        if self.config2 == self.config:
            object.__setattr__(self, "config2", None)
        if self.grouped2 and self.banded2:
            raise CusyncError("the second GeMM walks one order: grouped2 or banded2, not both", None)
        if self.grouped1 and self.banded1:
            raise CusyncError("the first GeMM walks one order: grouped1 or banded1, not both", None)
        if self.grouped1 and self.banded2:
            raise CusyncError("banded2 walks the first GeMM's bands: not with grouped1", None)

    @property
    def tile2(self) -> str:
        """The second GeMM's tile config."""
        return self.config2 or self.config

    @property
    def label(self) -> str:
        return (self.config + (f"+{self.config2}" if self.config2 else "") + (" G1" if self.grouped1 else "")
                + (" B1" if self.banded1 else "") + (" G2" if self.grouped2 else "") + (" B2" if self.banded2 else ""))

    @classmethod
    def from_dict(cls, d: dict) -> "Sm90Tiles":
        """The inverse of as_dict (a dispatch entry's tile fields)."""
        return cls(d["config"], d.get("grouped2", False), d.get("banded1", False), d.get("banded2", False),
                   d.get("grouped1", False), d.get("config2"))

    def as_dict(self, splits=("1", "1")) -> dict:
        """The dispatch table's tile fields (templates/dispatch.h.j2 reads g1.BM, g1.BN, g2.BM, g2.BN)."""
        bm, bn, _ = _dims(self.config)
        bm2, bn2, _ = _dims(self.tile2)
        return {"config": self.config, "config2": self.config2, "grouped1": self.grouped1, "grouped2": self.grouped2,
                "banded1": self.banded1, "banded2": self.banded2, "splits": [str(v) for v in splits], "g1": {"BM": bm, "BN": bn},
                "g2": {"BM": bm2, "BN": bn2}}


# The L2-friendly orders (docs/sm90.md, "The grouped order" and "The banded order"), in every
# ordering, stream orders included, from the M where a GeMM's tiles span several row blocks. Past
# one 64-row tile (GROUPED1_MAX_M > M >= GROUPED_MIN_M) both GeMMs also walk the grouped order (G1
# G2): the producer is then about one wave, its rows complete together whatever its order, and even
# within one wave the order matters (GPT-3's first GeMM at M = 128 on 64x128 tiles: 83 us
# row-major, 61 us grouped, H100; design.md). From GROUPED2_MIN_M the second GeMM walks the grouped
# order by default; from BANDED1_MIN_M the first (the producer) the banded order, which still
# completes row blocks early, band by band, and the second either grouped (its first wave spans every
# row: it waits for the producer's last band) or banded with the same bands (its first items read the
# band the producer completes first). Measured on the H100: the best configuration at every M >= 256
# used them (docs/design.md, 'Hopper: the tile order').
GROUPED_MIN_M = 65      # past one 64-row tile
GROUPED2_MIN_M = 256
BANDED1_MIN_M = 512
GROUPED1_MAX_M = 1024   # G1 G2 up to here (a longer producer should complete rows early: B1)


def orders_for(M: int) -> list[tuple[bool, bool, bool, bool]]:
    """The (grouped2, banded1, banded2, grouped1) orders an MLP is measured in at this M, the
    default first."""
    g1g2 = (True, False, False, True)
    if M < GROUPED_MIN_M:
        return [(False, False, False, False)]
    if M < GROUPED2_MIN_M:
        return [(False, False, False, False), g1g2]
    if M < BANDED1_MIN_M:
        return [(True, False, False, False), g1g2]
    out = [(True, True, False, False), (False, True, True, False)]
    return out + [g1g2] if M <= GROUPED1_MAX_M else out


def candidates(model: str, M: int, configs=CONFIGS, per_gemm: tuple | None = None) -> list[Sm90Tiles]:
    """What `cusyncgen bench` and `tune` measure at one (model, M): every tile config
    (tile_candidates) in each of the orders of orders_for(M); and, where `per_gemm` (the tile config
    each GeMM alone ran fastest on, gemm_rows) differs, that pair (the first GeMM on its tile, the
    second on its own) in the same orders."""
    out = [Sm90Tiles(t, *o) for t in tile_candidates(model, M, configs) for o in orders_for(M)]
    if per_gemm is not None and per_gemm[0] != per_gemm[1] and None not in per_gemm:
        out += [Sm90Tiles(per_gemm[0], *o, config2=per_gemm[1]) for o in orders_for(M)]
    return out


# ---- the compiled programs, the GeMMs and their chain ----

def model_of(model) -> "sm80.Model":
    """A model of this family by name (check_model), or a Model itself (the overhead benchmark's)."""
    if isinstance(model, sm80.Model):
        return model
    check_model(model)
    return sm80.MODELS[model]


def epilogue1(m: "sm80.Model") -> "sm90.Epilogue":
    """The first GeMM's epilogue: llama-ep's SwiGLU of its [W1|V] pairs, else GeLU (tanh)."""
    return sm90.EPI_SWIGLU_PAIR if m.swiglu_epilogue else sm90.EPI_GELU_TANH


def gemm_shapes(m: "sm80.Model") -> tuple:
    """(N, K) of the two GeMMs."""
    return (m.N1, m.K1), (m.N2, m.K2)


def dep_params(m: "sm80.Model", M: int, config: str) -> dict:
    """The .dep program's Params for M rows on a tile config (rows rounded up to whole row tiles)."""
    bm, bn, _ = _dims(config)
    rows = -(-M // bm) * bm
    if m.swiglu_epilogue:
        if bn != 2 * sm90.SWIGLU_BLOCK:
            raise sm90.Sm90Error(f"{m.name}'s first GeMM tile must be {2 * sm90.SWIGLU_BLOCK} wide (its weight's "
                                 f"interleaving); config {config} is {bn}")
        return {"H": m.H, "F": m.K2, "B": rows, "S": 1, "TileM": bm, "TileN1": bn // 2, "TileN2": bn}
    return {"H": m.H, "B": rows, "S": 1, "TileM": bm, "TileN": bn}


# The sizes whose descriptors `python -m cusyncgen.commands.sm90 build` also writes (DESCRIPTORS
# beside the library), for a GPU machine without the compiler's parser (lark): the benchmark's M
# list and the GPU tests'.
DESCRIPTOR_MS = (1, 64, 128, 200, 256, 512, 1024, 2048, 4096)
DESCRIPTORS = "descriptors.json"


def _compile(m: "sm80.Model", M: int, config: str):
    import cusyncgen

    prog = cusyncgen.compile(examples_dir() / m.dep, params=dep_params(m, M, config))
    pols = {p.name: p for p in prog.policies}
    return pols, prog.program.order("g1"), prog.program.order("g2")


def write_descriptors(path: Path) -> Path:
    """The compiled policies and orders of every model at DESCRIPTOR_MS on every tile config it
    fits, as JSON."""
    import dataclasses
    import json

    out = []
    for name in MODELS:
        m = sm80.MODELS[name]
        for config in CONFIGS:
            if not fits_gemm(name, config, 1):
                continue
            for M in DESCRIPTOR_MS:
                pols, o1, o2 = _compile(m, M, config)
                out.append({"model": name, "M": M, "config": config,
                            "policies": [dataclasses.asdict(p) for p in pols.values()],
                            "orders": [dataclasses.asdict(o1), dataclasses.asdict(o2)]})
    path.write_text(json.dumps(out))
    return path


@lru_cache(maxsize=None)
def _stored_descriptors() -> dict:
    import json

    from cusyncgen.ir import DimMap, OrderIR, PolicyIR

    path = sm90.library_path().parent / DESCRIPTORS
    if not path.is_file():
        return {}
    table = {}
    for e in json.loads(path.read_text()):
        pols = {}
        for p in e["policies"]:
            p = dict(p)
            p["dims"] = tuple(DimMap(**d) for d in p["dims"])
            p["producer_extent"] = tuple(p["producer_extent"])
            pols[p["name"]] = PolicyIR(**p)
        o1, o2 = (OrderIR(**{**o, "extent": tuple(o["extent"])}) for o in e["orders"])
        table[(e["model"], e["M"], e["config"])] = (pols, o1, o2)
    return table


@lru_cache(maxsize=None)
def compiled_mlp(model, M: int, config: str):
    """The compiled .dep program of the MLP at this size and tile: (policies by name, g1 order,
    g2 order). Without the parser (a GPU machine lacking lark), the descriptors that the build
    command wrote from the same compilation."""
    m = model_of(model)
    try:
        import lark  # noqa: F401
    except ImportError:
        hit = _stored_descriptors().get((m.name, M, config))
        if hit is None:
            raise sm90.Sm90Error(f"lark is not installed and {DESCRIPTORS} beside the library has no entry for "
                                 f"{m.name} M={M} {config}") from None
        return hit
    return _compile(m, M, config)


def mlp_splits(model, M: int, config: str, splits="none", config2: "str | None" = None) -> tuple:
    """Split-K of an MLP's two GeMMs, a pair of sm90.Splits: "none", "auto" (sm90.auto_splits of
    each, on its own tile config: config, and config2 for the second where given), or a pair of
    Splits / (S, start) / ints."""
    if splits == "none" or splits is None:
        return (sm90.NO_SPLIT, sm90.NO_SPLIT)
    m = model_of(model)
    if splits == "auto":
        out = []
        for (N, K), c in zip(gemm_shapes(m), (config, config2 or config)):
            cm, (_, bn, bk) = sm90.cluster_m(c), _dims(c)
            out.append(sm90.auto_splits(cm * (N // bn) * sm90.order_grid(c, M, N)[1], K // bk, sms=132 // cm * cm))
        return tuple(out)
    s1, s2 = (sm90.as_split(v) for v in splits)
    return (s1, s2)


def gemm_orders(model, M: int, tiles: Sm90Tiles, o1, o2) -> tuple:
    """The sm90.Order each GeMM walks: the compiler's (o1, o2; the second's only on the first's tile,
    else row-major), or the grouped or banded order `tiles` names, sized by grouped_columns and
    band_rows for a wave of the 132 SMs (B2: the first GeMM's band height, where it is banded)."""
    m = model_of(model)
    (_, K1), (N2, K2) = gemm_shapes(m)
    config, c2 = tiles.config, tiles.tile2
    bm, bn, _ = _dims(config)
    bm2, bn2, _ = _dims(c2)
    cm = sm90.cluster_m(config)
    d1 = sm90.cluster_order(sm90.order_desc(o1), config)
    # the compiler's consumer order is for the producer's tile; with a tile of its own, row-major
    d2 = (sm90.cluster_order(sm90.order_desc(o2), config) if tiles.config2 is None
          else sm90.row_major_order(*sm90.order_grid(c2, M, N2)))
    band1 = None
    if tiles.grouped1:
        X1, Y1 = d1.extent[0], d1.extent[1]
        d1 = sm90.grouped_order(X1, Y1, sm90.grouped_columns(X1, Y1, cm * bm * K1 * 2.0, bn * K1 * 2.0, 132 // cm))
    if tiles.banded1:
        X1, Y1 = d1.extent[0], d1.extent[1]
        d1 = sm90.banded_order(X1, Y1, sm90.band_rows(X1, Y1, cm * bm * K1 * 2.0, bn * K1 * 2.0, 132 // cm))
        band1 = d1.group_stride
    if tiles.banded2:
        X2, Y2 = d2.extent[0], d2.extent[1]
        # the first GeMM's band height in the second's row blocks (at least one)
        R = (max(1, band1 * bm // bm2) if band1 is not None
             else sm90.band_rows(X2, Y2, cm * bm2 * K2 * 2.0, bn2 * K2 * 2.0, 132 // cm))
        d2 = sm90.banded_order(X2, Y2, min(R, Y2))
    if tiles.grouped2:
        X2, Y2 = d2.extent[0], d2.extent[1]
        d2 = sm90.grouped_order(X2, Y2, sm90.grouped_columns(X2, Y2, cm * bm2 * K2 * 2.0, bn2 * K2 * 2.0, 132 // cm))
    return d1, d2


def chain_name(cfg: Config, tiles: Sm90Tiles, splits=(sm90.NO_SPLIT, sm90.NO_SPLIT), store: str = "pair") -> str:
    """A chain's name in messages: "sm90 <tiles' label> [splitK<S1>/<S2>] [<store>-store] <config>"."""
    head = f"sm90 {tiles.label}"
    if sm90.has_split(splits):
        head += f" splitK{splits[0]}/{splits[1]}"
    if store != "pair":
        head += f" {store}-store"
    return f"{head} {cfg.name}"


def mlp_chain_name(model, M: int, cfg, tiles: Sm90Tiles, splits="none", store: str = "pair") -> str:
    """The name mlp_chain's chain of these arguments has (chain_name), without building it."""
    if isinstance(cfg, Sm90Config):
        cfg, splits = cfg.base, cfg.splits
    return chain_name(cfg, tiles, mlp_splits(model_of(model), M, tiles.config, splits, tiles.config2), store)


def mlp_chain(model, M: int, cfg, tiles: Sm90Tiles, buffers, splits="none", store: str = "pair",
              timeout_ns: int = 0) -> "sm90.Sm90Chain":
    """One MLP as an sm90.Sm90Chain over given device buffers (ints), `buffers` = (X [M, H], W1 [N1, H],
    W2 [H, F], Y [M, F] the intermediate, Z [M, H]); fp16, row-major. cfg: a Config (one of
    SM90_ORDERINGS) or an Sm90Config (its splits); tiles: the tile config(s) and orders; splits:
    "none", "auto" or a pair (mlp_splits); store: "pair" (fp16-pair stores, the default) or "quad"
    (16-byte stores, for A/B). The policies stay the producer's, compiled for its tile; with a tile
    config of its own, each consumer tile waits on the producer row blocks its rows overlap."""
    if isinstance(cfg, Sm90Config):
        cfg, splits = cfg.base, cfg.splits
    m = model_of(model)
    X, W1, W2, Y, Z = buffers
    (N1, K1), (N2, K2) = gemm_shapes(m)
    c1, c2 = tiles.config, tiles.tile2
    for c in (c1, c2):
        if c not in CONFIGS:
            raise sm90.Sm90Error(f"unknown tile config {c!r} (have {', '.join(CONFIGS)})")
    if N2 % _dims(c2)[1]:
        raise sm90.Sm90Error(f"{m.name}'s second GeMM (N = {N2}) is no multiple of {c2}'s tile width")
    if store not in sm90.STORES:
        raise sm90.Sm90Error(f"unknown store mode {store!r} (have {', '.join(sm90.STORES)})")
    pols, o1, o2 = compiled_mlp(m, M, c1)
    sp = mlp_splits(m, M, c1, splits, tiles.config2)
    d1, d2 = gemm_orders(m, M, tiles, o1, o2)
    st = sm90.STORES[store]
    links = [sm90.Link(c1, sm90.gemm_desc(X, W1, Y, M, N1, K1, c1, epilogue1(m), d1, splits=sp[0], store=st)),
             sm90.Link(c2, sm90.gemm_desc(Y, W2, Z, M, N2, K2, c2, sm90.EPI_IDENTITY, d2, splits=sp[1], store=st))]
    policies = [pols[cfg.policy]] if cfg.policy in pols else []   # Sm90Chain names a policy it lacks
    return sm90.Sm90Chain(cfg, links, policies, timeout_ns=timeout_ns, name=chain_name(cfg, tiles, sp, store))


# ---- torch data: the GPU tests', the sanitizer runs' and the probes' ----

def mlp_case(model, M: int, seed: int = 0):
    """Fresh random operands of one MLP on the GPU and its reference (torch tensors): X [M, H], W1
    [N1, H], W2 [H, F] fp16 (scaled so that the outputs stay O(1)), the intermediate Y as fp16 from a
    float32 product (GeLU tanh, or llama-ep's SwiGLU pair of [W1|V] interleaved by 64), and Z = Y W2^T
    in float32."""
    import torch

    m = model_of(model)
    g = torch.Generator(device="cuda").manual_seed(seed)
    X = torch.randn(M, m.H, device="cuda", generator=g).half()
    W1 = (torch.randn(m.N1, m.H, device="cuda", generator=g) / m.H ** 0.5).half()
    W2 = (torch.randn(m.H, m.K2, device="cuda", generator=g) / m.K2 ** 0.5).half()
    return (X, W1, W2) + mlp_reference(m, X, W1, W2)


def mlp_reference(model, X, W1, W2) -> tuple:
    """(Y, Z) of one MLP on torch tensors: Y fp16 from a float32 product and the model's activation,
    Z = Y W2^T in float32 (mlp_case's reference, for other inputs)."""
    import torch.nn.functional as Fn

    m = model_of(model)
    A = X.float() @ W1.float().t()
    if m.swiglu_epilogue:
        a4 = A.view(X.shape[0], m.N1 // (2 * sm90.SWIGLU_BLOCK), 2, sm90.SWIGLU_BLOCK)
        Y = (Fn.silu(a4[:, :, 0]) * a4[:, :, 1]).reshape(X.shape[0], m.K2).half()
    else:
        Y = Fn.gelu(A, approximate="tanh").half()
    return Y, Y.float() @ W2.float().t()


def torch_rel_err(out, ref) -> float:
    """Relative Frobenius error of a torch tensor against a float32 reference; inf on a NaN/inf
    (base.rel_err's, for torch tensors)."""
    o = out.float()
    if not bool(o.isfinite().all()):
        return float("inf")
    return float((o - ref).norm() / ref.norm().clamp_min(1e-30))


@dataclass
class MLPSm90(sm80.MLPOperands):
    """Both GeMMs of one model at one M on one sm90 tile config."""

    # the registry entry (cusyncgen.workloads.base.Workload)
    name = "mlp"
    vendor = "cuBLAS"
    kernel = "sm90"
    orderings = SM90_ORDERINGS
    models = MODELS
    sizes = SIZES
    bench_options = ()
    tune_mode = "measure"

    model_name: str
    M: int
    tile: str | None = None
    grouped2: bool | None = None   # the second GeMM walks sm90.grouped_order (None: orders_for's default)
    banded1: bool | None = None    # the first GeMM walks sm90.banded_order (None: orders_for's default)
    banded2: bool | None = None    # the second GeMM walks the first's bands (None: orders_for's default)
    timeout_ns: int = TIMEOUT_NS
    tile2: str | None = None       # the second GeMM's own tile config (None: `tile`; no Chain then)
    grouped1: bool | None = None   # the first GeMM walks sm90.grouped_order (None: orders_for's default)
    _runners: dict = field(default_factory=dict, repr=False)

    @classmethod
    def sources(cls, sizes=None, tune: bool = False) -> list:
        """No per-shape modules: one library holds every tile config (`python -m cusyncgen.commands.sm90
        build`, cached by its sources' hash; CUSYNC_SM90_LIB names a prebuilt one)."""
        return []

    @classmethod
    def bench(cls, models=None, sizes=None, iters: int = 30, progress: bool = True) -> dict:
        return bench(models, sizes, iters, progress)

    @classmethod
    def tune(cls, models, sizes, iters: int, cache_path, progress: bool = True, device: str | None = None) -> dict:
        return tune(list(models or MODELS), list(sizes or SIZES), iters, cache_path, progress, device)

    def __post_init__(self):
        check_model(self.model_name)
        self.tile = self.tile or default_tile(self.model_name, self.M)
        if not fits(self.model_name, self.tile):
            raise CusyncError(f"{self.model_name}: tile config {self.tile!r} does not fit its GeMMs (those that do: "
                              f"{', '.join(c for c in CONFIGS if fits(self.model_name, c))})", None)
        self.model = sm80.MODELS[self.model_name]   # shapes, reference and vendor rows: the sm80 model's
        g2, b1, b2, g1 = orders_for(self.M)[0]
        self.grouped1 = g1 if self.grouped1 is None else self.grouped1
        self.grouped2 = g2 if self.grouped2 is None else self.grouped2
        self.banded1 = b1 if self.banded1 is None else self.banded1
        self.banded2 = b2 if self.banded2 is None else self.banded2
        if self.tile2 is not None:
            if not fits_gemm(self.model_name, self.tile2, 2):
                raise CusyncError(f"{self.model_name}: tile config {self.tile2!r} does not fit its second GeMM", None)
            if self.tile2 == self.tile:
                self.tile2 = None
        self.tiles = Sm90Tiles(self.tile, self.grouped2, self.banded1, self.banded2, self.grouped1, self.tile2)
        lib = sm90.library()
        for t in (self.tile, self.tiles.tile2):
            if t not in lib.configs:
                raise CusyncError(f"the sm90 library has no tile config {t} (it has {', '.join(lib.configs)})", None)
        self._split_counts = {sp: mlp_splits(self.model_name, self.M, self.tile, sp, self.tile2) for sp in SPLITS}

    def splits_of(self, splits: str) -> tuple:
        """The pair of sm90.Splits of "none" or "auto"."""
        return self._split_counts[splits]

    def configs(self) -> list[Sm90Config]:
        """Every ordering x policy, also with split-K where auto_splits splits a GeMM at this M; no
        Chain where the GeMMs have tile configs of their own (the chain is one kernel)."""
        out = configs_for([sp for sp in SPLITS if sp == "none" or sm90.has_split(self.splits_of(sp))])
        return [c for c in out if not (self.tile2 and c.ordering == Ordering.PERSISTENT)]

    def _runner(self, cfg: Sm90Config, x, w1, w2, y, z):
        from cusyncgen.cuda.lazy import cupy
        ptrs = (x.data.ptr, w1.data.ptr, w2.data.ptr, y.data.ptr, z.data.ptr)
        key = (cfg,) + ptrs
        r = self._runners.get(key)
        if r is None:
            r = mlp_chain(self.model_name, self.M, cfg, self.tiles, ptrs, timeout_ns=self.timeout_ns)
            cupy.cuda.runtime.deviceSynchronize()   # its semaphores are zeroed on another stream
            self._runners[key] = r
        return r

    def run(self, stream, cfg, x, w1, w2, y, z) -> None:
        """One MLP under `cfg` (an Sm90Config, or a Config: no split-K) on `stream` (a CuPy stream)."""
        if isinstance(cfg, Config):
            cfg = Sm90Config(cfg)
        self._runner(cfg, x, w1, w2, y, z).launch(stream.ptr)

    def __call__(self, x, cfg=Config("RowSync", Ordering.PERSISTENT, True), weights=None):
        from cusyncgen.cuda.lazy import cupy
        x = cupy.asarray(x)
        w1, w2 = (cupy.asarray(w) for w in weights)
        y, z = self.outputs()
        self.run(cupy.cuda.get_current_stream(), cfg, x, w1, w2, y, z)
        return z

    def check_stages(self) -> None:
        """Raise if a wait of any run so far timed out (after synchronizing)."""
        for r in self._runners.values():
            r.check_debug()

    def timed_out(self) -> dict[str, str]:
        """{configuration name: the chain's debug record} of each configuration one of whose runs had
        a wait time out (after synchronizing)."""
        out = {}
        for (cfg, *_), r in self._runners.items():
            msg = r.timed_out()
            if msg:
                out[cfg.name] = msg
        return out


# ---- the benchmark ----

def _with_splits(rows: list[dict], mlp: MLPSm90) -> list[dict]:
    for r in rows:
        sp = "auto" if r["config"].endswith(SPLIT_K) else "none"
        r["splits"] = "/".join(map(str, mlp.splits_of(sp)))
        r["tile_cfg"] = mlp.tiles.as_dict(mlp.splits_of(sp))
    return rows


def measure_point(model: str, M: int, iters: int, stream, seed: int = 0, tile: str | None = None,
                  grouped2: bool | None = None, banded1: bool | None = None, banded2: bool | None = None,
                  tile2: str | None = None, grouped1: bool | None = None):
    """Every configuration of one (model, M, tile config(s), orders; None: orders_for(M)): rows (each
    checked against the float32 reference on poisoned outputs, as the sm80 MLP's), and the MLP."""
    mlp = MLPSm90(model, M, tile, grouped2, banded1, banded2, tile2=tile2, grouped1=grouped1)
    with stream:
        rows, mlp, sets, outs, ref = sm80._measure(mlp, iters, stream, seed, None)
    stream.synchronize()
    for name, err in mlp.timed_out().items():   # a wait gave up: that configuration is wrong, whatever it computed
        for r in rows:
            if r["config"] == name:
                r.update(correct=False, error=err)
    return _with_splits(rows, mlp), mlp, sets, outs, ref


# The stream orders of the sm90 MLP: StreamSync and PDL alone on the CUTLASS kernels (with and
# without split-K), on the decode kernel and on the swapped GeMM.
STREAM_SYNCS = ("StreamSync", "StreamSync" + SPLIT_K, "StreamSync" + DECODE, "StreamSync" + SWAP)


def rebase(rows: list[dict]) -> float:
    """Every row's speed-up over the fastest correct StreamSync among them (all tile configs, with and
    without split-K, the decode kernel's, the swapped GeMM's: the sm90 kernels in stream order).
    Returns that time."""
    ss = [r for r in rows if r["config"] in STREAM_SYNCS]
    base = min(r["time_us"] for r in ([r for r in ss if r["correct"]] or ss))
    for r in rows:
        r["speedup_vs_streamsync"] = round(base / r["time_us"], 4)
    return base


def gemm_rows(model: str, M: int, configs, bufs, stream, iters: int) -> list[dict]:
    """Each GeMM of the MLP alone (identity epilogue), on the fastest correct of the tile configs of
    `configs` that fit it (tile_candidates of that GeMM), in the compiler's row-major order and in
    the grouped order (sm90.grouped_order: nothing waits on a GeMM alone), each with and without
    split-K (sm90.auto_splits, a split-K tail where whole waves fill the SMs), against cuBLAS
    (torch.matmul in a CUDA graph) on the same operands. Each row's "tile" is the config its GeMM
    ran fastest on (per_gemm_tiles)."""
    from cusyncgen.cuda import baselines, timing
    from cusyncgen.cuda.lazy import cupy, torch

    m = sm80.MODELS[model]
    x, w1, w2 = bufs
    y_in = (cupy.random.RandomState(M).standard_normal((M, m.K2), dtype=cupy.float32)).astype(cupy.float16)
    out = []
    for gemm, (a, b, N, K) in enumerate([(x, w1, m.N1, m.K1), (y_in, w2, m.N2, m.K2)], start=1):
        c = cupy.full((M, N), cupy.nan, dtype=cupy.float16)
        ref = a.astype(cupy.float32) @ b.astype(cupy.float32).T
        best = None
        for tile in tile_candidates(model, M, configs, gemm):
            bm, bn, bk = _dims(tile)
            X, Y = sm90.order_grid(tile, M, N)
            orders = {"": sm90.row_major_order(X, Y),
                      " G": sm90.grouped_order(X, Y, sm90.grouped_columns(X, Y, bm * K * 2.0, bn * K * 2.0))}
            for (oname, order), S in itertools.product(orders.items(), {sm90.NO_SPLIT, sm90.auto_splits(X * Y, K // bk)}):
                plan = sm90.Plan(tile, [sm90.gemm_desc(a.data.ptr, b.data.ptr, c.data.ptr, M, N, K, tile, order=order,
                                                       splits=S)])
                with stream:
                    c.fill(cupy.nan)
                    plan.launch(stream.ptr)
                    stream.synchronize()
                    err = rel_err(c, ref)
                    g = timing.capture(lambda s, plan=plan: plan.launch(s.ptr), stream)
                    t = timing.median(timing.time_graphs([g], stream, iters=iters))
                del g, plan
                if err < TOL and (best is None or t < best[0]):
                    best = (t, tile + oname, S, err)
        ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
        cub = baselines.graph_time(lambda: ta @ tb.T, iters)
        flops = 2 * M * N * K
        row = {"model": model, "M": M, "gemm": gemm, "kernel": "sm90", "N": N, "K": K, "cublas_us": round(cub, 2),
               "cublas_tflops": round(flops / cub / 1e6, 1)}
        if best is None:
            row.update(ours_us=None, correct=False, config=None)
        else:
            t, tile, S, err = best
            row.update(ours_us=round(t, 2), ours_tflops=round(flops / t / 1e6, 1),
                       config=tile + (f" splitK{S}" if S.S > 1 else ""), tile=tile.split()[0], grouped=tile.endswith(" G"),
                       splits=str(S), correct=True, rel_err=err)
        out.append(row)
        del c
    return out


def per_gemm_tiles(grows: list[dict]) -> tuple:
    """(first GeMM's tile config, second's) of one point's gemm_rows: what each ran fastest on alone
    (None where none ran correctly)."""
    by = {r["gemm"]: (r.get("tile") if r.get("correct") else None) for r in grows}
    return by.get(1), by.get(2)


def bench(models=None, sizes=None, iters: int = 30, progress: bool = True) -> dict:
    """Every model and M: each GeMM alone (best tile) against cuBLAS; then on every tile config the
    model can use, and on the pair of tile configs the GeMMs alone ran fastest on (per_gemm_tiles),
    in each order of orders_for(M), StreamSync, PDL alone, each policy +PDL and +Chain (with split-K
    where it applies); cuBLAS (eager, graph: each the fastest correct vendor form, sm80.vendor_forms)
    and the floor. Every row has "kernel": "sm90"."""
    from cusyncgen.cuda import baselines, driver
    from cusyncgen.cuda.lazy import cupy

    models = models.split(",") if isinstance(models, str) else list(models or MODELS)
    for m in models:
        check_model(m)
    sizes = list(sizes or SIZES)
    dev = driver.device_name()
    ceil = baselines.ceilings()
    lib_configs, lib_swap = sm90.library().configs, sm90.library().swap_configs
    rows, grows = [], []
    stream = cupy.cuda.Stream()
    work = [(m, M) for m in models for M in sizes]
    for i, (model, M) in enumerate(work):
        t0 = time.time()
        gbufs = MLPSm90(model, M).buffers(seed=1000 * i)
        point_g = gemm_rows(model, M, lib_configs, gbufs, stream, iters)
        grows += point_g
        del gbufs
        point, keep = [], None
        for cand in candidates(model, M, lib_configs, per_gemm_tiles(point_g)):
            pr, mlp, sets, outs, ref = measure_point(model, M, iters, stream, seed=1000 * i, tile=cand.config,
                                                     grouped2=cand.grouped2, banded1=cand.banded1,
                                                     banded2=cand.banded2, tile2=cand.config2,
                                                     grouped1=cand.grouped1)
            point += pr
            if keep is None:
                keep = (mlp, sets, ref)
            else:
                del mlp, sets, outs
        if mlp_decode.fits(model, M):   # the decode kernel beside them
            drows, dmlp, *_ = mlp_decode.measure_point(model, M, iters, stream, seed=1000 * i)
            point += drows
            del dmlp
        if mlp_swap.fits(model, M):   # and the swapped GeMM
            point += mlp_swap.measure_point(model, M, iters, stream, seed=1000 * i, configs=lib_swap)
        base = rebase(point)
        rows += point
        mlp, sets, ref = keep
        vendor = sm80.vendor_rows(mlp.model, M, sets[0], ref, base, iters, ceil)
        rows += [dict(r, kernel="sm90") for r in vendor]
        if progress:
            best = min((r for r in point if r["correct"]), key=lambda r: r["time_us"], default=None)
            cb = next(r for r in vendor if r["config"] == "cuBLAS+graph")
            print(f"[{i + 1}/{len(work)}] {model} M={M} (sm90): StreamSync {base:.1f} us, best "
                  + (f"{best['config']} [{best['tiles']}] {best['time_us']:.1f} us ({base / best['time_us']:.3f}x; "
                     if best else "NONE CORRECT (")
                  + f"cuBLAS+graph {cb['time_us']:.1f} us, {cb['vendor_form']} of {', '.join(cb['vendor_forms'])})"
                  + f" [{time.time() - t0:.0f} s]",
                  file=sys.stderr, flush=True)
        del mlp, sets, keep
        cupy.get_default_memory_pool().free_all_blocks()
    return {"device": dev, "workload": "mlp", "kernel": "sm90", "vendor": "cuBLAS", "ceilings": ceil, "rows": rows,
            "gemm": grows}


# ---- tune ----

STREAM_ORDERS = ("StreamSync", "PDL", "StreamSync" + SPLIT_K, "PDL" + SPLIT_K, "StreamSync" + DECODE, "PDL" + DECODE,
                 "StreamSync" + SWAP, "PDL" + SWAP)


def choose(model: str, M: int, rows: list[dict]) -> dict:
    """The fastest correct configuration of one (model, M) over every tile config and split-K
    choice, StreamSync and PDL alone included (so never slower than the fastest stream order; one
    of them where nothing is faster), as a tune choice (the fields cusyncgen.commands.tune's report reads)."""
    ok = [r for r in rows if r["correct"]]
    if not ok:
        raise CusyncError(f"sm90 {model} M={M}: no configuration computed the reference's result", None)
    best = min(ok, key=lambda r: r["time_us"])
    ss = [r for r in rows if r["config"] in STREAM_SYNCS]
    base = min(ss, key=lambda r: r["time_us"])
    stream_best = min((r for r in ok if r["config"] in STREAM_ORDERS), key=lambda r: r["time_us"], default=None)
    same = min(r["time_us"] for r in ss if r["tiles"] == best["tiles"])
    return {"model": model, "M": M, "kernel": "sm90", "config": best["config"], "tiles": best["tiles"],
            "splits": best.get("splits"), "streamsync_tiles": base["tiles"], "tile_cfg": best.get("tile_cfg"),
            "sync_warp": None,   # the sm90 kernels wait in their DMA warp
            "time_us": best["time_us"], "streamsync_us": base["time_us"],
            "speedup_vs_streamsync": round(base["time_us"] / best["time_us"], 4),
            "speedup_same_tiles": round(same / best["time_us"], 4),
            "fastest_stream_order": stream_best and stream_best["config"],
            "fastest_stream_order_us": stream_best and stream_best["time_us"],
            "fastest_stream_order_tile_cfg": stream_best and stream_best.get("tile_cfg"),
            "speedup_vs_stream_order": stream_best and round(stream_best["time_us"] / best["time_us"], 4),
            "predicted": None, "measured_family": family(best["config"]), "prediction_matches": False,
            "candidates": len(rows)}


def vendor_confirmed(times: dict, forms) -> dict:
    """confirm's vendor fields from the vendor forms' times in the rounds ({form: us}) and their
    check (baselines.VendorForms): the fastest correct form's time ("vendor_us"), its name
    ("vendor_form"), every form's time ("vendor_forms"), the skipped ("vendor_skipped")."""
    from cusyncgen.cuda import baselines
    best = baselines.fastest_form(times, forms.errors, TOL)
    if best is None:
        raise CusyncError(f"no vendor form ran ({forms.skipped})", None)
    out = {"vendor_us": round(times[best], 2), "vendor_form": best,
           "vendor_forms": {f: round(t, 2) for f, t in sorted(times.items())}, "vendor_rel_err": forms.errors[best]}
    if forms.skipped:
        out["vendor_skipped"] = dict(sorted(forms.skipped.items()))
    return out


def _instance(model: str, M: int, tile_cfg: dict) -> "MLPSm90 | mlp_decode.MLPDecode | mlp_swap.MLPSwap":
    if tile_cfg.get("kernel") == "decode":
        return mlp_decode.MLPDecode(model, M)
    if tile_cfg.get("kernel") == "swap":
        return mlp_swap.MLPSwap(model, M, tile_cfg["config"], tile_cfg.get("config2"))
    t = Sm90Tiles.from_dict(tile_cfg)
    return MLPSm90(model, M, t.config, t.grouped2, t.banded1, t.banded2, tile2=t.config2, grouped1=t.grouped1)


def _config(name: str):
    """The configuration `run` takes for a row's config name (the decode kernel's and the swapped
    GeMM's: the name)."""
    return name if name.endswith((DECODE, SWAP)) else Sm90Config.parse(name)


# Input sets of a confirm, replayed in turn (as the bench's three): GPT-3's and LLaMA-ep's weights
# (302 and 135 MB a set) then never meet in the 50 MB L2 from one replay to the next.
CONFIRM_SETS = 3
# A confirm also times the choice and every vendor form back to back: CONFIRM_CHAIN MLPs (the sets in
# turn) in one CUDA graph, its time over CONFIRM_CHAIN, as a model's decode graph runs an MLP (a
# kernel boundary before it, not a graph launch of its own; the issue's "graphs of 10 back-to-back
# MLPs").
CONFIRM_CHAIN = 10


def vendor_graphs(m, sets, refs, chain: int):
    """Every vendor form (sm80.vendor_forms) on each input set, checked against that set's reference
    and captured in graphs: (baselines.VendorForms of the first set, its errors the worst over the
    sets and its skipped every set's; {form: [its graph on each set]} and {form: one graph of `chain`
    calls back to back, the sets in turn}, of the forms made and captured on every set)."""
    from cusyncgen.cuda import baselines

    checked = [sm80.check_vendor_forms(m, a, ref) for a, ref in zip(sets, refs)]
    forms = checked[0]
    vgraphs, vchains = {}, {}
    for name in forms.fns:
        if any(name not in c.fns for c in checked):
            continue
        try:
            fns = [c.fns[name] for c in checked]
            vgraphs[name] = [baselines.graph_of(fn) for fn in fns]
            vchains[name] = baselines.graph_of(lambda fns=fns: [fns[i % len(fns)]() for i in range(chain)])
        except Exception as exc:   # a form that cannot be captured is skipped, as in bench
            forms.skipped[name + "+graph"] = baselines.why_skipped(exc)
            vgraphs.pop(name, None)
    for c in checked[1:]:
        forms.skipped.update({k: v for k, v in c.skipped.items() if k not in forms.skipped})
        for name, e in c.errors.items():
            forms.errors[name] = max(forms.errors.get(name, 0.0), e)
    return forms, vgraphs, vchains


def confirm(model: str, M: int, choice: dict, iters: int, seed: int) -> dict:
    """The choice re-measured: the chosen configuration, the fastest stream order and cuBLAS + CUDA
    graph (what a user would pick instead: every vendor form, sm80.vendor_forms, each in a graph of
    its own) on CONFIRM_SETS sets of fresh random inputs ("sets"), every output checked against its
    float32 reference first, then timed in timing.rounds_for rounds (one median each over graphs
    replayed back to back, the sets in turn, as the bench times ours: no weight byte is read twice
    from L2; the order rotated from round to round; the median over the rounds). The vendor is its
    fastest correct form ("vendor_us", named in "vendor_form"; every form's time in "vendor_forms"). Where the choice is the fastest stream order
    itself, it is timed once and stands for both. The fastest of many noisy candidates is biased
    low; these times are not: they are the ratios to quote. Each side is also timed back to back,
    CONFIRM_CHAIN MLPs in one graph (the "_chain_us" fields: confirm_fields). "floor_us": the point's
    roofline floor (sm80.floor_us), its ceilings measured after the rounds."""
    from cusyncgen.cuda import baselines, timing
    from cusyncgen.cuda.lazy import cupy

    stream = cupy.cuda.Stream()
    mine = _instance(model, M, choice["tile_cfg"])
    sets = [mine.buffers(seed=seed + s) for s in range(CONFIRM_SETS)]
    refs = [mine.reference(*a) for a in sets]
    runs = {"ours": (mine, _config(choice["config"]))}
    same = (choice.get("fastest_stream_order") == choice["config"]
            and choice.get("fastest_stream_order_tile_cfg") == choice["tile_cfg"])
    if choice.get("fastest_stream_order_tile_cfg") and not same:
        runs["stream"] = (_instance(model, M, choice["fastest_stream_order_tile_cfg"]),
                          _config(choice["fastest_stream_order"]))
    graphs, chains, errs = {}, {}, {}
    for k, (mlp, cfg) in runs.items():
        graphs[k], outs = [], []
        for a, ref in zip(sets, refs):
            y, z = mlp.outputs()
            outs.append((y, z))
            with stream:
                z.fill(cupy.nan)
                mlp.run(stream, cfg, *a, y, z)
                stream.synchronize()
                mlp.check_stages()
                errs[k] = max(errs.get(k, 0.0), rel_err(z, ref))
                graphs[k].append(timing.capture(lambda s, mlp=mlp, cfg=cfg, a=a, y=y, z=z: mlp.run(s, cfg, *a, y, z),
                                                stream))

        def back_to_back(s, mlp=mlp, cfg=cfg, outs=outs):
            for i in range(CONFIRM_CHAIN):
                mlp.run(s, cfg, *sets[i % len(sets)], *outs[i % len(sets)])
        with stream:
            chains[k] = timing.capture(back_to_back, stream)
    stream.synchronize()
    forms, vgraphs, vchains = vendor_graphs(mine.model, sets, refs, chain=CONFIRM_CHAIN)
    timers = {k: timing.Replay(tuple(g.launch for g in gs)) for k, gs in graphs.items()}
    timers.update({("chain", k): timing.Replay((g.launch,), CONFIRM_CHAIN) for k, g in chains.items()})
    timers.update({("vendor", name): timing.Replay(baselines.replays_on(g)) for name, g in vgraphs.items()})
    timers.update({("vendor-chain", name): timing.Replay(baselines.replays_on(g), CONFIRM_CHAIN)
                   for name, g in vchains.items()})
    times, rounds = timing.time_in_rounds(timers, stream, iters)
    out = confirm_fields(times, forms, same)
    errs["vendor"] = out.pop("vendor_rel_err")
    out.update(rounds=rounds, timing=timing.INTERLEAVED, correct=all(e < TOL for e in errs.values()),
               rel_err=max(errs.values()))
    out.update(sets=len(sets), floor_us=round(sm80.floor_us(mine.model, M, baselines.ceilings()), 2))
    return out


def confirm_fields(times: dict, forms, same: bool) -> dict:
    """confirm's times from the rounds' medians (keys: "ours", "stream", ("vendor", form), and back to
    back ("chain", "ours" | "stream"), ("vendor-chain", form)): "ours_us", "stream_us" (the choice's
    where `same`), the vendor's fields (vendor_confirmed) and the same back to back, "_chain" after
    each ("ours_chain_us", "stream_chain_us", "vendor_chain_us", "vendor_chain_form",
    "vendor_chain_forms"; "chain": CONFIRM_CHAIN) where they were timed."""
    def of(kind):
        return {k[1]: t for k, t in times.items() if isinstance(k, tuple) and k[0] == kind}

    out = {f"{k}_us": round(t, 2) for k, t in times.items() if not isinstance(k, tuple)}
    out.update(vendor_confirmed(of("vendor"), forms))
    if of("chain"):
        out.update({f"{k}_chain_us": round(t, 2) for k, t in of("chain").items()})
        chained = vendor_confirmed(of("vendor-chain"), forms)
        out.update(vendor_chain_us=chained["vendor_us"], vendor_chain_form=chained["vendor_form"],
                   vendor_chain_forms=chained["vendor_forms"], chain=CONFIRM_CHAIN)
    if same:
        out["stream_us"] = out["ours_us"]
        if "ours_chain_us" in out:
            out["stream_chain_us"] = out["ours_chain_us"]
    return out


def settle(choice: dict, confirmed: dict) -> dict:
    """The choice with its re-measurement (confirm): where the fastest stream order ran faster than
    the chosen configuration there, the stream order is the choice (so the tuned choice is never
    slower than the fastest stream order, re-measured either), marked "fallback"."""
    out = dict(choice, confirm=dict(confirmed))
    s = confirmed.get("stream_us")
    if s is not None and s < confirmed["ours_us"] and choice.get("fastest_stream_order_tile_cfg"):
        t = choice["fastest_stream_order_tile_cfg"]
        label = (mlp_decode.TILES if t.get("kernel") == "decode"
                 else mlp_swap.tiles_label(t["config"], t.get("config2")) if t.get("kernel") == "swap"
                 else Sm90Tiles.from_dict(t).label)
        out.update(config=choice["fastest_stream_order"], tile_cfg=t, tiles=label,
                   time_us=choice["fastest_stream_order_us"], fallback=choice["config"],
                   speedup_vs_streamsync=round(choice["streamsync_us"] / choice["fastest_stream_order_us"], 4),
                   speedup_vs_stream_order=1.0)
        out["confirm"].update(ours_us=s, stream_us=s)
        if "stream_chain_us" in confirmed:
            out["confirm"].update(ours_chain_us=confirmed["stream_chain_us"])
    return out


def confirm_key(model: str, M: int, choice: dict, runtime: str, forms: bool = True, chain: bool = True) -> str:
    """The tune cache's key of a choice's re-measurement: "model|M|confirm:<config>:<tiles>:vendor-forms:chain|
    runtime" (every vendor form timed, and back to back: CONFIRM_CHAIN); chain=False: the key of one
    without the back-to-back times, forms=False: of one from before the vendor forms were compared
    (one unnamed cuBLAS form): older caches, which a live tune measures again and a report from the
    cache still reads."""
    tail = (":vendor-forms" if forms else "") + (":chain" if forms and chain else "")
    return f"{model}|{M}|confirm:{choice['config']}:{choice['tiles']}{tail}|{runtime}"


def library_digest() -> str:
    """What a tune cache entry was measured with: the library's cache folder (lib-<hash of its
    sources and flags>) or, for CUSYNC_SM90_LIB, the file's name and size."""
    return sm90.lib.digest()


def tune(models, sweep, iters: int, cache_path, progress: bool = True, device: str | None = None) -> dict:
    """Measure (or reuse from the cache, keyed model|M|tiles|library) every candidate (candidates:
    every tile config in the orders of orders_for(M), and the pair of tile configs the GeMMs alone
    ran fastest on, measured first and cached as model|M|gemm|library; at M <= 64 the decode kernel
    and the swapped GeMM's tiles) of every (model, M), choose
    per size, and re-measure the choice against the fastest stream order and cuBLAS + graph
    (confirm, every vendor form; cached under confirm_key). device: report from the cache of
    that device without a GPU."""
    import json
    from pathlib import Path

    cache_path = Path(cache_path)
    for m in models:
        check_model(m)
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    if device is None:
        from cusyncgen.cuda import driver
        from cusyncgen.cuda.lazy import cupy
        dev, runtime, configs = driver.device_name(), library_digest(), sm90.library().configs
        swap_configs = sm90.library().swap_configs
        decode_digest = mlp_decode.digest()
        stream = cupy.cuda.Stream()
    else:
        dev, configs, stream, swap_configs = device, CONFIGS, None, sm90.SWAP_CONFIGS
        if not cache.get(dev):
            raise CusyncError(f"the cache has nothing for {dev}", None)
        runtime = next(k for k in reversed(cache[dev]) if "|gemm|" in k).rsplit("|", 1)[1]
        decode_digest = next((k.rsplit("|", 1)[1] for k in reversed(cache[dev]) if k.split("|")[2] == mlp_decode.TILES),
                             "")
    entries = cache.setdefault(dev, {})
    choices = []
    for model in models:
        for M in sweep:
            t0 = time.time()
            rows = []
            gkey = f"{model}|{M}|gemm|{runtime}"
            if gkey not in entries:
                if device is not None:
                    raise CusyncError(f"{model} M={M}: the GeMMs alone are not in the cache for {dev} (library "
                                      f"{runtime})", None)
                gbufs = MLPSm90(model, M).buffers(seed=M)
                entries[gkey] = {"gemm": gemm_rows(model, M, configs, gbufs, stream, iters)}
                files.write_file(cache_path, json.dumps(cache, indent=1) + "\n")
                del gbufs
            for tiles in candidates(model, M, configs, per_gemm_tiles(entries[gkey]["gemm"])):
                key = f"{model}|{M}|{tiles.label}|{runtime}"
                if key not in entries:
                    if device is not None:
                        raise CusyncError(f"{model} M={M} tiles {tiles.label} are not in the cache for {dev} (library "
                                          f"{runtime})", None)
                    point, mlp, *_ = measure_point(model, M, iters, stream, seed=M, tile=tiles.config,
                                                   grouped2=tiles.grouped2, banded1=tiles.banded1,
                                                   banded2=tiles.banded2, tile2=tiles.config2,
                                                   grouped1=tiles.grouped1)
                    entries[key] = {"rows": point, "tiles": tiles.label}
                    files.write_file(cache_path, json.dumps(cache, indent=1) + "\n")
                    del mlp
                    cupy.get_default_memory_pool().free_all_blocks()
                rows += [dict(r) for r in entries[key]["rows"]]
            # the decode kernel; a report from a cache measured before it has none (decode_digest "")
            if mlp_decode.fits(model, M) and (device is None or decode_digest):
                key = f"{model}|{M}|{mlp_decode.TILES}|{decode_digest}"   # its own runtime: the cubin
                if key not in entries:
                    if device is not None:
                        raise CusyncError(f"{model} M={M}: the decode kernel is not in the cache for {dev}", None)
                    point, dmlp, *_ = mlp_decode.measure_point(model, M, iters, stream, seed=M)
                    entries[key] = {"rows": point, "tiles": mlp_decode.TILES}
                    files.write_file(cache_path, json.dumps(cache, indent=1) + "\n")
                    del dmlp
                    cupy.get_default_memory_pool().free_all_blocks()
                rows += [dict(r) for r in entries[key]["rows"]]
            # the swapped GeMM (the library's kernels: keyed by its runtime); a report from a cache
            # measured before it has none
            if mlp_swap.fits(model, M):
                for pair in mlp_swap.tile_pairs(M, swap_configs, model):
                    key = f"{model}|{M}|{mlp_swap.tiles_label(*pair)}|{runtime}"
                    if key not in entries and device is None:
                        entries[key] = {"rows": mlp_swap.measure_point(model, M, iters, stream, seed=M, pairs=[pair]),
                                        "tiles": mlp_swap.tiles_label(*pair)}
                        files.write_file(cache_path, json.dumps(cache, indent=1) + "\n")
                        cupy.get_default_memory_pool().free_all_blocks()
                    if key in entries:
                        rows += [dict(r) for r in entries[key]["rows"]]
            rebase(rows)
            c = choose(model, M, rows)
            ckey = confirm_key(model, M, c, runtime)
            if ckey not in entries and device is None:
                entries[ckey] = {"confirm": confirm(model, M, c, iters, seed=M + 1)}
                files.write_file(cache_path, json.dumps(cache, indent=1) + "\n")
                cupy.get_default_memory_pool().free_all_blocks()
            if ckey not in entries and device is not None:   # an older cache's: a report only
                older = (confirm_key(model, M, c, runtime, chain=False), confirm_key(model, M, c, runtime, forms=False))
                ckey = next((k for k in older if k in entries), ckey)
            if ckey in entries:
                c = settle(c, entries[ckey]["confirm"])
            choices.append(c)
            if progress:
                print(f"{model} M={M} (sm90): {c['config']} [{c['tiles']}] {c['speedup_vs_streamsync']:.3f}x over "
                      f"StreamSync, {c['speedup_vs_stream_order']}x over {c['fastest_stream_order']} "
                      f"[{time.time() - t0:.0f} s]", file=sys.stderr, flush=True)
    return {"device": dev, "workload": "mlp", "kernel": "sm90", "runtime": runtime, "choices": choices}
