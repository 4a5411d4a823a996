"""Pass 3, affine lowering: every tile index of a Dep as a quasi-affine form over the consumer
tile's coordinates (``c.x``, ``c.y``, ``c.z``) and the ForAll loop variables (``i0``, ``i1``...).

A form is integer-linear terms plus floor division / modulo by positive constants (``Aff``).
Products of dims, or divisions by them, are NotAffineError. The consumer tile must be the grid's
own dims (``Tile(x, y)``); a producer tile must give every dim of its grid an index. A ForAll
whose variable no index uses repeats the same tiles: a warning. Output: Lowered.
No sympy here (bounds.py prints forms with it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from cusyncgen import ir
from cusyncgen import syntax as S
from cusyncgen.errors import (ArityError, CusyncWarning, DimNotInGridError, KindError,
                              NotAffineError, ValueRangeError)

from .evaluate import INT_MAX, Values, const, extent_of
from .names import KIND_WORD

AXES = ir.AXES

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


def variables(a: Aff) -> set:
    out = set()
    for atom, _ in a.terms:
        out |= {atom[1]} if atom[0] == "v" else variables(atom[1])
    return out


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n] + "..."


def nesting(a: Aff) -> int:
    """How many floor divisions / modulos nest in ``a``."""
    return max((1 + nesting(atom[1]) for atom, _ in a.terms if atom[0] != "v"), default=0)


#: floor divisions / modulos nested in one tile index, at most: a form's sort key grows
#: exponentially with the nesting, and C++ compilers limit bracket depth
MAX_NESTING = 16


# ---- IR expression helpers (used by the later passes) ----------------------------------------

def walk(e: ir.Expr):
    yield e
    if isinstance(e, ir.Add):
        for t in e.terms:
            yield from walk(t)
    elif isinstance(e, (ir.Mul, ir.FloorDiv, ir.Mod)):
        yield from walk(e.arg)


def coef_of(e: ir.Expr, var: str):
    """The coefficient of ``var`` in ``e`` when it is a plain linear term (0 if absent), else
    None (inside a floor division or modulo)."""
    terms = e.terms if isinstance(e, ir.Add) else (e,)
    coef = 0
    for t in terms:
        if t == ir.Var(var):
            coef += 1
        elif isinstance(t, ir.Mul) and t.arg == ir.Var(var):
            coef += t.coef
        elif any(n == ir.Var(var) for n in walk(t)):
            return None
    return coef


# ---- the pass ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Site:
    """One producer tile expression of a Dep, lowered: its forms per axis (x, y, z) over the
    variables of ``box`` (the consumer tile's coordinates and the ForAll loops, with bounds)."""

    tile: S.TileExpr
    loops: tuple  # of ir.LoopIR, outermost first
    index: tuple  # three Aff
    box: dict  # variable -> (lo, hi), inclusive


@dataclass(frozen=True)
class DepSites:
    decl: S.DepDecl
    consumer: ir.GridIR
    producers: tuple  # ((producer GridIR, (Site, ...)), ...) in order of first appearance


@dataclass
class Lowered:
    """Pass 3's output: the Values and every Dep's lowered producer tiles."""

    values: Values
    deps: list = field(default_factory=list)

    @property
    def warnings(self) -> list:
        return self.values.warnings


def index(values: Values, e: S.Expr, env: dict) -> Aff:
    """The form of a tile index; ``env`` maps the dims in scope to variables."""
    if isinstance(e, S.Num):
        return Aff(e.value)
    if isinstance(e, S.Name):
        if e.name in env:
            return Aff(0, {("v", env[e.name]): 1})
        sym = values.scope.lookup(e)
        if sym.kind == "dim":
            raise DimNotInGridError(f"dim '{e.name}' is not a dim of the consumer grid and "
                                    f"is not bound by a ForAll here", e.span)
        if sym.kind == "param":
            return Aff(values.params[e.name])
        raise KindError(f"'{e.name}' is {KIND_WORD[sym.kind]}, not a value", e.span)
    if isinstance(e, S.Extent):
        return Aff(extent_of(values, e))
    if isinstance(e, S.Neg):
        return index(values, e.operand, env).scale(-1)
    if isinstance(e, S.BinOp) and e.op in "+-":
        a, b = index(values, e.lhs, env), index(values, e.rhs, env)
        return a.add(b, 1 if e.op == "+" else -1)
    if isinstance(e, S.BinOp) and e.op == "*":
        a, b = index(values, e.lhs, env), index(values, e.rhs, env)
        if a.is_const:
            return b.scale(a.const)
        if b.is_const:
            return a.scale(b.const)
        raise NotAffineError(f"'{S.unparse_expr(e)}' is not affine: both factors depend on "
                             f"dims", e.span)
    if isinstance(e, (S.BinOp, S.CDiv)):
        a, b = index(values, e.lhs, env), index(values, e.rhs, env)
        op = "cdiv" if isinstance(e, S.CDiv) else e.op
        if not b.is_const:
            raise NotAffineError(f"'{S.unparse_expr(e)}' is not affine: the divisor "
                                 f"'{S.unparse_expr(e.rhs)}' depends on dims", e.span)
        k = b.const
        if k <= 0:
            raise NotAffineError(f"'{S.unparse_expr(e)}': the divisor must be a positive "
                                 f"constant, but it is {k}", e.rhs.span)
        if nesting(a) >= MAX_NESTING:
            raise NotAffineError(f"'{_short(S.unparse_expr(e))}' nests more than {MAX_NESTING} "
                                 f"floor divisions or modulos", e.span)
        if op == "%":
            return modulo(a, k)
        if op == "cdiv":
            a = a.add(Aff(k - 1))
        return floordiv(a, k)
    raise TypeError(e)


@dataclass(frozen=True)
class _Bound:
    """A tile expression with its variable binding, before lowering."""

    tile: S.TileExpr
    env: dict
    loops: tuple  # of ir.LoopIR
    spans: tuple  # the ForAll of each loop


def lower(values: Values) -> Lowered:
    out = Lowered(values)
    for st in values.scope.program.stmts:
        if isinstance(st, S.DepDecl):
            out.deps.append(_dep(values, st))
    return out


def _dep(values: Values, st: S.DepDecl) -> DepSites:
    scope = values.scope
    cgrid: ir.GridIR = values.grids[st.consumer.grid.name]
    if len(st.consumer.tiles) != 1:
        raise ArityError(f"the consumer of Dep '{st.name}' must be one tile of "
                         f"'{cgrid.name}'", st.consumer.span)
    csites = _bind(values, st.consumer.tiles[0], {}, (), (), None)
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
            if isinstance(e, S.Name) and scope.kind_of(e.name) == "dim" \
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
    for group in st.producers:
        pgrid: ir.GridIR = values.grids[group.grid.name]
        sites = merged.setdefault(pgrid.name, (pgrid, []))[1]
        for ts in group.tiles:
            for b in _bind(values, ts, env, (), (), cbox):
                sites.append(_site(values, pgrid, b, cbox))
    return DepSites(st, cgrid, tuple((g, tuple(s)) for g, s in merged.values()))


def _bind(values: Values, ts, env: dict, loops: tuple, spans: tuple, cbox) -> list:
    """The tile expressions of a tile set, each with its ForAll loops (outermost first)."""
    scope = values.scope
    if isinstance(ts, S.TileExpr):
        return [_Bound(ts, env, loops, spans)]
    if isinstance(ts, S.TileRef):
        decl = scope.lookup(S.Name(ts.name, ts.span), "tile", "forall").decl
        return _bind(values, decl.tile if isinstance(decl, S.TileDecl) else decl.forall, env,
                     loops, spans, cbox)
    if isinstance(ts, S.ForAllExpr):
        scope.lookup(ts.dim, "dim")
        r = ts.range
        lo = 0 if r.lo is None else const(values, r.lo, "a Range bound")
        aff = index(values, r.hi, env) if _bound_is_variable(r.hi, env) else None
        if aff is not None and not aff.is_const:
            loop = _variable_loop(ts, loops, lo, aff, cbox)
        else:
            # (a bound whose dims cancel, e.g. a Param that switched a causal mask off, is constant)
            hi = aff.const if aff is not None else const(values, r.hi, "a Range bound")
            if hi <= lo:
                raise ValueRangeError(f"Range({'' if r.lo is None else f'{lo}, '}{hi}) is empty",
                                      r.span)
            if hi - lo > INT_MAX or abs(lo) > INT_MAX or abs(hi) > INT_MAX:
                raise ValueRangeError("Range too large for int", r.span)
            loop = ir.LoopIR(f"i{len(loops)}", lo, hi, ts.dim.name)
        return _bind(values, ts.tiles, {**env, ts.dim.name: loop.var}, loops + (loop,),
                     spans + (ts.span,), cbox)
    raise TypeError(ts)


def _names(e):
    """Every S.Name in an expression (Extent's grid and dim names excluded), without recursion."""
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, S.Name):
            yield n
        else:
            stack.extend(S._children(n))


