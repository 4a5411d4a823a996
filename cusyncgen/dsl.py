"""The .dep language embedded in Python: the same syntax tree, so the same analysis and header.

    from cusyncgen.dsl import Program, Param, Dim, Grid, Tile, ForAll, Range, Dep
    H, B, S = Param("H", 12288), Param("B", 8), Param("S", 256)
    TileM, TileN = Param("TileM", 128), Param("TileN", 128)
    x, y = Dim("x"), Dim("y")
    g1 = Grid("g1", [x, y], [H / (2 * TileN), B * S / TileM])
    g2 = Grid("g2", [x, y], [H / TileN, B * S / TileM])
    dep = Dep("dep", (g2, Tile(x, y)), (g1, ForAll(Tile(x, y), x, Range(g1.x))))
    compiled = Program("mlp_gpt3", H, B, S, TileM, TileN, x, y, dep).compile()

``/`` and ``//`` both mean the .dep ``/`` (exact in extents, floor in tile indices). Every object
remembers the Python line that built it, so errors point there. A ``Program`` declares the items
it is given in order, each after everything it refers to.
"""

from __future__ import annotations

import linecache
import sys
from typing import Optional

from cusyncgen import syntax as S
from cusyncgen.errors import CusyncError


def _here(depth: int = 2) -> S.Span:
    """The span of the user's line that called into this module."""
    f = sys._getframe(depth)
    while f is not None and f.f_globals.get("__name__") == __name__:
        f = f.f_back
    if f is None:  # pragma: no cover
        return S.NOSPAN
    text = linecache.getline(f.f_code.co_filename, f.f_lineno).rstrip("\n") or None
    col = len(text) - len(text.lstrip()) + 1 if text else 1
    end = len(text) + 1 if text else 2
    return S.Span(f.f_code.co_filename, f.f_lineno, col, f.f_lineno, end, text)


class Expr:
    """A DSL expression: wraps a syntax node and the declarations it refers to."""

    __slots__ = ("node", "refs")

    def __init__(self, node, refs=()):
        self.node = node
        self.refs = tuple(refs)

    def _bin(self, op: str, other, swap: bool = False) -> "Expr":
        o = _expr(other)
        a, b = (o, self) if swap else (self, o)
        return Expr(S.BinOp(op, a.node, b.node, _here(3)), a.refs + b.refs)

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __truediv__(self, o): return self._bin("/", o)
    def __rtruediv__(self, o): return self._bin("/", o, True)
    def __floordiv__(self, o): return self._bin("/", o)
    def __rfloordiv__(self, o): return self._bin("/", o, True)
    def __mod__(self, o): return self._bin("%", o)
    def __rmod__(self, o): return self._bin("%", o, True)
    def __neg__(self): return Expr(S.Neg(self.node, _here()), self.refs)
    def __pos__(self): return self


def _expr(v) -> Expr:
    if isinstance(v, Expr):
        return v
    if isinstance(v, bool) or not isinstance(v, int):
        raise CusyncError(f"expected an int or a DSL expression, got {v!r}", _here(3))
    return Expr(S.Num(v, _here(3)))


def _name(name, what: str) -> str:
    """A declaration's name: a str (analysis checks that it is an identifier)."""
    if not isinstance(name, str):
        raise CusyncError(f"the name of a {what} must be a str, not {type(name).__name__}",
                          _here(3))
    return name


def _seq(items, what: str) -> tuple:
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise CusyncError(f"{what} must be a list or tuple, not {type(items).__name__}", _here(3))
    return tuple(items)


def cdiv(a, b) -> Expr:
    """``cdiv(a, b)``: division rounding up."""
    a, b = _expr(a), _expr(b)
    return Expr(S.CDiv(a.node, b.node, _here()), a.refs + b.refs)


class Param(Expr):
    """``Param NAME[ = default];``"""

    __slots__ = ("name", "default", "span")

    def __init__(self, name: str, default=None):
        self.name, self.span = _name(name, "Param"), _here()
        self.default = None if default is None else _expr(default)
        super().__init__(S.Name(name, self.span), (self,))

    def decl(self):
        return S.ParamDecl(self.name, None if self.default is None else self.default.node,
                           self.span)

    def deps(self):
        return () if self.default is None else self.default.refs


class Dim(Expr):
    """``Dim NAME;``"""

    __slots__ = ("name", "span")

    def __init__(self, name: str):
        self.name, self.span = _name(name, "Dim"), _here()
        super().__init__(S.Name(name, self.span), (self,))

    def decl(self):
        return S.DimDecl(self.name, self.span)

    def deps(self):
        return ()


