"""Pass 2, evaluation: every Param's value and every grid's extents, in declaration order.

``/`` in a constant must divide exactly (``cdiv`` rounds up); extents are positive and fit in an
int, and so does a grid's tile count. Output: Values (the Scope plus ints and GridIRs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cusyncgen import ir
from cusyncgen import syntax as S
from cusyncgen.errors import (ArityError, DimNotInGridError, DuplicateNameError,
                              InexactDivisionError, KindError, MissingParamError, ValueRangeError)

from .names import KIND_WORD, Scope

INT_MAX = 2**31 - 1
AXES = ir.AXES


@dataclass
class Values:
    """Pass 2's output: the Scope, the Params' values and the grids."""

    scope: Scope
    param_values: list = field(default_factory=list)  # [(name, value)] in declaration order
    params: dict = field(default_factory=dict)  # name -> value
    grids: dict = field(default_factory=dict)  # name -> GridIR, in declaration order

    @property
    def warnings(self) -> list:
        return self.scope.warnings


def const(values: Values, e: S.Expr, what: str) -> int:
    """The value of a constant expression (Params, numbers, grid extents)."""
    if isinstance(e, S.Num):
        return e.value
    if isinstance(e, S.Name):
        sym = values.scope.lookup(e)
        if sym.kind == "param":
            return values.params[e.name]
        if sym.kind == "dim":
            raise KindError(f"dim '{e.name}' cannot be used in {what}, which must be a "
                            f"constant", e.span)
        raise KindError(f"'{e.name}' is {KIND_WORD[sym.kind]}, not a value", e.span)
    if isinstance(e, S.Extent):
        return extent_of(values, e)
    if isinstance(e, S.Neg):
        return -const(values, e.operand, what)
    if isinstance(e, S.CDiv):
        a, b = const(values, e.lhs, what), const(values, e.rhs, what)
        if b == 0:
            raise ValueRangeError("division by zero", e.rhs.span)
        return -(-a // b)
    if isinstance(e, S.BinOp):
        a, b = const(values, e.lhs, what), const(values, e.rhs, what)
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


def extent_of(values: Values, e: S.Extent) -> int:
    values.scope.lookup(e.grid, "grid")
    g: ir.GridIR = values.grids[e.grid.name]
    d = e.dim.name
    if d in g.dims and d:
        return g.extent[g.dims.index(d)]
    if d in AXES and d not in values.scope.dims:
        return g.extent[AXES.index(d)]
    raise DimNotInGridError(f"grid '{g.name}' has no dim '{d}' (its dims: "
                            f"{', '.join(x for x in g.dims if x)})", e.dim.span)


def evaluate(scope: Scope) -> Values:
    values = Values(scope)
    for st in scope.program.stmts:
        if isinstance(st, S.ParamDecl):
            _param(values, st)
        elif isinstance(st, S.GridDecl):
            _grid(values, st)
    return values


def _param(values: Values, st: S.ParamDecl) -> None:
    given = values.scope.params
    if st.name in given:
        value = given[st.name]
    elif st.default is not None:
        value = const(values, st.default, "a Param value")
    else:
        raise MissingParamError(f"Param '{st.name}' has no value: give it a default "
                                f"(Param {st.name} = ...;) or pass -D {st.name}=VALUE", st.span)
    values.params[st.name] = value
    values.param_values.append((st.name, value))


def _grid(values: Values, st: S.GridDecl) -> None:
    scope = values.scope
    extent = [1, 1, 1]
    names = ["", "", ""]
    if len(st.dims) != len(st.extents):
        raise ArityError(f"Grid {st.name} needs one extent per dim: Grid {st.name}(dims..., "
                         f"extents...), got {len(st.dims)} dims and {len(st.extents)} extents",
                         st.span)
    for d, e in zip(st.dims, st.extents):
        axis = scope.lookup(d, "dim").axis
        if axis >= 3:
            raise ArityError(f"Grid {st.name}: '{d.name}' is the Dim number {axis + 1}; only "
                             f"the first three Dims ({', '.join(scope.dims[:3])}) can be grid "
                             f"dims, later ones only ForAll variables", d.span)
        if names[axis]:
            raise DuplicateNameError(f"Grid {st.name} lists dim '{d.name}' twice", d.span)
        v = const(values, e, "a grid extent")
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
    values.grids[st.name] = g
