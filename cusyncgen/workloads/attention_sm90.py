"""The attention block on Hopper: QKV GeMM -> attention -> output GeMM. At token generation (one
new token per sequence against its KV cache) on kernels built for bandwidth (docs/sm90.md,
"Attention at token generation"); at prompt processing on CUTLASS's Hopper GeMMs and FMHA.

    blk = AttentionGen("gpt3", B=4, past=2048)
    ins = blk.buffers(seed=0); outs = blk.outputs()
    blk.run(stream, "PDL", *ins, *outs)

    QKV GeMM    qkv = X Wqkv^T          [B, 3 NH D]
    attention   o = softmax(q K^T / sqrt(D)) V over concat(cache, new)   decode_attention.cuh:
                                        the new K/V appended at position `past`, split over the KV
                                        length, the splits combined in the same launch
    output GeMM z = o Wo^T

Each GeMM runs on an engine (engines_for): the decode kernel (cusyncgen.cuda.decode.DecodeGemm: the
weight's rows streamed into registers over every SM; the default), a CUTLASS sm90 tile config of
the prebuilt library with or without split-K (where B fills the tensor cores: mma.sync makes the
decode kernel compute-bound at 64 rows), or the library's swapped GeMM (SwapGemm: the weight as
CUTLASS's A operand, tiles of 64 weight rows x 16-64 tokens). The bench times each GeMM on every
engine (the QKV GeMM alone, the output GeMM in the block behind the QKV GeMM's near-fastest engines:
choose_engines) and runs the block on the fastest pair, each ordering on the attention's sizing
(decode_attention.sizings) that reads the cache faster in the block, and under PDL with the
attention itself PDL-launched or not, whichever is faster there (choose_sizing).

Orderings (ORDERINGS): StreamSync (three launches in stream order) and PDL (the output GeMM
PDL-launched, and the attention too where that is faster, AttentionGen.attention_pdl: a decode
output GeMM issues its first weight loads before griddepcontrol.wait). Synchronized (SYNCED), on
the decode engines, by the policies cusyncgen compiles from examples/attention_<model>.dep at the
block's tiles (dep_params): TileSync, StridedSync (a head's Q, K and V tiles on one semaphore) and
RowSync, each as "<policy>+PDL" (three launches, the attention and the output GeMM PDL-launched and
waiting on the semaphores: an attention item starts once its head is posted) and "<policy>+Chain"
(the whole block in one launch, decode_attention_chain.cuh).

`cusyncgen bench attention --kernel sm90` measures every (model, B, S') of the sweep against the
vendor chain a user would write (cuBLAS QKV linear -> the KV-cache append -> SDPA on each backend
-> cuBLAS output linear, in a CUDA graph; the fastest correct form), in interleaved rounds, with the
floor (weights and KV cache over the run's copy bandwidth); and the prompts of PROMPT_POINTS
(AttentionPrompt: CUTLASS sm90 GeMMs and CUTLASS's Hopper FMHA forward reading Q, K, V straight from
the QKV GeMM's output, runtime_cuda/sm90/fmha.cu; in stream order, PDL and each policy + PDL:
PromptChain), the attention stage alone
against SDPA alone. The default family on an sm_90 device (`--kernel sm80`: the SM80 kernels);
`cusyncgen tune attention` chooses among its bench results (--from-json).
"""
from __future__ import annotations

import ctypes
import math
import sys
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache

from cusyncgen.cuda import decode, decode_attention
from cusyncgen.cuda.configs import Ordering
from cusyncgen.cuda.sm90.desc import FMHA_O_ROWS
from cusyncgen.errors import CusyncError

D = decode_attention.HEAD_DIM
MODELS = {"gpt3": 12288, "llama": 8192}   # hidden size; heads per GPU of 8-way model parallelism: H / (8 D)
GEN_B = (1, 4, 16, 64)
GEN_SP = (512, 2048, 8192)
ORDERINGS = ("StreamSync", "PDL")
SYNCED = decode_attention.CONFIGS   # the synchronized configurations (<policy>+PDL, <policy>+Chain): decode engines
TIMEOUT_NS = 2_000_000_000
TOL = 2e-2
VENDOR = "vendor"
DECODE_ENGINE = "decode"
SWAP_ENGINE = "swap "   # + a swapped-GeMM config of the library: "swap 16x64x128sw1"
SDPA_BACKENDS = {"sdpa-cudnn": "CUDNN_ATTENTION", "sdpa-flash": "FLASH_ATTENTION",
                 "sdpa-efficient": "EFFICIENT_ATTENTION", "sdpa-math": "MATH"}


def heads(model: str) -> int:
    return MODELS[model] // (8 * D)


def gemm_shapes(model: str) -> tuple:
    """(N, K) of the block's QKV and output GeMMs."""
    nd = heads(model) * D
    return (3 * nd, MODELS[model]), (MODELS[model], nd)


def check_engines(model: str, M: int, engines: tuple, candidates) -> None:
    """Each GeMM's engine among candidates(M, N, K) (engines_for, prompt_engines_for)."""
    for e, (n, k) in zip(engines, gemm_shapes(model)):
        if e not in candidates(M, n, k):
            raise CusyncError(f"GeMM engine {e!r} does not fit a {M} x {n} x {k} GeMM (those that do: "
                              f"{', '.join(candidates(M, n, k))})", None)


def label(model: str, past: int) -> str:
    """The rows' "model": the model and the cached tokens (as the sm80 attention's generation rows)."""
    return f"{model}-gen-S'{past}"


def point(B: int, past: int) -> str:
    return f"B={B} S'={past}"


