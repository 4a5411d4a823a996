"""The program after analysis: plain data only (frozen dataclasses of ints, strings and expression
trees; no lark, no sympy, no closures).

The methods here are the reference model of the generated header: check.py, the tests, the planner
and the GPU tests compare against ``PolicyIR.sem/value``, ``OrderIR.tile/linear``,
``ProgramIR.producer_tiles``, ``ProgramIR.wait_tile`` and ``ProgramIR.edges``. See docs/design.md.

Each has an array form beside it for enumeration at scale (numpy over arrays of tile coordinates,
int64): ``evaluate`` and ``OrderIR.tile/linear`` take arrays as they are, ``PolicyIR.sem_np/value_np``,
``ProducerIR.enumerate_np`` (what consumer tiles read), ``ProducerIR.decode_np`` (the waits decoded
like the generated ``waits::tile``) and ``ProgramIR.edge_blocks`` (``edges()`` in blocks). The
scalar methods stay the definition; tests compare the two.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Union

import numpy as np

Tile = tuple  # (x, y, z)
AXES = ("x", "y", "z")


# ---- producer-tile index expressions: a small plain expression tree --------------------------

@dataclass(frozen=True)
class Const:
    value: int


@dataclass(frozen=True)
class Var:
    """``c.x``/``c.y``/``c.z``: the consumer tile's coordinates; ``i0``, ``i1``...: ForAll loops."""

    name: str


@dataclass(frozen=True)
class Add:
    terms: tuple


@dataclass(frozen=True)
class Mul:
    coef: int
    arg: "Expr"


@dataclass(frozen=True)
class FloorDiv:
    """Floor division by a positive constant; ``nonneg``: analysis proved ``arg >= 0``."""

    arg: "Expr"
    k: int
    nonneg: bool


@dataclass(frozen=True)
class Mod:
    """Modulo (result in [0, k)) by a positive constant; ``nonneg`` as for FloorDiv."""

    arg: "Expr"
    k: int
    nonneg: bool


Expr = Union[Const, Var, Add, Mul, FloorDiv, Mod]


def py_source(e: Expr) -> str:
    """Python source of ``e`` over the names cx, cy, cz, i0, i1, ... (floor semantics)."""
    if isinstance(e, Const):
        return str(e.value)
    if isinstance(e, Var):
        return e.name.replace(".", "")
    if isinstance(e, Add):
        return "(" + " + ".join(py_source(t) for t in e.terms) + ")"
    if isinstance(e, Mul):
        return f"({e.coef} * {py_source(e.arg)})"
    if isinstance(e, FloorDiv):
        return f"({py_source(e.arg)} // {e.k})"
    if isinstance(e, Mod):
        return f"({py_source(e.arg)} % {e.k})"
    raise TypeError(e)