def _bound_is_variable(e: S.Expr, env: dict) -> bool:
    """Does a Range's upper bound name a dim of the consumer tile (``Range(y + 1)``)?"""
    return any(env.get(n.name, "").startswith("c.") for n in _names(e))


def _variable_loop(ts: S.ForAllExpr, loops: tuple, lo: int, aff: Aff, cbox) -> ir.LoopIR:
    """An outermost ForAll whose upper bound ``aff`` is affine in the consumer tile's dims: each
    consumer tile c waits on the tiles of [lo, bound(c)) (a causal mask's triangle)."""
    r = ts.range
    if loops:
        raise KindError("only the outermost ForAll of a tile set may have a bound that depends on "
                        "the consumer tile", r.hi.span)
    if cbox is None:
        raise KindError("a Range bound may depend on the consumer tile only inside a Dep",
                        r.hi.span)
    if not variables(aff) <= set(cbox):
        raise KindError("a Range bound may depend on the consumer tile's dims only", r.hi.span)
    if not aff.is_affine():
        raise NotAffineError(f"the Range bound '{S.unparse_expr(r.hi)}' is not affine", r.hi.span)
    bmin, bmax = interval(aff, cbox)
    if bmin < lo:
        raise ValueRangeError(f"Range({lo}, {S.unparse_expr(r.hi)}) would run backwards for some "
                              f"consumer tile (its bound goes down to {bmin})", r.hi.span)
    if bmax <= lo:
        raise ValueRangeError(f"Range({lo}, {S.unparse_expr(r.hi)}) is empty for every consumer "
                              f"tile", r.span)
    if bmax - lo > INT_MAX or abs(bmax) > INT_MAX:
        raise ValueRangeError("Range too large for int", r.span)
    return ir.LoopIR(f"i{len(loops)}", lo, bmax, ts.dim.name, to_ir(aff, cbox),
                     S.unparse_expr(r.hi))


