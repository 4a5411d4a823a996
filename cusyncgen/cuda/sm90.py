"""The synchronized Hopper (sm90) GeMMs and MLP chains: build and load libcusync_sm90.so (the
CUTLASS 3 based kernel of runtime_cuda/sm90/), fill its policy and order descriptors from the
compiled .dep program, and launch a GeMM or an MLP in one of the orderings:

- ``stream``: StreamSync, the two GeMMs in stream order;
- ``pdl``: PDL alone (the consumer PDL-launched, griddepcontrol.wait before its loads);
- ``pdl+policy``: the consumer PDL-launched, waiting on the tile semaphores instead;
- ``chain``: one persistent launch holding both GeMMs (every producer tile handed out first).

Building needs nvcc and the CUTLASS headers of the nvidia-cutlass wheel, not a GPU; the library is
cached under ``$CUSYNCGEN_CACHE`` (or ``~/.cache/cusyncgen``) by a hash of its sources and options,
so it can be built here and carried to the GPU machine (``python -m cusyncgen.cuda.sm90 build``).
``CUSYNC_SM90_LIB`` names a prebuilt library directly. Launches take device pointers (ints) and
a stream handle; ``MlpRunner`` allocates its buffers with torch. docs/sm90.md.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple
from pathlib import Path

from cusyncgen.errors import CusyncError

ARCH_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
              "-Xcompiler", "-fPIC"]
LIB_NAME = "libcusync_sm90.so"
# pp: ping-pong; tma: the TMA-store epilogue (docs/sm90.md)
CONFIGS = ("128x128x64", "128x256x64", "64x128x64", "128x192x64", "256x128x64", "64x128x64pp",
           "128x128x64pp", "128x128x64tma", "128x192x64tma", "128x256x64tma", "256x128x64tma")
STOCK_CONFIGS = ("128x128x64", "128x256x64")  # the stock CUTLASS A/B references (stock_ref.cuh)
ORDERINGS = ("stream", "pdl", "pdl+policy", "chain")
POLICIES = ("TileSync", "RowSync")

# sm90_api.h
EPI_IDENTITY, EPI_GELU_TANH, EPI_GELU_ERF, EPI_SWIGLU_PAIR = 0, 1, 2, 3
PDL_TRIGGER, PDL_WAIT, PDL_LAUNCH = 1, 2, 4
STORE_QUAD, STORE_PAIR = 0, 1  # CusyncSm90Store: quad-transposed 16-byte stores, fp16-pair stores (default)
STORES = {"quad": STORE_QUAD, "pair": STORE_PAIR}
DIM_KINDS = {"tile": 0, "all": 1, "mod": 2, "div": 3}
LLAMA_EP_BLOCK = 64  # [W1|V] row interleaving of llama-ep's first weight (cusyncgen.cuda.modules)


class Sm90Error(CusyncError):
    """The sm90 library could not be built, loaded or launched, or rejected its arguments."""

    def __init__(self, message: str):
        super().__init__(message, None)


# ---- building ------------------------------------------------------------------------------------

def source_dir() -> Path:
    here = Path(__file__).resolve().parents[1]
    for cand in (here.parent / "runtime_cuda" / "sm90", here / "_data" / "runtime_cuda" / "sm90"):
        if (cand / "sm90_api.h").is_file():
            return cand
    raise Sm90Error("cannot find runtime_cuda/sm90/sm90_api.h next to the cusyncgen package")


def cutlass_dirs() -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or spec.origin is None:
        env = os.environ.get("CUTLASS_DIR")
        if env:
            return [Path(env) / "include", Path(env) / "tools" / "util" / "include"]
        raise Sm90Error("the CUTLASS headers were not found: install nvidia-cutlass or set CUTLASS_DIR")
    src = Path(spec.origin).parent / "source"
    return [src / "include", src / "tools" / "util" / "include"]


def cache_root() -> Path:
    root = Path(os.environ.get("CUSYNCGEN_CACHE") or Path.home() / ".cache" / "cusyncgen") / "sm90"
    root.mkdir(parents=True, exist_ok=True)
    return root


@lru_cache(maxsize=None)
def _nvcc_version(nvcc: str) -> str:
    if shutil.which(nvcc) is None:
        raise Sm90Error("nvcc was not found on PATH (or set CUSYNC_SM90_LIB to a prebuilt library)")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip().splitlines()[-1] if out.stdout else "unknown"


def _digest(parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _headers_digest(src: Path) -> str:
    """The library's headers and the runtime's (runtime_cuda/cusync, the sync layer included)."""
    heads = sorted(src.glob("*.h")) + sorted(src.glob("*.cuh")) + sorted((src.parent / "cusync").rglob("*.h"))
    return _digest([str(p.relative_to(src.parent)).encode() + p.read_bytes() for p in heads])


def build(nvcc: str = "nvcc", jobs: int | None = None, defines: tuple = (), verbose: bool = False,
          dry_run: bool = False) -> Path:
    """The path of libcusync_sm90.so, compiling what the cache lacks: one object per .cu (each tile
    configuration is its own translation unit, built in parallel, one line on stderr as each is
    done), linked with the static cudart. dry_run: the path only, whether or not it is built."""
    env = os.environ.get("CUSYNC_SM90_LIB")
    if env:
        if not Path(env).is_file():
            raise Sm90Error(f"CUSYNC_SM90_LIB={env} does not exist")
        return Path(env)
    src = source_dir()
    incs = cutlass_dirs()
    flags = ARCH_FLAGS + [f"-D{d}" for d in defines] + [f"-I{d}" for d in incs] + [f"-I{src}", f"-I{src.parent}"]
    base = [_nvcc_version(nvcc), " ".join(ARCH_FLAGS), " ".join(defines), _headers_digest(src),
            str(incs[0].parent)]
    units = sorted(src.glob("*.cu"))
    lib_key = _digest(base + [u.name.encode() + u.read_bytes() for u in units])
    out = cache_root() / f"lib-{lib_key}" / LIB_NAME
    if dry_run:
        return out
    if out.is_file():
        _ensure_descriptors(out.parent)
        return out
    objdir = cache_root() / "obj"
    objdir.mkdir(parents=True, exist_ok=True)

    def obj_of(u: Path) -> Path:
        return objdir / f"{u.stem}-{_digest(base + [u.read_bytes()])}.o"

    todo = sum(not obj_of(u).is_file() for u in units)
    done = iter(range(1, todo + 1))  # next() under the GIL: each finished unit its own number
    workers = jobs or os.cpu_count() or 1
    if todo:
        print(f"building {LIB_NAME}: {todo} of {len(units)} translation units to compile, {workers} at a time "
              "(minutes each)", file=sys.stderr, flush=True)

    def compile_one(u: Path) -> Path:
        obj = obj_of(u)
        if obj.is_file():
            return obj
        tmp = obj.with_suffix(f".{os.getpid()}.tmp.o")
        cmd = ["nice", "-n", "10", nvcc, *flags, "-Xptxas=-warn-spills", "-c", str(u), "-o", str(tmp)]
        if verbose:
            print(" ".join(cmd), file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise Sm90Error(f"nvcc failed on {u.name}:\n{proc.stderr[-4000:]}")
        if verbose and proc.stderr.strip():
            print(proc.stderr, file=sys.stderr, flush=True)
        os.replace(tmp, obj)
        print(f"[{next(done)}/{todo}] {u.name}", file=sys.stderr, flush=True)
        return obj

    with ThreadPoolExecutor(max_workers=workers) as pool:
        objs = list(pool.map(compile_one, units))
    print(f"linking {LIB_NAME}", file=sys.stderr, flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    cmd = [nvcc, "-shared", "-cudart", "static", "-gencode=arch=compute_90a,code=sm_90a", "-o", str(tmp),
           *map(str, objs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise Sm90Error(f"linking {LIB_NAME} failed:\n{proc.stderr[-4000:]}")
    os.replace(tmp, out)
    _ensure_descriptors(out.parent)
    return out


def _ensure_descriptors(folder: Path):
    if (folder / DESCRIPTORS).is_file():
        return
    try:
        write_descriptors(folder / DESCRIPTORS)
    except ImportError:
        pass  # no parser here: compiled_mlp needs it at run time then


# ---- the C interface ------------------------------------------------------------------------------

class Policy(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32 * 3), ("param", ctypes.c_int32 * 3), ("extent", ctypes.c_int32 * 3),
                ("num_sems", ctypes.c_int32)]


class Order(ctypes.Structure):
    _fields_ = [("group_dim", ctypes.c_int32), ("group_stride", ctypes.c_int32), ("group_count", ctypes.c_int32),
                ("groups_outer", ctypes.c_int32), ("extent", ctypes.c_int32 * 3)]


class Gemm(ctypes.Structure):
    _fields_ = [("A", ctypes.c_void_p), ("B", ctypes.c_void_p), ("C", ctypes.c_void_p),
                ("M", ctypes.c_int32), ("N", ctypes.c_int32), ("K", ctypes.c_int32), ("ldc", ctypes.c_int32),
                ("epilogue", ctypes.c_int32), ("order", Order),
                ("in_policy", Policy), ("in_sems", ctypes.c_void_p), ("in_tile_n", ctypes.c_int32),
                ("out_policy", Policy), ("out_sems", ctypes.c_void_p), ("splits", ctypes.c_int32),
                ("split_from", ctypes.c_int32), ("store", ctypes.c_int32), ("in_tile_m", ctypes.c_int32)]


class Debug(ctypes.Structure):
    """cusync::DebugRecord (runtime_cuda/cusync/debug.h), shared with the SM80 stages."""
    _fields_ = [("failed", ctypes.c_int32), ("stage", ctypes.c_int32), ("producer", ctypes.c_int32),
                ("tile_x", ctypes.c_int32), ("tile_y", ctypes.c_int32), ("tile_z", ctypes.c_int32),
                ("sem", ctypes.c_int32), ("seen", ctypes.c_uint32), ("expected", ctypes.c_uint32),
                ("consumer_x", ctypes.c_int32), ("consumer_y", ctypes.c_int32), ("consumer_z", ctypes.c_int32),
                ("block", ctypes.c_int32), ("claimed", ctypes.c_int32)]


def policy_desc(p) -> Policy:
    """A cusyncgen.ir.PolicyIR as the device descriptor (policy_desc.h evaluates it like PolicyIR)."""
    d = Policy()
    for i, dm in enumerate(p.dims):
        d.kind[i] = DIM_KINDS[dm.kind]
        d.param[i] = int(dm.param)
        d.extent[i] = int(p.producer_extent[i])
    d.num_sems = int(p.num_sems)
    return d


def order_desc(o) -> Order:
    """A cusyncgen.ir.OrderIR as the device descriptor."""
    d = Order()
    d.group_dim = -1 if o.group_dim is None else "xyz".index(o.group_dim)
    d.group_stride = int(o.group_stride)
    d.group_count = int(o.group_count)
    d.groups_outer = int(bool(o.groups_outer))
    for i in range(3):
        d.extent[i] = int(o.extent[i])
    return d


def row_major_order(X: int, Y: int) -> Order:
    d = Order()
    d.group_dim, d.group_stride, d.group_count, d.groups_outer = -1, 1, 1, 0
    d.extent[0], d.extent[1], d.extent[2] = X, Y, 1
    return d


# Python mirrors of policy_desc.h (the CPU test compares them, and the host-compiled header, with
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
    [y bm, (y + 1) bm) read when the producer's row tile is in_bm (policy_desc.h's producer_rows)."""
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