@dataclass
class AttentionGen:
    """One generation step of the attention block: B sequences of `past` cached tokens."""

    name = "attention"
    vendor = VENDOR
    kernel = "sm90"
    orderings = frozenset({Ordering.STREAM, Ordering.PDL_ALONE, Ordering.PERSISTENT})
    models = tuple(MODELS)
    sizes = GEN_B
    bench_options = ()
    tune_mode = "bench"       # the fastest correct configuration per point, chosen among bench results
    # the device's default on sm_90 (`--kernel sm80`: the SM80 family, whose prompts have sync warps,
    # spread and tile options)

    model: str
    B: int
    past: int
    engines: tuple = (DECODE_ENGINE, DECODE_ENGINE)   # the QKV and output GeMMs' (engines_for's names)
    # the attention's sizing (decode_attention.Plan) in stream order and under PDL; None: plan_for's
    sizing: tuple = (None, None)
    attention_pdl: bool = True    # under PDL, the attention PDL-launched too (the output GeMM always is)
    timeout_ns: int = TIMEOUT_NS
    _parts: tuple | None = field(default=None, repr=False)
    _pdl_attention: object = field(default=None, repr=False)
    _chain: object = field(default=None, repr=False)

    def __post_init__(self):
        if self.model not in MODELS:
            raise CusyncError(f"the sm90 attention has no model {self.model!r} (its models: {', '.join(MODELS)})", None)
        if not 1 <= self.B <= decode.MAX_M:
            raise CusyncError(f"the sm90 attention at generation takes B = 1 to {decode.MAX_M}, not {self.B}", None)
        if self.past < 0:
            raise CusyncError(f"cached tokens: {self.past}", None)
        self.H, self.NH = MODELS[self.model], heads(self.model)
        self.smax = self.past + 1
        check_engines(self.model, self.B, self.engines, engines_for)

    def gemm_shapes(self) -> tuple:
        """(N, K) of the QKV and output GeMMs."""
        return gemm_shapes(self.model)

    @classmethod
    def sources(cls, sizes=None, tune: bool = False) -> list:
        """The decode GeMM's and the attention kernel's translation units (the CUTLASS engines are the
        prebuilt sm90 library's)."""
        return [decode.source(), decode_attention.source()]

    @classmethod
    def bench(cls, models=None, sizes=None, iters: int = 30, progress: bool = True) -> dict:
        return bench(models, sizes, iters, progress)

    @staticmethod
    def markdown(result: dict) -> str:
        """The bench page of a result of this family (bench.write's ``page``)."""
        return markdown(result)

    @property
    def parts(self):
        """(QKV GeMM, attention in stream order, output GeMM) runners."""
        if self._parts is None:
            (n1, k1), (n2, k2) = self.gemm_shapes()
            self._parts = (gemm_engine(self.engines[0], self.B, n1, k1), self.sized_attention(self.sizing[0]),
                           gemm_engine(self.engines[1], self.B, n2, k2))
        return self._parts

    def attention(self, pdl: bool) -> "decode_attention.DecodeAttention":
        """The attention runner of an ordering: in stream order (parts[1]) or PDL-launched."""
        if not pdl or self.sizing[1] == self.sizing[0]:
            return self.parts[1]
        if self._pdl_attention is None:
            self._pdl_attention = self.sized_attention(self.sizing[1])
        return self._pdl_attention

    def sized_attention(self, plan) -> "decode_attention.DecodeAttention":
        """An attention runner of this step on `plan` (a decode_attention.Plan; None: plan_for's)."""
        if plan is None:
            return decode_attention.DecodeAttention(self.B, self.NH, self.smax, self.past)
        return decode_attention.DecodeAttention(self.B, self.NH, self.smax, self.past, plan.form, plan.split)

    def configs(self) -> list[str]:
        return list(ORDERINGS + SYNCED)

    @property
    def chain(self) -> "decode_attention.DecodeAttentionChain":
        if self._chain is None:
            self._chain = decode_attention.DecodeAttentionChain(self.B, self.NH, self.H, self.smax, self.past,
                                                                compiled_policies(self.model, self.B, self.past),
                                                                self.timeout_ns)
        return self._chain

    def timed_out(self) -> str | None:
        """The debug record of a chain's wait that timed out (after synchronizing), or None."""
        return None if self._chain is None else self._chain.timed_out()

    def check_stages(self) -> None:
        msg = self.timed_out()
        if msg:
            raise CusyncError(f"attention {self.model} B={self.B} S'={self.past}: {msg}", None)

    # ---- buffers
    def buffers(self, seed: int | None = None):
        """x [B, H], Wqkv [3 NH D, H], Wo [H, NH D], the K and V caches [B, NH, past + 1, D] (positions
        < past random, the new token's position poisoned): fp16 CuPy arrays. run() packs the weights
        for a decode engine at their first launch (run once before capturing a graph)."""
        from cusyncgen.cuda.lazy import cupy
        rs = cupy.random.RandomState(seed)
        nd = self.NH * D

        def normal(shape, scale=1.0):
            return (rs.standard_normal(shape, dtype=cupy.float32) * scale).astype(cupy.float16)

        x = normal((self.B, self.H))
        wqkv = normal((3 * nd, self.H), 1 / math.sqrt(self.H))
        wo = normal((self.H, nd), 1 / math.sqrt(nd))
        caches = []
        for _ in range(2):
            c = cupy.empty((self.B, self.NH, self.smax, D), dtype=cupy.float16)
            for b in range(self.B):    # one sequence at a time: the fp32 draw of a whole cache is 2x its size
                c[b, :, : self.past] = normal((self.NH, self.past, D))
            c[:, :, self.past] = cupy.nan
            caches.append(c)
        return (x, wqkv, wo, *caches)

    def outputs(self):
        """qkv [B, 3 NH D], o [B, NH D], z [B, H], poisoned."""
        from cusyncgen.cuda.lazy import cupy
        nd = self.NH * D
        return tuple(cupy.full(s, cupy.nan, dtype=cupy.float16)
                     for s in ((self.B, 3 * nd), (self.B, nd), (self.B, self.H)))

    def run(self, stream, cfg: str, x, wqkv, wo, kc, vc, qkv, o, z) -> None:
        """One step of the block under `cfg` (ORDERINGS, SYNCED) on `stream` (a CuPy stream)."""
        if cfg in SYNCED:
            self.chain.launch(stream, cfg, x, wqkv, wo, kc, vc, qkv, o, z)
            return
        if cfg not in ORDERINGS:
            raise CusyncError(f"the sm90 attention has no configuration {cfg!r} (it has "
                              f"{', '.join(ORDERINGS + SYNCED)})", None)
        g1, _, g2 = self.parts
        pdl = cfg == "PDL"
        att = self.attention(pdl)
        g1.prepare(wqkv)
        g2.prepare(wo)
        g1.launch(stream, x, wqkv, qkv)
        att.launch(stream, qkv, kc, vc, o, pdl=pdl and self.attention_pdl)
        g2.launch(stream, o, wo, z, pdl=pdl)

    # ---- the reference, in float32
    def reference(self, x, wqkv, wo, kc, vc):
        """z of one step in float32 (the cached positions < past, the new K/V from x), and the new
        token's K and V rows (fp32) the append must have written."""
        from cusyncgen.cuda.lazy import torch
        t = torch.from_dlpack
        nd = self.NH * D
        qkv = t(x).float() @ t(wqkv).float().T                       # [B, 3 NH D]
        q, k, v = (qkv[:, i * nd:(i + 1) * nd].view(self.B, self.NH, D) for i in range(3))
        o = torch.empty(self.B, self.NH, D, device=qkv.device)
        for b in range(self.B):
            kk = torch.cat([t(kc)[b, :, : self.past].float(), k[b, :, None]], dim=1)   # [NH, past + 1, D]
            vv = torch.cat([t(vc)[b, :, : self.past].float(), v[b, :, None]], dim=1)
            s = (kk @ q[b, :, :, None]).squeeze(-1) / math.sqrt(D)                    # [NH, past + 1]
            o[b] = (torch.softmax(s, dim=-1)[:, None, :] @ vv).squeeze(1)
        return o.reshape(self.B, nd) @ t(wo).float().T, k, v

    def error(self, outs, ins, ref) -> tuple[float, bool]:
        """(z's relative error, whether the caches hold the new K and V at position past)."""
        from cusyncgen.cuda.lazy import torch
        z_ref, k, v = ref
        qkv, _, z = outs
        t = torch.from_dlpack
        nd = self.NH * D
        new = t(qkv)[:, nd:].view(self.B, 2, self.NH, D)
        appended = bool(torch.equal(t(ins[3])[:, :, self.past], new[:, 0])) and \
            bool(torch.equal(t(ins[4])[:, :, self.past], new[:, 1]))
        return rel(t(z), z_ref), appended

    # ---- the vendor, as a user writes it
    def vendor_fn(self, ins, backend: str):
        """The block in PyTorch on the same operands: cuBLAS QKV linear, the append into the caches,
        SDPA over past + 1 keys under sdpa_kernel(backend), cuBLAS output linear. Returns fn() -> z."""
        from cusyncgen.cuda.lazy import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        member = getattr(SDPBackend, backend)
        x, wqkv, wo, kc, vc = (torch.from_dlpack(a) for a in ins)
        B, NH, past = self.B, self.NH, self.past

        def fn():
            qkv = torch.nn.functional.linear(x, wqkv).view(B, 3, NH, D)
            kc[:, :, past] = qkv[:, 1]
            vc[:, :, past] = qkv[:, 2]
            with sdpa_kernel(member):
                o = torch.nn.functional.scaled_dot_product_attention(qkv[:, 0, :, None], kc, vc)   # [B, NH, 1, D]
            return torch.nn.functional.linear(o.reshape(B, NH * D), wo)
        return fn

    def flash_decoding_fn(self, ins):
        """flash_attn's flash_attn_with_kvcache (split-KV decoding) where the package is installed: it
        takes [B, S, NH, D] caches, so the form keeps its own copies in that layout."""
        from flash_attn import flash_attn_with_kvcache   # ImportError where not installed: the form is skipped
        from cusyncgen.cuda.lazy import torch
        x, wqkv, wo, kc, vc = (torch.from_dlpack(a) for a in ins)
        B, NH, past = self.B, self.NH, self.past
        kc2, vc2 = kc.transpose(1, 2).contiguous(), vc.transpose(1, 2).contiguous()
        seqlens = torch.full((B,), past, dtype=torch.int32, device=x.device)

        def fn():
            qkv = torch.nn.functional.linear(x, wqkv).view(B, 1, 3, NH, D)
            o = flash_attn_with_kvcache(qkv[:, :, 0], kc2, vc2, k=qkv[:, :, 1], v=qkv[:, :, 2], cache_seqlens=seqlens)
            return torch.nn.functional.linear(o.reshape(B, NH * D), wo)
        return fn

    def floor_bytes(self) -> int:
        """Bytes the block must move: both weights, the cached K and V, x, the new K/V, z."""
        nd = self.NH * D
        return 2 * (4 * nd * self.H + 2 * self.B * self.NH * self.past * D + self.B * self.H * 2 + 2 * self.B * nd)


def dep_params(B: int, past: int) -> dict:
    """The .dep's Params at the block's tiles: one token per sequence (S = 1), one row tile of
    decode.MAX_M rows, g1's tiles TileN = D columns (a head's Q, K or V)."""
    return {"B": B, "S": 1, "Sp": past, "TileM": decode.MAX_M, "TileK": decode.MAX_M, "TileN": D}


def compiled_policies(model: str, B: int, past: int) -> dict:
    """{"depQK": {policy name: PolicyIR}, "depT2": {...}} of examples/attention_<model>.dep."""
    import cusyncgen
    from cusyncgen.workloads.kernels import examples_dir
    prog = cusyncgen.compile(examples_dir() / f"attention_{model}.dep", params=dep_params(B, past))
    out: dict = {"depQK": {}, "depT2": {}}
    for p in prog.policies:
        if p.dep in out and (p.dep != "depQK" or p.consumer == "gP"):
            out[p.dep][p.name] = p
    return out


def engines_for(M: int, N: int, K: int) -> list[str]:
    """The GeMM engines of an M x N x K GeMM: the decode kernel, each 64-row CUTLASS sm90 tile config
    (M <= 64) whose BN divides N and BK K, without and with split-K where auto_splits finds one
    (" splitK<S>@<start>"), and the swapped GeMM's configs for M rows ("swap <config>",
    sm90.swap_configs_for; the wide form's among them at M > 16) whose packed groups of weight rows
    divide N."""
    from cusyncgen.cuda import sm90
    swap = [SWAP_ENGINE + c for c in sm90.swap_configs_for(M) if sm90.swap_tile(c).fits(N, K)]
    return ([DECODE_ENGINE] + tile_engines(M, N, K, lambda c, bm: bm == 64 and not c.endswith(("tma", "c2")))
            + swap)


