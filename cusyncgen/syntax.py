"""The syntax tree of a .dep program: frozen dataclasses, each with a source ``Span``.

Both the .dep parser (parser.py) and the embedded Python DSL (dsl.py) build this tree; analysis.py
consumes it. Spans are left out of equality, so a tree built from Python equals the parsed one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union


@dataclass(frozen=True)
class Span:
    """Where a node comes from: 1-based line and column, end exclusive."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int
    line_text: Optional[str] = field(default=None, compare=False, repr=False)


NOSPAN = Span("<unknown>", 0, 0, 0, 0)


def _span() -> Span:
    return field(default=NOSPAN, compare=False, repr=False)


# ---- expressions -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Num:
    value: int
    span: Span = _span()


@dataclass(frozen=True)
class Name:
    """A use of a declared name: a Param, a Dim (in tile indices) or a Grid (in Deps)."""

    name: str
    span: Span = _span()


@dataclass(frozen=True)
class Extent:
    """``g.x``: the extent of grid ``g`` along its dim ``x``."""

    grid: Name
    dim: Name
    span: Span = _span()


@dataclass(frozen=True)
class BinOp:
    """``lhs op rhs`` with op one of ``+ - * / %`` (``/`` is exact in extents, floor in tile indices)."""

    op: str
    lhs: "Expr"
    rhs: "Expr"
    span: Span = _span()


@dataclass(frozen=True)
class Neg:
    operand: "Expr"
    span: Span = _span()


@dataclass(frozen=True)
class CDiv:
    """``cdiv(a, b)``: division rounding up."""

    lhs: "Expr"
    rhs: "Expr"
    span: Span = _span()


Expr = Union[Num, Name, Extent, BinOp, Neg, CDiv]


# ---- tiles -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RangeExpr:
    """``Range(hi)`` or ``Range(lo, hi)``: the integers in [lo, hi)."""

    lo: Optional[Expr]
    hi: Expr
    span: Span = _span()


@dataclass(frozen=True)
class TileExpr:
    """``Tile(e1, e2[, e3])``: one tile, index i along the i-th declared Dim."""

    indices: tuple
    span: Span = _span()


@dataclass(frozen=True)
class TileRef:
    """A use of a named Tile or ForAll."""

    name: str
    span: Span = _span()


@dataclass(frozen=True)
class ForAllExpr:
    """``ForAll(tiles, dim, Range(...))``: ``tiles`` with ``dim`` ranging over the range."""

    tiles: "TileSet"
    dim: Name
    range: RangeExpr
    span: Span = _span()


TileSet = Union[TileExpr, TileRef, ForAllExpr]


# ---- statements --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParamDecl:
    name: str
    default: Optional[Expr]
    span: Span = _span()


@dataclass(frozen=True)
class DimDecl:
    name: str
    span: Span = _span()


@dataclass(frozen=True)
class GridDecl:
    name: str
    dims: tuple  # of Name
    extents: tuple  # of Expr
    span: Span = _span()


@dataclass(frozen=True)
class TileDecl:
    name: str
    tile: TileExpr
    span: Span = _span()


@dataclass(frozen=True)
class ForAllDecl:
    name: str
    forall: ForAllExpr
    span: Span = _span()


@dataclass(frozen=True)
class DepGroup:
    """``{grid, tiles...}``: tiles of one grid."""

    grid: Name
    tiles: tuple  # of TileSet
    span: Span = _span()


@dataclass(frozen=True)
class DepDecl:
    """``Dep NAME({consumerGrid, consumerTile}, {producerGrid, tiles...}, ...)``."""

    name: str
    consumer: DepGroup
    producers: tuple  # of DepGroup
    span: Span = _span()


Stmt = Union[ParamDecl, DimDecl, GridDecl, TileDecl, ForAllDecl, DepDecl]


@dataclass(frozen=True)
class Program:
    """A whole .dep file. ``file`` is the name errors and the header mention."""

    file: str
    stmts: tuple
    span: Span = _span()


