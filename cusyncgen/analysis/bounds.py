"""Pass 4, bounds: every producer tile index stays inside its grid for every consumer tile, and
no intermediate value overflows an int.

Interval reasoning over the variables' boxes proves it without enumeration (exact for affine
forms, so a million-tile grid costs nothing); a quasi-affine form whose interval is not tight is
enumerated over the variables it uses, up to ENUMERATION_LIMIT values. The out-of-bounds message
names a consumer tile that leaves the grid and the index with its Params substituted, simplified
by sympy: this is the only module of the compiler that imports sympy (on the first
error only). Output: Proved, whose Deps
are IR (producer tile sets with plain expressions).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from cusyncgen import ir
from cusyncgen import syntax as S
from cusyncgen.errors import OutOfBoundsError, ValueRangeError

from .affine import (AXES, Aff, Lowered, Site, interval, magnitude, to_ir, variables, walk)
from .evaluate import INT_MAX, Values

#: consumer tiles enumerated when the interval proof of a quasi-affine index is not tight
ENUMERATION_LIMIT = 2_000_000


@dataclass
class Proved:
    """Pass 4's output: the Values and the Deps as IR, with each Dep's declaration."""

    values: Values
    deps: tuple = ()  # of ir.DepIR
    decls: dict = field(default_factory=dict)  # Dep name -> S.DepDecl

    @property
    def warnings(self) -> list:
        return self.values.warnings


def to_sympy(a: Aff, names: dict):
    """``a`` as a sympy expression over the user's dim names (``names``: variable -> name)."""
    import sympy  # only for messages: imported when an index is out of bounds

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


def prove(lowered: Lowered) -> Proved:
    out = Proved(lowered.values)
    deps = []
    for d in lowered.deps:
        producers = []
        for pgrid, sites in d.producers:
            sets = [_tileset(d.consumer, pgrid, s) for s in sites]
            sets = _interleave(sets)
            has_div = any(isinstance(n, ir.FloorDiv) for t in sets for e in t.index
                          for n in walk(e))
            producers.append(ir.ProducerIR(pgrid.name, tuple(sets), has_div))
        deps.append(ir.DepIR(d.decl.name, d.consumer.name, tuple(producers)))
        out.decls[d.decl.name] = d.decl
    out.deps = tuple(deps)
    return out


def _tileset(cgrid: ir.GridIR, pgrid: ir.GridIR, site: Site) -> ir.TileSetIR:
    tile, box = site.tile, site.box
    index = []
    for a in range(3):
        aff = site.index[a]
        if a < len(tile.indices):
            e = tile.indices[a]
            if magnitude(aff, box) > INT_MAX:
                raise ValueRangeError(f"'{S.unparse_expr(e)}' overflows int for some tile",
                                      e.span)
            lo, hi = interval(aff, box)
            if lo < 0 or hi > pgrid.extent[a] - 1:
                _out_of_bounds(cgrid, pgrid, a, e, aff, site, lo, hi)
        index.append(to_ir(aff, box))
    text = "Tile(" + ", ".join(S.unparse_expr(i) for i in tile.indices) + ")"
    for lp in reversed(site.loops):
        text = f"ForAll({text}, {lp.dim}, Range({lp.lo}, {lp.hi_text or lp.hi}))"
    return ir.TileSetIR(tuple(index), site.loops, text)


def _out_of_bounds(cgrid, pgrid, a, e, aff: Aff, site: Site, lo, hi) -> None:
    """Raise OutOfBoundsError with a witness, unless enumeration shows the interval was loose."""
    box = site.box
    E = pgrid.extent[a]
    dim = pgrid.dims[a]
    if aff.is_affine():
        want_max = hi > E - 1
        witness = {}
        for atom, c in aff.terms:
            vlo, vhi = box[atom[1]]
            witness[atom[1]] = vhi if (c > 0) == want_max else vlo
        value = hi if want_max else lo
    else:
        names = sorted(variables(aff))  # only what the index depends on is enumerated
        sizes = [box[n][1] - box[n][0] + 1 for n in names]
        if math.prod(sizes) > ENUMERATION_LIMIT:
            raise OutOfBoundsError(
                f"cannot prove that tile index '{S.unparse_expr(e)}' of grid "
                f"'{pgrid.name}' stays in [0, {E - 1}] (its bounds are [{lo}, {hi}]) and there "
                f"are too many tiles to enumerate", e.span)
        expr = ir.py_source(to_ir(aff, box))
        fn = eval(f"lambda {', '.join(n.replace('.', '') for n in names)}: {expr}")  # noqa: S307
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