def evaluate(e: Expr, env: dict):
    """Value of ``e`` with ``env`` mapping variable names (``c.x``, ``i0``...) to ints, or to int64
    arrays that broadcast together (numpy's ``//`` and ``%`` floor like Python's). For arrays use
    :func:`evaluate_np`, which also guards against int64 overflow."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Add):
        return sum(evaluate(t, env) for t in e.terms)
    if isinstance(e, Mul):
        return e.coef * evaluate(e.arg, env)
    if isinstance(e, FloorDiv):
        return evaluate(e.arg, env) // e.k
    if isinstance(e, Mod):
        return evaluate(e.arg, env) % e.k
    raise TypeError(e)


_INT64_SAFE = 2**62


def magnitude(e: Expr, maxabs: dict) -> int:
    """An upper bound of ``|e|`` and of every intermediate value, given ``maxabs[name]`` bounds."""
    if isinstance(e, Const):
        return abs(e.value)
    if isinstance(e, Var):
        return maxabs[e.name]
    if isinstance(e, Add):
        return sum(magnitude(t, maxabs) for t in e.terms)
    if isinstance(e, Mul):
        return abs(e.coef) * magnitude(e.arg, maxabs)
    if isinstance(e, FloorDiv):
        return magnitude(e.arg, maxabs) + 1
    if isinstance(e, Mod):
        return max(magnitude(e.arg, maxabs), e.k)
    raise TypeError(e)


def expr_names(e: Expr) -> set:
    """The variable names ``e`` reads (``c.x``, ``i0``...)."""
    if isinstance(e, Var):
        return {e.name}
    if isinstance(e, Add):
        return set().union(*(expr_names(t) for t in e.terms))
    if isinstance(e, (Mul, FloorDiv, Mod)):
        return expr_names(e.arg)
    return set()


def evaluate_np(e: Expr, env: dict) -> np.ndarray:
    """:func:`evaluate` over int64 arrays (or ints) that broadcast together; the result is an
    int64 array (0-d when ``e`` is constant). Where some intermediate value could leave int64 it
    computes with Python ints (object arrays) instead, so the result is exact."""
    names = expr_names(e)
    maxabs = {}
    for n in names:
        v = env[n]
        maxabs[n] = int(np.max(np.abs(v))) if np.size(v) else 0
    if magnitude(e, maxabs) < _INT64_SAFE:
        return np.asarray(evaluate(e, {n: env[n] for n in names}), dtype=np.int64)
    big = {n: np.asarray(env[n]).astype(object) for n in names}
    return np.asarray(evaluate(e, big), dtype=object)


# ---- grids and orders -------------------------------------------------------------------------

@dataclass(frozen=True)
class GridIR:
    name: str
    extent: tuple  # (X, Y, Z); dims the grid does not declare have extent 1
    dims: tuple = ()  # the declared dim names, by axis ("" for an undeclared axis)

    @property
    def num_tiles(self) -> int:
        X, Y, Z = self.extent
        return X * Y * Z

    def tiles(self) -> Iterator[Tile]:
        """All tiles, row-major (x fastest)."""
        X, Y, Z = self.extent
        for z in range(Z):
            for y in range(Y):
                for x in range(X):
                    yield (x, y, z)

    def contains(self, t: Tile) -> bool:
        return all(0 <= c < e for c, e in zip(t, self.extent))

    def coords(self, start: int, stop: int) -> tuple:
        """(x, y, z) int64 arrays of the tiles ``start .. stop-1`` of :meth:`tiles` (row-major)."""
        return row_major(np.arange(start, stop, dtype=np.int64), self.extent)

    def contains_np(self, x, y, z) -> np.ndarray:
        X, Y, Z = self.extent
        return (x >= 0) & (x < X) & (y >= 0) & (y < Y) & (z >= 0) & (z < Z)


def row_major(linear, extent: tuple) -> tuple:
    """(x, y, z) of row-major linear indices (x fastest); ints or arrays."""
    X, Y, _ = extent
    return linear % X, (linear // X) % Y, linear // (X * Y)


def lexicographic(index, extent: tuple) -> tuple:
    """(x, y, z) of the ``index``-th tile in lexicographic order (x slowest, the order of
    :func:`product_tiles` and of sorted tuples); ints or arrays."""
    _, Y, Z = extent
    return index // (Y * Z), (index // Z) % Y, index % Z


@dataclass(frozen=True)
class OrderIR:
    """Row-major over permuted coordinates; along ``group_dim`` position r holds tile coordinate
    ``r // group_count + (r % group_count) * group_stride`` (docs/design.md).

    ``groups_outer`` (group_dim "x" only): the groups are the outer loop instead -- every row of
    group 0 (its group_count tiles x, x + stride, ... per row), then group 1, ...: linear
    ``i + count * (y + Y * (g + stride * z))`` for tile x = g + i * stride. For a consumer that
    reads one group over all rows (Attention's R.V reads every V row of its head)."""

    grid: str
    group_dim: Optional[str] = None  # "x", "y", "z" or None (plain row-major)
    group_stride: int = 1
    group_count: int = 1
    extent: tuple = (1, 1, 1)  # the grid's (X, Y, Z)
    groups_outer: bool = False

    def __post_init__(self):
        if self.groups_outer and self.group_dim != "x":
            raise ValueError("groups_outer orders group along x")

    @property
    def num_tiles(self) -> int:
        X, Y, Z = self.extent
        return X * Y * Z

    def _axis(self) -> int:
        return AXES.index(self.group_dim) if self.group_dim else -1

    def desc(self) -> tuple:
        """The run-time descriptor (CusyncOrderDesc) as plain ints: (group_dim, group_stride,
        group_count, groups_outer, extent[3]); group_dim -1 for none."""
        return self._axis(), int(self.group_stride), int(self.group_count), int(bool(self.groups_outer)), \
            tuple(int(e) for e in self.extent)

    def tile(self, linear: int) -> Tile:
        """The tile at position ``linear`` (an int, or an int64 array: a tuple of arrays)."""
        X, Y, _ = self.extent
        if self.groups_outer:
            c, s = self.group_count, self.group_stride
            i, y, g, z = linear % c, (linear // c) % Y, (linear // (c * Y)) % s, linear // (c * Y * s)
            return (g + i * s, y, z)
        r = [linear % X, (linear // X) % Y, linear // (X * Y)]
        a = self._axis()
        if a >= 0:
            r[a] = r[a] // self.group_count + (r[a] % self.group_count) * self.group_stride
        return tuple(r)

    def linear(self, t: Tile) -> int:
        """The position of tile ``t`` (ints, or a tuple of int64 arrays)."""
        X, Y, _ = self.extent
        if self.groups_outer:
            c, s = self.group_count, self.group_stride
            return t[0] // s + c * (t[1] + Y * (t[0] % s + s * t[2]))
        r = list(t)
        a = self._axis()
        if a >= 0:
            s = self.group_stride
            r[a] = (r[a] % s) * self.group_count + r[a] // s
        return r[0] + X * (r[1] + Y * r[2])


# ---- policies ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class DimKind:
    """One kind of :class:`DimMap`: a row of :data:`DIM_KINDS`. The functions take ``t`` (a tile
    coordinate), ``E`` (the producer grid's extent along the dim) and ``p`` (the DimMap's param);
    ``coord`` and ``group`` take int64 arrays for ``t`` as well as ints."""

    name: str
    coord: Callable  # (t, p) -> semaphore coordinate
    extent: Callable  # (E, p) -> number of semaphore coordinates along the dim
    group: Callable  # (t, E, p) -> how many tiles share t's coordinate
    cxx: Callable  # (axis, p) -> C++ text of coord over t.<axis>; "" when always 0
    cxx_group: Callable  # (axis, E, p) -> group as an int when constant, else C++ text
    describe: Callable  # (p) -> words for the header's comment


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _mod_group_cxx(ax: str, E: int, s: int):
    return E // s if E % s == 0 else f"({E // s} + (t.{ax} % {s} < {E % s} ? 1 : 0))"


def _div_group_cxx(ax: str, E: int, k: int):
    return k if E % k == 0 else f"(t.{ax} / {k} < {E // k} ? {k} : {E % k})"


#: every DimMap kind: ``tile`` (one semaphore per tile), ``all`` (one for the whole dim), ``mod``
#: (tiles ``t % p`` share one: StridedSync) and ``div`` (tiles ``t / p`` share one).
# DimMap kinds as the run-time descriptors number them (runtime_cuda/cusync/desc.h, DimKind)
DIM_KIND_CODES = {"tile": 0, "all": 1, "mod": 2, "div": 3}

DIM_KINDS = {k.name: k for k in (
    DimKind("tile", coord=lambda t, p: t, extent=lambda E, p: E, group=lambda t, E, p: 1,
            cxx=lambda ax, p: f"t.{ax}", cxx_group=lambda ax, E, p: 1,
            describe=lambda p: "one semaphore per tile"),
    DimKind("all", coord=lambda t, p: 0, extent=lambda E, p: 1, group=lambda t, E, p: E,
            cxx=lambda ax, p: "", cxx_group=lambda ax, E, p: E,
            describe=lambda p: "one semaphore for the whole dim"),
    DimKind("mod", coord=lambda t, p: t % p, extent=lambda E, p: p,
            group=lambda t, E, p: E // p + (t % p < E % p) * 1,
            cxx=lambda ax, p: f"t.{ax} % {p}", cxx_group=_mod_group_cxx,
            describe=lambda p: f"tiles t % {p} share a semaphore"),
    DimKind("div", coord=lambda t, p: t // p, extent=lambda E, p: _cdiv(E, p),
            group=lambda t, E, p: np.minimum(p, E - (t // p) * p),
            cxx=lambda ax, p: f"t.{ax} / {p}", cxx_group=_div_group_cxx,
            describe=lambda p: f"tiles t / {p} share a semaphore"),
)}


@dataclass(frozen=True)
class DimMap:
    """How one dim of a producer tile maps to a semaphore coordinate: ``kind`` names a row of
    :data:`DIM_KINDS` (``tile``, ``all``, ``mod``, ``div``), ``param`` its parameter."""

    kind: str
    param: int = 0

    def __post_init__(self):
        if self.kind not in DIM_KINDS:
            raise ValueError(f"unknown DimMap kind {self.kind!r}")

    @property
    def row(self) -> DimKind:
        return DIM_KINDS[self.kind]

    def coord(self, t):
        return DIM_KINDS[self.kind].coord(t, self.param)

    def extent(self, E: int) -> int:
        return DIM_KINDS[self.kind].extent(E, self.param)

    def group(self, t, E: int):
        """How many tiles of this dim share the semaphore coordinate of ``t``."""
        return DIM_KINDS[self.kind].group(t, E, self.param)


@dataclass(frozen=True)
class PolicyIR:
    dep: str
    consumer: str
    producer: str
    name: str
    producer_extent: tuple
    dims: tuple  # three DimMap
    num_sems: int

    @property
    def struct_name(self) -> str:
        return f"{self.dep}_{self.producer}_{self.name}"

    def desc(self) -> tuple:
        """The run-time descriptor (runtime_cuda/cusync/desc.h, CusyncPolicyDesc) as plain ints:
        (kind[3], param[3], extent[3], num_sems)."""
        kinds = tuple(DIM_KIND_CODES[d.kind] for d in self.dims)
        return kinds, tuple(int(d.param) for d in self.dims), tuple(int(e) for e in self.producer_extent), \
            int(self.num_sems)

    def sem(self, t: Tile) -> int:
        return int(self._sem(*t))

    def value(self, t: Tile) -> int:
        return int(self._value(*t))

    def sem_np(self, x, y, z) -> np.ndarray:
        """:meth:`sem` of the tiles (x[i], y[i], z[i]) (int64 arrays of one shape)."""
        return np.broadcast_to(self._sem(x, y, z), np.shape(x))

    def value_np(self, x, y, z) -> np.ndarray:
        """:meth:`value` of the tiles (x[i], y[i], z[i]) (int64 arrays of one shape)."""
        return np.broadcast_to(self._value(x, y, z), np.shape(x))

    def _sem(self, *t):
        c = [d.coord(v) for d, v in zip(self.dims, t)]
        C = [d.extent(E) for d, E in zip(self.dims, self.producer_extent)]
        return c[0] + C[0] * (c[1] + C[1] * c[2])

    def _value(self, *t):
        v = 1
        for d, c, E in zip(self.dims, t, self.producer_extent):
            v = v * d.group(c, E)
        return v


# ---- dependencies -----------------------------------------------------------------------------

#: edges (or tiles) per block of the array forms: bounds their memory (a few arrays of this many
#: int64 values at a time)
CHUNK = 1 << 20

#: up to this many waited tiles ProducerIR.tiles interprets the loops in Python, above it numpy
_SCALAR_TILES = 64


@dataclass(frozen=True)
class LoopIR:
    """One ForAll: ``var`` over [lo, hi). With ``hi_expr`` (an outermost ForAll whose bound
    depends on the consumer tile, e.g. ``Range(y + 1)`` for a causal mask) the loop runs over
    [lo, hi_expr(c)) for consumer tile c, and ``hi`` is the largest of those bounds."""

    var: str
    lo: int
    hi: int
    dim: str = ""  # the .dep dim it binds, for messages and comments
    hi_expr: Optional["Expr"] = None  # over c.x, c.y, c.z only
    hi_text: str = ""  # the .dep text of a variable bound, for comments

    @property
    def count(self) -> int:
        """The largest trip count (every consumer tile's, when the bound is constant)."""
        return self.hi - self.lo

    def hi_at(self, env: dict) -> int:
        return self.hi if self.hi_expr is None else evaluate(self.hi_expr, env)

    def hi_np(self, env: dict):
        """:meth:`hi_at` with int64 arrays for c.x, c.y, c.z."""
        return self.hi if self.hi_expr is None else evaluate_np(self.hi_expr, env)


@dataclass(frozen=True)
class TileSetIR:
    """Producer tiles ``index`` (x, y, z expressions) for every value of the nested ``loops``
    (outermost first, innermost varies fastest)."""

    index: tuple
    loops: tuple = ()
    text: str = ""  # the .dep text, for comments

    @property
    def count(self) -> int:
        """The largest number of tiles (for every consumer tile, when no bound varies)."""
        n = 1
        for lp in self.loops:
            n *= lp.count
        return n

    @property
    def variable(self) -> bool:
        return any(lp.hi_expr is not None for lp in self.loops)

    def count_at(self, env: dict) -> int:
        """The number of tiles for the consumer tile of ``env`` (c.x, c.y, c.z)."""
        n = 1
        for lp in self.loops:
            n *= max(0, lp.hi_at(env) - lp.lo)
        return n

    def count_np(self, env: dict):
        """:meth:`count_at` with int64 arrays for c.x, c.y, c.z."""
        n = 1
        for lp in self.loops:
            n = n * np.maximum(0, lp.hi_np(env) - lp.lo)
        return n

    def walk(self, env: dict, out: list) -> None:
        """Append the tiles of the consumer tile of ``env`` to ``out``, in wait order (the nested
        loops interpreted; ``env`` gets the loop variables)."""

        def loop(k: int) -> None:
            if k == len(self.loops):
                out.append(tuple(evaluate(e, env) for e in self.index))
                return
            lp = self.loops[k]
            for v in range(lp.lo, lp.hi_at(env)):
                env[lp.var] = v
                loop(k + 1)

        loop(0)

    def enumerate_np(self, env: dict, n: int) -> tuple:
        """:meth:`walk` for ``n`` consumer tiles at once (``env``: c.x, c.y, c.z as arrays of
        length ``n``): ((x, y, z) arrays of shape (n, K)), mask of shape (n, K) or None). Row i
        holds consumer tile i's tiles in wait order where ``mask`` is true (a loop whose bound
        varies runs to its largest bound, masked); K is the product of the loops' trip counts."""
        L = len(self.loops)
        cenv = {k: np.asarray(v).reshape((n,) + (1,) * L) for k, v in env.items()}
        mask, sizes = None, []
        for k, lp in enumerate(self.loops):
            hi = lp.hi_np(cenv)
            top = lp.hi if lp.hi_expr is None else max(lp.hi, int(np.max(hi)) if n else lp.hi)
            size = max(0, top - lp.lo)
            v = np.arange(lp.lo, lp.lo + size, dtype=np.int64).reshape(
                (1,) * (k + 1) + (size,) + (1,) * (L - k - 1))
            cenv[lp.var] = v
            sizes.append(size)
            if lp.hi_expr is not None:
                m = v < hi
                mask = m if mask is None else mask & m
        shape = (n,) + tuple(sizes)
        idx = tuple(np.broadcast_to(evaluate_np(e, cenv), shape).reshape(n, -1) for e in self.index)
        if mask is not None:
            mask = np.broadcast_to(mask, shape).reshape(n, -1)
        return idx, mask


@dataclass(frozen=True)
class ProducerIR:
    grid: str
    tilesets: tuple
    has_floor_div: bool = False

    @property
    def count(self) -> int:
        """The largest number of waited tiles over consumer tiles."""
        return sum(ts.count for ts in self.tilesets)

    def count_at(self, c: Tile) -> int:
        env = _consumer_env(c)
        return sum(ts.count_at(env) for ts in self.tilesets)

    def tiles(self, c: Tile) -> list:
        """The producer tiles one consumer tile ``c`` waits on, in wait order."""
        if self.count > _SCALAR_TILES:
            _, t = self.enumerate_np(*(np.array([v], dtype=np.int64) for v in c))
            return [tuple(r) for r in t.tolist()]
        env, out = _consumer_env(c), []
        for ts in self.tilesets:
            ts.walk(env, out)
        return out

    def enumerate_np(self, cx, cy, cz) -> tuple:
        """:meth:`tiles` of the consumer tiles (cx[i], cy[i], cz[i]) (int64 arrays of length N):
        (counts, tiles), ``counts[i]`` the number of tiles consumer tile i reads and ``tiles``
        an (M, 3) array of all of them, consumer tile by consumer tile, each in wait order."""
        n = len(cx)
        env = {"c.x": cx, "c.y": cy, "c.z": cz}
        parts = [ts.enumerate_np(env, n) for ts in self.tilesets]
        if not parts:
            return np.zeros(n, dtype=np.int64), np.zeros((0, 3), dtype=np.int64)
        cols = [np.concatenate([idx[a] for idx, _ in parts], axis=1) for a in range(3)]
        K = cols[0].shape[1]
        if all(m is None for _, m in parts):
            return np.full(n, K, dtype=np.int64), np.stack([c.ravel() for c in cols], axis=1)
        mask = np.concatenate([np.ones(idx[0].shape, dtype=bool) if m is None else m
                               for idx, m in parts], axis=1)
        return mask.sum(axis=1), np.stack([c[mask] for c in cols], axis=1)

    def decode_np(self, cx, cy, cz) -> tuple:
        """The waits as the generated header decodes them (``waits::count(c)`` and ``waits::tile(c,
        i)``, like :meth:`ProgramIR.wait_tile`) for the consumer tiles (cx[i], cy[i], cz[i]):
        (counts, tiles) in the form of :meth:`enumerate_np`."""
        n = len(cx)
        env = {"c.x": cx, "c.y": cy, "c.z": cz}
        per = [np.broadcast_to(np.asarray(ts.count_np(env), dtype=np.int64), (n,))
               for ts in self.tilesets]
        counts = sum(per) if per else np.zeros(n, dtype=np.int64)
        cid = np.repeat(np.arange(n), counts)
        i = np.arange(len(cid)) - np.repeat(np.cumsum(counts) - counts, counts)
        tiles = np.zeros((len(cid), 3), dtype=np.int64)
        off = np.zeros(n, dtype=np.int64)
        for ts, m in zip(self.tilesets, per):
            lo = off[cid]
            sel = (i >= lo) & (i < lo + m[cid])
            if sel.any():
                j, c = i[sel] - lo[sel], cid[sel]
                e = {"c.x": cx[c], "c.y": cy[c], "c.z": cz[c]}
                for lp in reversed(ts.loops):  # mixed radix, innermost fastest
                    e[lp.var] = lp.lo + j % lp.count
                    j = j // lp.count
                for a, ex in enumerate(ts.index):
                    tiles[sel, a] = evaluate_np(ex, e)
            off = off + m
        return counts, tiles


def _consumer_env(c: Tile) -> dict:
    return {"c.x": c[0], "c.y": c[1], "c.z": c[2]}


@dataclass(frozen=True)
class DepIR:
    name: str
    consumer: str
    producers: tuple  # of ProducerIR

    def producer(self, name: str) -> ProducerIR:
        for p in self.producers:
            if p.grid == name:
                return p
        raise KeyError(f"dep {self.name} has no producer {name}")


@dataclass(frozen=True)
class ProgramIR:
    name: str  # namespace of the header
    source: str  # file name the header mentions
    params: tuple  # ((name, value), ...) in declaration order
    overrides: tuple  # ((name, value), ...) given with -D, in declaration order
    grids: tuple
    deps: tuple
    orders: tuple
    policies: tuple

    def grid(self, name: str) -> GridIR:
        for g in self.grids:
            if g.name == name:
                return g
        raise KeyError(name)

    def dep(self, name: str) -> DepIR:
        for d in self.deps:
            if d.name == name:
                return d
        raise KeyError(name)

    def order(self, grid: str) -> OrderIR:
        for o in self.orders:
            if o.grid == grid:
                return o
        raise KeyError(grid)

    def policies_of(self, dep: str, producer: str) -> list:
        return [p for p in self.policies if p.dep == dep and p.producer == producer]

    def producer_tiles(self, dep: str, consumer_tile: Tile) -> list:
        """[(producer grid, tile), ...]: what ``consumer_tile`` of ``dep``'s consumer reads, in
        wait order (producers in Dep order)."""
        d = self.dep(dep)
        c = tuple(consumer_tile)
        return [(p.grid, t) for p in d.producers for t in p.tiles(c)]

    def waits(self, dep: str, producer: str, consumer_tile: Tile) -> list:
        """The tiles of ``producer`` that ``consumer_tile`` waits on: ``{dep}_{producer}_waits``."""
        return self.dep(dep).producer(producer).tiles(tuple(consumer_tile))

    def wait_count(self, dep: str, producer: str) -> int:
        """The largest number of waited tiles over consumer tiles."""
        return self.dep(dep).producer(producer).count

    def wait_count_at(self, dep: str, producer: str, consumer_tile: Tile) -> int:
        """``{dep}_{producer}_waits::count(c)``."""
        return self.dep(dep).producer(producer).count_at(tuple(consumer_tile))

    def wait_tile(self, dep: str, producer: str, consumer_tile: Tile, i: int) -> Tile:
        """The i-th waited tile, decoded like the generated ``waits::tile(c, i)`` (mixed radix
        over the ForAll loops, innermost fastest) rather than by enumeration."""
        p = self.dep(dep).producer(producer)
        env = _consumer_env(consumer_tile)
        for ts in p.tilesets:
            n = ts.count_at(env)
            if i < n:
                j = i
                for lp in reversed(ts.loops):  # only the outermost loop's count may vary
                    env[lp.var] = lp.lo + j % lp.count
                    j //= lp.count
                return tuple(evaluate(e, env) for e in ts.index)
            i -= n
        raise IndexError("wait index out of range")

    def edges(self) -> list:
        """Every (consumer, consumer tile, producer, producer tile) pair, deduplicated, sorted."""
        out = set()
        for d in self.deps:
            g = self.grid(d.consumer)
            for p in d.producers:
                for c in g.tiles():
                    for t in p.tiles(c):
                        out.add((d.consumer, c, p.grid, t))
        return sorted(out)

    def edge_blocks(self, chunk: Optional[int] = None) -> Iterator[tuple]:
        """:meth:`edges` in blocks, in the same order: ``(consumer, producers, cols)`` with
        ``producers`` the sorted producer grid names of that consumer and ``cols`` seven int64
        arrays ``cx, cy, cz, p, px, py, pz`` (``p`` indexes ``producers``); about ``chunk``
        (default CHUNK) edges a block."""
        chunk = CHUNK if chunk is None else chunk
        by_consumer: dict = {}
        for d in self.deps:
            for p in d.producers:
                by_consumer.setdefault(d.consumer, []).append(p)
        for cname in sorted(by_consumer):
            prods = by_consumer[cname]
            names = tuple(sorted({p.grid for p in prods}))
            rank = {n: i for i, n in enumerate(names)}
            g = self.grid(cname)
            step = max(1, chunk // max(1, sum(p.count for p in prods)))
            for start in range(0, g.num_tiles, step):
                idx = np.arange(start, min(start + step, g.num_tiles), dtype=np.int64)
                cx, cy, cz = lexicographic(idx, g.extent)
                cids, ranks, tiles = [], [], []
                for p in prods:
                    counts, t = p.enumerate_np(cx, cy, cz)
                    cids.append(np.repeat(np.arange(len(idx), dtype=np.int64), counts))
                    ranks.append(np.full(len(t), rank[p.grid], dtype=np.int64))
                    tiles.append(t)
                t = np.concatenate(tiles)
                cid, r, px, py, pz = _sorted_unique([np.concatenate(cids), np.concatenate(ranks),
                                                     t[:, 0], t[:, 1], t[:, 2]])
                yield cname, names, (cx[cid], cy[cid], cz[cid], r, px, py, pz)


def _sorted_unique(cols: list) -> list:
    """The distinct rows of the columns ``cols`` (int64 arrays, first the most significant),
    sorted: as a list of columns."""
    if len(cols[0]) == 0:
        return cols
    lo = [int(c.min()) for c in cols]
    span = [int(c.max()) - l + 1 for c, l in zip(cols, lo)]
    total = 1
    for s_ in span:
        total *= s_
    if total < _INT64_SAFE:  # one mixed-radix key
        key = np.zeros(len(cols[0]), dtype=np.int64)
        for c, l, s_ in zip(cols, lo, span):
            key *= s_
            key += c - l
        if not np.all(key[1:] > key[:-1]):  # often enumerated in order already
            order = np.argsort(key, kind="stable")
            key = key[order]
            keep = np.ones(len(key), dtype=bool)
            keep[1:] = key[1:] != key[:-1]
            cols = [c[order[keep]] for c in cols]
        return cols
    order = np.lexsort(cols[::-1])
    rows = np.stack(cols, axis=1)[order]
    keep = np.ones(len(rows), dtype=bool)
    keep[1:] = np.any(rows[1:] != rows[:-1], axis=1)
    return [rows[keep, a] for a in range(len(cols))]


def product_tiles(extent: tuple) -> Iterator[Tile]:
    """Tiles of a box, lexicographic (x slowest): used by the JSON emitters."""
    return itertools.product(*(range(e) for e in extent))