class Grid:
    """``Grid NAME(dims..., extents...);``; ``grid.x`` is its extent along dim ``x``."""

    def __init__(self, name: str, dims, extents):
        self.name, self.span = _name(name, "Grid"), _here()
        self.dims = _seq(dims, f"the dims of Grid {name}")
        self.extents = tuple(_expr(e) for e in _seq(extents, f"the extents of Grid {name}"))
        for d in self.dims:
            if not isinstance(d, Dim):
                raise CusyncError(f"Grid {name}: {d!r} is not a Dim", self.span)

    def __getattr__(self, dim: str) -> Expr:
        if dim.startswith("_"):
            raise AttributeError(dim)
        span = _here()
        return Expr(S.Extent(S.Name(self.name, span), S.Name(dim, span), span), (self,))

    def decl(self):
        return S.GridDecl(self.name, tuple(_expr(d).node for d in self.dims),
                          tuple(e.node for e in self.extents), self.span)

    def deps(self):
        return tuple(r for d in self.dims for r in _expr(d).refs) + \
            tuple(r for e in self.extents for r in e.refs)


class _TileSet:
    __slots__ = ("node", "refs")

    def __init__(self, node, refs):
        self.node, self.refs = node, tuple(refs)


def Tile(*indices) -> _TileSet:  # noqa: N802 - the paper's name
    """``Tile(e1, e2[, e3])``."""
    es = [_expr(i) for i in indices]
    return _TileSet(S.TileExpr(tuple(e.node for e in es), _here()),
                    tuple(r for e in es for r in e.refs))


class _Range:
    __slots__ = ("node", "refs")

    def __init__(self, node, refs):
        self.node, self.refs = node, tuple(refs)


def Range(lo, hi=None) -> _Range:  # noqa: N802
    """``Range(n)`` = [0, n) or ``Range(lo, hi)``."""
    if hi is None:
        h = _expr(lo)
        return _Range(S.RangeExpr(None, h.node, _here()), h.refs)
    a, b = _expr(lo), _expr(hi)
    return _Range(S.RangeExpr(a.node, b.node, _here()), a.refs + b.refs)


def ForAll(tiles: _TileSet, dim: Dim, rng: _Range) -> _TileSet:  # noqa: N802
    """``ForAll(tiles, dim, Range(...))``."""
    if not isinstance(tiles, _TileSet) or not isinstance(dim, Dim) or not isinstance(rng, _Range):
        raise CusyncError("ForAll(tiles, dim, Range(...)) expects a Tile or ForAll, a Dim and a "
                          "Range", _here())
    return _TileSet(S.ForAllExpr(tiles.node, S.Name(dim.name, _here()), rng.node, _here()),
                    tiles.refs + (dim,) + rng.refs)


class Dep:
    """``Dep NAME({consumerGrid, tile}, {producerGrid, tiles...}, ...)``: each group is a tuple
    ``(grid, tile, ...)``."""

    def __init__(self, name: str, consumer: tuple, *producers: tuple):
        self.name, self.span = _name(name, "Dep"), _here()
        if not producers:
            raise CusyncError(f"Dep {name} needs at least one producer group", self.span)
        self.groups = [self._group(g) for g in (consumer,) + producers]

    def _group(self, g):
        if not isinstance(g, tuple) or len(g) < 2 or not isinstance(g[0], Grid) or \
                not all(isinstance(t, _TileSet) for t in g[1:]):
            raise CusyncError(f"Dep {self.name}: each group is a tuple (grid, tiles...)",
                              self.span)
        return g

    def decl(self):
        groups = [S.DepGroup(S.Name(g[0].name, self.span), tuple(t.node for t in g[1:]),
                             self.span) for g in self.groups]
        return S.DepDecl(self.name, groups[0], tuple(groups[1:]), self.span)

    def deps(self):
        return tuple(r for g in self.groups for r in (g[0],) + tuple(x for t in g[1:]
                                                                      for x in t.refs))


class Program:
    """A whole program: the given items (Params, Dims, Grids, Deps) in order, each preceded by
    the declarations it refers to."""

    def __init__(self, name: str, *items):
        self.name = _name(name, "Program")
        self.items = items
        self.span = _here()

    def decls(self) -> list:
        out, seen = [], set()

        def visit(obj):
            if id(obj) in seen:
                return
            seen.add(id(obj))
            for d in obj.deps():
                visit(d)
            out.append(obj)

        for it in self.items:
            if not hasattr(it, "decl"):
                raise CusyncError(f"Program {self.name}: {it!r} is not a Param, Dim, Grid or Dep",
                                  self.span)
            visit(it)
        return out

    def to_syntax(self, file: Optional[str] = None) -> S.Program:
        return S.Program(file or f"{self.name} (Python DSL)",
                         tuple(d.decl() for d in self.decls()), self.span)

    def to_dep(self) -> str:
        """The program as .dep text."""
        return S.unparse(self.to_syntax())

    def compile(self, params: Optional[dict] = None, name: Optional[str] = None):
        import cusyncgen

        return cusyncgen.compile(self, params=params, name=name)
