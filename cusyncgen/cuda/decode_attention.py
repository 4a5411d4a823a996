"""The generation attention kernel (runtime_cuda/kernels/decode_attention.cuh): its module, the
ctypes mirror of its parameters, the ways a block reads the cache (FORMS), the split of the KV
length and the plan that picks both (plan_for; sizings: the candidates a block measures), the
launch, and a float32 reference.

`DecodeAttention(batch, heads, smax, past)` owns the workspace of one shape (fp32 partials per
split, per-head split counts left zero by every launch) and launches one step of generation: the new
token's K and V appended to the caches at position `past`, attention over past + 1 keys, O written
for the output GeMM.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from functools import lru_cache

from cusyncgen.cuda import build, decode
from cusyncgen.cuda.sm90.desc import Debug, Policy
from cusyncgen.errors import CusyncError

HEADER = "kernels/decode_attention.cuh"
CHAIN_HEADER = "kernels/decode_attention_chain.cuh"
HEAD_DIM = 128
KEY_BYTES = 2 * HEAD_DIM * 2   # a key's K and V rows (fp16)
THREADS = 128
MAX_CHUNK = 1024      # keys a split holds at most (more splits fill the SMs better than longer ones)
MIN_CHUNK = 64
MAX_SPLITS = 512      # splits a head's combine weighs (shared memory)
UNROLL = 8            # keys a half-warp has in flight (the loads form)
# The bulk forms' stages: (keys a stage, stages in flight); a stage is the K and V rows of its keys
# in shared memory (2 x 256 bytes a key), copied by one thread's bulk copies. The two plan_for
# chooses among (docs/design.md, "Attention at token generation", for the others measured).
BULK_STAGES = ((64, 3), (32, 2))
FORMS = ("loads",) + tuple(f"bulk{k}x{s}" for k, s in BULK_STAGES)
BLOCKS_PER_SM = 4     # the blocks an SM is meant to hold when sizing the splits (32 KiB of loads in flight each)
# The cached K and V bytes a PDL launch prefetches into L2 before its wait, over the L2's size: the
# QKV GeMM streams its weights past them (evict-first). A third: a share large enough to cover the
# QKV GeMM's stream, small enough that a long cache does not evict its own prefetched lines
# (docs/design.md, "Attention at token generation").
PREFETCH_L2_SHARE = 1 / 3


class AttentionError(CusyncError):
    def __init__(self, message: str):
        super().__init__(message, None)


class AttnParams(ctypes.Structure):
    """CusyncDecodeAttnParams."""

    _fields_ = [("qkv", ctypes.c_void_p), ("kcache", ctypes.c_void_p), ("vcache", ctypes.c_void_p),
                ("o", ctypes.c_void_p), ("ws", ctypes.c_void_p), ("counts", ctypes.c_void_p),
                ("batch", ctypes.c_int32), ("heads", ctypes.c_int32), ("smax", ctypes.c_int32),
                ("past", ctypes.c_int32), ("splits", ctypes.c_int32), ("chunk", ctypes.c_int32),
                ("scale", ctypes.c_float), ("pdl", ctypes.c_int32), ("prefetch_keys", ctypes.c_int32)]


class ChainParams(ctypes.Structure):
    """CusyncDecodeAttnChainParams."""

    _fields_ = [("gemms", decode.Params), ("attn", AttnParams), ("o_policy", Policy), ("o_sems", ctypes.c_void_p),
                ("trace", ctypes.c_void_p), ("stage_tickets", ctypes.c_void_p)]


def chain_name(v: "decode.Shape") -> str:
    return v.name.replace("cusync_decode_mlp_", "cusync_decode_attn_chain_")


def source() -> build.Source:
    """The attention kernel, and the synchronized block's kernels (the one-launch chain and the "+PDL"
    stages) for each decode GeMM variant."""
    text = (f'#include "{CHAIN_HEADER}"\nCUSYNC_DEFINE_DECODE_ATTENTION({UNROLL})\n'
            + "".join(f"CUSYNC_DEFINE_DECODE_ATTENTION_BULK({k}, {st})\n" for k, st in BULK_STAGES)
            + f'CUSYNC_DEFINE_DECODE_ATTN_STAGE({UNROLL})\n'
            + "".join(f"CUSYNC_DEFINE_DECODE_ATTN_CHAIN({v.tb}, {v.d}, {v.rw}, {v.blocks}, {int(v.packed)}, {UNROLL})\n"
                      for v in decode.VARIANTS)
            + 'extern "C" __device__ const int cusync_decode_attn_params_size = sizeof(CusyncDecodeAttnParams);\n'
            'extern "C" __device__ const int cusync_decode_attn_chain_params_size = sizeof(CusyncDecodeAttnChainParams);\n')
    return build.Source("decode_attention", text)


@lru_cache(maxsize=None)
def module():
    """The loaded cubin (built here if the cache lacks it); checks the parameter struct's size."""
    from cusyncgen.cuda import driver
    mod = driver.Module(build.build(source()))
    for name, mirror in (("CusyncDecodeAttnParams", AttnParams), ("CusyncDecodeAttnChainParams", ChainParams)):
        size = mod.constant_int(f"cusync_decode_{'attn_chain' if 'Chain' in name else 'attn'}_params_size")
        if size != ctypes.sizeof(mirror):
            raise AttentionError(f"{mod.path.name}: {name} is {size} bytes, its ctypes mirror {ctypes.sizeof(mirror)}")
    return mod