class Library:
    def __init__(self, path: Path):
        try:
            self.dll = ctypes.CDLL(str(path))
        except OSError as e:
            raise Sm90Error(f"cannot load {path}: {e}") from None
        d = self.dll
        d.cusync_sm90_configs.restype = ctypes.c_char_p
        d.cusync_sm90_error_string.restype = ctypes.c_char_p
        d.cusync_sm90_error_string.argtypes = [ctypes.c_int]
        d.cusync_sm90_plan_create.argtypes = [ctypes.c_char_p, ctypes.POINTER(Gemm), ctypes.c_int, ctypes.c_void_p,
                                              ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p,
                                              ctypes.POINTER(ctypes.c_void_p)]
        d.cusync_sm90_plan_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        d.cusync_sm90_plan_grid.argtypes = [ctypes.c_void_p]
        d.cusync_sm90_plan_destroy.argtypes = [ctypes.c_void_p]
        d.cusync_sm90_stock_configs.restype = ctypes.c_char_p
        d.cusync_sm90_stock_gemm.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                             ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                             ctypes.c_int, ctypes.c_void_p]
        self.configs = tuple(d.cusync_sm90_configs().decode().split(","))
        self.stock_configs = tuple(d.cusync_sm90_stock_configs().decode().split(","))

    def check(self, code: int, what: str):
        if code != 0:
            raise Sm90Error(f"{what}: {self.dll.cusync_sm90_error_string(code).decode()} (code {code})")


