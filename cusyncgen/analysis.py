"""Analysis: syntax tree -> ProgramIR.

Resolves names and Params, evaluates grid extents, turns every producer tile index into a
quasi-affine form (integer-linear terms plus floor division / modulo by positive constants),
proves by interval reasoning that it stays inside the producer grid for every consumer tile (no
enumeration, so a million-tile grid costs nothing), and derives the tile orders and the candidate
synchronization policies of the paper's section V. This is the only module that imports sympy: it
prints an index with its Params substituted and simplified in out-of-bounds messages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import sympy

from cusyncgen import ir
from cusyncgen import syntax as S
from cusyncgen.errors import (ArityError, CusyncError, CyclicDependencyError, DimNotInGridError,
                              DuplicateNameError, InexactDivisionError, KindError,
                              MissingParamError, NotAffineError, OutOfBoundsError,
                              UnknownNameError, ValueRangeError)

INT_MAX = 2**31 - 1
AXES = ir.AXES
#: consumer tiles enumerated when the interval proof of a quasi-affine index is not tight
ENUMERATION_LIMIT = 2_000_000
#: per-consumer producer tiles beyond which policy grouping is not derived from samples
SAMPLE_LIMIT = 100_000

CXX_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export extern
false float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr
operator or or_eq private protected public register reinterpret_cast requires return short signed
sizeof static static_assert static_cast struct switch template this thread_local throw true try
typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
cusync std main
""".split())


# ---- quasi-affine forms -----------------------------------------------------------------------

class Aff:
    """``const + sum(coef * atom)``; an atom is ('v', name), ('div', Aff, k) or ('mod', Aff, k)."""

    __slots__ = ("const", "terms", "_key")

    def __init__(self, const: int = 0, terms: Optional[dict] = None):
        self.const = const
        t = {a: c for a, c in (terms or {}).items() if c != 0}
        self.terms = tuple(sorted(t.items(), key=lambda ac: _atom_key(ac[0])))
        self._key = (const, tuple((_atom_key(a), c) for a, c in self.terms))

    def __eq__(self, other):
        return isinstance(other, Aff) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def add(self, other: "Aff", sign: int = 1) -> "Aff":
        d = dict(self.terms)
        for a, c in other.terms:
            d[a] = d.get(a, 0) + sign * c
        return Aff(self.const + sign * other.const, d)

    def scale(self, k: int) -> "Aff":
        return Aff(self.const * k, {a: c * k for a, c in self.terms})

    def has(self, kind: str) -> bool:
        for a, _ in self.terms:
            if a[0] == kind or (a[0] != "v" and a[1].has(kind)):
                return True
        return False

    def is_affine(self) -> bool:
        return all(a[0] == "v" for a, _ in self.terms)


def _atom_key(a) -> str:
    if a[0] == "v":
        return "0" + a[1]
    return f"1{a[0]}{a[2]}:{a[1]._key!r}"