def _site(values: Values, pgrid: ir.GridIR, b: _Bound, cbox: dict) -> Site:
    tile = b.tile
    dims = values.scope.dims
    if len(tile.indices) > len(dims):
        raise ArityError(f"this Tile has {len(tile.indices)} indices but only "
                         f"{len(dims)} Dims are declared", tile.span)
    declared = [a for a in range(3) if pgrid.dims[a]]
    need = declared[-1] + 1 if declared else 0
    if len(tile.indices) < need:
        shape = ", ".join(pgrid.dims[a] or "0" for a in range(need))
        raise ArityError(f"this tile of grid '{pgrid.name}' has {len(tile.indices)} "
                         f"ind{'ex' if len(tile.indices) == 1 else 'ices'} but the grid has "
                         f"{len(declared)} dims: give each an index, like Tile({shape})",
                         tile.span)
    box = dict(cbox)
    for lp in b.loops:
        box[lp.var] = (lp.lo, lp.hi - 1)
    forms = []
    for a in range(3):
        if a >= len(tile.indices):
            forms.append(Aff(0))
            continue
        e = tile.indices[a]
        aff = index(values, e, b.env)
        if not pgrid.dims[a] and not (aff.is_const and aff.const == 0):
            raise DimNotInGridError(f"grid '{pgrid.name}' has no dim '{dims[a]}', so "
                                    f"this tile index must be 0, not "
                                    f"'{S.unparse_expr(e)}'", e.span)
        forms.append(aff)
    used = set().union(*(variables(f) for f in forms))
    for lp, span in zip(b.loops, b.spans):
        if lp.var not in used:
            values.warnings.append(CusyncWarning(
                f"ForAll over '{lp.dim}' repeats the same tile {lp.count} times: its tile does "
                f"not use '{lp.dim}'", span))
    return Site(tile, b.loops, tuple(forms), box)
