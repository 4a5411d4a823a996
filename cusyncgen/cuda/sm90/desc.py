"""The sm90 library's C structs and constants (runtime_cuda/sm90/sm90_api.h) as ctypes mirrors, and
the descriptors built from the compiler's IR: a PolicyIR as a CusyncSm90Policy, an OrderIR as a
CusyncSm90Order (runtime_cuda/cusync/desc.h evaluates both on the device exactly as PolicyIR.sem/value and
OrderIR.tile do; desc_sem, desc_value and desc_tile are the same evaluation in Python, for the CPU
tests), and one GeMM as a CusyncSm90Gemm. The library exports each struct's layout (abi.h) and
lib.Library compares it with these mirrors when it loads."""
from __future__ import annotations

import ctypes
import enum

from cusyncgen.cuda.sm90.errors import Sm90Error
from cusyncgen.cuda.sm90.split import NO_SPLIT, Split, as_split
from cusyncgen.cuda.sm90.tiles import cluster_m, order_grid, tile_dims


class Epilogue(enum.IntEnum):
    """CusyncSm90Epilogue: applied in fp32 to the accumulators before the fp16 store."""

    IDENTITY = 0
    GELU_TANH = 1
    GELU_ERF = 2
    SWIGLU_PAIR = 3   # B's rows [W1|V] interleaved by 64: out[:, 64b + j] = silu(acc[:, 128b + j]) * acc[:, 128b + 64 + j]
    SWIGLU_ROWS = 4   # the swapped GeMM's weight rows [W1|V] interleaved by 8: out[:, 8b + j] = silu(acc[:, 16b + j]) * acc[:, 16b + 8 + j]


class Store(enum.IntEnum):
    """CusyncSm90Store: how the register epilogue writes C."""

    QUAD = 0   # the 4 threads of a quad exchange fp16 pairs: 16-byte stores (C 16-byte aligned)
    PAIR = 1   # each thread stores its fp16 pairs (4-byte stores): the default


class LaunchFlag(enum.Flag):
    """CusyncSm90Flags: how a plan is launched. Not cusync::StageFlags (cusyncgen.cuda.chain.StageFlag,
    the SM80 kernels' flags, whose bits differ): an enum.Flag, not an int, so that the two are never
    compared or mixed; plan_flags (cusyncgen.cuda.sm90.launch) turns a chain Step into these."""

    NONE = 0
    PDL_TRIGGER = 1   # griddepcontrol.launch_dependents at the start of every CTA
    PDL_WAIT = 2      # griddepcontrol.wait in the DMA warp before its first load ("PDL alone")
    PDL_LAUNCH = 4    # launched with cudaLaunchAttributeProgrammaticStreamSerialization


EPI_IDENTITY, EPI_GELU_TANH, EPI_GELU_ERF, EPI_SWIGLU_PAIR, EPI_SWIGLU_ROWS = (
    Epilogue.IDENTITY, Epilogue.GELU_TANH, Epilogue.GELU_ERF, Epilogue.SWIGLU_PAIR, Epilogue.SWIGLU_ROWS)
STORE_QUAD, STORE_PAIR = Store.QUAD, Store.PAIR
STORES = {"quad": STORE_QUAD, "pair": STORE_PAIR}
# [W1|V] row interleaving of llama-ep's first weight: a SwiGLU pair tile is twice this wide
SWIGLU_BLOCK = 64
# sm90_api.h's CUSYNC_SM90_CHAIN_SYNC_WORDS: the swapped MLP chain's counters (swap_mlp); its word 5
# holds 1 + the index of a second-GeMM tile whose wait timed out, word 6 the count it saw
CHAIN_SYNC_WORDS, CHAIN_TIMED_OUT, CHAIN_SEEN = 8, 5, 6
# [W1|V] row interleaving of the swapped GeMM's SwiGLU weight (EPI_SWIGLU_ROWS): a thread's two accumulator rows
SWIGLU_ROWS_BLOCK = 8


class Policy(ctypes.Structure):
    """CusyncSm90Policy: cusyncgen.ir.PolicyIR (sem(t) = c0 + C0 (c1 + C1 c2), value(t) = the
    product of the group sizes)."""

    _fields_ = [("kind", ctypes.c_int32 * 3), ("param", ctypes.c_int32 * 3), ("extent", ctypes.c_int32 * 3),
                ("num_sems", ctypes.c_int32)]