@lru_cache(maxsize=None)
def library_path() -> Path:
    return build()


@lru_cache(maxsize=None)
def library() -> Library:
    return Library(library_path())


class Plan:
    """One persistent launch over one GeMM or the two of a chain (its TMA descriptors built once)."""

    def __init__(self, config: str, gemms: list, ticket: int = 0, grid: int = 0, flags: int = 0,
                 timeout_ns: int = 0, debug: int = 0):
        lib = library()
        if config not in lib.configs:
            raise Sm90Error(f"unknown sm90 config {config!r}; the library has {', '.join(lib.configs)}")
        arr = (Gemm * len(gemms))(*gemms)
        handle = ctypes.c_void_p()
        lib.check(lib.dll.cusync_sm90_plan_create(config.encode(), arr, len(gemms), ticket or None, grid, flags,
                                                  timeout_ns, debug or None, ctypes.byref(handle)),
                  f"sm90 plan ({config}, {len(gemms)} GeMM)")
        self.lib, self.handle, self.config = lib, handle, config
        self.grid = lib.dll.cusync_sm90_plan_grid(handle)

    def launch(self, stream: int = 0):
        self.lib.check(self.lib.dll.cusync_sm90_plan_launch(self.handle, ctypes.c_void_p(stream)), "sm90 launch")

    def __del__(self):
        if getattr(self, "handle", None):
            self.lib.dll.cusync_sm90_plan_destroy(self.handle)
            self.handle = None


RASTERS = {"heuristic": 0, "m": 1, "n": 2}


def stock_gemm(config: str, cluster_m: int, A: int, B: int, C: int, M: int, N: int, K: int, raster: str = "heuristic",
               swizzle: int = 1, stream: int = 0):
    """One launch of the stock CUTLASS GeMM (the A/B reference; not synchronized, no epilogue)."""
    lib = library()
    if config not in lib.stock_configs:
        raise Sm90Error(f"no stock reference {config!r}; the library has {', '.join(lib.stock_configs)}")
    lib.check(lib.dll.cusync_sm90_stock_gemm(config.encode(), cluster_m, A, B, C, M, N, K, RASTERS[raster], swizzle,
                                             ctypes.c_void_p(stream)), f"stock CUTLASS GeMM {config} c{cluster_m}x1")