@dataclass(frozen=True)
class Split:
    """A head's keys in `splits` ranges of `chunk` keys (the last shorter)."""

    chunk: int
    splits: int


def prefetch_keys(items: int, chunk: int, l2_bytes: int) -> int:
    """The cached keys each of `items` blocks (splits of `chunk` keys) prefetches into L2 before its
    PDL wait: an equal share of PREFETCH_L2_SHARE of the L2 (a key is a K and a V row of HEAD_DIM
    halves), at most the chunk; 0 where a share holds no key."""
    return min(chunk, int(l2_bytes * PREFETCH_L2_SHARE) // (items * KEY_BYTES))


def split_for(batch: int, heads: int, keys: int, sms: int) -> Split:
    """Ranges of keys such that the grid (batch x heads x splits blocks) holds about BLOCKS_PER_SM
    blocks an SM or more: chunk = the keys an SM's blocks would read if every SM read the same,
    rounded up to MIN_CHUNK, at most MAX_CHUNK."""
    if keys < 1:
        raise AttentionError(f"attention over {keys} keys")
    per_block = math.ceil(batch * heads * keys / (sms * BLOCKS_PER_SM))
    chunk = min(MAX_CHUNK, max(MIN_CHUNK, -(-per_block // MIN_CHUNK) * MIN_CHUNK))
    splits = -(-keys // chunk)
    if splits > MAX_SPLITS:
        raise AttentionError(f"{keys} keys a head: more than {MAX_SPLITS} splits of {MAX_CHUNK} keys")
    return Split(chunk, splits)


# The sizing for caches that fill the SMs (docs/design.md, "Attention at token generation"): every
# block resident at once with an equal share where the grid allows (one wave), the forms in this
# order on a tie; a block's fixed cost (its ramp, its partial's combine) counted as
# BLOCK_COST_KEYS keys; the busiest SM's blocks keeping at least IN_FLIGHT bytes of the cache in
# flight. A cache under ONE_WAVE_MIN_BYTES an SM is latency-bound: split_for's many short splits.
ONE_WAVE_FORMS = ("bulk64x3", "loads", "bulk32x2")
BLOCK_COST_KEYS = 64
IN_FLIGHT = 96 << 10
ONE_WAVE_MIN_BYTES = 512 << 10


def in_flight(form: str) -> int:
    """The cache bytes one block of `form` has in flight."""
    if form == "loads":
        return 8 * UNROLL * KEY_BYTES   # 8 half-warps, UNROLL keys each
    return form_kernel(form)[1]


@dataclass(frozen=True)
class Plan:
    """How a step's attention reads the cache: a form (FORMS) and its split."""

    form: str
    split: "Split"


def latency_bound(batch: int, heads: int, keys: int, sms: int) -> bool:
    """Whether a cache is under ONE_WAVE_MIN_BYTES an SM (split_for's many short splits read it)."""
    return batch * heads * keys * KEY_BYTES < ONE_WAVE_MIN_BYTES * sms


def plan_for(batch: int, heads: int, keys: int, sms: int, residents: dict) -> Plan:
    """The form and split of a step's attention over `keys` keys a head: for a cache of at least
    ONE_WAVE_MIN_BYTES an SM, among the (form of ONE_WAVE_FORMS, splits) whose busiest SM keeps
    IN_FLIGHT bytes in flight, one whose blocks are all resident at once if any is (a partial
    second wave streams on fewer SMs), then the one whose busiest SM reads the fewest keys, each
    block's fixed cost counted (BLOCK_COST_KEYS); ties to the most bytes in flight, then to the
    order of ONE_WAVE_FORMS. residents: {form: blocks an SM holds}. Smaller caches: loads on
    split_for."""
    if keys < 1:
        raise AttentionError(f"attention over {keys} keys")
    if latency_bound(batch, heads, keys, sms):
        return Plan("loads", split_for(batch, heads, keys, sms))
    bh = batch * heads
    best = None
    for rank, form in enumerate(ONE_WAVE_FORMS):
        per_block = in_flight(form)
        for s in range(1, min(MAX_SPLITS, keys) + 1):
            chunk = -(-keys // s)
            if -(-keys // chunk) != s:   # the same chunk as fewer splits
                continue
            per_sm = -(-bh * s // sms)
            flight = min(residents[form], per_sm) * min(per_block, chunk * KEY_BYTES)
            if flight < IN_FLIGHT:
                continue
            one_wave = bh * s <= residents[form] * sms
            key = (not one_wave, per_sm * (chunk + BLOCK_COST_KEYS), -flight, rank)
            if best is None or key < best[0]:
                best = (key, Plan(form, Split(chunk, s)))
    return best[1] if best else Plan("loads", split_for(batch, heads, keys, sms))


# The other sizing a block may take over a large cache (sizings): split_for's many short splits on
# this form. In the block under PDL, one wave of long blocks reads the cache up to 6% slower than in
# stream order, and several waves of short blocks mostly faster; why is not established, so which
# one a point runs is measured (docs/design.md, "Attention at token generation").
WAVES_FORM = "bulk64x3"


def sizings(batch: int, heads: int, keys: int, sms: int, residents: dict) -> tuple:
    """The sizings (Plan) a step's attention may take, plan_for's first: over a cache plan_for sizes
    for the SMs (at least ONE_WAVE_MIN_BYTES an SM) also split_for's split on WAVES_FORM (its chunk a
    multiple of the 64-key stage; the same splits balanced to equal chunks read 0-4% slower), unless
    both are one block of that form a head; which one a block runs under each ordering is measured
    (attention_sm90.choose_sizing)."""
    plan = plan_for(batch, heads, keys, sms, residents)
    if latency_bound(batch, heads, keys, sms):
        return (plan,)
    waves = Plan(WAVES_FORM, split_for(batch, heads, keys, sms))
    one_block_a_head = waves.form == plan.form and waves.split.splits == plan.split.splits == 1
    return (plan,) if waves == plan or one_block_a_head else (plan, waves)


@lru_cache(maxsize=None)
def residents() -> dict:
    """{form: blocks of its kernel an SM holds} on this GPU, for ONE_WAVE_FORMS."""
    from cusyncgen.cuda import driver
    out = {}
    for form in ONE_WAVE_FORMS:
        name, smem = form_kernel(form)
        out[form] = driver.max_active_blocks(module().kernel(name, THREADS, smem))
    return out


def form_kernel(form: str) -> tuple[str, int]:
    """The kernel of a form (FORMS) and its dynamic shared memory."""
    if form == "loads":
        return f"cusync_decode_attention_{UNROLL}", 0
    for keys, stages in BULK_STAGES:
        if form == f"bulk{keys}x{stages}":
            return f"cusync_decode_attention_bulk_{keys}_{stages}", stages * keys * KEY_BYTES
    raise AttentionError(f"no attention form {form!r} (the forms: {', '.join(FORMS)})")


class DecodeAttention:
    """One generation step's attention for `batch` sequences of `heads` heads (D = HEAD_DIM) with
    `past` cached tokens in caches of `smax` positions: launch(stream, qkv, kcache, vcache, o).
    form: how a block reads its keys (FORMS): "loads", or "bulk<keys>x<stages>"; None: plan_for's
    form and split. split: the KV split (default: plan_for's, or split_for's with a form given)."""

    def __init__(self, batch: int, heads: int, smax: int, past: int, form: str | None = None,
                 split: Split | None = None):
        from cusyncgen.cuda import driver
        from cusyncgen.cuda.lazy import cupy

        if not 0 <= past < smax:
            raise AttentionError(f"the new token goes at position {past} of a cache of {smax} positions")
        if form is None:
            plan = plan_for(batch, heads, past + 1, driver.sm_count(), residents())
            form, split = plan.form, split or plan.split
        if split is not None and not (0 < split.chunk and (split.splits - 1) * split.chunk < past + 1
                                      <= split.splits * split.chunk and split.splits <= MAX_SPLITS):
            raise AttentionError(f"{split.splits} splits of {split.chunk} keys do not cover {past + 1} keys "
                                 f"(at most {MAX_SPLITS} splits, each holding a key)")
        self.batch, self.heads, self.smax, self.past, self.form = batch, heads, smax, past, form
        name, smem = form_kernel(form)
        self.split = split or split_for(batch, heads, past + 1, driver.sm_count())
        self.prefetch_keys = prefetch_keys(batch * heads * self.split.splits, self.split.chunk, driver.l2_bytes())
        self.kernel = module().kernel(name, THREADS, smem)
        bh = batch * heads
        self.ws = cupy.zeros(bh * self.split.splits * (HEAD_DIM + 2), dtype=cupy.float32)   # O, then (max, sum)
        self.counts = cupy.zeros(bh, dtype=cupy.uint32)

    def params(self, qkv: int, kcache: int, vcache: int, o: int, pdl: bool = False) -> AttnParams:
        return AttnParams(qkv, kcache, vcache, o, self.ws.data.ptr, self.counts.data.ptr, self.batch, self.heads,
                          self.smax, self.past, self.split.splits, self.split.chunk,
                          math.log2(math.e) / math.sqrt(HEAD_DIM), int(pdl), self.prefetch_keys)

    def launch(self, stream, qkv, kcache, vcache, o, pdl: bool = False) -> None:
        """qkv [batch, 3 heads D], caches [batch, heads, smax, D], o [batch, heads D]: fp16 CuPy
        arrays, contiguous. pdl: launched to overlap the previous kernel of the stream (the QKV
        row read after griddepcontrol.wait)."""
        want = {"qkv": (qkv, (self.batch, 3 * self.heads * HEAD_DIM)),
                "kcache": (kcache, (self.batch, self.heads, self.smax, HEAD_DIM)),
                "vcache": (vcache, (self.batch, self.heads, self.smax, HEAD_DIM)),
                "o": (o, (self.batch, self.heads * HEAD_DIM))}
        for name, (a, shape) in want.items():
            if tuple(a.shape) != shape or a.dtype.itemsize != 2 or not a.flags.c_contiguous:
                raise AttentionError(f"{name}: a contiguous fp16 array of shape {shape}, not {tuple(a.shape)} "
                                     f"{a.dtype}")
        p = self.params(qkv.data.ptr, kcache.data.ptr, vcache.data.ptr, o.data.ptr, pdl)
        # a bulk form's launch asks for the largest shared-memory carveout (its stages are its loads in flight)
        self.kernel.launch((self.batch * self.heads * self.split.splits, 1, 1), [p], stream, pdl=pdl,
                           smem=self.kernel.smem or None)


def reference(qkv, kcache, vcache, past: int):
    """The float32 result of one step (CuPy arrays as DecodeAttention.launch takes them; the caches'
    positions < past read, the new K and V from the QKV row): [batch, heads D] float32."""
    from cusyncgen.cuda.lazy import cupy

    B, H = kcache.shape[:2]
    new = qkv.reshape(B, 3, H, HEAD_DIM).astype(cupy.float32)
    k = cupy.concatenate([kcache[:, :, :past].astype(cupy.float32), new[:, 1, :, None]], axis=2)
    v = cupy.concatenate([vcache[:, :, :past].astype(cupy.float32), new[:, 2, :, None]], axis=2)
    s = cupy.einsum("bhd,bhkd->bhk", new[:, 0], k) / math.sqrt(HEAD_DIM)
    w = cupy.exp(s - s.max(axis=2, keepdims=True))
    return (cupy.einsum("bhk,bhkd->bhd", w, v) / w.sum(axis=2, keepdims=True)).reshape(B, H * HEAD_DIM)


# The synchronized configurations' policies: {name: (depQK's policy, depT2's policy)} of the
# compiled .dep (attention.py's POLICY_CONFIGS, as far as the block has those dependencies), each
# in one launch ("<name>+Chain") or as three PDL-chained launches waiting on the semaphores
# ("<name>+PDL").
CHAIN_POLICIES = {"TileSync": ("TileSync", "TileSync"), "StridedSync": ("StridedSync", "TileSync"),
                  "RowSync": ("RowSync", "GroupSync_xtile_ytile_zall")}
CONFIGS = tuple(f"{p}+{o}" for p in CHAIN_POLICIES for o in ("PDL", "Chain"))


class DecodeAttentionChain:
    """The attention block of one generation step synchronized per tile (decode_attention_chain.cuh):
    the QKV GeMM and the output GeMM on the decode kernel, the attention between, by `policies`
    ({"depQK": {name: PolicyIR}, "depT2": {...}} of the compiled .dep at D-column g1 tiles, one row
    tile). launch(stream, config, x, wqkv, wo, kcache, vcache, qkv, o, z) with config one of CONFIGS:
    "<policy>+Chain" one launch; "<policy>+PDL" three launches, the attention and the output GeMM
    PDL-launched, waiting on the semaphores. A wait longer than timeout_ns gives up (timed_out() says
    where)."""

    def __init__(self, batch: int, heads: int, hidden: int, smax: int, past: int, policies: dict,
                 timeout_ns: int = 2_000_000_000):
        from cusyncgen.cuda.lazy import cupy
        from cusyncgen.cuda.sm90.desc import policy_desc

        nd = heads * HEAD_DIM
        self.batch, self.heads, self.hidden, self.timeout_ns = batch, heads, hidden, int(timeout_ns)
        self.trace = None   # a CuPy uint64 [grid, 8] array: the chain's blocks' phase times (global timer ns)
        # the chain's kernels run both GeMMs stream-K on one variant (their packed weights its layout)
        self.gemms = (decode.DecodeGemm(batch, decode.GemmShape(3 * nd, hidden), split="stream-k"),
                      decode.DecodeGemm(batch, decode.GemmShape(hidden, nd), split="stream-k"))
        self.shape = self.gemms[0].shape
        self.attn = DecodeAttention(batch, heads, smax, past, form="loads")   # the chain's items read by loads
        mod = module()
        self.kernel = mod.kernel(chain_name(self.shape), THREADS)
        self.stages = (mod.kernel(chain_name(self.shape).replace("_chain_", "_qkv_"), THREADS),
                       mod.kernel(f"cusync_decode_attn_stage_{UNROLL}", THREADS),
                       mod.kernel(chain_name(self.shape).replace("_chain_", "_out_"), THREADS))
        # every block resident: the later shares wait on the earlier
        self.grid = decode.resident_grid([self.kernel, self.stages[0], self.stages[2]], self.shape.blocks)
        self.items = batch * heads * self.attn.split.splits
        self.debug = cupy.zeros(ctypes.sizeof(Debug) // 4, dtype=cupy.int32)
        self.descs, self.sems, self.tickets = {}, {}, {}
        for name, (qk, t2) in CHAIN_POLICIES.items():
            pq, pt = policies["depQK"].get(qk), policies["depT2"].get(t2)
            if pq is None or pt is None:
                continue
            dq, dt = policy_desc(pq), policy_desc(pt)
            if tuple(dq.extent) != (3 * heads, 1, 1) or tuple(dt.extent) != (1, 1, batch * heads):
                raise AttentionError(f"{name}: compiled for g1 tiles {tuple(dq.extent)} and attention tiles "
                                     f"{tuple(dt.extent)}, the block has (3 NH, 1, 1) = {(3 * heads, 1, 1)} and "
                                     f"(1, 1, B NH) = {(1, 1, batch * heads)}")
            self.descs[name] = (dq, dt)
            for order in ("PDL", "Chain"):   # each configuration its own semaphores and epochs
                cfg = f"{name}+{order}"
                self.sems[cfg] = (cupy.zeros(max(1, dq.num_sems), dtype=cupy.uint32),
                                  cupy.zeros(max(1, dt.num_sems), dtype=cupy.uint32))
                self.tickets[cfg] = cupy.zeros(4, dtype=cupy.uint64)   # the chain's, then the three stages'

    @property
    def configs(self) -> list[str]:
        return [c for c in CONFIGS if c.rpartition("+")[0] in self.descs]

    def prepare(self, wqkv, wo) -> None:
        self.gemms[0].prepare(wqkv)
        self.gemms[1].prepare(wo)

    def params(self, config: str, x, wqkv, wo, kcache, vcache, qkv, o, z) -> ChainParams:
        name = config.rpartition("+")[0]
        g1, g2 = self.gemms
        c = ChainParams()
        c.gemms = g1.params(x.data.ptr, wqkv.data.ptr, qkv.data.ptr)
        c.gemms.gemm[1] = g2.params(o.data.ptr, wo.data.ptr, z.data.ptr).gemm[0]
        c.gemms.gemm[0].tile_cols = HEAD_DIM
        dq, dt = self.descs[name]
        sq, st = self.sems[config]
        tickets = self.tickets[config]
        c.gemms.policy, c.gemms.sems, c.gemms.ticket = dq, sq.data.ptr, tickets.data.ptr
        c.gemms.debug, c.gemms.timeout_ns, c.gemms.first, c.gemms.last = self.debug.data.ptr, self.timeout_ns, 0, 1
        c.attn = self.attn.params(qkv.data.ptr, kcache.data.ptr, vcache.data.ptr, o.data.ptr)
        c.o_policy, c.o_sems = dt, st.data.ptr
        c.trace = None if self.trace is None else self.trace.data.ptr
        c.stage_tickets = tickets.data.ptr + 8
        return c

    def launch(self, stream, config: str, x, wqkv, wo, kcache, vcache, qkv, o, z) -> None:
        if config not in self.configs:
            raise AttentionError(f"the synchronized attention block has no configuration {config!r} (it has "
                                 f"{', '.join(self.configs)})")
        self.prepare(wqkv, wo)
        c = self.params(config, x, wqkv, wo, kcache, vcache, qkv, o, z)
        if config.endswith("+Chain"):
            self.kernel.launch((self.grid, 1, 1), [c], stream)
            return
        qkv_k, att_k, out_k = self.stages
        qkv_k.launch((self.grid, 1, 1), [c], stream)
        att_k.launch((self.items, 1, 1), [c], stream, pdl=True)
        out_k.launch((self.grid, 1, 1), [c], stream, pdl=True)

    def timed_out(self) -> str | None:
        """What the first wait that timed out saw (after synchronizing), or None."""
        d = decode.read_debug(self.debug)
        if d is None:
            return None
        what = {1: "an attention item", 2: "the output GeMM (row block"}.get(d.stage, f"stage {d.stage}")
        tail = f" {d.consumer_x})" if d.stage == 2 else f" {d.consumer_x}"
        return (f"a wait timed out: {what}{tail} on producer tile ({d.tile_x}, {d.tile_y}, {d.tile_z}) sem {d.sem} "
                f"seen {d.seen} target {d.expected}")
