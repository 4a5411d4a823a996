"""The program after analysis: plain ints and strings only (no lark, no sympy).

The methods here are the reference model of the generated header: check.py, the tests, the planner
and the GPU tests compare against ``PolicyIR.sem/value``, ``OrderIR.tile/linear``,
``ProgramIR.producer_tiles`` and ``ProgramIR.edges``. See docs/design.md.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

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


def evaluate(e: Expr, env: dict) -> int:
    """Value of ``e`` with ``env`` mapping variable names (``c.x``, ``i0``...) to ints."""
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

    def tile(self, linear: int) -> Tile:
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
class DimMap:
    """How one dim of a producer tile maps to a semaphore coordinate: ``tile`` (one per tile),
    ``all`` (one for the whole dim), ``mod`` (``t % param``), ``div`` (``t // param``)."""

    kind: str
    param: int = 0

    def coord(self, t: int) -> int:
        if self.kind == "tile":
            return t
        if self.kind == "all":
            return 0
        if self.kind == "mod":
            return t % self.param
        return t // self.param

    def extent(self, E: int) -> int:
        if self.kind == "tile":
            return E
        if self.kind == "all":
            return 1
        if self.kind == "mod":
            return self.param
        return -(-E // self.param)

    def group(self, t: int, E: int) -> int:
        """How many tiles of this dim share the semaphore coordinate of ``t``."""
        if self.kind == "tile":
            return 1
        if self.kind == "all":
            return E
        if self.kind == "mod":
            s = self.param
            return E // s + (1 if t % s < E % s else 0)
        k = self.param
        return min(k, E - (t // k) * k)


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

    def sem(self, t: Tile) -> int:
        c = [d.coord(v) for d, v in zip(self.dims, t)]
        C = [d.extent(E) for d, E in zip(self.dims, self.producer_extent)]
        return c[0] + C[0] * (c[1] + C[1] * c[2])

    def value(self, t: Tile) -> int:
        v = 1
        for d, c, E in zip(self.dims, t, self.producer_extent):
            v *= d.group(c, E)
        return v


# ---- dependencies -----------------------------------------------------------------------------

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


@dataclass(frozen=True)
class ProducerIR:
    grid: str
    tilesets: tuple
    has_floor_div: bool = False
    _fn: object = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "_fn", _compile_producer(self.tilesets))

    @property
    def count(self) -> int:
        """The largest number of waited tiles over consumer tiles."""
        return sum(ts.count for ts in self.tilesets)

    def count_at(self, c: Tile) -> int:
        env = _consumer_env(c)
        return sum(ts.count_at(env) for ts in self.tilesets)

    def tiles(self, c: Tile) -> list:
        """The producer tiles one consumer tile ``c`` waits on, in wait order."""
        return self._fn(*c)


def _consumer_env(c: Tile) -> dict:
    return {"c.x": c[0], "c.y": c[1], "c.z": c[2]}


def _compile_producer(tilesets) -> object:
    """A Python function (cx, cy, cz) -> list of tiles, generated once: fast enough to enumerate
    10^5+ edges."""
    lines = ["def f(cx, cy, cz):", "    out = []"]
    for ts in tilesets:
        indent = "    "
        for lp in ts.loops:
            hi = lp.hi if lp.hi_expr is None else py_source(lp.hi_expr)
            lines.append(f"{indent}for {lp.var} in range({lp.lo}, {hi}):")
            indent += "    "
        idx = ", ".join(py_source(e) for e in ts.index)
        lines.append(f"{indent}out.append(({idx}))")
    lines.append("    return out")
    ns: dict = {}
    exec("\n".join(lines), ns)  # noqa: S102 - source built from our own IR
    return ns["f"]


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
                fn = p._fn
                for c in g.tiles():
                    for t in fn(*c):
                        out.add((d.consumer, c, p.grid, t))
        return sorted(out)


def product_tiles(extent: tuple) -> Iterator[Tile]:
    """Tiles of a box, lexicographic (x slowest): used by the JSON emitters."""
    return itertools.product(*(range(e) for e in extent))