def tile_engines(M: int, N: int, K: int, keep) -> list[str]:
    """The library's tile configs that keep(config, BM) accepts and whose BN divides N and BK K, each
    without and with split-K where auto_splits finds one (" splitK<S>@<start>")."""
    from cusyncgen.cuda import sm90
    out = []
    for c in sm90.CONFIGS:
        bm, bn, bk = sm90.tile_dims(c)
        if N % bn or K % bk or not keep(c, bm):
            continue
        out.append(c)
        X, Y = sm90.order_grid(c, M, N)
        sp = sm90.auto_splits(X * Y, K // bk)
        if sp.S > 1:
            out.append(f"{c} splitK{sp.S}@{sp.start}")
    return out


class CutlassGemm:
    """One GeMM alone on a CUTLASS sm90 tile config of the prebuilt library (identity epilogue):
    the same launch interface as decode.DecodeGemm. A plan (its TMA descriptors) per operand set and
    launch mode, made at the first launch (outside a captured graph: run once before capturing)."""

    def __init__(self, engine: str, M: int, N: int, K: int):
        from cusyncgen.cuda import sm90
        self.config, _, split = engine.partition(" splitK")
        self.split = sm90.NO_SPLIT if not split else sm90.Split(*(int(v) for v in split.split("@")))
        self.M, self.N, self.K = M, N, K
        self.plans: dict = {}

    def prepare(self, w) -> None:
        """Nothing to pack."""

    def launch(self, stream, x, w, y, pdl: bool = False) -> None:
        from cusyncgen.cuda import sm90
        from cusyncgen.cuda.sm90.desc import LaunchFlag
        flags = LaunchFlag.PDL_TRIGGER | (LaunchFlag.PDL_WAIT | LaunchFlag.PDL_LAUNCH if pdl else LaunchFlag.NONE)
        key = (x.data.ptr, w.data.ptr, y.data.ptr, flags)
        plan = self.plans.get(key)
        if plan is None:
            if stream.is_capturing():
                raise CusyncError(f"{self.config}: the plan of these operands is made at their first launch, "
                                  "not inside a graph capture (run once first)", None)
            desc = sm90.gemm_desc(x.data.ptr, w.data.ptr, y.data.ptr, self.M, self.N, self.K, self.config,
                                  splits=self.split)
            plan = self.plans[key] = sm90.Plan(self.config, [desc], flags=flags)
        plan.launch(stream.ptr)


class SwapGemm:
    """One GeMM alone on the swapped GeMM of the prebuilt library (runtime_cuda/sm90/swap.cu: the
    weight as CUTLASS's A operand, read packed: prepare() makes the copy, sm90.swap_pack; identity
    epilogue): the same launch interface as decode.DecodeGemm. PDL-launched, it issues its weight
    tiles of every pipeline stage before griddepcontrol.wait and X's after it."""

    def __init__(self, engine: str, M: int, N: int, K: int):
        self.config = engine.removeprefix(SWAP_ENGINE)
        self.M, self.N, self.K = M, N, K
        self.packed: dict = {}   # the packed weights it reads (sm90.packed_weight)

    def prepare(self, w) -> None:
        """The weight's packed copy (sm90.packed_weight: once per array, not inside a graph capture)."""
        from cusyncgen.cuda import sm90
        sm90.packed_weight(self.packed, w, sm90.swap_tile(self.config).group)

    def launch(self, stream, x, w, y, pdl: bool = False) -> None:
        from cusyncgen.cuda import sm90
        wp = sm90.packed_weight(self.packed, w, sm90.swap_tile(self.config).group, stream)
        sm90.swap_gemm(self.config, sm90.EPI_IDENTITY, wp.data.ptr, x.data.ptr, y.data.ptr, self.M, self.N, self.K,
                       pdl=pdl, stream=stream.ptr)


def gemm_engine(engine: str, M: int, N: int, K: int):
    if engine == DECODE_ENGINE:
        return decode.DecodeGemm(M, decode.GemmShape(N, K))
    if engine.startswith(SWAP_ENGINE):
        return SwapGemm(engine, M, N, K)
    return CutlassGemm(engine, M, N, K)


def rel(a, ref) -> float:
    from cusyncgen.cuda.lazy import torch
    a = a.float()
    if not bool(torch.isfinite(a).all()):
        return math.inf
    return float(torch.linalg.vector_norm(a - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))


def vendor_forms(blk: AttentionGen, ins, ref):
    """The vendor's forms of one point, each checked against the reference (baselines.VendorForms)."""
    from cusyncgen.cuda import baselines
    makers = {f"torch+{n}": (lambda b=b: blk.vendor_fn(ins, b)) for n, b in SDPA_BACKENDS.items()}
    makers["torch+flash-decoding"] = lambda: blk.flash_decoding_fn(ins)
    return baselines.VendorForms.check(makers, lambda name, fn: rel(fn(), ref[0]))


def choose_gemm_engines(model: str, M: int, candidates, ins, stream, iters: int, in_block=None,
                        near: float = 1.0) -> tuple[tuple, dict]:
    """Each GeMM of the block on every engine of candidates(M, N, K), on the point's weights (the
    output GeMM on a random input), checked against float32 on a poisoned output and timed in a CUDA
    graph: alone, or, with in_block(qkv engine, output engine) (a run(stream) of the whole block),
    the output GeMM in the block behind each QKV engine within `near` x the fastest QKV time alone
    (which SMs the QKV GeMM leaves free decides where the output GeMM's early CTAs land). Returns
    (the fastest correct engine of each: alone, or the fastest pair in the block) and {"qkv"|"out":
    {engine: us, or its error}} ("out": behind the chosen QKV engine; "pairs": {"<qkv> | <out>": us}
    where more than one QKV engine was tried)."""
    from cusyncgen.cuda import timing
    from cusyncgen.cuda.lazy import cupy
    from cusyncgen.workloads.base import rel_err

    x, wqkv, wo = ins[:3]
    o_in = cupy.random.RandomState(M).standard_normal((M, heads(model) * D), dtype=cupy.float32).astype(cupy.float16)

    def timed(runs: dict) -> dict:
        """{key: run(stream)} each captured in a graph, all timed in one interleaved round (the same
        clocks for every candidate: time_in_rounds): {key: us}."""
        replays = {key: timing.Replay((timing.capture(run, stream).launch,)) for key, run in runs.items()}
        return {key: round(t, 2) for key, t in timing.time_in_rounds(replays, stream, iters, rounds=1)[0].items()}

    record, correct = {}, {}
    for name, a, w, (n, k) in zip(("qkv", "out"), (x, o_in), (wqkv, wo), gemm_shapes(model)):
        y = cupy.empty((M, n), dtype=cupy.float16)
        ref = a.astype(cupy.float32) @ w.astype(cupy.float32).T
        times, runs = {}, {}
        for e in candidates(M, n, k):
            g = gemm_engine(e, M, n, k)
            g.prepare(w)
            with stream:
                y.fill(math.nan)
                g.launch(stream, a, w, y)
                stream.synchronize()
                err = rel_err(y, ref)
                if err >= TOL:
                    times[e] = f"wrong: relative error {err:.3g}"
                elif name == "qkv" or not in_block:
                    runs[e] = lambda s, g=g: g.launch(s, a, w, y)
                else:
                    times[e] = None   # timed in the block below
        if runs:
            with stream:
                times.update(timed(runs))
        ok = [e for e, t in times.items() if not isinstance(t, str)]
        if not ok:
            raise CusyncError(f"{model} M={M}: no engine computed the {name} GeMM ({times})", None)
        record[name], correct[name] = times, ok
    if not in_block:
        return tuple(min(correct[g], key=record[g].get) for g in ("qkv", "out")), record
    alone = record["qkv"]
    fastest = min(correct["qkv"], key=alone.get)
    tried = sorted((e for e in correct["qkv"] if alone[e] <= near * alone[fastest]), key=alone.get)
    with stream:
        pairs = timed({(q, e): in_block(q, e) for q in tried for e in correct["out"]})
    chosen = min(pairs, key=pairs.get)
    record["out"] = {e: (pairs[(chosen[0], e)] if e in correct["out"] else t) for e, t in record["out"].items()}
    if len(tried) > 1:
        record["pairs"] = {f"{q} | {e}": t for (q, e), t in pairs.items()}
    return chosen, record


# QKV engines within this factor of the fastest alone are also timed in the block (choose_engines)
QKV_NEAR = 1.10


def choose_engines(model: str, B: int, past: int, ins, stream, iters: int) -> tuple[tuple, dict]:
    """The GeMM engines of a generation point (choose_gemm_engines over engines_for): the fastest pair
    in the block under PDL, of the QKV engines within QKV_NEAR of the fastest alone and every output
    engine. Alone they cannot show what the block gains: the output GeMM's first weight loads overlap
    the attention only on the SMs the QKV GeMM leaves (the decode kernel fills every SM; the swapped
    GeMM's 64-row tiles leave GPT-3 60 of 132)."""
    def in_block(q, e):
        whole = AttentionGen(model, B, past, (q, e))
        outs = whole.outputs()
        whole.run(stream, "PDL", *ins, *outs)
        return lambda s: whole.run(s, "PDL", *ins, *outs)
    return choose_gemm_engines(model, B, engines_for, ins, stream, iters, in_block, near=QKV_NEAR)


IN_STREAM_ORDER = "attention in stream order"   # PDL with only the output GeMM PDL-launched


def sizing_name(plan, cfg: str = "StreamSync", attention_pdl: bool = True) -> str:
    """A candidate's key in choose_sizing's record: the sizing's form and splits, and under PDL
    whether the attention itself is PDL-launched."""
    name = f"{plan.form} {plan.split.splits} x {plan.split.chunk}"
    if cfg == "PDL":
        name += ", attention PDL-launched" if attention_pdl else f", {IN_STREAM_ORDER}"
    return name


def choose_sizing(model: str, B: int, past: int, engines: tuple, ins, stream, iters: int,
                  ref=None) -> tuple[tuple, bool, dict]:
    """The attention's sizing under each ordering of ORDERINGS, and under PDL whether the attention
    itself is PDL-launched behind the QKV GeMM (the output GeMM always is): every candidate (each of
    decode_attention.sizings; under PDL each also with the attention launched in stream order) run
    in the block on `engines`, checked against the float32 reference on poisoned outputs and a
    poisoned append position, then timed there in interleaved rounds. Plan_for sizes the grid for
    the attention alone; in the block, a PDL-launched attention of long blocks reads slower than
    one launched in stream order, for reasons not established, so both are measured, not assumed
    (docs/design.md, "Attention at token generation"). Returns ((stream order's Plan, PDL's Plan),
    whether PDL's attention is PDL-launched, {ordering: {sizing_name: us, or its error}}). ref: the
    block's reference on ins, if made."""
    from cusyncgen.cuda import driver, timing

    cands = decode_attention.sizings(B, heads(model), past + 1, driver.sm_count(), decode_attention.residents())
    base = AttentionGen(model, B, past, engines)
    if ref is None:
        ref = base.reference(*ins)
    g1, _, g2 = base.parts   # one pair of GeMM runners (and packed weights) for every candidate
    record, runs = {cfg: {} for cfg in ORDERINGS}, {}
    for plan in cands:
        parts = (g1, base.sized_attention(plan), g2)
        for apdl in (True, False):
            blk = replace(base, sizing=(plan, plan), attention_pdl=apdl, _parts=parts)
            for cfg in ORDERINGS if apdl else ("PDL",):
                with stream:
                    outs = blk.outputs()
                    ins[3][:, :, past] = math.nan
                    ins[4][:, :, past] = math.nan
                    blk.run(stream, cfg, *ins, *outs)
                    stream.synchronize()
                err, appended = blk.error(outs, ins, ref)
                if err >= TOL or not appended:
                    record[cfg][sizing_name(plan, cfg, apdl)] = f"wrong: relative error {err:.3g}, appended {appended}"
                else:
                    runs[(cfg, plan, apdl)] = lambda s, blk=blk, cfg=cfg, outs=outs: blk.run(s, cfg, *ins, *outs)
    with stream:
        replays = {key: timing.Replay((timing.capture(run, stream).launch,)) for key, run in runs.items()}
        times = timing.time_in_rounds(replays, stream, iters, rounds=2)[0]
    chosen = []
    for cfg in ORDERINGS:
        mine = {(plan, apdl): t for (c, plan, apdl), t in times.items() if c == cfg}
        if not mine:
            raise CusyncError(f"{model} {point(B, past)}: no attention sizing computed the block under {cfg} "
                              f"({record[cfg]})", None)
        record[cfg].update({sizing_name(plan, cfg, apdl): round(t, 2) for (plan, apdl), t in mine.items()})
        chosen.append(min(mine, key=mine.get))
    (stream_plan, _), (pdl_plan, attention_pdl) = chosen
    return (stream_plan, pdl_plan), attention_pdl, record


def form_replays(forms_of_sets: list, prefix: str) -> dict:
    """{prefix + form: timing.Replay} of each checked form (baselines.VendorForms, one per input set,
    the first the one its row reports) in a CUDA graph on each set; a form that cannot be captured,
    or failed on a set, is skipped with the reason."""
    from cusyncgen.cuda import baselines, timing
    replays = {}
    first = forms_of_sets[0]
    for name in first.fns:
        try:
            graphs = [baselines.graph_of(f.fns[name]) for f in forms_of_sets]
        except KeyError:   # the form failed on another set
            first.skipped[name + "+graph"] = "it did not run on every input set"
            continue
        except Exception as exc:   # a form that cannot be captured is that form's failure
            first.skipped[name + "+graph"] = baselines.why_skipped(exc)
            continue
        replays[prefix + name] = timing.Replay(baselines.replays_on(graphs))
        first.errors[name] = max(f.errors[name] for f in forms_of_sets)   # its worst set
    return replays


def form_row(head: dict, config: str, forms, times: dict, prefix: str, rounds: int) -> dict:
    """The row of the fastest correct of `forms` as `config` (its times: those of `times` under
    `prefix`), every form's time and the skipped beside it."""
    from cusyncgen.cuda import baselines
    vt = {n[len(prefix):]: t for n, t in times.items() if n.startswith(prefix)}
    best = baselines.fastest_form(vt, forms.errors, TOL)
    if best is None:
        raise CusyncError(f"{head['model']} {head['point']}: no vendor form ran ({forms.skipped})", None)
    row = {**head, "config": config, "time_us": round(vt[best], 2), "correct": forms.errors[best] < TOL,
           "rel_err": forms.errors[best], "vendor_form": best,
           "vendor_forms": {f: round(t, 2) for f, t in sorted(vt.items())}, "rounds": rounds}
    if forms.skipped:
        row["vendor_skipped"] = dict(sorted(forms.skipped.items()))
    return row


def measure_point(model: str, B: int, past: int, iters: int, stream, seed: int, ceil: dict,
                  engines: tuple | None = None) -> list[dict]:
    """Rows of one point: each ordering (checked against the float32 reference on poisoned outputs
    and a poisoned append position) on each GeMM's fastest engine (choose_engines; or `engines`),
    the vendor (its fastest correct form in a CUDA graph) and the floor. Ours and the vendor's forms
    are timed in interleaved rounds (timing.time_in_rounds)."""
    from cusyncgen.cuda import timing

    blk = AttentionGen(model, B, past)
    sets = [blk.buffers(seed=seed + s) for s in range(2)]
    record = None
    if engines is None:
        engines, record = choose_engines(model, B, past, sets[0], stream, iters)
    ref = blk.reference(*sets[0])
    sizing, attention_pdl, sized = choose_sizing(model, B, past, engines, sets[0], stream, iters, ref)
    blk = AttentionGen(model, B, past, engines, sizing, attention_pdl)
    for ins in sets:
        blk.parts[0].prepare(ins[1])
        blk.parts[2].prepare(ins[2])
    outs = [blk.outputs() for _ in sets]
    head = {"model": label(model, past), "M": B, "B": B, "Sp": past, "phase": "generation", "point": point(B, past),
            "kernel": "sm90"}
    timers, rows = {}, {}
    for cfg in ORDERINGS + SYNCED:
        for o in outs[0]:
            o.fill(math.nan)
        sets[0][3][:, :, past] = math.nan
        sets[0][4][:, :, past] = math.nan
        blk.run(stream, cfg, *sets[0], *outs[0])
        stream.synchronize()
        err, appended = blk.error(outs[0], sets[0], ref)
        for a, o in zip(sets[1:], outs[1:]):   # each operand set's first launch outside the capture
            blk.run(stream, cfg, *a, *o)
        graphs = [timing.capture(lambda s, a=a, o=o: blk.run(s, cfg, *a, *o), stream) for a, o in zip(sets, outs)]
        timers[cfg] = timing.Replay(tuple(g.launch for g in graphs))
        att = blk.chain.attn if cfg in SYNCED else blk.attention(cfg == "PDL")   # the chain's items read by loads
        sp = att.split
        rows[cfg] = {**head, "config": cfg, "correct": err < TOL and appended, "rel_err": err, "appended": appended,
                     "splits": f"{sp.splits} x {sp.chunk} keys", "attention_form": att.form,
                     "engines": [DECODE_ENGINE] * 2 if cfg in SYNCED else list(engines)}   # SYNCED: decode GeMMs
        if record is not None:
            rows[cfg]["engine_us"] = record
        if cfg in ORDERINGS:
            rows[cfg]["sizing_us"] = sized[cfg]
        if cfg == "PDL":
            rows[cfg]["attention_pdl"] = attention_pdl
    forms = vendor_forms(blk, sets[0], ref)
    forms1 = vendor_forms(blk, sets[1], blk.reference(*sets[1]))   # a graph on each set, as ours
    timers.update(form_replays([forms, forms1], "vendor:"))
    times, rounds = timing.time_in_rounds(timers, stream, iters)
    stream.synchronize()
    late = blk.timed_out()
    out = []
    for cfg in ORDERINGS + SYNCED:
        out.append({**rows[cfg], "time_us": round(times[cfg], 2), "rounds": rounds})
        if late and cfg in SYNCED:   # the record does not say which configuration gave up: none is trusted
            out[-1].update(correct=False, error=late)
    out.append(form_row(head, VENDOR + "+graph", forms, times, "vendor:", rounds))
    floor = blk.floor_bytes() / ceil["bandwidth"] * 1e6
    out.append({**head, "config": "floor", "time_us": round(floor, 2), "correct": True, "rel_err": 0.0})
    base = out[0]["time_us"]
    for r in out:
        r["speedup_vs_streamsync"] = round(base / r["time_us"], 4)
    return out


def bench(models=None, sizes=None, iters: int = 30, progress: bool = True) -> dict:
    """Every model at generation (B of sizes, default GEN_B, x S' of GEN_SP) and at prompt
    processing (PROMPT_POINTS, causal and not; with sizes, the points whose B S is among them)."""
    from cusyncgen.cuda import baselines, driver, timing
    from cusyncgen.cuda.lazy import cupy

    models = models.split(",") if isinstance(models, str) else list(models or MODELS)
    for m in models:
        if m not in MODELS:
            raise CusyncError(f"the sm90 attention has no model {m!r} (its models: {', '.join(MODELS)})", None)
    gen_b = list(sizes or GEN_B)
    ceil = baselines.ceilings()
    stream = cupy.cuda.Stream()
    rows, stages = [], []
    work = [("generation", m, B, sp, False) for m in models for sp in GEN_SP for B in gen_b if B <= decode.MAX_M]
    work += [("prompt", m, B, S, c) for m in models for c in (False, True) for B, S in PROMPT_POINTS
             if sizes is None or B * S in sizes]
    for i, (phase, model, B, n, causal) in enumerate(work):
        t0 = time.time()
        with stream:
            if phase == "generation":
                pr = measure_point(model, B, n, iters, stream, seed=1000 * i, ceil=ceil)
            else:
                pr = measure_prompt(model, B, n, causal, iters, stream, seed=1000 * i, ceil=ceil)
        rows += [r for r in pr if r["config"] not in STAGE_CONFIGS]
        stages += [r for r in pr if r["config"] in STAGE_CONFIGS]
        cupy.get_default_memory_pool().free_all_blocks()
        if progress:
            by = {r["config"]: r for r in pr}
            v = by[VENDOR + "+graph"]
            ours = " ".join(f"{c} {r['time_us']:.1f}" for c, r in by.items()
                            if c not in (VENDOR + "+graph", "floor") and c not in STAGE_CONFIGS)
            print(f"[{i + 1}/{len(work)}] {model} {pr[0]['point']}: {ours} "
                  + (f"stage {by[STAGE]['time_us']:.1f} (SDPA {by[VENDOR_STAGE]['time_us']:.1f}) " if STAGE in by
                     else "")
                  + f"vendor {v['time_us']:.1f} ({v['vendor_form']}) floor {by['floor']['time_us']:.1f} us "
                  f"correct={all(r['correct'] for r in pr)} [{time.time() - t0:.0f} s]", file=sys.stderr, flush=True)
    # the attention stage alone (ours, SDPA's) is not a configuration of the block: its own list
    return {"device": driver.device_name(), "workload": "attention", "kernel": "sm90", "vendor": VENDOR,
            "ceilings": ceil, "timing": timing.INTERLEAVED, "rows": rows, "stage": stages}


# ---- the prompt: CUTLASS sm90 GeMMs and CUTLASS's Hopper FMHA (runtime_cuda/sm90/fmha.cu)

PROMPT_SMALL_TILE_MAX_M = 2048   # 64-row tiles are candidates up to this many tokens
FMHA_ALIGN = 8   # CUTLASS's Hopper FMHA: the sequence length a multiple of 8 tokens (its TMA alignment)
PROMPT_POINTS = ((1, 512), (1, 1024), (1, 2048), (1, 4096), (4, 1024))   # (B, S)
PROMPT_ORDERINGS = ("StreamSync", "PDL")
# The prompt's synchronized configurations: the policies of decode_attention.CHAIN_POLICIES (depQK's
# on the QKV GeMM's tiles, depT2's on O's), three PDL-chained launches waiting on the semaphores
PROMPT_SYNCED = tuple(f"{p}+PDL" for p in decode_attention.CHAIN_POLICIES)
STAGE, VENDOR_STAGE = "attention-stage", "sdpa-stage"
STAGE_CONFIGS = (STAGE, VENDOR_STAGE)   # the stage-alone rows: the result's "stage" list, not its "rows"


def prompt_label(model: str, causal: bool, B: int = 1) -> str:
    """The rows' "model" (as the sm80 attention's prompt rows; a batch of several prompts named, as
    the rows' M is B S: B = 4 x 1024 and B = 1 x 4096 are two points)."""
    return f"{model}-prompt" + (f"-B{B}" if B > 1 else "") + ("-causal" if causal else "")


def prompt_engines_for(M: int, N: int, K: int) -> list[str]:
    """The CUTLASS sm90 tile configs of an M x N x K GeMM of the prompt: 128- and 256-row tiles (the
    output GeMM's fastest: cuBLAS's tile there too), and 64-row ones up to PROMPT_SMALL_TILE_MAX_M
    rows (more tiles to fill the SMs), whose BN divides N (the TMA-store epilogue from 256 rows on),
    with split-K where auto_splits finds one. The synchronized configurations take the QKV GeMM on
    128-row tiles only (qkv_sync_cols); the output GeMM waits on O's 64-row tiles from any."""
    return tile_engines(M, N, K, lambda c, bm: (bm in (128, 256) or (bm == 64 and M <= PROMPT_SMALL_TILE_MAX_M))
                        and not c.endswith("c2") and not (c.endswith("tma") and M < 256))


@dataclass
class AttentionPrompt:
    """One prompt of the attention block: B sequences of S tokens."""

    model: str
    B: int
    S: int
    causal: bool = False
    engines: tuple = ("128x128x64", "128x128x64")   # the QKV and output GeMMs' tile configs (prompt_engines_for)
    timeout_ns: int = TIMEOUT_NS     # a synchronized wait gives up after this long (timed_out says where)
    _parts: tuple | None = field(default=None, repr=False)
    _chains: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.model not in MODELS:
            raise CusyncError(f"the sm90 attention has no model {self.model!r} (its models: {', '.join(MODELS)})",
                              None)
        if self.B < 1 or self.S < 1:
            raise CusyncError(f"a prompt of B = {self.B} sequences of S = {self.S} tokens", None)
        if self.S % FMHA_ALIGN:
            raise CusyncError(f"the Hopper FMHA reads whole 16-byte rows of tokens: S a multiple of {FMHA_ALIGN}, not "
                              f"{self.S} (pad the prompt)", None)
        self.H, self.NH, self.M = MODELS[self.model], heads(self.model), self.B * self.S
        check_engines(self.model, self.M, self.engines, prompt_engines_for)

    def gemm_shapes(self) -> tuple:
        return gemm_shapes(self.model)

    @property
    def parts(self):
        if self._parts is None:
            (n1, k1), (n2, k2) = self.gemm_shapes()
            self._parts = (CutlassGemm(self.engines[0], self.M, n1, k1),
                           CutlassGemm(self.engines[1], self.M, n2, k2))
        return self._parts

    def buffers(self, seed: int | None = None):
        """x [B S, H], Wqkv [3 NH D, H], Wo [H, NH D]: fp16 CuPy arrays."""
        from cusyncgen.cuda.lazy import cupy
        rs = cupy.random.RandomState(seed)
        nd = self.NH * D

        def normal(shape, scale=1.0):
            return (rs.standard_normal(shape, dtype=cupy.float32) * scale).astype(cupy.float16)

        return normal((self.M, self.H)), normal((3 * nd, self.H), 1 / math.sqrt(self.H)), \
            normal((self.H, nd), 1 / math.sqrt(nd))

    def outputs(self):
        """qkv [B S, 3 NH D], o [B S, NH D], z [B S, H] (fp16, poisoned), lse [B, NH, S] (fp32)."""
        from cusyncgen.cuda.lazy import cupy
        nd = self.NH * D
        shapes = ((self.M, 3 * nd), (self.M, nd), (self.M, self.H))
        return tuple(cupy.full(s, cupy.nan, dtype=cupy.float16) for s in shapes) \
            + (cupy.zeros((self.B, self.NH, self.S), dtype=cupy.float32),)

    def stage(self, stream, qkv, o, lse) -> None:
        """The attention stage alone (CUTLASS's Hopper FMHA)."""
        from cusyncgen.cuda import driver, sm90
        sm90.fmha(qkv.data.ptr, o.data.ptr, lse.data.ptr, self.B, self.NH, self.S, self.causal, driver.sm_count(),
                  stream.ptr)

    def configs(self) -> list[str]:
        """StreamSync, PDL, and the synchronized configurations where the QKV GeMM's tiles are whole
        heads' columns or cut across heads (qkv_sync_cols) and O's row tiles fit S."""
        out = list(PROMPT_ORDERINGS)
        cols = qkv_sync_cols(self.engines[0], self.NH)
        if self.S % FMHA_O_ROWS == 0 and cols:
            # tiles across heads: no StridedSync (examples/attention_qkv_tiles.dep)
            out += [c for c in PROMPT_SYNCED if cols % D == 0 or not c.startswith("StridedSync")]
        return out

    def run(self, stream, cfg: str, x, wqkv, wo, qkv, o, z, lse) -> None:
        """One prompt of the block under `cfg` (configs()) on `stream` (a CuPy stream). The PDL
        and synchronized launches are made at their first run (outside a graph capture)."""
        if cfg not in self.configs():
            raise CusyncError(f"the sm90 prompt attention ({self.model} B={self.B} S={self.S}, QKV GeMM on "
                              f"{self.engines[0]}) has no configuration {cfg!r} (it has "
                              f"{', '.join(self.configs())})", None)
        if cfg == "StreamSync":
            g1, g2 = self.parts
            g1.launch(stream, x, wqkv, qkv)
            self.stage(stream, qkv, o, lse)
            g2.launch(stream, o, wo, z)
            return
        self.chain(cfg, (x, wqkv, wo, qkv, o, z, lse), stream).launch(stream)

    def chain(self, cfg: str, arrays: tuple, stream=None) -> "PromptChain":
        """The PromptChain of a PDL or synchronized configuration on these arrays (x, wqkv, wo, qkv,
        o, z, lse), made at the first call (not inside a capture on `stream`)."""
        key = (cfg,) + tuple(a.data.ptr for a in arrays)
        if key not in self._chains:
            if stream is not None and stream.is_capturing():
                raise CusyncError(f"{cfg}: its launches are made at the first run, not inside a graph capture "
                                  "(run once first)", None)
            self._chains[key] = PromptChain(self, cfg, arrays, self.timeout_ns)
        return self._chains[key]

    def timed_out(self) -> str | None:
        """What the first wait that timed out saw, in any synchronized configuration run (after
        synchronizing), or None."""
        for chain in self._chains.values():
            msg = chain.timed_out()
            if msg:
                return f"{chain.cfg}: {msg}"
        return None

    def check_stages(self) -> None:
        msg = self.timed_out()
        if msg:
            raise CusyncError(f"attention {self.model} prompt B={self.B} S={self.S}: {msg}", None)

    def reference(self, x, wqkv, wo):
        """(z, o) in float32."""
        from cusyncgen.cuda.lazy import torch
        t = torch.from_dlpack
        nd = self.NH * D
        qkv = (t(x).float() @ t(wqkv).float().T).view(self.B, self.S, 3, self.NH, D)
        o = torch.empty(self.B, self.S, self.NH, D, device=qkv.device)
        mask = torch.ones(self.S, self.S, dtype=torch.bool, device=qkv.device).tril() if self.causal else None
        for b in range(self.B):
            q, k, v = (qkv[b, :, i].transpose(0, 1) for i in range(3))            # [NH, S, D]
            s = (q @ k.transpose(1, 2)) / math.sqrt(D)
            if mask is not None:
                s = s.masked_fill(~mask, -math.inf)
            o[b] = (torch.softmax(s, dim=-1) @ v).transpose(0, 1)
        o = o.reshape(self.M, nd)
        return o @ t(wo).float().T, o

    def vendor_fn(self, ins, backend: str):
        """The block in PyTorch: cuBLAS QKV linear, SDPA under sdpa_kernel(backend) on the [B, NH, S,
        D] views, cuBLAS output linear."""
        from cusyncgen.cuda.lazy import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        member = getattr(SDPBackend, backend)
        x, wqkv, wo = (torch.from_dlpack(a) for a in ins)
        B, S, NH = self.B, self.S, self.NH

        def fn():
            qkv = torch.nn.functional.linear(x, wqkv).view(B, S, 3, NH, D).permute(2, 0, 3, 1, 4)
            with sdpa_kernel(member):
                o = torch.nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=self.causal)
            return torch.nn.functional.linear(o.transpose(1, 2).reshape(B * S, NH * D), wo)
        return fn

    def vendor_stage_fn(self, qkv, backend: str):
        """SDPA alone under sdpa_kernel(backend) on contiguous q, k, v [B, NH, S, D] (made here,
        outside the timing: the stage at its best form)."""
        from cusyncgen.cuda.lazy import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        member = getattr(SDPBackend, backend)
        q, k, v = (a.contiguous() for a in torch.from_dlpack(qkv).view(self.B, self.S, 3, self.NH, D)
                   .permute(2, 0, 3, 1, 4))

        def fn():
            with sdpa_kernel(member):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return fn

    def flops_bytes(self) -> tuple[float, float]:
        nd = self.NH * D
        pairs = self.S * (self.S + 1) // 2 if self.causal else self.S * self.S
        flops = 2 * self.M * self.H * 3 * nd + 4 * self.B * self.NH * pairs * D + 2 * self.M * nd * self.H
        byts = 2 * (4 * nd * self.H + self.M * self.H * 2 + self.M * 3 * nd * 2 + self.M * nd * 2)
        return flops, byts