class Order(ctypes.Structure):
    """CusyncSm90Order: cusyncgen.ir.OrderIR (groups_outer 2: the banded order, orders.banded_order)."""

    _fields_ = [("group_dim", ctypes.c_int32), ("group_stride", ctypes.c_int32), ("group_count", ctypes.c_int32),
                ("groups_outer", ctypes.c_int32), ("extent", ctypes.c_int32 * 3)]


class Gemm(ctypes.Structure):
    """CusyncSm90Gemm: one GeMM of a plan, C[M, N] = epilogue(A[M, K] B[N, K]^T), its order, the
    policy it waits on (in_*) and the one it posts (out_*), its split-K and store mode."""

    _fields_ = [("A", ctypes.c_void_p), ("B", ctypes.c_void_p), ("C", ctypes.c_void_p),
                ("M", ctypes.c_int32), ("N", ctypes.c_int32), ("K", ctypes.c_int32), ("ldc", ctypes.c_int32),
                ("epilogue", ctypes.c_int32), ("order", Order),
                ("in_policy", Policy), ("in_sems", ctypes.c_void_p), ("in_tile_n", ctypes.c_int32),
                ("out_policy", Policy), ("out_sems", ctypes.c_void_p), ("splits", ctypes.c_int32),
                ("split_from", ctypes.c_int32), ("store", ctypes.c_int32), ("in_tile_m", ctypes.c_int32)]


class Debug(ctypes.Structure):
    """CusyncSm90Debug = cusync::DebugRecord (runtime_cuda/cusync/debug.h, shared with the SM80
    stages): what the first wait that timed out saw."""

    _fields_ = [("failed", ctypes.c_int32), ("stage", ctypes.c_int32), ("producer", ctypes.c_int32),
                ("tile_x", ctypes.c_int32), ("tile_y", ctypes.c_int32), ("tile_z", ctypes.c_int32),
                ("sem", ctypes.c_int32), ("seen", ctypes.c_uint32), ("expected", ctypes.c_uint32),
                ("consumer_x", ctypes.c_int32), ("consumer_y", ctypes.c_int32), ("consumer_z", ctypes.c_int32),
                ("block", ctypes.c_int32), ("claimed", ctypes.c_int32)]

    @classmethod
    def of(cls, words) -> "Debug":
        """The record from its int32 words as read back from the GPU (a list)."""
        return cls.from_buffer_copy((ctypes.c_int32 * len(words))(*words))


class FmhaSync(ctypes.Structure):
    """CusyncSm90FmhaSync: the prompt's attention stage synchronized -- the QKV GeMM's tiles it waits
    on (in_*), O's tiles it posts (out_*: tile (head, row block of FMHA_O_ROWS rows)), its ticket,
    launch flags (LaunchFlag values), timeout and debug record."""

    _fields_ = [("in_policy", Policy), ("in_sems", ctypes.c_void_p), ("in_tile_m", ctypes.c_int32),
                ("in_tile_n", ctypes.c_int32), ("out_policy", Policy), ("out_sems", ctypes.c_void_p),
                ("ticket", ctypes.c_void_p), ("flags", ctypes.c_int32), ("timeout_ns", ctypes.c_int64),
                ("debug", ctypes.c_void_p)]


#: an O tile's rows in the synchronized FMHA (CUSYNC_SM90_FMHA_O_ROWS: one consumer warp group's share)
FMHA_O_ROWS = 64

# The structs the library exports the layouts of (abi.h), by their C names.
STRUCTS = {"CusyncSm90Policy": Policy, "CusyncSm90Order": Order, "CusyncSm90Gemm": Gemm, "CusyncSm90Debug": Debug,
           "CusyncSm90FmhaSync": FmhaSync}


def policy_desc(p) -> Policy:
    """A cusyncgen.ir.PolicyIR as the device descriptor (PolicyIR.desc(): the same numbers the
    generated header's `<policy>_desc()` holds; cusync/desc.h evaluates it like PolicyIR)."""
    kinds, params, extent, num = p.desc()
    return Policy((ctypes.c_int32 * 3)(*kinds), (ctypes.c_int32 * 3)(*params), (ctypes.c_int32 * 3)(*extent), num)


def permuted_policy(d: Policy, dims: tuple) -> Policy:
    """The same policy over tiles whose coordinates are d's in the order `dims` (new dim i is d's
    dim dims[i]): the same groups and values, the semaphores numbered in the new order -- a
    producer and a consumer that both see tiles that way agree."""
    return Policy((ctypes.c_int32 * 3)(*(d.kind[i] for i in dims)), (ctypes.c_int32 * 3)(*(d.param[i] for i in dims)),
                  (ctypes.c_int32 * 3)(*(d.extent[i] for i in dims)), d.num_sems)