def floordiv(a: Aff, k: int) -> Aff:
    if k == 1:
        return a
    if a.is_const:
        return Aff(a.const // k)
    if all(c % k == 0 for _, c in a.terms):
        return Aff(a.const // k, {x: c // k for x, c in a.terms})
    return Aff(0, {("div", a, k): 1})


def modulo(a: Aff, k: int) -> Aff:
    if k == 1:
        return Aff(0)
    if all(c % k == 0 for _, c in a.terms):
        return Aff(a.const % k)
    return Aff(0, {("mod", a, k): 1})


def atom_interval(a, box: dict) -> tuple:
    if a[0] == "v":
        return box[a[1]]
    lo, hi = interval(a[1], box)
    k = a[2]
    if a[0] == "div":
        return (lo // k, hi // k)
    if lo // k == hi // k:
        return (lo % k, hi % k)
    return (0, k - 1)


def interval(a: Aff, box: dict) -> tuple:
    """Bounds [lo, hi] of ``a`` when every variable ranges over its box interval: exact (tight)
    for affine forms, since each variable occurs once; sound for quasi-affine ones."""
    lo = hi = a.const
    for atom, c in a.terms:
        alo, ahi = atom_interval(atom, box)
        if c > 0:
            lo += c * alo
            hi += c * ahi
        else:
            lo += c * ahi
            hi += c * alo
    return lo, hi


def magnitude(a: Aff, box: dict) -> int:
    """An upper bound of every intermediate value when evaluating ``a`` left to right."""
    m = abs(a.const)
    for atom, c in a.terms:
        alo, ahi = atom_interval(atom, box)
        m += abs(c) * max(abs(alo), abs(ahi))
        if atom[0] != "v":
            m = max(m, magnitude(atom[1], box))
    return m


def to_ir(a: Aff, box: dict) -> ir.Expr:
    parts = []
    for atom, c in a.terms:
        if atom[0] == "v":
            node = ir.Var(atom[1])
        else:
            inner = atom[1]
            nonneg = interval(inner, box)[0] >= 0
            cls = ir.FloorDiv if atom[0] == "div" else ir.Mod
            node = cls(to_ir(inner, box), atom[2], nonneg)
        parts.append(node if c == 1 else ir.Mul(c, node))
    if a.const or not parts:
        parts.append(ir.Const(a.const))
    return parts[0] if len(parts) == 1 else ir.Add(tuple(parts))


def to_sympy(a: Aff, names: dict):
    """``a`` as a sympy expression over the user's dim names (``names``: variable -> name)."""
    e = sympy.Integer(a.const)
    for atom, c in a.terms:
        if atom[0] == "v":
            t = sympy.Symbol(names.get(atom[1], atom[1]), integer=True)
        elif atom[0] == "div":
            t = sympy.floor(to_sympy(atom[1], names) / atom[2])
        else:
            t = sympy.Mod(to_sympy(atom[1], names), atom[2])
        e += c * t
    return e


def concrete_text(a: Aff, names: dict) -> str:
    """The index with every Param substituted, simplified by sympy: what the bounds were
    checked on (``x+H/(8*TileN)`` is ``x + 12``)."""
    return str(to_sympy(a, names))


# ---- the analyzer -------------------------------------------------------------------------------

@dataclass
class _Sym:
    kind: str  # param, dim, grid, tile, forall, dep
    decl: object
    value: object = None


_KIND_WORD = {"param": "a Param", "dim": "a Dim", "grid": "a Grid", "tile": "a Tile",
              "forall": "a ForAll", "dep": "a Dep"}


@dataclass
class _TileSite:
    """One producer tile expression with its variable binding, for analysis."""

    tile: S.TileExpr
    env: dict
    loops: tuple


class Analyzer:
    def __init__(self, program: S.Program, params: dict, name: str):
        self.program = program
        self.params = {k: v for k, v in (params or {}).items()}
        self.name = name
        self.syms: dict = {}
        self.dims: list = []
        self.grids: dict = {}
        self.param_values: list = []
        self.deps: list = []
        self.dep_spans: dict = {}
        self.producer_sites: dict = {}
        self._cbox: Optional[dict] = None  # the consumer box while a Dep's producers are analyzed

    # ---- names ----
    def declare(self, name: str, kind: str, decl, span: S.Span, value=None) -> None:
        if name in self.syms:
            prev = self.syms[name]
            where = getattr(prev.decl, "span", None)
            at = f" (first declared at line {where.line})" if where and where.line else ""
            raise DuplicateNameError(f"'{name}' is already declared as {_KIND_WORD[prev.kind]}"
                                     f"{at}", span)
        if kind in ("grid", "dep") and (name in CXX_KEYWORDS or name.startswith("cusyncgen_")):
            raise KindError(f"'{name}' cannot name a {kind.capitalize()}: it is reserved in the "
                            f"generated C++", span)
        self.syms[name] = _Sym(kind, decl, value)

    def lookup(self, name: S.Name, *kinds: str) -> _Sym:
        sym = self.syms.get(name.name)
        if sym is None:
            raise UnknownNameError(f"unknown name '{name.name}'", name.span)
        if kinds and sym.kind not in kinds:
            want = " or ".join(_KIND_WORD[k] for k in kinds)
            raise KindError(f"'{name.name}' is {_KIND_WORD[sym.kind]}, expected {want}", name.span)
        return sym

    # ---- constants ----
    def const(self, e: S.Expr, what: str) -> int:
        if isinstance(e, S.Num):
            return e.value
        if isinstance(e, S.Name):
            sym = self.lookup(e)
            if sym.kind == "param":
                return sym.value
            if sym.kind == "dim":
                raise KindError(f"dim '{e.name}' cannot be used in {what}, which must be a "
                                f"constant", e.span)
            raise KindError(f"'{e.name}' is {_KIND_WORD[sym.kind]}, not a value", e.span)
        if isinstance(e, S.Extent):
            return self.extent_of(e)
        if isinstance(e, S.Neg):
            return -self.const(e.operand, what)
        if isinstance(e, S.CDiv):
            a, b = self.const(e.lhs, what), self.const(e.rhs, what)
            if b == 0:
                raise ValueRangeError("division by zero", e.rhs.span)
            return -(-a // b)
        if isinstance(e, S.BinOp):
            a, b = self.const(e.lhs, what), self.const(e.rhs, what)
            if e.op == "+":
                return a + b
            if e.op == "-":
                return a - b
            if e.op == "*":
                if abs(a) > 2**64 or abs(b) > 2**64:
                    raise ValueRangeError("value too large", e.span)
                return a * b
            if b == 0:
                raise ValueRangeError("division by zero" if e.op == "/" else "modulo by zero",
                                      e.rhs.span)
            if e.op == "%":
                return a % b
            if a % b:
                raise InexactDivisionError(
                    f"'{S.unparse_expr(e)}' is {a}/{b}, which is not exact; use "
                    f"cdiv({S.unparse_expr(e.lhs)}, {S.unparse_expr(e.rhs)}) to round up", e.span)
            return a // b
        raise TypeError(e)

    def extent_of(self, e: S.Extent) -> int:
        sym = self.lookup(e.grid, "grid")
        g: ir.GridIR = sym.value
        d = e.dim.name
        if d in g.dims and d:
            return g.extent[g.dims.index(d)]
        if d in AXES and d not in self.dims:
            return g.extent[AXES.index(d)]
        raise DimNotInGridError(f"grid '{g.name}' has no dim '{d}' (its dims: "
                                f"{', '.join(x for x in g.dims if x)})", e.dim.span)

    # ---- index expressions ----
    def index(self, e: S.Expr, env: dict) -> Aff:
        if isinstance(e, S.Num):
            return Aff(e.value)
        if isinstance(e, S.Name):
            if e.name in env:
                return Aff(0, {("v", env[e.name]): 1})
            sym = self.lookup(e)
            if sym.kind == "dim":
                raise DimNotInGridError(f"dim '{e.name}' is not a dim of the consumer grid and "
                                        f"is not bound by a ForAll here", e.span)
            if sym.kind == "param":
                return Aff(sym.value)
            raise KindError(f"'{e.name}' is {_KIND_WORD[sym.kind]}, not a value", e.span)
        if isinstance(e, S.Extent):
            return Aff(self.extent_of(e))
        if isinstance(e, S.Neg):
            return self.index(e.operand, env).scale(-1)
        if isinstance(e, S.BinOp) and e.op in "+-":
            a, b = self.index(e.lhs, env), self.index(e.rhs, env)
            return a.add(b, 1 if e.op == "+" else -1)
        if isinstance(e, S.BinOp) and e.op == "*":
            a, b = self.index(e.lhs, env), self.index(e.rhs, env)
            if a.is_const:
                return b.scale(a.const)
            if b.is_const:
                return a.scale(b.const)
            raise NotAffineError(f"'{S.unparse_expr(e)}' is not affine: both factors depend on "
                                 f"dims", e.span)
        if isinstance(e, (S.BinOp, S.CDiv)):
            a, b = self.index(e.lhs, env), self.index(e.rhs, env)
            op = "cdiv" if isinstance(e, S.CDiv) else e.op
            if not b.is_const:
                raise NotAffineError(f"'{S.unparse_expr(e)}' is not affine: the divisor "
                                     f"'{S.unparse_expr(e.rhs)}' depends on dims", e.span)
            k = b.const
            if k <= 0:
                raise NotAffineError(f"'{S.unparse_expr(e)}': the divisor must be a positive "
                                     f"constant, but it is {k}", e.rhs.span)
            if op == "%":
                return modulo(a, k)
            if op == "cdiv":
                a = a.add(Aff(k - 1))
            return floordiv(a, k)
        raise TypeError(e)

    # ---- statements ----
    def run(self) -> ir.ProgramIR:
        given = set(self.params)
        for st in self.program.stmts:
            getattr(self, "stmt_" + type(st).__name__)(st)
        unknown = sorted(given - {n for n, s in self.syms.items() if s.kind == "param"})
        if unknown:
            raise UnknownNameError(f"-D {unknown[0]}: the program declares no Param "
                                   f"'{unknown[0]}'")
        self.check_cycles()
        self.check_cxx_names()
        grids = tuple(self.grids.values())
        deps = tuple(self.deps)
        orders = self.derive_orders()
        policies = tuple(p for d in deps for prod in d.producers
                         for p in self.derive_policies(d, prod))
        for p in policies:
            if p.num_sems > INT_MAX:
                raise ValueRangeError(f"policy {p.struct_name} needs {p.num_sems} semaphores",
                                      self.dep_spans[p.dep])
        overrides = tuple((n, v) for n, v in self.param_values if n in given)
        return ir.ProgramIR(self.name, self.program.file, tuple(self.param_values), overrides,
                            grids, deps, orders, policies)

    def stmt_ParamDecl(self, st: S.ParamDecl) -> None:
        if st.name in self.params:
            value = self.params[st.name]
        elif st.default is not None:
            value = self.const(st.default, "a Param value")
        else:
            raise MissingParamError(f"Param '{st.name}' has no value: give it a default "
                                    f"(Param {st.name} = ...;) or pass -D {st.name}=VALUE",
                                    st.span)
        self.declare(st.name, "param", st, st.span, value)
        self.param_values.append((st.name, value))

    def stmt_DimDecl(self, st: S.DimDecl) -> None:
        # the first three Dims are the axes x, y, z of grids and tiles; more Dims can only be
        # ForAll variables (e.g. `Dim x, y, k;` ... ForAll(Tile(x + k*D, y), k, Range(2)))
        self.declare(st.name, "dim", st, st.span, len(self.dims))
        self.dims.append(st.name)

    def stmt_GridDecl(self, st: S.GridDecl) -> None:
        extent = [1, 1, 1]
        names = ["", "", ""]
        for d, e in zip(st.dims, st.extents):
            sym = self.lookup(d, "dim")
            axis = sym.value
            if axis >= 3:
                raise ArityError(f"Grid {st.name}: '{d.name}' is the Dim number {axis + 1}; only "
                                 f"the first three Dims ({', '.join(self.dims[:3])}) can be grid "
                                 f"dims, later ones only ForAll variables", d.span)
            if names[axis]:
                raise DuplicateNameError(f"Grid {st.name} lists dim '{d.name}' twice", d.span)
            v = self.const(e, "a grid extent")
            if v < 1:
                raise ValueRangeError(f"the extent of grid '{st.name}' along '{d.name}' is {v}; "
                                      f"it must be at least 1", e.span)
            if v > INT_MAX:
                raise ValueRangeError(f"the extent {v} of grid '{st.name}' does not fit in int",
                                      e.span)
            extent[axis] = v
            names[axis] = d.name
        g = ir.GridIR(st.name, tuple(extent), tuple(names))
        if g.num_tiles > INT_MAX:
            raise ValueRangeError(f"grid '{st.name}' has {g.num_tiles} tiles, more than an int "
                                  f"holds", st.span)
        self.declare(st.name, "grid", st, st.span, g)
        self.grids[st.name] = g

    def check_names(self, node) -> None:
        """Declaration before use: every name a Tile or ForAll mentions is already declared."""
        if isinstance(node, S.Name):
            self.lookup(node)
        elif isinstance(node, S.Extent):
            self.lookup(node.grid, "grid")
        elif isinstance(node, S.TileRef):
            self.lookup(S.Name(node.name, node.span), "tile", "forall")
        elif isinstance(node, S.TileExpr):
            if len(node.indices) > 3:
                raise ArityError(f"a Tile has at most 3 indices, this one has "
                                 f"{len(node.indices)}", node.span)
            for i in node.indices:
                self.check_names(i)
        elif isinstance(node, S.ForAllExpr):
            self.check_names(node.tiles)
            self.lookup(node.dim, "dim")
            self.check_names(node.range)
        elif isinstance(node, S.RangeExpr):
            if node.lo is not None:
                self.check_names(node.lo)
            self.check_names(node.hi)
        elif isinstance(node, (S.BinOp, S.CDiv)):
            self.check_names(node.lhs)
            self.check_names(node.rhs)
        elif isinstance(node, S.Neg):
            self.check_names(node.operand)

    def stmt_TileDecl(self, st: S.TileDecl) -> None:
        self.check_names(st.tile)
        self.declare(st.name, "tile", st, st.span, st.tile)

    def stmt_ForAllDecl(self, st: S.ForAllDecl) -> None:
        self.check_names(st.forall)
        self.declare(st.name, "forall", st, st.span, st.forall)

    def sites(self, ts, env: dict, loops: tuple) -> list:
        if isinstance(ts, S.TileExpr):
            self.check_names(ts)
            return [_TileSite(ts, env, loops)]
        if isinstance(ts, S.TileRef):
            sym = self.lookup(S.Name(ts.name, ts.span), "tile", "forall")
            return self.sites(sym.value, env, loops)
        if isinstance(ts, S.ForAllExpr):
            self.lookup(ts.dim, "dim")
            r = ts.range
            lo = 0 if r.lo is None else self.const(r.lo, "a Range bound")
            aff = self.index(r.hi, env) if self.bound_is_variable(r.hi, env) else None
            if aff is not None and not aff.is_const:
                return self.variable_loop_sites(ts, env, loops, lo, aff)
            # (a bound whose dims cancel, e.g. a Param that switched a causal mask off, is constant)
            hi = aff.const if aff is not None else self.const(r.hi, "a Range bound")
            if hi <= lo:
                raise ValueRangeError(f"Range({'' if r.lo is None else f'{lo}, '}{hi}) is empty",
                                      r.span)
            if hi - lo > INT_MAX or abs(lo) > INT_MAX or abs(hi) > INT_MAX:
                raise ValueRangeError("Range too large for int", r.span)
            var = f"i{len(loops)}"
            loop = ir.LoopIR(var, lo, hi, ts.dim.name)
            return self.sites(ts.tiles, {**env, ts.dim.name: var}, loops + (loop,))
        raise TypeError(ts)

    def bound_is_variable(self, e: S.Expr, env: dict) -> bool:
        """Does a Range's upper bound name a dim of the consumer tile (``Range(y + 1)``)?"""
        return any(isinstance(n, S.Name) and env.get(n.name, "").startswith("c.") for n in _names(e))

    def variable_loop_sites(self, ts: S.ForAllExpr, env: dict, loops: tuple, lo: int, aff: Aff) -> list:
        """An outermost ForAll whose upper bound `aff` is affine in the consumer tile's dims: each
        consumer tile c waits on the tiles of [lo, bound(c)) (a causal mask's triangle)."""
        r = ts.range
        if loops:
            raise KindError("only the outermost ForAll of a tile set may have a bound that depends on "
                            "the consumer tile", r.hi.span)
        if self._cbox is None:
            raise KindError("a Range bound may depend on the consumer tile only inside a Dep", r.hi.span)
        if not _variables(aff) <= set(self._cbox):
            raise KindError("a Range bound may depend on the consumer tile's dims only", r.hi.span)
        if not aff.is_affine():
            raise NotAffineError(f"the Range bound '{S.unparse_expr(r.hi)}' is not affine", r.hi.span)
        bmin, bmax = interval(aff, self._cbox)
        if bmin < lo:
            raise ValueRangeError(f"Range({lo}, {S.unparse_expr(r.hi)}) would run backwards for some "
                                  f"consumer tile (its bound goes down to {bmin})", r.hi.span)
        if bmax <= lo:
            raise ValueRangeError(f"Range({lo}, {S.unparse_expr(r.hi)}) is empty for every consumer tile",
                                  r.span)
        if bmax - lo > INT_MAX or abs(bmax) > INT_MAX:
            raise ValueRangeError("Range too large for int", r.span)
        var = f"i{len(loops)}"
        loop = ir.LoopIR(var, lo, bmax, ts.dim.name, to_ir(aff, self._cbox), S.unparse_expr(r.hi))
        return self.sites(ts.tiles, {**env, ts.dim.name: var}, loops + (loop,))

    def stmt_DepDecl(self, st: S.DepDecl) -> None:
        self.declare(st.name, "dep", st, st.span)
        self.dep_spans[st.name] = st.span
        cgrid: ir.GridIR = self.lookup(st.consumer.grid, "grid").value
        if len(st.consumer.tiles) != 1:
            raise ArityError(f"the consumer of Dep '{st.name}' must be one tile of "
                             f"'{cgrid.name}'", st.consumer.span)
        csites = self.sites(st.consumer.tiles[0], {}, ())
        ctile = csites[0].tile
        if csites[0].loops:
            raise KindError(f"the consumer of Dep '{st.name}' must be a single tile, not a "
                            f"ForAll", st.consumer.tiles[0].span)
        declared = [d for d in cgrid.dims if d]
        last = max(a for a in range(3) if cgrid.dims[a]) + 1 if declared else 0
        shape = [cgrid.dims[a] or "0" for a in range(last)]  # e.g. Tile(x, y) or Tile(0, y)
        for i, e in enumerate(ctile.indices):
            want = shape[i] if i < last else "0"
            ok = (isinstance(e, S.Name) and e.name == want) or \
                (want == "0" and isinstance(e, S.Num) and e.value == 0)
            if not ok:
                if isinstance(e, S.Name) and self.syms.get(e.name, _Sym("", None)).kind == "dim" \
                        and e.name not in cgrid.dims:
                    raise DimNotInGridError(f"dim '{e.name}' is not a dim of grid "
                                            f"'{cgrid.name}' (its dims: {', '.join(declared)})",
                                            e.span)
                what = "0" if want == "0" else f"the dim '{want}'"
                raise KindError(f"the consumer tile of Dep '{st.name}' must be "
                                f"Tile({', '.join(shape)}): index {i + 1} must be {what} of grid "
                                f"'{cgrid.name}'".replace("be 0 of grid", "be 0 in grid"), e.span)
        if len(ctile.indices) < last:
            raise ArityError(f"the consumer tile of Dep '{st.name}' must index every dim of "
                             f"grid '{cgrid.name}': Tile({', '.join(shape)})", ctile.span)
        env = {d: "c." + AXES[a] for a, d in enumerate(cgrid.dims) if d}
        cbox = {"c." + AXES[a]: (0, cgrid.extent[a] - 1) for a in range(3)}
        merged: dict = {}
        self._cbox = cbox  # Range bounds may depend on the consumer tile here
        try:
            for group in st.producers:
                pgrid: ir.GridIR = self.lookup(group.grid, "grid").value
                sets = merged.setdefault(pgrid.name, [])
                for ts in group.tiles:
                    for site in self.sites(ts, env, ()):
                        sets.append(self.tileset(st, cgrid, pgrid, site, cbox))
        finally:
            self._cbox = None
        producers = []
        for pname, sets in merged.items():
            sets = _interleave(sets)
            has_div = any(any(isinstance(n, ir.FloorDiv) for e in t.index for n in _walk(e))
                          for t in sets)
            producers.append(ir.ProducerIR(pname, tuple(sets), has_div))
        self.deps.append(ir.DepIR(st.name, cgrid.name, tuple(producers)))

    def tileset(self, st, cgrid: ir.GridIR, pgrid: ir.GridIR, site: _TileSite,
                cbox: dict) -> ir.TileSetIR:
        tile = site.tile
        if len(tile.indices) > len(self.dims):
            raise ArityError(f"this Tile has {len(tile.indices)} indices but only "
                             f"{len(self.dims)} Dims are declared", tile.span)
        box = dict(cbox)
        for lp in site.loops:
            box[lp.var] = (lp.lo, lp.hi - 1)
        index = []
        for a in range(3):
            if a >= len(tile.indices):
                index.append(ir.Const(0))
                continue
            e = tile.indices[a]
            aff = self.index(e, site.env)
            if magnitude(aff, box) > INT_MAX:
                raise ValueRangeError(f"'{S.unparse_expr(e)}' overflows int for some tile",
                                      e.span)
            lo, hi = interval(aff, box)
            E = pgrid.extent[a]
            if not pgrid.dims[a] and not (aff.is_const and aff.const == 0):
                raise DimNotInGridError(f"grid '{pgrid.name}' has no dim '{self.dims[a]}', so "
                                        f"this tile index must be 0, not "
                                        f"'{S.unparse_expr(e)}'", e.span)
            if lo < 0 or hi > E - 1:
                self.out_of_bounds(st, cgrid, pgrid, a, e, aff, box, site, lo, hi)
            index.append(to_ir(aff, box))
        text = "Tile(" + ", ".join(S.unparse_expr(i) for i in tile.indices) + ")"
        for lp in reversed(site.loops):
            text = f"ForAll({text}, {lp.dim}, Range({lp.lo}, {lp.hi_text or lp.hi}))"
        return ir.TileSetIR(tuple(index), site.loops, text)

    def out_of_bounds(self, st, cgrid, pgrid, a, e, aff: Aff, box, site, lo, hi) -> None:
        E = pgrid.extent[a]
        dim = pgrid.dims[a]
        witness = None
        if aff.is_affine():
            want_max = hi > E - 1
            witness = {}
            for atom, c in aff.terms:
                vlo, vhi = box[atom[1]]
                witness[atom[1]] = vhi if (c > 0) == want_max else vlo
            value = hi if want_max else lo
        else:
            names = sorted(_variables(aff))  # only what the index depends on is enumerated
            sizes = [box[n][1] - box[n][0] + 1 for n in names]
            if math.prod(sizes) > ENUMERATION_LIMIT:
                raise OutOfBoundsError(
                    f"cannot prove that tile index '{S.unparse_expr(e)}' of grid "
                    f"'{pgrid.name}' stays in [0, {E - 1}] (its bounds are [{lo}, {hi}]) and there "
                    f"are too many tiles to enumerate", e.span)
            expr = ir.py_source(to_ir(aff, box))
            fn = eval(f"lambda {', '.join(n.replace('.', '') for n in names)}: {expr}")  # noqa
            import itertools
            for vals in itertools.product(*(range(box[n][0], box[n][1] + 1) for n in names)):
                v = fn(*vals)
                if v < 0 or v >= E:
                    witness = dict(zip(names, vals))
                    value = v
                    break
            else:
                return  # the interval was loose; enumeration proves the index in bounds
        ct = tuple(witness.get("c." + AXES[i], 0) for i in range(3))
        at = f"{cgrid.name}({', '.join(str(c) for c in ct[:max(1, sum(1 for d in cgrid.dims if d))])})"
        loops = ", ".join(f"{lp.dim} = {witness.get(lp.var, lp.lo)}" for lp in site.loops
                          if lp.var in witness)
        extra = f" with {loops}" if loops else ""
        bound = f"{pgrid.name}.{dim}" if dim else f"the extent of {pgrid.name}"
        names = {"c." + AXES[i]: d for i, d in enumerate(cgrid.dims) if d}
        names.update({lp.var: lp.dim for lp in site.loops})
        text, concrete = S.unparse_expr(e), concrete_text(aff, names)
        desc = f"'{text}'"
        if concrete.replace(" ", "") != text.replace(" ", ""):
            desc += f" (= {concrete})"
        raise OutOfBoundsError(
            f"producer tile index {desc} is {value} for consumer tile {at}{extra}, "
            f"outside grid '{pgrid.name}' ({bound} = {E}, valid 0..{E - 1}); over all consumer "
            f"tiles it ranges over [{lo}, {hi}]", e.span)

    # ---- whole-program checks ----
    def check_cycles(self) -> None:
        graph: dict = {}
        for d in self.deps:
            for p in d.producers:
                if p.grid == d.consumer:
                    raise CyclicDependencyError(f"Dep '{d.name}': grid '{d.consumer}' depends on "
                                                f"itself", self.dep_spans[d.name])
                graph.setdefault(d.consumer, []).append((p.grid, d.name))
                # does p.grid reach d.consumer already?
                path = self._path(graph, p.grid, d.consumer)
                if path:
                    chain = " -> ".join([d.consumer] + path)
                    raise CyclicDependencyError(f"Dep '{d.name}' closes a cycle: {chain} "
                                                f"(consumer -> producer)", self.dep_spans[d.name])

    @staticmethod
    def _path(graph: dict, src: str, dst: str) -> list:
        stack, seen = [(src, [src])], {src}
        while stack:
            node, path = stack.pop()
            if node == dst:
                return path
            for nxt, _ in graph.get(node, []):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
        return []

    def check_cxx_names(self) -> None:
        """Generated struct names (g, g_order, dep_prod_Policy, dep_prod_waits) must not clash."""
        owner: dict = {}
        for g in self.grids.values():
            for n in (g.name, g.name + "_order"):
                owner.setdefault(n, []).append(self.syms[g.name].decl.span)
        for d in self.deps:
            for p in d.producers:
                owner.setdefault(f"{d.name}_{p.grid}_waits", []).append(self.dep_spans[d.name])
        for n, spans in owner.items():
            if len(spans) > 1:
                raise DuplicateNameError(f"two generated structs would both be named '{n}'; "
                                         f"rename a Grid or Dep", spans[-1])

    # ---- derivation (paper section V) ----
    def strided(self, prod: ir.ProducerIR, pgrid: ir.GridIR) -> Optional[tuple]:
        """(axis, stride) when a ForAll variable moves the producer tile along one axis by a
        constant stride s >= 2 (LLaMA's x and x+F/TileN, Attention's Q and K): the tiles
        t, t+s, ... one consumer tile reads share the semaphore t % s (StridedSync)."""
        for ts in prod.tilesets:
            for lp in ts.loops:
                uses = [(a, _coef_of(ts.index[a], lp.var)) for a in range(3)]
                hits = [(a, c) for a, c in uses if c != 0]
                if len(hits) != 1 or hits[0][1] is None:
                    continue
                a, c = hits[0]
                if 2 <= c < pgrid.extent[a]:
                    return a, c
        return None

    def grouping(self, prod: ir.ProducerIR, cgrid: ir.GridIR, pgrid: ir.GridIR) -> list:
        """Per axis, the DimMap that puts the tiles one consumer tile reads on one semaphore,
        judged from the consumer tiles at the corners and the center of the consumer grid."""
        out: list = [None, None, None]
        if prod.count > SAMPLE_LIMIT:
            return out
        picks = [sorted({0, (e - 1) // 2, e - 1}) for e in cgrid.extent]
        proj: list = [[], [], []]
        for cx in picks[0]:
            for cy in picks[1]:
                for cz in picks[2]:
                    tiles = prod.tiles((cx, cy, cz))
                    for a in range(3):
                        proj[a].append(sorted({t[a] for t in tiles}))
        for a in range(3):
            E = pgrid.extent[a]
            if E < 2:
                continue
            if all(p == list(range(E)) for p in proj[a]):
                out[a] = ir.DimMap("all")
                continue
            k = len(proj[a][0])
            if 1 < k < E and all(len(p) == k and p[0] % k == 0 and p == list(range(p[0], p[0] + k))
                                 for p in proj[a]):
                out[a] = ir.DimMap("div", k)
        return out

    def derive_policies(self, dep: ir.DepIR, prod: ir.ProducerIR) -> list:
        pgrid, cgrid = self.grids[prod.grid], self.grids[dep.consumer]
        E = pgrid.extent
        options = [[ir.DimMap("tile")] for _ in range(3)]
        st = self.strided(prod, pgrid)
        if st:
            options[st[0]].append(ir.DimMap("mod", st[1]))
        for a, g in enumerate(self.grouping(prod, cgrid, pgrid)):
            if g:
                options[a].append(g)
        combos = [(x, y, z) for z in options[2] for y in options[1] for x in options[0]]
        if E[0] > 1:
            combos.append((ir.DimMap("all"), ir.DimMap("tile"), ir.DimMap("tile")))
        seen, out, names = set(), [], set()
        for dims in combos:
            dims = tuple(_normalize(d, e) for d, e in zip(dims, E))
            if dims in seen:
                continue
            seen.add(dims)
            name = _policy_name(dims, prod.has_floor_div)
            if name in names:
                name += "_" + "_".join(f"{AXES[a]}{d.kind}{d.param or ''}"
                                       for a, d in enumerate(dims))
            names.add(name)
            num = 1
            for d, e in zip(dims, E):
                num *= d.extent(e)
            out.append(ir.PolicyIR(dep.name, dep.consumer, prod.grid, name, E, dims, num))
        return out

    def reads_group_over_rows(self, grid: str) -> bool:
        """Does some consumer tile read tiles of `grid` along y at a fixed x (a ForAll whose
        variable moves only the y coordinate, over more than one row: Attention's R.V reading
        every V row of its head)? Then a strided order runs each group through all rows first."""
        for d in self.deps:
            for p in d.producers:
                if p.grid != grid:
                    continue
                for ts in p.tilesets:
                    for lp in ts.loops:
                        uses = [_coef_of(ts.index[a], lp.var) for a in range(3)]
                        if uses[0] == 0 and uses[2] == 0 and uses[1] not in (0, None) and lp.hi - lp.lo > 1 \
                                and lp.hi_expr is None:  # a triangle (causal) favors the row-major order
                            return True
        return False

    def derive_orders(self) -> tuple:
        depth: dict = {}

        def level(g: str, seen=()) -> int:
            if g not in depth:
                ps = [p.grid for d in self.deps if d.consumer == g for p in d.producers]
                depth[g] = 1 + max((level(p) for p in ps), default=0)
            return depth[g]

        chosen: dict = {}
        # from the last consumer back to the first producer: a grid's order serves its consumers
        for d in sorted(self.deps, key=lambda d: -level(d.consumer)):
            for p in d.producers:
                if p.grid in chosen:
                    continue
                g = self.grids[p.grid]
                st = self.strided(p, g)
                if st and g.extent[st[0]] % st[1] == 0:
                    a, s = st
                    outer = a == 0 and g.extent[1] > 1 and self.reads_group_over_rows(p.grid)
                    chosen[p.grid] = ir.OrderIR(g.name, AXES[a], s, g.extent[a] // s, g.extent, outer)
        return tuple(chosen.get(g.name, ir.OrderIR(g.name, extent=g.extent)) for g in self.grids.values())


def _names(e):
    """Every S.Name in an expression of the syntax tree (Extent's grid and dim names excluded)."""
    if isinstance(e, S.Name):
        yield e
    elif isinstance(e, (S.BinOp, S.CDiv)):
        yield from _names(e.lhs)
        yield from _names(e.rhs)
    elif isinstance(e, S.Neg):
        yield from _names(e.operand)


def _variables(a: Aff) -> set:
    out = set()
    for atom, _ in a.terms:
        out |= {atom[1]} if atom[0] == "v" else _variables(atom[1])
    return out


def _walk(e: ir.Expr):
    yield e
    if isinstance(e, ir.Add):
        for t in e.terms:
            yield from _walk(t)
    elif isinstance(e, (ir.Mul, ir.FloorDiv, ir.Mod)):
        yield from _walk(e.arg)


def _coef_of(e: ir.Expr, var: str):
    """The coefficient of ``var`` in ``e`` when it is a plain linear term (0 if absent), else
    None (inside a floor division or modulo)."""
    terms = e.terms if isinstance(e, ir.Add) else (e,)
    coef = 0
    for t in terms:
        if t == ir.Var(var):
            coef += 1
        elif isinstance(t, ir.Mul) and t.arg == ir.Var(var):
            coef += t.coef
        elif any(n == ir.Var(var) for n in _walk(t)):
            return None
    return coef


def _with_term(e: ir.Expr, term: ir.Expr) -> ir.Expr:
    """``e + term``, keeping the constant last."""
    terms = list(e.terms) if isinstance(e, ir.Add) else [e]
    const = terms.pop() if isinstance(terms[-1], ir.Const) else None
    terms.append(term)
    if const is not None and const.value != 0:
        terms.append(const)
    return terms[0] if len(terms) == 1 else ir.Add(tuple(terms))


def _interleave(sets: list) -> list:
    """Zip consecutive tile sets with the same ForAll ranges whose tiles differ only by a constant
    stride along one axis (``{g1, Tile(x, y), Tile(x + D, y)}``, LLaMA's two ForAlls): one tile
    set with an extra innermost loop, so the tiles one consumer step reads (k and k + D) are waited
    on one after the other instead of half a row apart."""
    out, i = [], 0
    while i < len(sets):
        first, run, axis, step = sets[i], [sets[i]], None, None
        sig = tuple((lp.var, lp.lo, lp.hi, lp.hi_expr) for lp in first.loops)
        j = i + 1
        while j < len(sets) and tuple((lp.var, lp.lo, lp.hi, lp.hi_expr) for lp in sets[j].loops) == sig:
            diff = [a for a in range(3) if sets[j].index[a] != first.index[a]]
            if len(diff) != 1:
                break
            a = diff[0]
            b0, o0 = _split_const(first.index[a])
            b1, o1 = _split_const(sets[j].index[a])
            if b0 != b1 or o1 <= o0:
                break
            if axis is None:
                axis, step = a, o1 - o0
            if a != axis or o1 - o0 != step * len(run):
                break
            run.append(sets[j])
            j += 1
        if len(run) < 2:
            out.append(first)
            i += 1
            continue
        var = f"i{len(first.loops)}"
        index = list(first.index)
        index[axis] = _with_term(index[axis], ir.Mul(step, ir.Var(var)))
        loop = ir.LoopIR(var, 0, len(run), "")
        text = " then ".join(t.text for t in run) + (" (interleaved)" if first.loops else "")
        out.append(ir.TileSetIR(tuple(index), first.loops + (loop,), text))
        i = j
    return out


def _split_const(e: ir.Expr) -> tuple:
    """(e without its constant term, the constant term)."""
    if isinstance(e, ir.Const):
        return None, e.value
    if isinstance(e, ir.Add) and isinstance(e.terms[-1], ir.Const):
        rest = e.terms[:-1]
        return (rest[0] if len(rest) == 1 else ir.Add(rest)), e.terms[-1].value
    return e, 0


def _normalize(d: ir.DimMap, E: int) -> ir.DimMap:
    if E == 1 or (d.kind == "mod" and d.param >= E) or (d.kind == "div" and d.param == 1):
        return ir.DimMap("tile")
    if (d.kind == "div" and d.param >= E) or (d.kind == "mod" and d.param == 1):
        return ir.DimMap("all")
    return d


def _policy_name(dims: tuple, floor_div: bool) -> str:
    kinds = [d.kind for d in dims]
    if all(k == "tile" for k in kinds):
        return "Conv2DTileSync" if floor_div else "TileSync"
    if "mod" in kinds and all(k in ("mod", "tile") for k in kinds):
        return "StridedSync"
    if kinds == ["all", "tile", "tile"]:
        return "RowSync"
    if kinds == ["tile", "all", "tile"]:
        return "ColSync"
    return "GroupSync_" + "_".join(f"{AXES[a]}{d.kind}{d.param or ''}"
                                   for a, d in enumerate(dims))


def analyze(program: S.Program, params: Optional[dict] = None,
            name: Optional[str] = None) -> ir.ProgramIR:
    """Check ``program`` for the given Param values and derive its orders and policies."""
    return Analyzer(program, params or {}, name or "cusync_program").run()