def unparse_expr(e: Expr) -> str:
    """The .dep text of an expression (fully parenthesized where needed); used in messages."""
    if isinstance(e, Num):
        return str(e.value)
    if isinstance(e, Name):
        return e.name
    if isinstance(e, Extent):
        return f"{e.grid.name}.{e.dim.name}"
    if isinstance(e, Neg):
        return f"-{_paren(e.operand, 3)}"
    if isinstance(e, CDiv):
        return f"cdiv({unparse_expr(e.lhs)}, {unparse_expr(e.rhs)})"
    if isinstance(e, BinOp):
        prec = 1 if e.op in "+-" else 2
        return f"{_paren(e.lhs, prec)}{e.op}{_paren(e.rhs, prec + 1)}"
    raise TypeError(f"not an expression: {e!r}")


def unparse_tiles(t) -> str:
    """The .dep text of a tile set (Tile, a named tile or ForAll)."""
    if isinstance(t, TileExpr):
        return "Tile(" + ", ".join(unparse_expr(i) for i in t.indices) + ")"
    if isinstance(t, TileRef):
        return t.name
    r = t.range
    bounds = unparse_expr(r.hi) if r.lo is None else f"{unparse_expr(r.lo)}, {unparse_expr(r.hi)}"
    return f"ForAll({unparse_tiles(t.tiles)}, {t.dim.name}, Range({bounds}))"


def unparse(program: Program) -> str:
    """The .dep text of a program, one statement per line: ``parse(unparse(p)) == p``."""
    out = []
    for s in program.stmts:
        if isinstance(s, ParamDecl):
            out.append(f"Param {s.name}" + ("" if s.default is None
                                             else f" = {unparse_expr(s.default)}") + ";")
        elif isinstance(s, DimDecl):
            out.append(f"Dim {s.name};")
        elif isinstance(s, GridDecl):
            args = [d.name for d in s.dims] + [unparse_expr(e) for e in s.extents]
            out.append(f"Grid {s.name}({', '.join(args)});")
        elif isinstance(s, TileDecl):
            out.append(f"Tile {s.name}{unparse_tiles(s.tile)[4:]};")
        elif isinstance(s, ForAllDecl):
            out.append(f"ForAll {s.name}{unparse_tiles(s.forall)[6:]};")
        elif isinstance(s, DepDecl):
            groups = [s.consumer] + list(s.producers)
            text = ", ".join("{" + ", ".join([g.grid.name] + [unparse_tiles(t) for t in g.tiles])
                             + "}" for g in groups)
            out.append(f"Dep {s.name}({text});")
    return "\n".join(out) + "\n"


def _paren(e: Expr, prec: int) -> str:
    own = 1 if isinstance(e, BinOp) and e.op in "+-" else 2 if isinstance(e, BinOp) else 4
    text = unparse_expr(e)
    return f"({text})" if own < prec else text


#: how deeply expressions may nest (a flat sum of N terms nests N levels): the analysis recurses
#: over expressions, and this bound keeps it within cliutil.RECURSION_LIMIT
MAX_DEPTH = 1000


def _children(node) -> tuple:
    if isinstance(node, (BinOp, CDiv)):
        return (node.lhs, node.rhs)
    if isinstance(node, Neg):
        return (node.operand,)
    if isinstance(node, RangeExpr):
        return (node.hi,) if node.lo is None else (node.lo, node.hi)
    if isinstance(node, TileExpr):
        return node.indices
    if isinstance(node, ForAllExpr):
        return (node.tiles, node.range)
    return ()


def depth(e) -> int:
    """How many levels the expressions in ``e`` nest (a name or number is 1; a Tile, ForAll or
    Range adds none), without recursion."""
    best, stack = 0, [(e, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (Num, Name, Extent, BinOp, Neg, CDiv)):
            d += 1
        best = max(best, d)
        stack.extend((c, d) for c in _children(node))
    return best


def expressions(program: Program):
    """Every top-level expression or tile set of the program's statements, in source order."""
    for s in program.stmts:
        if isinstance(s, ParamDecl):
            if s.default is not None:
                yield s.default
        elif isinstance(s, GridDecl):
            yield from s.extents
        elif isinstance(s, TileDecl):
            yield s.tile
        elif isinstance(s, ForAllDecl):
            yield s.forall
        elif isinstance(s, DepDecl):
            for g in (s.consumer,) + tuple(s.producers):
                yield from g.tiles