def tile_dims(config: str) -> tuple:
    """(BM, BN, BK) of a config name "<BM>x<BN>x<BK>[pp|tma|c2]" ("pp": the ping-pong form; "tma": the
    TMA-store epilogue; "c2": clusters of two CTAs along M sharing B through TMA multicast)."""
    bm, bn, bk = (int(v) for v in config.removesuffix("pp").removesuffix("tma").removesuffix("c2").split("x"))
    return bm, bn, bk


def cluster_m(config: str) -> int:
    return 2 if config.endswith("c2") else 1


def order_grid(config: str, M: int, N: int) -> tuple:
    """(X, Y) of the grid an order walks: N / BN column blocks by the row blocks, or, with clusters of
    two CTAs along M, by the pairs of row blocks (each item is a pair, one row block per CTA)."""
    bm, bn, _ = tile_dims(config)
    cm = cluster_m(config)
    return N // bn, -(-(-(-M // bm)) // cm)


def cluster_order(d: "Order", config: str) -> "Order":
    """A tile order (the compiler's) over the grid of a clustered config: the same walk over the pairs
    of row blocks (OrderIR's row-major and x-grouped forms; one that permutes row blocks would split a
    cluster's pair)."""
    cm = cluster_m(config)
    if cm == 1:
        return d
    if d.group_dim == 1:
        raise Sm90Error(f"config {config}: an order that permutes row blocks cannot pair them in clusters")
    d.extent[1] = -(-d.extent[1] // cm)
    return d


def grouped_order(X: int, Y: int, columns: int) -> Order:
    """The order that walks `columns` N blocks (x = g, g + s, ..., s = X / columns) down every M block
    before the next group (OrderIR's groups_outer form): a wave of G items then reads about
    G / columns row blocks of A and `columns` column blocks of B, not G / X row blocks and every
    column block of B (row-major). For a GeMM nothing waits on (the last of a chain, or alone)."""
    if columns < 1 or X % columns:
        raise Sm90Error(f"grouped order: {columns} columns do not divide {X}")
    d = Order()
    d.group_dim, d.group_stride, d.group_count, d.groups_outer = 0, X // columns, columns, 1
    d.extent[0], d.extent[1], d.extent[2] = X, Y, 1
    return d


def banded_order(X: int, Y: int, rows: int) -> Order:
    """The banded order: bands of `rows` row blocks (the last may be shorter), walked band by band,
    each band column by column (its rows down one column, then the next column). A wave of G items
    reads about `rows` row blocks of A and G / rows column blocks of B, and B is read once per band
    (the row-major order reads all of B once per wave once a wave spans a row), while the rows of a
    band are complete as soon as the band is: an L2-friendly order for a producer. Not an OrderIR
    form: a permutation of the same tiles, which the policies (checked against the compiler's
    OrderIR) do not depend on; docs/sm90.md says why any permutation is deadlock-free."""
    if rows < 1 or rows > Y:
        raise Sm90Error(f"banded order: {rows} rows per band for {Y} row blocks")
    d = Order()
    d.group_dim, d.group_stride, d.group_count, d.groups_outer = -1, rows, 1, 2
    d.extent[0], d.extent[1], d.extent[2] = X, Y, 1
    return d


def band_rows(X: int, Y: int, a_row_bytes: float, b_col_bytes: float, sms: int = 132) -> int:
    """The band height R (1..Y) of banded_order that minimizes a wave's L2 footprint
    R * a_row + ceil(G / R) * b_col (G = min(sms, X * Y) items, columns capped at X); ties go to the
    smaller R (rows complete earlier)."""
    G = min(sms, X * Y)
    best, best_cost = 1, None
    for R in range(1, Y + 1):
        cost = R * a_row_bytes + min(X, -(-G // R)) * b_col_bytes
        if best_cost is None or cost < best_cost:
            best, best_cost = R, cost
    return best


def grouped_columns(X: int, Y: int, a_row_bytes: float, b_col_bytes: float, sms: int = 132) -> int:
    """The divisor c of X that minimizes a wave's L2 footprint c * b_col + (sms / c) * a_row (rows
    capped at Y)."""
    best, best_cost = X, None
    for c in range(1, X + 1):
        if X % c:
            continue
        rows = min(Y, -(-sms // c))
        cost = c * b_col_bytes + rows * a_row_bytes
        if best_cost is None or cost < best_cost:
            best, best_cost = c, cost
    return best


class Split(NamedTuple):
    """Split-K of one GeMM: the tiles from `start` on (in the GeMM's order) are each `S` work items
    over k-ranges of their K; the tiles before `start` are one item each. start = 0: every tile split
    (classic split-K); start a multiple of the grid: whole waves of tiles run unsplit and only the
    last, partial wave is split (a split-K tail)."""

    S: int = 1
    start: int = 0

    def __str__(self) -> str:
        return str(self.S) if self.S == 1 or self.start == 0 else f"{self.S}@{self.start}"


NO_SPLIT = Split()

# The split-K cost model of auto_splits, in k-tile times: what a work item costs beyond its k-tiles
# (prologue, epilogue, the pipeline's fill: latency, which at small M is many k-tiles' worth), and
# what a split adds (its fp32 partial stored, its share of the last split's reduction). Fitted to
# an H100 run (docs/design.md, 'Hopper: split-K tails'): gpt3 M=1's first GeMM, 48 tiles of 192
# k-tiles, is fastest with 2 splits (4 and 11 were slower); llama-ep's first at M=1, 43 tiles of 128
# k-tiles, with 3; gpt3's second, 96 tiles of 96 k-tiles, unsplit.
ITEM_COST_K = 8
SPLIT_COST_K = 8


def split_makespan(tiles: int, k_tiles: int, split: Split, sms: int = 132) -> float:
    """auto_splits' model of a GeMM's time, in k-tile times: the static persistent schedule hands
    CTA b the items b, b + G, ...; the unsplit tiles fill whole rounds, the split tiles' items the
    rest."""
    G = min(sms, tiles) if split.S == 1 else sms
    whole = split.start if split.S > 1 else tiles
    t = -(-whole // G) * (k_tiles + ITEM_COST_K) if whole else 0.0
    if split.S > 1:
        rest = tiles - split.start
        t += -(-(rest * split.S) // G) * (-(-k_tiles // split.S) + ITEM_COST_K + SPLIT_COST_K)
    return t


def auto_splits(tiles: int, k_tiles: int, sms: int = 132, min_k_tiles: int = 8, max_splits: int = 16) -> Split:
    """Split-K of a GeMM of `tiles` tiles: no split, or the tiles past the last whole wave (start =
    w * sms, w = 0 .. tiles // sms) split S ways (2..max_splits, each split at least min_k_tiles
    k-tiles), whichever split_makespan finds fastest; a split must gain 3% over the next simpler
    choice (fewer splits, fewer split tiles)."""
    best = NO_SPLIT
    best_t = split_makespan(tiles, k_tiles, best, sms)
    for w in range(tiles // sms, -1, -1):   # the fewest split tiles first
        start = w * sms
        if start >= tiles:
            continue
        for S in range(2, max_splits + 1):
            if k_tiles // S < min_k_tiles:
                break
            sp = Split(S, start)
            t = split_makespan(tiles, k_tiles, sp, sms)
            if t < best_t * 0.97:
                best, best_t = sp, t
    return best


def as_split(splits) -> Split:
    """A Split from a Split, (S, start) or an int S (every tile split)."""
    if isinstance(splits, Split):
        return splits
    if isinstance(splits, tuple):
        return Split(*(int(v) for v in splits))
    return Split(int(splits))


def gemm_desc(A: int, B: int, C: int, M: int, N: int, K: int, config: str, epilogue: int = EPI_IDENTITY,
              order: "Order | None" = None, splits: "int | Split" = 1, store: int = STORE_PAIR) -> Gemm:
    """One GeMM's descriptor. splits: an int S (every tile split S ways) or a Split (the tiles from
    its start on). store: STORE_PAIR (the register epilogue's fp16-pair stores, the default: 5%
    faster on average on the H100, docs/design.md) or STORE_QUAD (16-byte stores after a transpose
    inside each quad; C must be 16-byte aligned)."""
    bm, bn, bk = tile_dims(config)
    sp = as_split(splits)
    if sp.S < 1 or sp.S > K // bk:
        raise Sm90Error(f"split-K: {sp.S} splits of {K // bk} k-tiles")
    X, Y = order_grid(config, M, N)
    if sp.start < 0 or sp.start > X * Y * cluster_m(config):
        raise Sm90Error(f"split-K: the split tiles start at {sp.start}, past the {X * Y} tiles")
    if store not in STORES.values():
        raise Sm90Error(f"unknown store mode {store!r} (have {', '.join(f'{k}={v}' for k, v in STORES.items())})")
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


# ---- the MLPs -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Model:
    name: str
    dep: str
    H: int
    F: int          # the second GeMM's K (the first GeMM's output columns)
    N1: int         # the first GeMM's N (2F for the SwiGLU pair)
    epilogue1: int


MODELS = {
    "gpt3": Model("gpt3", "mlp_gpt3.dep", 12288, 6144, 6144, EPI_GELU_TANH),
    "llama-ep": Model("llama-ep", "mlp_llama_ep.dep", 8192, 2752, 2 * 2752, EPI_SWIGLU_PAIR),
}
# Chains no MLP workload lists: "wave", GPT-3's .dep program with H = 512, for the overhead
# benchmark (cusyncgen.workloads.overhead_sm90: at M = 128 x SMs / 2 its producer is one wave of
# 128x128 tiles of 8 k-tiles, two per row). Compiled on use (no descriptors beside the library:
# needs lark).
EXTRA_MODELS = {"wave": Model("wave", "mlp_gpt3.dep", 512, 256, 256, EPI_GELU_TANH)}


def model_of(name: str) -> Model:
    """The Model named `name` (MODELS or EXTRA_MODELS)."""
    m = MODELS.get(name) or EXTRA_MODELS.get(name)
    if m is None:
        raise Sm90Error(f"unknown model {name!r} (have {', '.join(list(MODELS) + list(EXTRA_MODELS))})")
    return m


def dep_params(model: Model, M: int, config: str) -> dict:
    bm, bn, _ = tile_dims(config)
    rows = -(-M // bm) * bm
    if model.epilogue1 == EPI_SWIGLU_PAIR:
        if bn != 2 * LLAMA_EP_BLOCK:
            raise Sm90Error(f"{model.name}'s first GeMM tile must be {2 * LLAMA_EP_BLOCK} wide (its weight's "
                            f"interleaving); config {config} is {bn}")
        return {"H": model.H, "F": model.F, "B": rows, "S": 1, "TileM": bm, "TileN1": bn // 2, "TileN2": bn}
    return {"H": model.H, "B": rows, "S": 1, "TileM": bm, "TileN": bn}


def examples_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "examples"


# The sizes whose descriptors `build` also writes (descriptors.json beside the library), for a GPU
# machine without the compiler's parser (lark): the benchmark's M list and the GPU tests'.
DESCRIPTOR_MS = (1, 64, 128, 200, 256, 512, 1024, 2048, 4096)
DESCRIPTORS = "descriptors.json"


def _compile_mlp(model_name: str, M: int, config: str):
    import cusyncgen

    model = model_of(model_name)
    prog = cusyncgen.compile(examples_dir() / model.dep, params=dep_params(model, M, config))
    pols = {p.name: p for p in prog.policies}
    return pols, prog.program.order("g1"), prog.program.order("g2")


def write_descriptors(path: Path) -> Path:
    """The compiled policies and orders of every MLP at DESCRIPTOR_MS, as JSON."""
    import dataclasses
    import json

    out = []
    for model_name, model in MODELS.items():
        for config in CONFIGS:
            if model.epilogue1 == EPI_SWIGLU_PAIR and tile_dims(config)[1] != 2 * LLAMA_EP_BLOCK:
                continue
            for M in DESCRIPTOR_MS:
                pols, o1, o2 = _compile_mlp(model_name, M, config)
                out.append({"model": model_name, "M": M, "config": config,
                            "policies": [dataclasses.asdict(p) for p in pols.values()],
                            "orders": [dataclasses.asdict(o1), dataclasses.asdict(o2)]})
    path.write_text(json.dumps(out))
    return path


@lru_cache(maxsize=None)
def _stored_descriptors() -> dict:
    import json

    from cusyncgen.ir import DimMap, OrderIR, PolicyIR

    path = library_path().parent / DESCRIPTORS
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
def compiled_mlp(model_name: str, M: int, config: str):
    """The compiled .dep program of the MLP at this size and tile: (policies by name, g1 order,
    g2 order). Without the parser (a GPU machine lacking lark), the descriptors that `build` wrote
    from the same compilation."""
    model_of(model_name)
    try:
        import lark  # noqa: F401
    except ImportError:
        hit = _stored_descriptors().get((model_name, M, config))
        if hit is None:
            raise Sm90Error(f"lark is not installed and {DESCRIPTORS} beside the library has no entry for "
                            f"{model_name} M={M} {config}") from None
        return hit
    return _compile_mlp(model_name, M, config)


def mlp_splits(model_name: str, M: int, config: str, splits="none", config2: "str | None" = None) -> tuple:
    """Split-K of an MLP's two GeMMs, a pair of Splits: "none", "auto" (auto_splits of each, on its
    own tile config: config, and config2 for the second where given), or a pair of Splits / ints."""
    if splits == "none" or splits is None:
        return (NO_SPLIT, NO_SPLIT)
    m = model_of(model_name)
    if splits == "auto":
        out = []
        for (N, K), c in zip(mlp_sizes(m), (config, config2 or config)):
            cm, (_, bn, bk) = cluster_m(c), tile_dims(c)
            out.append(auto_splits(cm * (N // bn) * order_grid(c, M, N)[1], K // bk, sms=132 // cm * cm))
        return tuple(out)
    s1, s2 = (as_split(v) for v in splits)
    return (s1, s2)


def mlp_case(model_name: str, M: int, seed: int = 0):
    """Fresh random operands of one MLP on the GPU and its reference, for the GPU tests and the
    sanitizer runs (torch tensors): X [M, H], W1 [N1, H], W2 [H, F] fp16 (scaled so that the outputs
    stay O(1)), the intermediate Y as fp16 from a float32 product (GeLU tanh, or llama-ep's SwiGLU pair
    of [W1|V] interleaved by 64), and Z = Y W2^T in float32."""
    import torch

    m = model_of(model_name)
    g = torch.Generator(device="cuda").manual_seed(seed)
    X = torch.randn(M, m.H, device="cuda", generator=g).half()
    W1 = (torch.randn(m.N1, m.H, device="cuda", generator=g) / m.H ** 0.5).half()
    W2 = (torch.randn(m.H, m.F, device="cuda", generator=g) / m.F ** 0.5).half()
    return (X, W1, W2) + mlp_reference(model_name, X, W1, W2)


def mlp_reference(model_name: str, X, W1, W2) -> tuple:
    """(Y, Z) of one MLP on torch tensors: Y fp16 from a float32 product and the model's activation,
    Z = Y W2^T in float32 (mlp_case's reference, for other inputs)."""
    import torch.nn.functional as Fn

    m = model_of(model_name)
    A = X.float() @ W1.float().t()
    if m.epilogue1 == EPI_SWIGLU_PAIR:
        a4 = A.view(X.shape[0], m.N1 // (2 * LLAMA_EP_BLOCK), 2, LLAMA_EP_BLOCK)
        Y = (Fn.silu(a4[:, :, 0]) * a4[:, :, 1]).reshape(X.shape[0], m.F).half()
    else:
        Y = Fn.gelu(A, approximate="tanh").half()
    return Y, Y.float() @ W2.float().t()


def rel_err(out, ref) -> float:
    """Relative Frobenius error of a torch tensor against a float32 reference; inf on a NaN/inf."""
    o = out.float()
    if not bool(o.isfinite().all()):
        return float("inf")
    return float((o - ref).norm() / ref.norm().clamp_min(1e-30))


def has_split(splits) -> bool:
    """Does a pair of Splits (mlp_splits) split either GeMM?"""
    return any(as_split(s).S > 1 for s in splits)


def mlp_sizes(model: Model):
    """(N, K) of the two GeMMs."""
    return (model.N1, model.H), (model.H, model.F)


class MlpRunner:
    """One MLP (model, M, config, ordering, policy) over given device buffers: X [M, H], W1 [N1, H],
    W2 [H, F], Y [M, F] (the intermediate), Z [M, H]; fp16, row-major. Allocates its semaphores,
    ticket and debug record (torch, zeroed once, never reset). ``config2``: the second GeMM's tile
    config where it differs from the first's (two launches: not the chain, whose one kernel has one
    tile; the policies stay the producer's, compiled for its tile, and each consumer tile waits on
    the producer row blocks its rows overlap). ``splits``: split-K counts of the two
    GeMMs ((1, 1): none; "auto": auto_splits per GeMM). ``grouped2``: the second GeMM (nothing waits
    on it) walks grouped_order instead of the compiler's order. ``grouped1``: the first GeMM walks
    grouped_order (its rows complete only at its end: for a producer of about one wave). ``banded1``: the first GeMM walks
    banded_order (band_rows' height) instead of the compiler's order (row blocks complete band by
    band; the policies are unchanged). ``banded2``: the second GeMM walks banded_order too, with the
    first GeMM's band height (or its own band_rows'), so that its first items read the rows the
    producer completes first (not with grouped2). ``store``: "pair" (fp16-pair stores, the default) or "quad"
    (16-byte stores, for A/B)."""

    def __init__(self, model: str, M: int, ordering: str, policy: "str | None", config: str, X: int, W1: int,
                 W2: int, Y: int, Z: int, timeout_ns: int = 0, splits="none", grouped2: bool = False,
                 banded1: bool = False, store: str = "pair", banded2: bool = False, config2: "str | None" = None,
                 grouped1: bool = False):
        import torch

        model_of(model)
        if ordering not in ORDERINGS:
            raise Sm90Error(f"unknown ordering {ordering!r} (have {', '.join(ORDERINGS)})")
        syncs = ordering in ("pdl+policy", "chain")
        if syncs and policy not in POLICIES:
            raise Sm90Error(f"ordering {ordering} needs a policy ({', '.join(POLICIES)})")
        config2 = None if config2 == config else config2
        if config2 is not None:
            if ordering == "chain":
                raise Sm90Error(f"the chain is one kernel with one tile config: {config} and {config2} need two "
                                "launches (StreamSync, PDL or <Policy>+PDL)")
            if config2 not in CONFIGS:
                raise Sm90Error(f"unknown tile config {config2!r} (have {', '.join(CONFIGS)})")
        self.model, self.M, self.ordering, self.config, self.config2 = model_of(model), M, ordering, config, config2
        self.policy = policy if syncs else None
        m = self.model
        (N1, K1), (N2, K2) = mlp_sizes(m)
        pols, o1, o2 = compiled_mlp(model, M, config)
        c2 = config2 or config
        self.splits = mlp_splits(model, M, config, splits, config2)
        bm, bn, bk = tile_dims(config)
        bm2, bn2, _ = tile_dims(c2)
        if N2 % bn2:
            raise Sm90Error(f"{model}'s second GeMM (N = {N2}) is no multiple of {c2}'s tile width")
        d1 = cluster_order(order_desc(o1), config)
        # the compiler's consumer order is for the producer's tile; with a tile of its own, row-major
        d2 = cluster_order(order_desc(o2), config) if config2 is None else row_major_order(*order_grid(c2, M, N2))
        if store not in STORES:
            raise Sm90Error(f"unknown store mode {store!r} (have {', '.join(STORES)})")
        self.store = store
        if grouped2 and banded2:
            raise Sm90Error("the second GeMM walks one order: grouped2 or banded2, not both")
        if grouped1 and banded1:
            raise Sm90Error("the first GeMM walks one order: grouped1 or banded1, not both")
        if grouped1 and banded2:
            raise Sm90Error("banded2 walks the first GeMM's bands: not with grouped1")
        self.grouped1 = grouped1
        self.grouped2 = grouped2
        self.banded1 = banded1
        self.banded2 = banded2
        cm = cluster_m(config)
        if grouped1:
            X1, Y1 = d1.extent[0], d1.extent[1]
            d1 = grouped_order(X1, Y1, grouped_columns(X1, Y1, cm * bm * K1 * 2.0, bn * K1 * 2.0, 132 // cm))
        if banded1:
            X1, Y1 = d1.extent[0], d1.extent[1]
            d1 = banded_order(X1, Y1, band_rows(X1, Y1, cm * bm * K1 * 2.0, bn * K1 * 2.0, 132 // cm))
            self.band1 = d1.group_stride
        if banded2:
            X2, Y2 = d2.extent[0], d2.extent[1]
            # the first GeMM's band height in the second's row blocks (at least one)
            R = (max(1, self.band1 * bm // bm2) if banded1
                 else band_rows(X2, Y2, cm * bm2 * K2 * 2.0, bn2 * K2 * 2.0, 132 // cm))
            d2 = banded_order(X2, Y2, min(R, Y2))
        if grouped2:
            X2, Y2 = d2.extent[0], d2.extent[1]
            d2 = grouped_order(X2, Y2, grouped_columns(X2, Y2, cm * bm2 * K2 * 2.0, bn2 * K2 * 2.0, 132 // cm))
        g1 = gemm_desc(X, W1, Y, M, N1, K1, config, m.epilogue1, d1, splits=self.splits[0], store=STORES[store])
        g2 = gemm_desc(Y, W2, Z, M, N2, K2, c2, EPI_IDENTITY, d2, splits=self.splits[1], store=STORES[store])
        dev = torch.device("cuda")
        self.debug = torch.zeros(16, dtype=torch.int32, device=dev)
        self.ticket = torch.zeros(2, dtype=torch.int64, device=dev)
        self.sems = None
        if syncs:
            pol = pols[policy]
            self.sems = torch.zeros(max(1, pol.num_sems), dtype=torch.int32, device=dev)
            pd = policy_desc(pol)
            g1.out_policy, g1.out_sems = pd, self.sems.data_ptr()
            g2.in_policy, g2.in_sems = pd, self.sems.data_ptr()
            g2.in_tile_n = bn // 2 if m.epilogue1 == EPI_SWIGLU_PAIR else bn
            g2.in_tile_m = bm
        dbg = self.debug.data_ptr()
        tk = self.ticket.data_ptr()
        if ordering == "chain":
            self.plans = [Plan(config, [g1, g2], ticket=tk, timeout_ns=timeout_ns, debug=dbg)]
        elif ordering == "stream":
            self.plans = [Plan(config, [g1]), Plan(c2, [g2])]
        elif ordering == "pdl":
            self.plans = [Plan(config, [g1], flags=PDL_TRIGGER),
                          Plan(c2, [g2], flags=PDL_LAUNCH | PDL_WAIT)]
        else:  # pdl+policy
            self.plans = [Plan(config, [g1], flags=PDL_TRIGGER),
                          Plan(c2, [g2], ticket=tk, flags=PDL_LAUNCH, timeout_ns=timeout_ns, debug=dbg)]

    @property
    def name(self) -> str:
        head = f"sm90 {self.config}" + (f"+{self.config2}" if self.config2 else "")
        if has_split(self.splits):
            head += f" splitK{self.splits[0]}/{self.splits[1]}"
        if self.grouped1:
            head += " G1"
        if self.banded1:
            head += " B1"
        if self.grouped2:
            head += " G2"
        if self.banded2:
            head += " B2"
        if self.store != "pair":
            head += f" {self.store}-store"
        if self.ordering == "stream":
            return f"{head} StreamSync"
        if self.ordering == "pdl":
            return f"{head} PDL"
        if self.ordering == "chain":
            return f"{head} {self.policy} Chain"
        return f"{head} {self.policy}+PDL"

    def launch(self, stream: int = 0):
        for p in self.plans:
            p.launch(stream)

    def check_debug(self):
        """Raise if a wait of this runner timed out (call after synchronizing)."""
        d = Debug.from_buffer_copy(self.debug.cpu().numpy().tobytes()[:ctypes.sizeof(Debug)])
        if d.failed:
            raise Sm90Error(f"{self.name} M={self.M}: a wait timed out: block {d.block} gemm {d.stage} tile "
                            f"({d.consumer_x}, {d.consumer_y}) producer tile ({d.tile_x}, {d.tile_y}) sem {d.sem} "
                            f"seen {d.seen} target {d.expected}")


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m cusyncgen.cuda.sm90",
                                 description="build: build the library (what the cache lacks) and print its path; "
                                             "path: print the path it is or would be built at, building nothing")
    ap.add_argument("what", choices=["build", "path"])
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    try:
        print(build(jobs=a.jobs, verbose=a.verbose, dry_run=a.what == "path"))
    except CusyncError as e:
        print(e.render("python -m cusyncgen.cuda.sm90"), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