def qkv_sync_cols(engine: str, heads: int) -> int:
    """The columns of a QKV GeMM tile on this engine ("<tile config>[ split-K]") where the
    synchronized prompt can wait on it, else 0: 128-row tiles, no cluster, BN columns of whole heads
    whose count divides the model's `heads` (examples/attention_<model>.dep: StridedSync and the
    head-together order derive), or BN columns across heads, at least D / 2 of them and dividing the
    3 heads D columns (examples/attention_qkv_tiles.dep: the per-tile policy and RowSync derive)."""
    config = engine.partition(" ")[0]
    bm, bn = (int(v) for v in config.split("x")[:2])
    if bm != 128 or config.endswith("c2"):
        return 0
    if bn % D == 0:
        return bn if heads % (bn // D) == 0 else 0
    return bn if 2 * bn >= D and (3 * heads * D) % bn == 0 else 0


# The QKV GeMM lets the FMHA launch early where its CTAs take more than this many items each
# (qkv_triggers): with fewer rounds no head completes before the GeMM's last round, and the early
# launch only costs (docs/design.md, "The PDL edges apart").
QKV_TRIGGER_ROUNDS = 2


def qkv_triggers(cfg: str, config: str, M: int, N: int, split, sms: int | None = None) -> bool:
    """Whether the prompt's QKV GeMM lets the FMHA launch early (griddepcontrol.launch_dependents at
    each CTA's start): only where the FMHA can work before the GeMM ends -- a synchronized
    configuration whose GeMM CTAs take more than two work items each (QKV_TRIGGER_ROUNDS), so that
    heads complete while later rounds are computed. An early launch the FMHA cannot use costs the
    block 2-11 us at 512-1024 tokens (docs/design.md, "The PDL edges apart"); without it the FMHA
    launches as the GeMM ends."""
    from cusyncgen.cuda import sm90
    if cfg == "PDL":
        return False
    if sms is None:
        from cusyncgen.cuda import driver
        sms = driver.sm_count()
    X, Y = sm90.order_grid(config, M, N)
    return split.items(X * Y) > QKV_TRIGGER_ROUNDS * sms


def prompt_dep_params(B: int, S: int, causal: bool, tile_m: int, heads_per_tile: int = 1) -> dict:
    """The .dep's Params of a prompt of B sequences of S tokens as the GeMMs see it: B S rows (one
    sequence of B S tokens: the waits are computed by the kernels per sequence, the policies only
    number the tiles), row tiles of tile_m, g1's tiles heads_per_tile heads' D columns (of Q, K or V)."""
    return {"B": 1, "S": B * S, "Sp": 0, "TileM": tile_m, "TileK": tile_m, "TileN": D, "Causal": int(causal),
            "HeadsPerTile": heads_per_tile}


def qkv_policy(policies: dict, name: str):
    """depQK's policy of a chain policy name (decode_attention.CHAIN_POLICIES) among compiled_prompt's:
    on tiles of several heads the compiler names the per-tile policy Conv2DTileSync (two heads' items
    read each tile: the consumers' producer tiles overlap), TileSync's place."""
    got = policies["depQK"].get(name)
    if got is None and name == "TileSync":
        got = policies["depQK"].get("Conv2DTileSync")
    return got


@lru_cache(maxsize=None)
def compiled_prompt(model: str, B: int, S: int, causal: bool, qkv_cols: int = D) -> tuple:
    """({"depQK": {name: PolicyIR}, "depT2": {...}}, g1's OrderIR): depQK's on the QKV GeMM's
    128-row tiles of qkv_cols columns (qkv_sync_cols) and g1's order, from
    examples/attention_<model>.dep where the tiles are whole heads, from
    examples/attention_qkv_tiles.dep where they cut across heads; depT2's on O's tiles of
    FMHA_O_ROWS rows from examples/attention_<model>.dep."""
    import cusyncgen
    from cusyncgen.workloads.kernels import examples_dir
    path = examples_dir() / f"attention_{model}.dep"
    out: dict = {"depQK": {}, "depT2": {}}
    if qkv_cols % D:
        qk = cusyncgen.compile(examples_dir() / "attention_qkv_tiles.dep",
                               params={"H": MODELS[model], "Dh": D, "S": B * S, "TileM": 128, "QkvTileN": qkv_cols,
                                       "Causal": int(causal)})
    else:
        qk = cusyncgen.compile(path, params=prompt_dep_params(B, S, causal, 128, qkv_cols // D))
    out["depQK"] = {p.name: p for p in qk.policies if p.dep == "depQK" and p.consumer == "gP"}
    t2 = cusyncgen.compile(path, params=prompt_dep_params(B, S, causal, FMHA_O_ROWS))
    out["depT2"] = {p.name: p for p in t2.policies if p.dep == "depT2"}
    return out, qk.program.order("g1")


class PromptChain:
    """One synchronized configuration of a prompt (AttentionPrompt.run): three launches, the FMHA
    and the output GeMM PDL-launched. "PDL": each waits for the whole previous grid
    (griddepcontrol.wait); the QKV GeMM lets the FMHA launch early only where qkv_triggers says.
    "<policy>+PDL": where qkv_triggers says, the QKV GeMM walks the compiled order and posts its
    tiles (depQK's policy) and the FMHA's load warps wait for their head's tiles; elsewhere the FMHA,
    launched as the GeMM ends, waits on PDL. Its warp groups post O's tiles (depT2's, on O tiles of
    FMHA_O_ROWS rows x one head), and the output GeMM's load warp waits per head's k-tiles
    (runtime_cuda/cusync/sm90/fmha_sync.h). Each configuration has its own
    semaphores, tickets and debug records (zeroed once, never reset: the epochs advance)."""

    def __init__(self, blk: "AttentionPrompt", cfg: str, arrays: tuple, timeout_ns: int):
        from cusyncgen.cuda import sm90
        from cusyncgen.cuda.lazy import cupy
        F = sm90.LaunchFlag
        x, wqkv, wo, qkv, o, z, lse = arrays
        self.blk, self.cfg = blk, cfg
        (n1, k1), (n2, k2) = blk.gemm_shapes()
        M, NH = blk.M, blk.NH
        p1, p2 = blk.parts   # the engines' tile configs and split-K
        c1, c2 = p1.config, p2.config
        early = qkv_triggers(cfg, c1, M, n1, p1.split)   # the FMHA launched early, waiting on the QKV tiles
        g1 = sm90.gemm_desc(x.data.ptr, wqkv.data.ptr, qkv.data.ptr, M, n1, k1, c1, splits=p1.split)
        g2 = sm90.gemm_desc(o.data.ptr, wo.data.ptr, z.data.ptr, M, n2, k2, c2, splits=p2.split)
        self.debug = cupy.zeros((2, ctypes.sizeof(sm90.Debug) // 4), dtype=cupy.int32)   # the FMHA's, g2's
        self.sems: tuple = ()
        self.tickets = cupy.zeros(2, dtype=cupy.uint64)
        sync = sm90.FmhaSync()
        sync.flags = (F.PDL_TRIGGER | F.PDL_LAUNCH).value
        sync.timeout_ns, sync.debug = int(timeout_ns), self.debug.data.ptr
        wait_kw: dict = {}
        if cfg == "PDL":
            sync.flags |= F.PDL_WAIT.value
            g2_flags = F.PDL_TRIGGER | F.PDL_WAIT | F.PDL_LAUNCH
        else:
            name = cfg.rpartition("+")[0]
            qk, t2 = decode_attention.CHAIN_POLICIES[name]
            cols = qkv_sync_cols(c1, NH)
            policies, order = compiled_prompt(blk.model, blk.B, blk.S, blk.causal, cols)
            pq, pt = qkv_policy(policies, qk), policies["depT2"].get(t2)
            if pq is None or pt is None:
                raise CusyncError(f"{cfg}: the .dep gives no {qk} on the QKV GeMM's tiles of {cols} columns "
                                  f"or {t2} on O's", None)
            rows = FMHA_O_ROWS
            dq = sm90.policy_desc(pq)
            dt = sm90.permuted_policy(sm90.policy_desc(pt), (2, 1, 0))   # gT's (0, y, h) as O's (h, y, 0)
            X1, Y1 = sm90.order_grid(c1, M, n1)
            if tuple(dq.extent) != (X1, Y1, 1) or tuple(dt.extent) != (NH, M // rows, 1):
                raise CusyncError(f"{cfg}: compiled for QKV tiles {tuple(dq.extent)} and O tiles {tuple(dt.extent)}, "
                                  f"the block has {(X1, Y1, 1)} and {(NH, M // rows, 1)}", None)
            self.sems = (cupy.zeros(max(1, dq.num_sems), dtype=cupy.uint32),
                         cupy.zeros(max(1, dt.num_sems), dtype=cupy.uint32))
            if early:   # the FMHA starts heads while the GeMM computes others
                g1.order = sm90.order_desc(order)
                g1.out_policy, g1.out_sems = dq, self.sems[0].data.ptr
                sync.in_policy, sync.in_sems, sync.in_tile_m, sync.in_tile_n = dq, self.sems[0].data.ptr, 128, cols
            else:   # it launches as the GeMM ends: PDL's wait, cheaper than its semaphore polls
                sync.flags |= F.PDL_WAIT.value
            sync.out_policy, sync.out_sems = dt, self.sems[1].data.ptr
            sync.ticket = self.tickets.data.ptr
            g2.in_policy, g2.in_sems, g2.in_tile_n, g2.in_tile_m = dt, self.sems[1].data.ptr, D, rows
            g2_flags = F.PDL_TRIGGER | F.PDL_LAUNCH
            wait_kw = dict(ticket=self.tickets.data.ptr + 8, timeout_ns=int(timeout_ns),
                           debug=self.debug.data.ptr + self.debug.strides[0])
        self.sync = sync
        g1_flags = F.PDL_TRIGGER if early else F.NONE
        self.plans = (sm90.Plan(c1, [g1], flags=g1_flags), sm90.Plan(c2, [g2], flags=g2_flags, **wait_kw))
        self.args = (qkv.data.ptr, o.data.ptr, lse.data.ptr)

    def launch(self, stream) -> None:
        from cusyncgen.cuda import driver, sm90
        blk = self.blk
        self.plans[0].launch(stream.ptr)
        sm90.fmha_sync(*self.args, blk.B, blk.NH, blk.S, blk.causal, driver.sm_count(), self.sync, stream.ptr)
        self.plans[1].launch(stream.ptr)

    def timed_out(self) -> str | None:
        """What the first wait that timed out saw (after synchronizing): the attention stage's or the
        output GeMM's, or None."""
        from cusyncgen.cuda import sm90
        for name, words in zip(("the attention stage", "the output GeMM"), self.debug.get().tolist()):
            msg = sm90.debug_message(sm90.Debug.of(words))
            if msg:
                return f"{name}: {msg}"
        return None


def measure_prompt(model: str, B: int, S: int, causal: bool, iters: int, stream, seed: int, ceil: dict) -> list[dict]:
    """Rows of one prompt: StreamSync and PDL on the fastest tile configs, each synchronized
    configuration (PROMPT_SYNCED) on the fastest QKV engine the .dep describes (qkv_sync_cols),
    each checked against float32 on poisoned outputs; the attention stage alone and SDPA alone (its
    fastest correct backend on contiguous q, k, v), the vendor chain (its fastest correct form in a
    CUDA graph) and the floor; ours and the vendor's timed in interleaved rounds (the two stages in
    rounds of their own)."""
    from cusyncgen.cuda import baselines, timing

    probe = AttentionPrompt(model, B, S, causal)
    ins = probe.buffers(seed=seed)
    engines, record = choose_gemm_engines(model, B * S, prompt_engines_for, ins, stream, iters)
    blk = AttentionPrompt(model, B, S, causal, engines)
    outs = blk.outputs()
    z_ref, o_ref = blk.reference(*ins)
    head = {"model": prompt_label(model, causal, B), "M": B * S, "B": B, "S": S, "Sp": 0, "causal": causal,
            "phase": "prompt",
            "point": f"B={B} S={S}" + (" causal" if causal else ""), "kernel": "sm90"}
    from cusyncgen.cuda.lazy import torch
    # the synchronized configurations need QKV tiles the .dep describes (qkv_sync_cols): the fastest such engine
    sync_qkv = [e for e, t in record["qkv"].items() if not isinstance(t, str) and qkv_sync_cols(e, probe.NH)]
    blk_sync = (AttentionPrompt(model, B, S, causal, (min(sync_qkv, key=record["qkv"].get), engines[1]))
                if sync_qkv else None)
    runs = {c: blk for c in PROMPT_ORDERINGS}
    if blk_sync is not None:
        runs.update({c: blk_sync for c in blk_sync.configs() if c in PROMPT_SYNCED})
    errs, timers = {}, {}
    for cfg, b in runs.items():
        with stream:
            for o in outs[:3]:
                o.fill(math.nan)
            b.run(stream, cfg, *ins, *outs)
            stream.synchronize()
        b.check_stages()
        errs[cfg] = rel(torch.from_dlpack(outs[2]), z_ref), rel(torch.from_dlpack(outs[1]), o_ref)
        g = timing.capture(lambda s, b=b, cfg=cfg: b.run(s, cfg, *ins, *outs), stream)
        timers[cfg] = timing.Replay((g.launch,))
    err, err_o = errs["StreamSync"]
    stage_graph = timing.capture(lambda s: blk.stage(s, outs[0], outs[1], outs[3]), stream)
    stage_timers = {STAGE: timing.Replay((stage_graph.launch,))}
    chain = baselines.VendorForms.check({f"torch+{n}": (lambda b=b: blk.vendor_fn(ins, b))
                                         for n, b in SDPA_BACKENDS.items()},
                                        lambda name, fn: rel(fn(), z_ref))
    o4 = o_ref.view(B, S, blk.NH, D).transpose(1, 2)
    stage = baselines.VendorForms.check({f"{n}": (lambda b=b: blk.vendor_stage_fn(outs[0], b))
                                         for n, b in SDPA_BACKENDS.items()},
                                        lambda name, fn: rel(fn(), o4))
    timers.update(form_replays([chain], "chain:"))
    stage_timers.update(form_replays([stage], "stage:"))
    times, rounds = timing.time_in_rounds(timers, stream, iters)
    # the stage alone and SDPA alone in rounds of their own, after the blocks' (docs/design.md,
    # "Attention at prompt processing": the stage timed among the blocks' graphs)
    stage_times, stage_rounds = timing.time_in_rounds(stage_timers, stream, iters)
    times.update(stage_times)
    for b in (blk, blk_sync):
        if b is not None:
            b.check_stages()
    out = [{**head, "config": "StreamSync", "time_us": round(times["StreamSync"], 2), "correct": err < TOL,
            "rel_err": err, "engines": list(engines), "engine_us": record, "rounds": rounds},
           {**head, "config": STAGE, "time_us": round(times[STAGE], 2), "correct": err_o < TOL, "rel_err": err_o,
            "rounds": stage_rounds}]
    out += [{**head, "config": cfg, "time_us": round(times[cfg], 2), "correct": max(errs[cfg]) < TOL,
             "rel_err": errs[cfg][0], "engines": list(b.engines), "rounds": rounds}
            for cfg, b in runs.items() if cfg != "StreamSync"]
    out += [form_row(head, VENDOR + "+graph", chain, times, "chain:", rounds),
            form_row(head, VENDOR_STAGE, stage, times, "stage:", stage_rounds)]
    flops, byts = blk.flops_bytes()
    out.append({**head, "config": "floor", "time_us": round(max(flops / ceil["peak_flops"], byts / ceil["bandwidth"])
                                                             * 1e6, 2), "correct": True, "rel_err": 0.0})
    base = out[0]["time_us"]
    for r in out:
        r["speedup_vs_streamsync"] = round(base / r["time_us"], 4)
    return out


def prompt_markdown(rows: list[dict]) -> list[str]:
    """The prompt section of the bench page."""
    lines = []
    models = dict.fromkeys(r["model"].split("-prompt")[0] for r in rows if r.get("phase") == "prompt")
    for model in models:
        lines += [f"## {model} prompt", "",
                  "| B | S | causal | StreamSync | PDL | best synchronized | vendor+graph | vendor / our fastest | "
                  "our fastest / floor | floor | attention stage | SDPA alone | SDPA / stage | GeMM tiles (QKV, out; "
                  "synchronized QKV) | correct |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        pts = dict.fromkeys((r["B"], r["S"], r["causal"]) for r in rows
                            if r.get("phase") == "prompt" and r["model"].startswith(model + "-prompt"))
        for B, S, causal in sorted(pts, key=lambda p: (p[2], p[0] * p[1], p[0])):
            by = {r["config"]: r for r in rows
                  if r.get("phase") == "prompt" and r["model"] == prompt_label(model, causal, B)
                  and r["B"] == B and r["S"] == S}
            ours, v, fl = by["StreamSync"], by[VENDOR + "+graph"], by["floor"]
            st, vs = by[STAGE], by[VENDOR_STAGE]
            pdl = by.get("PDL")
            synced = [by[c] for c in PROMPT_SYNCED if c in by and by[c]["correct"]]
            best = min(synced, key=lambda r: r["time_us"]) if synced else None
            fastest = min([r for r in (ours, pdl, best) if r is not None and r["correct"]], key=lambda r: r["time_us"],
                          default=ours)
            cells = [B, S, "yes" if causal else "no", f"{ours['time_us']:.1f}",
                     f"{pdl['time_us']:.1f}" if pdl else "-",
                     f"{best['time_us']:.1f} ({best['config']})" if best else "-",
                     f"{v['time_us']:.1f} ({v['vendor_form']})", f"{v['time_us'] / fastest['time_us']:.3f}x",
                     f"{fastest['time_us'] / fl['time_us']:.2f}x", f"{fl['time_us']:.1f}", f"{st['time_us']:.1f}",
                     f"{vs['time_us']:.1f} ({vs['vendor_form']})", f"{vs['time_us'] / st['time_us']:.3f}x",
                     ", ".join(ours.get("engines", ["-"])) + (f"; {best['engines'][0]}" if best else ""),
                     "yes" if all(r["correct"] for r in by.values()) else "NO"]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        lines.append("")
    return lines


def sizing_words(row: dict) -> str:
    """A generation row's attention: its splits and form, and where PDL's attention was launched in
    stream order, that."""
    return (str(row.get("splits", "-")) + (f" ({row['attention_form']})" if "attention_form" in row else "")
            + (f", {IN_STREAM_ORDER}" if row.get("attention_pdl") is False else ""))


def sizing_cell(stream_row: dict, pdl_row: dict) -> str:
    """The attention's splits and form in stream order, and under PDL where they differ (or where
    the attention itself is not PDL-launched there)."""
    a, b = sizing_words(stream_row), sizing_words(pdl_row)
    if a == b:
        return a
    return f"{a}; PDL: {IN_STREAM_ORDER}" if b == f"{a}, {IN_STREAM_ORDER}" else f"{a}; PDL {b}"


def markdown(result: dict) -> str:
    """The bench page: per model, every point's orderings, the vendor and the floor."""
    from cusyncgen.cuda import timing
    lines = [f"# attention (sm90 kernels) on {result['device']}", ""]
    if result.get("command"):
        lines += [f"Written by `{result['command']}`.", ""]
    ceil = result["ceilings"]
    lines += [f"Measured in this run: copy bandwidth {ceil['bandwidth'] / 1e12:.2f} TB/s (the floor: weights, KV "
              "cache and activations over it). Times: median of CUDA-graph replays, microseconds; ours and the "
              f"vendor's forms timed in {timing.timing_words(result.get('timing'))}. vendor+graph: the fastest "
              "correct of cuBLAS QKV linear -> KV-cache append -> SDPA (each backend) -> cuBLAS output linear, in a "
              "CUDA graph (its form named).", ""]
    rows = [r for r in result["rows"] if r.get("phase", "generation") == "generation"]
    for model in dict.fromkeys(r["model"].split("-gen")[0] for r in rows):
        lines += [f"## {model} generation", "", "| B | S' | StreamSync | PDL | best policy config | time | vendor+graph | "
                  "vendor / ours | ours / floor | floor | GeMM engines (QKV, out) | attention splits (form): stream order; PDL | "
                  "correct |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        pts = dict.fromkeys((r["B"], r["Sp"]) for r in rows if r["model"].startswith(model + "-gen"))
        for B, sp in sorted(pts, key=lambda p: (p[1], p[0])):
            by = {r["config"]: r for r in rows if r["model"] == label(model, sp) and r["B"] == B}
            mine = [r for c, r in by.items() if c not in (VENDOR + "+graph", "floor") and r["correct"]]
            ours = min(mine, key=lambda r: r["time_us"], default=None)
            pol = min((r for r in mine if r["config"] in SYNCED), key=lambda r: r["time_us"], default=None)
            v, fl = by[VENDOR + "+graph"], by["floor"]
            lines.append(f"| {B} | {sp} | {by['StreamSync']['time_us']:.1f} | {by['PDL']['time_us']:.1f} | "
                         f"{'-' if pol is None else pol['config']} | "
                         f"{'-' if pol is None else format(pol['time_us'], '.1f')} | "
                         f"{v['time_us']:.1f} ({v['vendor_form']}) | "
                         f"{'-' if ours is None else format(v['time_us'] / ours['time_us'], '.3f') + 'x'} | "
                         f"{'-' if ours is None else format(ours['time_us'] / fl['time_us'], '.2f') + 'x'} | "
                         f"{fl['time_us']:.1f} | {', '.join(by['PDL'].get('engines', ['-']))} | "
                         f"{sizing_cell(by['StreamSync'], by['PDL'])} | "
                         f"{'yes' if all(r['correct'] for r in by.values()) else 'NO'} |")
        lines.append("")
    prompt = [r for r in result["rows"] + result.get("stage", []) if r.get("phase") == "prompt"]
    if prompt:
        lines += ["Prompt processing: CUTLASS sm90 GeMMs, each on its fastest tile config alone, and CUTLASS's "
                  "Hopper FMHA reading Q, K, V from the QKV GeMM's output, in stream order and PDL; 'best "
                  "synchronized': the fastest correct policy + PDL (the FMHA waiting for its head's QKV tiles and "
                  "posting O's, the output GeMM waiting per head; the QKV GeMM on its fastest tile config of one "
                  "head's columns, named after the ';'); 'attention stage': the FMHA alone; 'SDPA alone': PyTorch's "
                  "SDPA (each backend) on contiguous q, k, v, its fastest.", ""]
        lines += prompt_markdown(prompt)
    return "\n".join(lines)