def order_desc(o) -> Order:
    """A cusyncgen.ir.OrderIR as the device descriptor (OrderIR.desc(), as the header's `<grid>_order_desc()`)."""
    group_dim, stride, count, outer, extent = o.desc()
    return Order(group_dim, stride, count, outer, (ctypes.c_int32 * 3)(*extent))


def row_major_order(X: int, Y: int) -> Order:
    d = Order()
    d.group_dim, d.group_stride, d.group_count, d.groups_outer = -1, 1, 1, 0
    d.extent[0], d.extent[1], d.extent[2] = X, Y, 1
    return d


# Python mirrors of cusync/desc.h (the CPU test compares them, and the host-compiled header, with
# PolicyIR.sem/value and OrderIR.tile).
def _dim(kind, param, t, E):
    if kind == 0:
        return t, E, 1
    if kind == 1:
        return 0, 1, E
    if kind == 2:
        return t % param, param, E // param + (1 if t % param < E % param else 0)
    return t // param, -(-E // param), min(param, E - (t // param) * param)


def desc_sem(d: Policy, t) -> int:
    c = [_dim(d.kind[i], d.param[i], t[i], d.extent[i]) for i in range(3)]
    return c[0][0] + c[0][1] * (c[1][0] + c[1][1] * c[2][0])


def desc_value(d: Policy, t) -> int:
    v = 1
    for i in range(3):
        v *= _dim(d.kind[i], d.param[i], t[i], d.extent[i])[2]
    return v


def producer_rows(y: int, bm: int, in_bm: int, producer_Y: int) -> tuple:
    """(py0, rows): the producer row blocks [py0, py0 + rows) that a consumer tile's rows
    [y bm, (y + 1) bm) read when the producer's row tile is in_bm (cusync/sm90/deps.h, ColumnDeps::rows)."""
    py0 = y * bm // in_bm
    return py0, min(-(-(y + 1) * bm // in_bm), producer_Y) - py0


def desc_tile(o: Order, linear: int):
    X, Y = o.extent[0], o.extent[1]
    if o.groups_outer == 2:  # banded (banded_order)
        R = o.group_stride
        band, rest = divmod(linear, R * X)
        rows = min(R, Y - band * R)
        return (rest // rows, band * R + rest % rows, 0)
    if o.groups_outer:
        c, s = o.group_count, o.group_stride
        i, y, g, z = linear % c, (linear // c) % Y, (linear // (c * Y)) % s, linear // (c * Y * s)
        return (g + i * s, y, z)
    r = [linear % X, (linear // X) % Y, linear // (X * Y)]
    if o.group_dim >= 0:
        a = r[o.group_dim]
        r[o.group_dim] = a // o.group_count + (a % o.group_count) * o.group_stride
    return tuple(r)


def gemm_desc(A: int, B: int, C: int, M: int, N: int, K: int, config: str, epilogue: int = EPI_IDENTITY,
              order: "Order | None" = None, splits: "int | Split" = NO_SPLIT, store: int = STORE_PAIR) -> Gemm:
    """One GeMM's descriptor (no wait, no post: the chain wires those). splits: an int S (every
    tile split S ways) or a Split (the tiles from its start on). store: STORE_PAIR (the register
    epilogue's fp16-pair stores, the default: 5% faster on average on the H100, docs/design.md) or
    STORE_QUAD (16-byte stores after a transpose inside each quad; C must be 16-byte aligned)."""
    bm, bn, bk = tile_dims(config)
    sp = as_split(splits)
    if sp.S < 1 or sp.S > K // bk:
        raise Sm90Error(f"split-K: {sp.S} splits of {K // bk} k-tiles")
    X, Y = order_grid(config, M, N)
    if sp.start < 0 or sp.start > X * Y * cluster_m(config):
        raise Sm90Error(f"split-K: the split tiles start at {sp.start}, past the {X * Y} tiles")
    if store not in STORES.values():
        raise Sm90Error(f"unknown store mode {store!r} (have {', '.join(f'{k}={int(v)}' for k, v in STORES.items())})")
    g = Gemm()
    g.A, g.B, g.C = A, B, C
    g.M, g.N, g.K = M, N, K
    g.ldc = N // 2 if epilogue == EPI_SWIGLU_PAIR else N
    g.epilogue = epilogue
    g.order = order if order is not None else row_major_order(*order_grid(config, M, N))
    g.in_sems = None
    g.out_sems = None
    g.splits = sp.S
    g.split_from = sp.start
    g.store = store
    return g
