"""The decode MLP kernel (runtime_cuda/kernels/decode_mlp.cuh): its module, the ctypes mirrors of
its parameters, the packed weight layout and the launches of each ordering.

One cubin (built by cusyncgen.cuda.build, cached, no GPU needed) holds a kernel per token-block
count TB (M <= 8 TB rows) and the A/B variants: `source()` is its translation unit. `DecodeMlp` owns a model's workspace
(fp32 partial sums and group counts per GeMM, left zero by every launch; semaphores and the epoch
ticket per policy; the debug record) and launches:

  StreamSync       the two GeMMs as two launches in stream order;
  PDL              the second PDL-launched: its first weight loads before griddepcontrol.wait;
  <Policy>+Chain   one launch of both (each block its share of the first, then of the second),
                   the second waiting per 64-column tile of Y on the compiled policy's semaphores.

Each GeMM is split (SPLITS) stream-K over the grid, reduced through L2, or warp-K (warp_k_plan:
where its 16-row groups split evenly over nearly the whole grid, M <= 8, no SwiGLU), reduced in
each block's shared memory; "auto" takes warp-K where it applies.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache

from cusyncgen.cuda import build
from cusyncgen.cuda.sm90.desc import Debug, Policy
from cusyncgen.errors import CusyncError

HEADER = "kernels/decode_mlp.cuh"


@dataclass(frozen=True)
class Shape:
    """A kernel variant (cusync::decode::Shape): TB token blocks of 8 rows, D weight steps in flight
    a warp, RW weight rows a warp (16 or 32; a step is 8 * 16 / RW 32-column chunks: eight 16-byte
    loads a lane), blocks an SM, packed or row-major weights."""

    tb: int
    d: int
    rw: int = 32
    blocks: int = 2    # blocks of 128 threads an SM (the registers a thread may use: 65536 / 128 / blocks)
    packed: bool = False  # the weights in pack_weights' layout

    @property
    def name(self) -> str:
        return f"cusync_decode_mlp_{self.tb}_{self.d}_{self.rw}_{self.blocks}_{int(self.packed)}"

    @property
    def step_k(self) -> int:
        """K columns of a step."""
        return 8 * 32 // (2 * (self.rw // 16))

    @property
    def rows(self) -> int:
        """Weight rows of a block step."""
        return 4 * self.rw

    @property
    def macro(self) -> str:
        return f"CUSYNC_DEFINE_DECODE_MLP({self.tb}, {self.d}, {self.rw}, {self.blocks}, {int(self.packed)})"

# The variant each token-block count runs: packed weights, 32 rows a warp, weight loads that skip
# L1 (it keeps X), and as many blocks an SM and steps in flight as registers allow without spilling
# (at TB = 8 with X's fragments loaded at their step, not a step ahead: Shape::X_AHEAD in the
# header; docs/design.md, "Token generation: streaming the weights"); and the same at M <= 8 on
# row-major weights (no packed copy), for A/B runs and the tests.
VARIANTS = (Shape(1, 2, 32, 3, True), Shape(2, 2, 32, 3, True), Shape(4, 2, 32, 2, True), Shape(8, 2, 32, 2, True))
EXTRA = (Shape(1, 2, 32, 3, False),)
# Warp-K (a block's 16-row groups over all of K, K split over its 4 warps, reduced in shared memory:
# no reduction through L2 at the GeMM's end) at M <= 8: 16 rows a warp, 3 blocks an SM. At TB = 2
# it spills at 3 blocks an SM and streams slower than stream-K (docs/design.md).
WARP_K = (Shape(1, 2, 16, 3, True),)
SPLITS = ("auto", "stream-k", "warp-k")
MAX_M = 8 * VARIANTS[-1].tb
THREADS = 128
TILE_COLS = 64      # output columns of a producer tile
WS_STRIDE = 64      # floats per row of the partial sums
ACT = {"identity": 0, "gelu": 1, "swiglu": 2}


class DecodeError(CusyncError):
    def __init__(self, message: str):
        super().__init__(message, None)


class Gemm(ctypes.Structure):
    """CusyncDecodeGemm."""

    _fields_ = [("x", ctypes.c_void_p), ("w", ctypes.c_void_p), ("y", ctypes.c_void_p), ("ws", ctypes.c_void_p),
                ("counts", ctypes.c_void_p), ("n", ctypes.c_int32), ("k", ctypes.c_int32), ("act", ctypes.c_int32),
                ("tile_cols", ctypes.c_int32), ("warp_k", ctypes.c_int32)]


class Params(ctypes.Structure):
    """CusyncDecodeParams."""

    _fields_ = [("gemm", Gemm * 2), ("policy", Policy), ("sems", ctypes.c_void_p), ("ticket", ctypes.c_void_p),
                ("debug", ctypes.c_void_p), ("timeout_ns", ctypes.c_longlong), ("m", ctypes.c_int32),
                ("first", ctypes.c_int32), ("last", ctypes.c_int32), ("pdl", ctypes.c_int32)]


def source(trace: bool = False) -> build.Source:
    """The translation unit of every variant (VARIANTS); `trace`: the diagnostic build whose blocks
    stamp their times (CUSYNC_DECODE_TRACE, python -m cusyncgen.commands.decode_trace)."""
    lines = [f'#include "{HEADER}"'] + [v.macro for v in VARIANTS + EXTRA + WARP_K]
    lines.append('extern "C" __device__ const int cusync_decode_params_size = sizeof(CusyncDecodeParams);')
    if trace:   # the trace's globals are the header's
        return build.Source("decode_mlp_trace", "\n".join(lines) + "\n", defines=("CUSYNC_DECODE_TRACE",))
    return build.Source("decode_mlp", "\n".join(lines) + "\n")


def variant(M: int) -> Shape:
    """The variant for M rows: the fewest token blocks that hold them."""
    if not 1 <= M <= MAX_M:
        raise DecodeError(f"the decode MLP takes 1 to {MAX_M} rows, not M = {M}")
    return next(v for v in VARIANTS if 8 * v.tb >= M)


def check_shape(n: int, k: int, act: str, rows: int = 128) -> None:
    if n % rows or k % 32:
        raise DecodeError(f"the decode MLP needs N a multiple of {rows} and K of 32 (a GeMM is {n} x {k})")
    if act == "swiglu" and n % (2 * TILE_COLS):
        raise DecodeError(f"SwiGLU's [W1|V] rows come in blocks of {2 * TILE_COLS} (N = {n})")


@dataclass(frozen=True)
class GemmShape:
    """One GeMM of the decode MLP: weight rows n, K, its activation (ACT)."""

    n: int
    k: int
    act: str = "identity"

    def __post_init__(self):
        check_shape(self.n, self.k, self.act)

    @property
    def n_out(self) -> int:
        return self.n // 2 if self.act == "swiglu" else self.n

    @property
    def tiles(self) -> int:
        """Producer tiles of its output (TILE_COLS wide)."""
        return self.n_out // TILE_COLS


def pack_weights(w, step_k: int):
    """A weight [N, K] (fp16, row-major; CuPy, or NumPy for checks on the CPU) in a packed variant's
    layout: per 16-row group and step of step_k columns (K zero-padded to whole steps) one
    contiguous tile, in the order a warp's loads read it: load i = (h, c) of lane (g, t) holds row
    8 h + g, columns 32 c + 8 t .. + 8. A copy: the row-major weight stays the caller's."""
    import numpy
    xp = numpy if isinstance(w, numpy.ndarray) else _cupy()
    n, k = w.shape
    if n % 16 or step_k % 32:
        raise DecodeError(f"packing takes 16-row groups and 32-column chunks (a weight of {n} rows, steps of {step_k})")
    steps = -(-k // step_k)
    if steps * step_k != k:
        w = xp.concatenate([w, xp.zeros((n, steps * step_k - k), dtype=w.dtype)], axis=1)
    t = w.reshape(n // 16, 2, 8, steps, step_k // 32, 4, 8)        # [group, h, g, step, c, t, e]
    return xp.ascontiguousarray(t.transpose(0, 3, 1, 4, 2, 5, 6)).reshape(n, steps * step_k)


def _cupy():
    from cusyncgen.cuda.lazy import cupy
    return cupy


@lru_cache(maxsize=None)
def module(trace: bool = False):
    """The loaded cubin (built here if the cache lacks it); checks the parameter struct's size."""
    from cusyncgen.cuda import driver
    mod = driver.Module(build.build(source(trace)))
    size = mod.constant_int("cusync_decode_params_size")
    if size != ctypes.sizeof(Params):
        raise DecodeError(f"{mod.path.name}: CusyncDecodeParams is {size} bytes, its ctypes mirror "
                          f"{ctypes.sizeof(Params)}")
    return mod


def variant_for(M: int, shape: Shape | None) -> Shape:
    """`shape`, or variant(M); refused where it holds fewer than M rows."""
    shape = shape or variant(M)
    if shape.rw == 16:
        raise DecodeError(f"{shape.name}: the 16-row variants run warp-K only (decode.warp_k_choice takes them)")
    if 8 * shape.tb < M:
        raise DecodeError(f"{shape.name} holds {8 * shape.tb} rows, not M = {M}")
    return shape


def warp_k_plan(shapes, slots: int, min_share: float = 0.95) -> tuple[int, list[int]] | None:
    """Warp-K for GeMMs of `shapes` (one grid for all): the most blocks G <= slots such that every
    GeMM's 16-row groups split evenly, k = groups / G a block; None under SwiGLU (its gate and up
    rows are 64 apart) or where G would leave more than 1 - min_share of the slots idle (the
    stream then runs on fewer warps: the L2 reduction's full grid is faster)."""
    from math import gcd
    if any(g.act == "swiglu" or g.n % 16 for g in shapes):
        return None
    groups = [g.n // 16 for g in shapes]
    common = 0
    for n in groups:
        common = gcd(common, n)
    grid = max((d for d in range(1, min(common, slots) + 1) if common % d == 0), default=0)
    if grid < min_share * slots:
        return None
    return grid, [n // grid for n in groups]


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise DecodeError(f"split {split!r} is not one of {', '.join(SPLITS)}")


def warp_k_choice(mod, M: int, shapes):
    """(variant, kernel, grid, groups a block per GeMM) of warp-K for these GeMMs at M rows on this
    device, or None (M past the warp-K variants, or warp_k_plan refuses)."""
    wk = next((v for v in WARP_K if 8 * v.tb >= M), None)
    if wk is None:
        return None
    plan = warp_k_plan(shapes, resident_grid([mod.kernel(wk.name, THREADS)], wk.blocks))
    if plan is None:
        return None
    return wk, mod.kernel(wk.name, THREADS, red_smem(wk, max(plan[1]))), plan[0], list(plan[1])


def engine(mod, M: int, shapes, variant_: Shape | None, split: str) -> tuple[Shape, object, int, list[int]]:
    """(variant, kernel, grid, 16-row groups a block per GeMM, 0: stream-K) of GeMMs `shapes` at M
    rows: warp-K where the split allows it and warp_k_choice finds a plan (never for a caller's
    variant), else stream-K on the variant over the resident grid."""
    shape = variant_for(M, variant_)
    for g in shapes:
        check_shape(g.n, g.k, g.act, shape.rows)
    plan = warp_k_choice(mod, M, shapes) if split != "stream-k" and variant_ is None else None
    if plan is not None:
        return plan
    if split == "warp-k":
        raise DecodeError(f"warp-K does not split these GeMMs evenly at M = {M} "
                          f"({', '.join(f'{g.n} x {g.k} {g.act}' for g in shapes)})")
    kernel = mod.kernel(shape.name, THREADS)
    return shape, kernel, resident_grid([kernel], shape.blocks), [0] * len(shapes)


def pack_into(packed: dict, shape: Shape, weights) -> None:
    """Each weight's packed copy into `packed` (weight pointer -> (the weight, its copy)) for a
    packed variant, once per array (not while a CUDA graph is captured), in place before any launch
    on any stream."""
    if shape.packed and any(w.data.ptr not in packed for w in weights):
        for w in weights:
            if w.data.ptr not in packed:
                packed[w.data.ptr] = (w, pack_weights(w, shape.step_k))
        _cupy().cuda.get_current_stream().synchronize()


def packed_ptr(packed: dict, shape: Shape, ptr: int) -> int:
    """The pointer a launch reads for weight `ptr`: its packed copy on a packed variant."""
    if not shape.packed:
        return ptr
    hit = packed.get(ptr)
    if hit is None:
        raise DecodeError(f"{shape.name} reads packed weights: prepare() them first")
    return hit[1].data.ptr


def red_smem(shape: Shape, groups: int) -> int:
    """Shared memory of warp-K's partial sums: `groups` 16-row groups x (8 TB + 1) fp32 a row."""
    return groups * 16 * (8 * shape.tb + 1) * 4


def resident_grid(kernels, blocks: int) -> int:
    """The grid whose blocks are all resident at once (a later share waits on blocks of an earlier
    one): SMs x the fewest of `blocks` and what each of `kernels` fits an SM."""
    from cusyncgen.cuda import driver
    per_sm = min([blocks] + [driver.max_active_blocks(k) for k in kernels])
    if per_sm < 1:
        raise DecodeError(f"{kernels[0].name} does not fit an SM")
    return driver.sm_count() * per_sm


def read_debug(debug) -> Debug | None:
    """The debug record (a CuPy int32 array, after synchronizing) where a wait timed out, or None."""
    d = Debug.of(debug.get().tolist())
    return d if d.failed else None


CHAIN_POLICIES = ("TileSync", "RowSync")
ORDERINGS = ("StreamSync", "PDL") + tuple(p + "+Chain" for p in CHAIN_POLICIES)


class DecodeMlp:
    """Both GeMMs of one MLP at M rows on the decode kernel: `launch(stream, config, x, w1, w2, y, z)`
    with config one of ORDERINGS; `policies`: {name: cusyncgen.ir.PolicyIR} of the first GeMM's
    64-column output tiles (the compiled .dep's). A wait longer than timeout_ns gives up and
    `timed_out()` says which tile it waited on."""

    def __init__(self, M: int, shapes: tuple[GemmShape, GemmShape], policies: dict, timeout_ns: int = 2_000_000_000,
                 shape: Shape | None = None, trace: bool = False, split: str = "auto"):
        check_split(split)
        from cusyncgen.cuda.lazy import cupy
        from cusyncgen.cuda.sm90.desc import policy_desc

        g1, g2 = shapes
        if g2.k != g1.n_out:
            raise DecodeError(f"the second GeMM's K ({g2.k}) is not the first's output width ({g1.n_out})")
        self.M, self.shapes, self.timeout_ns = M, shapes, int(timeout_ns)
        self.module = module(trace)
        # warp_k: 16-row groups a block per GeMM (0: stream-K)
        self.shape, self.kernel, self.grid, self.warp_k = engine(self.module, M, shapes, shape, split)
        self.ws = [cupy.zeros(g.n * WS_STRIDE, dtype=cupy.float32) for g in shapes]
        self.counts = [cupy.zeros(g.n // 16, dtype=cupy.uint32) for g in shapes]   # a group of 16 or 32 rows
        self.debug = cupy.zeros(ctypes.sizeof(Debug) // 4, dtype=cupy.int32)
        self.packed = {}   # weight pointer -> (the weight, its packed copy): packed variants read those
        self.policies, self.sems, self.tickets = {}, {}, {}
        for name in CHAIN_POLICIES:
            p = policies.get(name)
            if p is None:
                continue
            desc = policy_desc(p)
            if tuple(desc.extent)[:2] != (g1.tiles, 1):
                raise DecodeError(f"{name} is compiled for a {tuple(desc.extent)} grid of producer tiles, the decode "
                                  f"MLP's first GeMM has ({g1.tiles}, 1, 1) tiles of {TILE_COLS} columns")
            self.policies[name] = desc
            self.sems[name] = cupy.zeros(max(1, desc.num_sems), dtype=cupy.uint32)
            self.tickets[name] = cupy.zeros(1, dtype=cupy.uint64)
        cupy.cuda.get_current_stream().synchronize()   # the zeros in place before a launch on any stream

    def prepare(self, *weights) -> None:
        """Pack weights for a packed variant (pack_into)."""
        pack_into(self.packed, self.shape, weights)

    def params(self, ptrs, first: int, last: int, policy: str | None = None, pdl: bool = False) -> Params:
        x, w1, w2, y, z = ptrs
        w1, w2 = packed_ptr(self.packed, self.shape, w1), packed_ptr(self.packed, self.shape, w2)
        p = Params()
        for i, (g, (a, w, out)) in enumerate(zip(self.shapes, ((x, w1, y), (y, w2, z)))):
            p.gemm[i] = Gemm(a, w, out, self.ws[i].data.ptr, self.counts[i].data.ptr, g.n, g.k, ACT[g.act], 0,
                             self.warp_k[i])
        if policy is not None:
            p.policy = self.policies[policy]
            p.sems, p.ticket = self.sems[policy].data.ptr, self.tickets[policy].data.ptr
        p.debug, p.timeout_ns, p.m = self.debug.data.ptr, self.timeout_ns, self.M
        p.first, p.last, p.pdl = first, last, int(pdl)
        return p

    def launch(self, stream, config: str, x, w1, w2, y, z) -> None:
        """One MLP under `config` (ORDERINGS) on `stream` (a CuPy stream); operands are CuPy arrays
        (x [M, K1], w1 [N1, K1], w2 [N2, K2], y [M, K2], z [M, N2], fp16, contiguous)."""
        self.prepare(w1, w2)
        ptrs = tuple(a.data.ptr for a in (x, w1, w2, y, z))

        def run(p: Params, pdl: bool = False) -> None:
            self.kernel.launch((self.grid, 1, 1), [p], stream, pdl=pdl)

        if config == "StreamSync":
            run(self.params(ptrs, 0, 0))
            run(self.params(ptrs, 1, 1))
        elif config == "PDL":
            run(self.params(ptrs, 0, 0))
            run(self.params(ptrs, 1, 1, pdl=True), pdl=True)
        elif config.endswith("+Chain") and config.removesuffix("+Chain") in self.policies:
            run(self.params(ptrs, 0, 1, policy=config.removesuffix("+Chain")))
        else:
            raise DecodeError(f"the decode MLP has no configuration {config!r} (it has "
                              f"{', '.join(c for c in ORDERINGS if not c.endswith('+Chain') or c[:-6] in self.policies)})")

    def timed_out(self) -> str | None:
        """What the first wait that timed out saw (after synchronizing), or None."""
        d = read_debug(self.debug)
        if d is None:
            return None
        return (f"a wait timed out: block {d.block} of the second GeMM (row block {d.consumer_x}) on producer tile "
                f"({d.tile_x}, {d.tile_y}) sem {d.sem} seen {d.seen} target {d.expected}")


class DecodeGemm:
    """One GeMM alone on the decode kernel (the attention block's QKV and output projections):
    `launch(stream, x, w, y, pdl)` computes y = act(x w^T) at M rows; with pdl the launch may
    overlap the previous kernel of the stream (its first weight loads before griddepcontrol.wait).
    split: as DecodeMlp's (a chain that runs the GeMM in its own kernel needs "stream-k")."""

    def __init__(self, M: int, shape: GemmShape, variant_: Shape | None = None, split: str = "auto"):
        from cusyncgen.cuda.lazy import cupy

        check_split(split)
        self.M, self.gemm = M, shape
        self.shape, self.kernel, self.grid, (self.warp_k,) = engine(module(), M, (shape,), variant_, split)
        self.ws = cupy.zeros(shape.n * WS_STRIDE, dtype=cupy.float32)
        self.counts = cupy.zeros(shape.n // 16, dtype=cupy.uint32)
        self.debug = cupy.zeros(ctypes.sizeof(Debug) // 4, dtype=cupy.int32)
        self.packed = {}
        cupy.cuda.get_current_stream().synchronize()   # the zeros in place before a launch on any stream

    def prepare(self, w) -> None:
        """Pack the weight for a packed variant (pack_into)."""
        pack_into(self.packed, self.shape, (w,))

    def params(self, x: int, w: int, y: int, pdl: bool = False) -> Params:
        w = packed_ptr(self.packed, self.shape, w)
        p = Params()
        g = self.gemm
        p.gemm[0] = Gemm(x, w, y, self.ws.data.ptr, self.counts.data.ptr, g.n, g.k, ACT[g.act], 0, self.warp_k)
        p.debug, p.timeout_ns, p.m = self.debug.data.ptr, 0, self.M
        p.first, p.last, p.pdl = 0, 0, int(pdl)
        return p

    def launch(self, stream, x, w, y, pdl: bool = False) -> None:
        """x [M, K], w [N, K], y [M, N_out]: fp16 CuPy arrays, contiguous."""
        g = self.gemm
        for name, a, shape in (("x", x, (self.M, g.k)), ("w", w, (g.n, g.k)), ("y", y, (self.M, g.n_out))):
            if tuple(a.shape) != shape or a.dtype.itemsize != 2 or not a.flags.c_contiguous:
                raise DecodeError(f"{name}: a contiguous fp16 array of shape {shape}, not {tuple(a.shape)} {a.dtype}")
        self.prepare(w)
        self.kernel.launch((self.grid, 1, 1), [self.params(x.data.ptr, w.data.ptr, y.data.ptr, pdl)], stream, pdl=pdl)
